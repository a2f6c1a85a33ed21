#pragma once
/// @file
/// Which missed session numbers of silent channels a site fetches over HTTP(S), and when
/// (docs/design-notes.md "Catch-up over HTTP"): per channel index, the stream its heartbeats
/// name and the numbers still to fetch, each due now or after a back-off that doubles with
/// every failed attempt. The daemon feeds it what heartbeat_intake reports missing, offers the
/// due numbers to its catch_up_client and reports each number's end. Pure bookkeeping: no
/// client, no timer, the time comes in as an argument.

#include "common/crypto.hpp"
#include "common/wire.hpp"
#include "receiver/core/sequence_book.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mcdist::receiver {

/// The numbers to fetch per channel index, with their back-off. Not thread-safe (the daemon's
/// io thread owns it).
class catch_up_queue {
 public:
  using clock_time = std::chrono::steady_clock::time_point;
  /// Numbers of one channel waiting to be fetched: a heartbeat names at most
  /// wire::max_seq_ranges ranges within sequence_book::window numbers; this bounds the table
  /// whatever a hub says.
  static constexpr std::size_t max_numbers_per_channel = sequence_book::window;
  /// First retry after a failed attempt, doubling to max_backoff (a hub restarting, a link
  /// down for an hour: the site asks every 5 minutes, not every second).
  static constexpr std::chrono::seconds first_backoff{2};
  static constexpr std::chrono::seconds max_backoff{300};

  /// A number offered to the client.
  struct pick {
    std::size_t index = 0;                ///< the daemon's channel index
    std::string channel;                  ///< the channel as the hub names it
    std::uint64_t seq = 0;                ///< the session number
    std::optional<crypto::key32> signer;  ///< the heartbeats' signer: the index must be its
  };
  /// What the client did with a pick.
  enum class offer {
    taken,  ///< submitted: the number is in flight until done()
    busy,   ///< not now (every worker busy): it stays due
    full,   ///< the client's queue is full: the channel's other numbers wait too
  };
  /// A stream by its names (sequence_book's key).
  struct stream {
    std::string channel;
    std::string source;
  };

  /// A heartbeat of channel `index` left `missing` numbers (inclusive ranges) of stream
  /// (`channel` as the hub names it, `source`) signed by `signer`: each becomes due at `now`;
  /// numbers already known keep their back-off, numbers no longer missing are forgotten, and
  /// when the stream changed (a hub's new key, a renamed channel) the old stream's numbers
  /// are, unless in flight. At most max_numbers_per_channel are kept.
  void note_missing(std::size_t index, const std::string& channel, const std::string& source,
                    const std::optional<crypto::key32>& signer,
                    std::span<const wire::seq_span> missing, clock_time now);
  /// Offers the numbers due at `now` of every channel `eligible` says yes to, oldest first
  /// within a channel, to `submit`.
  /// @return true when a number of an eligible channel waits (not in flight): the caller looks
  ///         again later
  bool offer_due(clock_time now, const std::function<bool(std::size_t)>& eligible,
                 const std::function<offer(const pick&)>& submit);
  /// Number `seq` of channel `index` was caught up: forgotten, counted.
  /// @return the channel's stream, whose sequence book entry the caller marks; nullopt for a
  ///         channel never noted
  std::optional<stream> succeeded(std::size_t index, std::uint64_t seq);
  /// An attempt at number `seq` of channel `index` failed at `now`: counted, and the number
  /// backed off (first_backoff, doubling up to max_backoff).
  /// @return the back-off, nullopt when the number is not held (forgotten meanwhile)
  std::optional<std::chrono::seconds> failed(std::size_t index, std::uint64_t seq, clock_time now);

  /// True when channel `index` was noted (its outcomes are taken).
  bool knows(std::size_t index) const noexcept { return index < m_channels.size(); }
  /// True when some channel holds a number.
  bool any() const noexcept;
  /// Numbers held in all channels, in flight or waiting.
  std::size_t pending() const noexcept;
  /// Numbers held of channel `index`, and whether `seq` is in flight (tests).
  std::size_t pending(std::size_t index) const noexcept;
  bool in_flight(std::size_t index, std::uint64_t seq) const noexcept;
  /// Numbers marked caught up, and attempts that failed (retried).
  std::uint64_t numbers_done() const noexcept { return m_numbers_done; }
  std::uint64_t attempts_failed() const noexcept { return m_failed; }

 private:
  struct number {
    clock_time due{};
    std::chrono::seconds backoff{0};
    bool in_flight = false;
  };
  struct channel_state {
    std::string channel;  ///< as the hub names it
    std::string source;   ///< sequence_book stream source
    std::optional<crypto::key32> signer;
    std::map<std::uint64_t, number> numbers;
  };

  std::vector<channel_state> m_channels;
  std::uint64_t m_numbers_done = 0;
  std::uint64_t m_failed = 0;
};

}  // namespace mcdist::receiver
