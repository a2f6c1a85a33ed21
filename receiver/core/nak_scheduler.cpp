#include "receiver/core/nak_scheduler.hpp"

#include "common/sha256.hpp"

#include <algorithm>
#include <cmath>
#include <span>

namespace mcdist::receiver {

duration nak_scheduler::draw_delay(std::uint64_t random) const noexcept {
  if (m_window.count() <= 0) return duration::zero();
  // 53 random bits: U uniform in [0, 1).
  const double u = static_cast<double>(random >> 11) * 0x1.0p-53;
  const double t = static_cast<double>(m_window.count());
  double x = u * t;
  if (m_group > 0) {
    const double lambda = std::log(static_cast<double>(m_group)) + 1.0;
    x = t / lambda * std::log1p(u * std::expm1(lambda));
  }
  return duration(
      std::clamp<duration::rep>(static_cast<duration::rep>(x), 0, m_window.count() - 1));
}

void nak_scheduler::advertise(std::uint32_t pass, std::uint32_t current, std::uint32_t file,
                              std::uint32_t first, std::uint32_t count) {
  if (pass != current || count == 0) return;
  std::uint64_t a = key(file, first);
  std::uint64_t b = a + count;
  // Merge with every run it overlaps or touches.
  auto it = m_runs.upper_bound(a);
  if (it != m_runs.begin() && std::prev(it)->second >= a) --it;
  bool merged = false;
  while (it != m_runs.end() && it->first <= b) {
    a = std::min(a, it->first);
    b = std::max(b, it->second);
    it = m_runs.erase(it);
    merged = true;
  }
  if (!merged && m_runs.size() >= max_runs) return;
  m_runs.emplace(a, b);
}

void nak_scheduler::cover_parity(std::uint32_t pass, std::uint32_t current, std::uint32_t fb,
                                 std::uint64_t parity) {
  if (pass != current || parity == 0) return;
  const auto it = m_covered.find(fb);
  if (it != m_covered.end()) {
    it->second = std::max(it->second, parity);
  } else if (m_covered.size() < max_covered_fec_blocks) {
    m_covered.emplace(fb, parity);
  }
}

bool nak_scheduler::advertised(std::uint32_t file, std::uint32_t block) const noexcept {
  const std::uint64_t k = key(file, block);
  auto it = m_runs.upper_bound(k);
  if (it == m_runs.begin()) return false;
  --it;
  return it->first <= k && k < it->second;
}

std::uint64_t nak_scheduler::id_hash(std::string_view id) noexcept {
  const auto d = sha256(std::as_bytes(std::span(id.data(), id.size())));
  std::uint64_t h = 0;
  for (int i = 0; i < 8; ++i) h = h << 8 | d[static_cast<std::size_t>(i)];
  return h;
}

}  // namespace mcdist::receiver
