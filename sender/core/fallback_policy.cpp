#include "sender/core/fallback_policy.hpp"

#include "common/packet.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mcdist::sender {

std::uint32_t auto_unicast_connections(std::uint64_t rate_bps, duration rtt) noexcept {
  constexpr std::uint32_t fewest = 4, most = 8;
  constexpr double initial_window_bytes = 10.0 * packet::tcp_mss_ethernet;  // RFC 6928
  if (rate_bps == 0 || rtt <= duration::zero()) return fewest;
  const double bdp_bytes = static_cast<double>(rate_bps) / 8 * to_seconds(rtt);
  const double n = std::ceil(bdp_bytes / initial_window_bytes);
  return n >= most ? most : std::max(fewest, static_cast<std::uint32_t>(n));
}

std::optional<transport_kind> fallback_policy::transport(
    std::optional<duration> rtt) const noexcept {
  auto offered = [this](transport_kind k) -> std::optional<transport_kind> {
    if (m_endpoints[index(k)]) return k;
    return std::nullopt;
  };
  switch (m_s.mode) {
    case fallback_mode::off: return std::nullopt;
    case fallback_mode::sctp: return offered(transport_kind::sctp_udp);
    case fallback_mode::sctp_kernel: return offered(transport_kind::sctp_kernel);
    case fallback_mode::tcp: return offered(transport_kind::tcp);
    case fallback_mode::automatic:
      if (rtt && *rtt > long_path_rtt && offered(transport_kind::tcp)) return transport_kind::tcp;
      if (offered(transport_kind::sctp_udp)) return transport_kind::sctp_udp;
      return offered(transport_kind::tcp);
  }
  return std::nullopt;
}

std::optional<std::string> fallback_policy::unicast_from_start(
    double set_bytes, std::uint32_t receivers, duration grtt,
    std::uint64_t multicast_rate_bps) const {
  if (m_s.force_unicast) return "unicast requested by the operator";
  if (m_s.unicast_rate_bps == 0 || receivers == 0) return std::nullopt;
  const double rtt = to_seconds(grtt);
  const double rate = multicast_rate_bps ? static_cast<double>(multicast_rate_bps) : 1e12;
  const double multicast = set_bytes * 8 / rate + 2 * rtt;
  const double unicast =
      2 * rtt + receivers * set_bytes * 8 / static_cast<double>(m_s.unicast_rate_bps);
  if (!(unicast < m_s.unicast_threshold * multicast)) return std::nullopt;
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "small set: unicast to %u receivers %.3f s < %.2f x multicast %.3f s "
                "(%.0f bytes, GRTT %.0f ms)",
                receivers, unicast, m_s.unicast_threshold, multicast, set_bytes, rtt * 1000);
  return std::string(buf);
}

bool fallback_policy::over_nak_ratio(std::uint64_t blocks_naked,
                                     std::uint64_t data_datagrams) const noexcept {
  if (m_s.mode == fallback_mode::off || data_datagrams < m_s.min_sample) return false;
  return static_cast<double>(blocks_naked) / static_cast<double>(data_datagrams) > m_s.nak_ratio;
}

std::optional<std::string> fallback_policy::nak_ratio_exceeded(std::uint64_t blocks_naked,
                                                               std::uint64_t data_datagrams,
                                                               bool others_below) const {
  if (!others_below || !over_nak_ratio(blocks_naked, data_datagrams)) return std::nullopt;
  const double ratio = static_cast<double>(blocks_naked) / static_cast<double>(data_datagrams);
  char buf[120];
  std::snprintf(buf, sizeof buf, "NAK ratio %.1f %% above %.1f %% (%llu of %llu blocks)",
                ratio * 100, m_s.nak_ratio * 100, static_cast<unsigned long long>(blocks_naked),
                static_cast<unsigned long long>(data_datagrams));
  return std::string(buf);
}

std::optional<std::string> fallback_policy::after_passes(std::uint32_t pass) const {
  if (pass < m_s.after_passes || !transport()) return std::nullopt;
  return "still missing data after " + std::to_string(pass) + " passes";
}

}  // namespace mcdist::sender
