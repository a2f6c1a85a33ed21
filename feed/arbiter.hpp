#pragma once
/// @file
/// Strict priority over one pacer (pure): the channels with a session that has data to send
/// share the feed's total rate (feed_daemon::session_rates gives the others the floor). The most
/// urgent (highest priority) gets its share or cap of the total; the next gets its own from what is
/// left, and so on; a channel left with nothing still gets a floor so its control traffic
/// (announces, markers, NAK answers) lives and its session does not time out at the sites. The
/// discipline is strict priority queueing (RFC 2475 section 4.2.2's EF over default forwarding,
/// EUMETCast/TelliCast channel priorities); the floor keeps the starved sessions alive instead of
/// letting them fail, at a cost to the urgent one of floor x N.

#include <cstdint>
#include <span>
#include <vector>

namespace mcdist::feed {

/// A running session's claim on the rate.
struct rate_claim {
  int priority = 0;           ///< higher first; ties served in the order given
  double share = 1.0;         ///< 0 < share <= 1, of the total, when cap_bps is 0
  std::uint64_t cap_bps = 0;  ///< fixed ceiling, bit/s (0 = use share)
};

/// Default floor: 1 % of the total rate per starved session.
inline constexpr double default_floor_fraction = 0.01;

/// Divides `total_bps` among `claims`.
/// @param total_bps      the feed's rate, bit/s (> 0)
/// @param claims         running sessions, any order
/// @param floor_fraction least fraction of the total any session gets
/// @return bit/s per claim, in the order of `claims`; the sum may exceed the total by at most
///         floor x (number of starved sessions)
std::vector<std::uint64_t> share_rate(std::uint64_t total_bps, std::span<const rate_claim> claims,
                                      double floor_fraction = default_floor_fraction);

/// Splits each channel's rate equally among its sessions: `channel_bps[i]` among `sessions[i]`
/// (>= 1) sessions, each at least the floor of share_rate (`floor_fraction` of `total_bps`).
/// @return bit/s per session, channel by channel in the order given
std::vector<std::uint64_t> split_rate(std::span<const std::uint64_t> channel_bps,
                                      std::span<const std::size_t> sessions,
                                      std::uint64_t total_bps,
                                      double floor_fraction = default_floor_fraction);

}  // namespace mcdist::feed
