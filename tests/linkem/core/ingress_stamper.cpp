#include "tests/linkem/core/ingress_stamper.hpp"

#include <algorithm>
#include <cstring>

namespace mcdist::linkem {

ingress_stamper::ingress_stamper(std::size_t capacity)
    : m_records(std::min<std::size_t>(capacity, 1024)),
      m_capacity(std::max<std::size_t>(capacity, 1)) {}

void ingress_stamper::on_tap(const tap_record& r) {
  if (m_records.size() >= m_capacity) {
    (void)m_records.pop_front();
    m_counters.overflowed.add();
  }
  m_records.push_back(r);
}

bool ingress_stamper::matches(const tap_record& r, std::span<const std::byte> ip_packet) noexcept {
  if (r.length != ip_packet.size()) {
    return false;
  }
  const std::size_t n = std::min<std::size_t>(r.head_len, ip_packet.size());
  return std::memcmp(r.head.data(), ip_packet.data(), n) == 0;
}

std::optional<std::int64_t> ingress_stamper::take(std::span<const std::byte> ip_packet,
                                                  std::int64_t read_ns) {
  while (!m_records.empty() && m_records.front().at_ns < read_ns - k_stale_ns) {
    (void)m_records.pop_front();
    m_counters.skipped.add();
  }
  const std::size_t depth = std::min(m_records.size(), k_search_depth);
  for (std::size_t i = 0; i < depth; ++i) {
    if (matches(m_records.at(i), ip_packet)) {
      for (std::size_t k = 0; k < i; ++k) {
        (void)m_records.pop_front();
      }
      m_counters.skipped.add(i);
      return m_records.pop_front().at_ns;
    }
  }
  return std::nullopt;
}

std::int64_t ingress_stamper::settle(std::optional<std::int64_t> tapped, std::int64_t read_ns) {
  (tapped ? m_counters.tapped : m_counters.read_stamped).add();
  const std::int64_t at =
      std::clamp(tapped.value_or(read_ns), std::min(m_last_ns, read_ns), read_ns);
  m_last_ns = at;
  const auto wait_us = static_cast<std::uint64_t>((read_ns - at) / 1000);
  if (wait_us > m_counters.max_wait_us.value()) {
    m_counters.max_wait_us.set(wait_us);
  }
  return at;
}

std::int64_t ingress_stamper::stamp(std::span<const std::byte> ip_packet, std::int64_t read_ns) {
  return settle(take(ip_packet, read_ns), read_ns);
}

}  // namespace mcdist::linkem
