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

double group_lack::untruncated_mean(double mean) noexcept {
  if (mean <= 1.0) return 0;
  // The root of g(lambda) = lambda - mean (1 - e^-lambda), by Newton's method from lambda =
  // mean: g is convex, g(mean) > 0 and g' > 0 from the root up, so the steps fall
  // monotonically onto the root (quadratically once close).
  double lambda = mean;
  for (int i = 0; i < 100; ++i) {
    const double g = lambda + mean * std::expm1(-lambda);
    const double dg = 1 - mean * std::exp(-lambda);
    if (dg <= 0) break;
    const double next = lambda - g / dg;
    if (!(next < lambda)) break;  // converged (or NaN)
    lambda = next;
  }
  return lambda;
}

void group_lack::on_nak(std::uint64_t lacks, std::uint64_t fec_blocks,
                        std::uint64_t sources) noexcept {
  if (sources == 0 || fec_blocks == 0 || m_rates >= samples) return;
  const double lambda =
      untruncated_mean(static_cast<double>(lacks) / static_cast<double>(fec_blocks));
  const double rate =
      std::min(1.0, lambda * static_cast<double>(fec_blocks) / static_cast<double>(sources));
  // Kept sorted by insertion (three values at most).
  std::uint32_t i = m_rates++;
  for (; i > 0 && m_rate[i - 1] > rate; --i) m_rate[i] = m_rate[i - 1];
  m_rate[i] = rate;
  ++m_version;
}

double group_lack::median_rate() const noexcept { return m_rate[(m_rates - 1) / 2]; }

std::uint64_t group_lack::target(std::uint32_t fb, std::uint32_t sources, std::uint32_t group,
                                 std::uint32_t sent) {
  if (group < min_group || m_rates == 0) return 0;
  auto it = m_fec.find(fb);
  if (it == m_fec.end()) {
    if (m_fec.size() >= max_fec_blocks) return 0;
    it = m_fec.emplace(fb, fec_state{sent, 0, 0}).first;
  }
  auto& s = it->second;
  if (s.version != m_version) {
    s.estimate = quantile(median_rate() * sources, group, sources);
    s.version = m_version;
  }
  return std::uint64_t{s.sent_before} + s.estimate;
}

}  // namespace mcdist::sender
