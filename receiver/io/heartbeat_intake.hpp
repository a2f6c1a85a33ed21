#pragma once
/// @file
/// mcdistd's intake of a hub's heartbeats (docs/design-notes.md "Heartbeats";
/// common/beacon.hpp): a channel's heartbeat names the hub's newest session number. The intake
/// bounds how many it checks per channel and second, opens them with the channel's trusted
/// senders, drops stale and replayed ones, records the rest in the sequence book and decides
/// what the daemon does next: hand the missed numbers to catch-up (a silent channel with a
/// catch_up_url) and answer with a gap report (a channel that may transmit), so the hub catches
/// the site up without waiting for the channel's next product. The daemon sends the gap report;
/// the intake has no socket and takes the time as arguments.

#include "common/crypto.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/io/daemon_config.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mcdist::receiver {

class sequence_book;

/// The heartbeat budgets per channel, the newest heartbeat taken per stream, and the counters.
/// Not thread-safe (the daemon's io thread owns it).
class heartbeat_intake {
 public:
  /// Heartbeats checked per channel and second: a hub sends one per interval (1 s at the
  /// shortest), a few hubs on one channel a few; beyond this a flood of forged heartbeats is
  /// dropped before its signature check.
  static constexpr std::uint32_t max_per_second = 8;

  /// What a heartbeat taken asks of the daemon.
  struct plan {
    std::string channel;  ///< the channel as the hub names it
    std::string source;   ///< the sequence_book stream source (signer key or sender name)
    std::optional<crypto::key32> signer;  ///< the hub key that signed it; nullopt: unsigned
    std::uint64_t newest_seq = 0;         ///< the hub's newest session number
    /// Numbers this site misses below it, as the sequence book reports them (inclusive ranges,
    /// oldest first), and how many numbers they hold.
    std::vector<wire::seq_span> missing;
    std::uint64_t missed = 0;
    /// A silent channel with a catch_up_url: the numbers go to catch-up (also when none is
    /// missing: numbers caught up another way are forgotten there).
    bool catch_up = false;
    /// A channel that may transmit: the gap report answering the heartbeat, to its source,
    /// signed with the site's key when the heartbeat was signed. Sent when it names missing
    /// numbers, which a relay's own report may gain from its sites' (relay_forwarder).
    std::optional<wire::gap_report> gap_report;
  };

  /// What happened to the heartbeats seen (status file "heartbeats").
  struct counters {
    std::uint64_t taken = 0;    ///< opened, fresh, newer than their stream's last
    std::uint64_t refused = 0;  ///< over the budget, not opened, or stale
    std::uint64_t gap_reports_sent = 0;
  };

  /// @param receiver_id  this site's id, named in gap reports
  /// @param max_age      a heartbeat sent longer ago than this is stale (max_session_age)
  /// @param max_skew     one stamped further ahead of this host's clock too (max_clock_skew)
  heartbeat_intake(std::string receiver_id, std::chrono::milliseconds max_age,
                   std::chrono::milliseconds max_skew);

  /// A heartbeat `d` on channel `index`, configured as `ch` (not retired). Counted against the
  /// channel's budget for the second around `now`, opened with ch.trusted_senders, checked to
  /// be fresh at `now_unix_ms` and newer than the last one taken of its stream, then recorded
  /// in `book`.
  /// @return what the daemon does; nullopt when it was refused (counted) or is not newer than
  ///         the last of its stream (a replay changes nothing)
  std::optional<plan> on_heartbeat(std::size_t index, const channel_config& ch,
                                   std::span<const std::byte> d, sequence_book& book,
                                   std::chrono::steady_clock::time_point now,
                                   std::uint64_t now_unix_ms);
  /// A plan's gap report left the control socket.
  void gap_report_sent() noexcept { ++m_counters.gap_reports_sent; }

  const counters& stats() const noexcept { return m_counters; }
  /// Streams whose newest heartbeat is remembered (at most sequence_book::max_streams).
  std::size_t streams() const noexcept { return m_last.size(); }

 private:
  /// Heartbeats checked on one channel in the current second.
  struct budget {
    std::chrono::steady_clock::time_point window_start{};
    std::uint32_t used = 0;
  };
  /// True when channel `index` may check one more heartbeat at `now`.
  bool spend(std::size_t index, std::chrono::steady_clock::time_point now);

  std::string m_receiver_id;
  std::chrono::milliseconds m_max_age;
  std::chrono::milliseconds m_max_skew;
  /// Per channel index.
  std::vector<budget> m_budgets;
  /// (channel as announced, source) -> the newest heartbeat taken, its sent_unix_ms.
  std::map<std::pair<std::string, std::string>, std::uint64_t> m_last;
  counters m_counters;
};

}  // namespace mcdist::receiver
