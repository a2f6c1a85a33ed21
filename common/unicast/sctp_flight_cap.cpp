#include "common/unicast/sctp_flight_cap.hpp"

#include <algorithm>

namespace mcdist::unicast {

void sctp_flight_cap::on_delivered(std::uint64_t bytes, bool cap_bound, time_point now) {
  if (bytes == 0 && !m_in_round) return;
  if (!m_in_round) {
    // A round starts at the first delivery after the last one ended; its bytes are those
    // acknowledged after that moment.
    m_in_round = true;
    m_round_start = now;
    m_round_bytes = 0;
    m_round_bound = cap_bound;
    return;
  }
  m_round_bytes += bytes;
  m_round_bound = m_round_bound || cap_bound;
  const duration elapsed = now - m_round_start;
  if (elapsed < std::max(m_rtprop, min_round)) return;
  const double rate =
      static_cast<double>(m_round_bytes) / std::chrono::duration<double>(elapsed).count();
  m_in_round = false;
  // A round the cap did not limit measured what was offered, not what the path takes: it may
  // raise the estimate, not lower it.
  if (!m_round_bound && rate < bottleneck_bandwidth()) return;
  m_bw[m_rounds % m_bw.size()] = rate;
  ++m_rounds;
}

void sctp_flight_cap::on_rtt(duration rtt, time_point now) {
  if (rtt <= duration::zero()) return;
  if (m_rtprop == duration::zero() || rtt <= m_rtprop || now - m_rtprop_stamp > rtprop_window) {
    m_rtprop = rtt;
    m_rtprop_stamp = now;
  }
}

double sctp_flight_cap::bottleneck_bandwidth() const noexcept {
  return *std::max_element(m_bw.begin(), m_bw.end());
}

std::size_t sctp_flight_cap::cap() const noexcept {
  if (m_rounds == 0 || m_rtprop > max_rtprop) return no_cap;
  const double seconds = std::chrono::duration<double>(std::max(m_rtprop, min_round)).count();
  const double bytes = static_cast<double>(gain) * bottleneck_bandwidth() * seconds;
  if (bytes >= static_cast<double>(no_cap / 2)) return no_cap / 2;
  return std::max(min_cap_bytes, static_cast<std::size_t>(bytes));
}

}  // namespace mcdist::unicast
