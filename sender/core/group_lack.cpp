#include "sender/core/group_lack.hpp"

#include <algorithm>
#include <cmath>

namespace mcdist::sender {

std::uint32_t group_lack::quantile(double mean, std::uint32_t group, std::uint32_t cap) noexcept {
  if (mean <= 0 || group <= 1) return 0;
  // P(X > q) = 1 - sum_{i <= q} e^-m m^i / i!, summed term by term (the terms are computed
  // in logs so a mean in the thousands does not underflow e^-m).
  const double tail = 1.0 / group;
  double cdf = 0;
  for (std::uint32_t q = 0; q < cap; ++q) {
    cdf += std::exp(-mean + q * std::log(mean) - std::lgamma(q + 1.0));
    if (1.0 - cdf <= tail) return q;
  }
  return cap;
}

std::uint64_t group_lack::on_lack(std::uint32_t fb, std::uint32_t lack, std::uint32_t sources,
                                  std::uint32_t group, std::uint32_t sent) {
  lack = std::min(lack, sources);
  if (group < min_group) return 0;
  auto it = m_fec.find(fb);
  if (it == m_fec.end()) {
    if (m_fec.size() >= max_fec_blocks) return 0;
    it = m_fec.emplace(fb, sample_set{}).first;
    it->second.sent_before = sent;
  }
  auto& s = it->second;
  if (s.count < samples) {
    // Kept sorted by insertion (three values at most).
    std::uint32_t i = s.count++;
    for (; i > 0 && s.lack[i - 1] > lack; --i) s.lack[i] = s.lack[i - 1];
    s.lack[i] = lack;
    // The median (the lower one of two): a lossy receiver among the first does not set it.
    s.estimate = quantile(s.lack[(s.count - 1) / 2], group, sources);
  }
  return std::uint64_t{s.sent_before} + s.estimate;
}

}  // namespace mcdist::sender
