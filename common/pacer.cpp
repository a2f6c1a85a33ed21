#include "common/pacer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mcdist {

double pacer::start_ns(time_point now) const noexcept {
  const double now_ns = static_cast<double>(now.time_since_epoch().count());
  return std::max(m_free_ns, now_ns - ns_for(m_burst_bytes));
}

std::uint64_t pacer::allowance(time_point now) const noexcept {
  if (m_rate_bps == 0) return std::numeric_limits<std::uint64_t>::max();
  const double now_ns = static_cast<double>(now.time_since_epoch().count());
  const double slack_ns = now_ns - start_ns(now);
  if (slack_ns <= 0) return 0;
  return static_cast<std::uint64_t>(slack_ns * static_cast<double>(m_rate_bps) / 8e9);
}

void pacer::consume(time_point now, std::uint64_t bytes) noexcept {
  if (m_rate_bps == 0) return;
  m_free_ns = start_ns(now) + ns_for(bytes);
}

time_point pacer::ready_at(time_point now, std::uint64_t bytes) const noexcept {
  if (m_rate_bps == 0) return now;
  const double t = start_ns(now) + ns_for(bytes);
  return time_point{duration{static_cast<std::int64_t>(std::ceil(t))}};
}

}  // namespace mcdist
