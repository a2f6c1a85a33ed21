// The sender session's per-receiver state and helpers, shared by the .cpp files that implement
// sender_session (sender_session.cpp: construction, timers, datagrams in, the end, the report;
// sender_session_passes.cpp: passes, data, markers, digests; sender_session_receivers.cpp:
// registration, keys, COMPLETE; sender_session_feedback.cpp: NAKs and adverts;
// sender_session_fallback.cpp: the unicast fallback; sender_session_rate.cpp: --rate auto;
// sender_session_silent.cpp: silent sessions). Not part of the session's interface: include it
// only from those files.
#pragma once

#include "sender/core/sender_session.hpp"

#include "common/fec/fec.hpp"
#include "common/log_limit.hpp"
#include "common/ranges.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "sender/core/digest_windows.hpp"
#include "sender/core/feedback_plan.hpp"
#include <algorithm>
#include <cmath>
#include <limits>
#include <spdlog/spdlog.h>
#include <stdexcept>

namespace mcdist::sender::session_detail {

/// IPv4 (20) + UDP (8) header bytes, counted against the rate: the rate is what the link
/// carries, which is what an operator provisions.
inline constexpr std::uint32_t ip_udp_overhead = packet::ipv4_udp_overhead;
/// The pacing bucket holds at least this many milliseconds of the rate, so a sender thread
/// that wakes late on a busy machine catches up instead of losing rate; bursts stay bounded by
/// it (5 ms at 1 Gbit/s is 625 kB, far inside a receiver's socket buffer).
inline constexpr std::uint64_t catch_up_ms = 5;
/// Under --rate auto the bucket holds this many milliseconds of the current rate instead: one
/// pacing quantum (at most 1 ms, pacing_quantum) and 1 ms of lateness are caught up, a longer
/// hold-up is not. Near a bottleneck a catch-up is a burst into its queue: 5 ms (81 datagrams
/// at 190 Mbit/s) overflowed a 100-packet queue often enough to pull runs well below the
/// link's rate, 2 ms rarely, 1 ms lost the late wake-ups of a busy machine (docs/benchmarks.md
/// "Rate auto" has the runs).
inline constexpr std::uint64_t auto_catch_up_ms = 2;
/// END is multicast this many times, end_spacing apart, so a receiver that loses
/// one still learns the session is over.
inline constexpr std::uint32_t end_repeats = 3;
inline constexpr duration end_spacing = std::chrono::milliseconds(20);
/// A silent session announces its manifest through the whole session, one cycle per this many
/// announce intervals (1 s at the default 250 ms), so a site that joins late or lost chunks
/// still gets the manifest; the digests of files announced without one go with every cycle.
inline constexpr int silent_announce_interval_factor = 4;
/// Floor and ceiling of the interval between progress markers during a pass.
inline constexpr duration min_marker_interval = std::chrono::milliseconds(5);
inline constexpr duration max_marker_interval = std::chrono::seconds(1);
/// Markers go at most once per this many data datagrams' time at the current rate: they are
/// charged to the pacer like data, so at a low rate (--rate auto's 64 kbit/s floor) markers
/// every GRTT / 2 of a short path would take the whole rate and no block would leave. Eight
/// keeps a marker's ~100 bytes under 1 % of the rate.
inline constexpr int marker_spacing_datagrams = 8;
/// Repair adverts leave at most once per this fraction of the GRTT (coalescing the NAKs of one
/// reaction time), clamped to [1 ms, 100 ms].
inline constexpr int advert_interval_grtt_divisor = 4;
inline constexpr duration min_advert_interval = std::chrono::milliseconds(1);
inline constexpr duration max_advert_interval = std::chrono::milliseconds(100);

inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class Msg>
std::vector<std::byte> encode(wire::msg_type type, session_id session, const Msg& m) {
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  wire::encode_control(out, type, session, m);
  return out;
}

inline fallback_settings fallback_settings_of(const sender_config& c) {
  return {.mode = c.fallback,
          .nak_ratio = c.fallback_nak_ratio,
          .min_sample = c.fallback_min_sample,
          .after_passes = c.fallback_after_passes,
          .unicast_rate_bps = c.unicast_rate_bps,
          .unicast_threshold = c.unicast_threshold,
          .force_unicast = c.force_unicast,
          .tcp_connections = c.tcp_connections,
          .sctp_associations = c.sctp_associations,
          .unicast_max_rate_bps = c.unicast_max_rate_bps};
}

/// The announce's settings; `rate_bps` the rate in force (the pacer's: under --rate auto the
/// controller's start rate, not the configured ceiling).
inline announce_settings announce_settings_of(const sender_config& c, std::uint64_t rate_bps) {
  return {.block_size = c.block_size,
          .rate_bps = rate_bps,
          .max_passes = c.max_passes,
          .closed_group = !c.receivers.empty(),
          .sender_name = c.sender_name,
          .only_receivers = c.only_receivers,
          .channel = c.channel,
          .channel_seq = c.channel_seq,
          .catch_up_seqs = c.catch_up_seqs,
          .fec_k = c.fec_k,
          .fec_max_parity = c.fec_max_parity,
          .fec_depth = c.fec_depth,
          .silent_passes = c.silent_passes,
          .block_digests = c.block_digests,
          .created_unix_ms = c.created_unix_ms,
          .reserve_bytes = c.announce_reserve_bytes};
}

}  // namespace mcdist::sender::session_detail

namespace mcdist::sender {

struct sender_session::receiver_state {
  receiver_report rep;
  std::uint32_t index = 0;       ///< in m_receivers
  bool awaiting_listed = false;  ///< in m_awaiting_connection
  time_point last_heard{};
  // Unicast fallback (rep.path: its transport once ordered).
  fallback_token token{};
  std::uint32_t fallback_orders = 0;   ///< FALLBACK messages sent
  std::uint32_t unicast_failures = 0;  ///< unicast sessions that ended before COMPLETE
  bool unicast_started = false;
  time_point next_fallback{};
  std::uint32_t last_nak_pass = 0;  ///< sender's pass when its last NAK with blocks arrived
  /// Pending-digest claims from REGISTER: file -> the receiver's digest of its copy.
  std::vector<std::pair<std::uint32_t, sha256_digest>> pending_claims;
  bool keyed = false;  ///< holds the session key (on_site_keyed or registered)
  /// Closed group: registration closes early once every awaited receiver is in
  /// (sender_config::not_awaited).
  bool awaited = true;
  bool relay = false;  ///< named in sender_config::relays: times out after relay_timeout

  /// Taking part over multicast: NAKs ask for blocks.
  bool on_multicast() const noexcept {
    return rep.state == receiver_report::state_t::registered && !is_unicast(rep.path);
  }
  /// Moved to unicast, its transfer under way.
  bool on_unicast() const noexcept {
    return rep.state == receiver_report::state_t::registered && is_unicast(rep.path);
  }
};

}  // namespace mcdist::sender
