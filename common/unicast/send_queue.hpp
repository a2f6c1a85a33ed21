#pragma once
/// @file
/// When a connection of a multi-socket TCP session takes its next record (pure; no I/O).
///
/// XFTP's records go to "whichever connection can take one" (Allman, Ostermann & Kruse,
/// section 3). A connection whose socket accepts every record it is offered takes far more
/// than it can send: the kernel's send buffer swallows a share of the whole set at the start,
/// and the connection that lost most packets then finishes its share alone at its 1/n of the
/// link while the others are idle. Measured through the link emulator (Ladha & Amer's 1 Mbit/s,
/// 70 ms, 3 %, four connections, BBR): the four connections ran dry at 8.1, 9.2, 9.6 and 9.9 s
/// of a 9.1 s transfer. So a connection takes a record only while the bytes it holds unsent
/// (SIOCOUTQNSD) are below a limit of `queue_time` at the rate it drains, and otherwise looks
/// again when it has drained to half of that limit: each connection holds little more than it
/// sends in `queue_time`, and the n connections run dry within about one record of one another.
///
/// The rate is the connection's pacing rate when the sender paces it (SO_MAX_PACING_RATE), else
/// the kernel's own pacing rate (TCP_INFO tcpi_pacing_rate: BBR's pacing rate, or for loss-based
/// congestion control 2 x cwnd / srtt in slow start and 1.2 x in congestion avoidance, Linux
/// tcp_update_pacing_rate), which is at or above what the connection delivers, so an estimate
/// errs towards a longer queue, never a starved connection. No rate known: no limit (the
/// kernel's queueing, as before).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

namespace mcdist::unicast {

/// The limits of one connection's unsent queue.
struct send_queue_rule {
  /// Time the queue may hold at the connection's rate (the limit in bytes = rate x this).
  std::chrono::milliseconds queue_time{50};
  /// Smallest limit, bytes: enough that the queue does not run dry between two looks at it.
  std::uint64_t min_bytes = 8 << 10;
  /// Largest limit, bytes: bounds what a fast connection holds beyond its window.
  std::uint64_t max_bytes = 4 << 20;
  /// Shortest wait before looking again (the timer's useful resolution).
  std::chrono::microseconds min_wait{1000};

  /// The unsent-queue limit of a connection draining at `rate_bytes_per_s` (> 0).
  constexpr std::uint64_t limit(std::uint64_t rate_bytes_per_s) const noexcept {
    const std::uint64_t bytes =
        rate_bytes_per_s / 1000 * static_cast<std::uint64_t>(queue_time.count());
    return std::clamp(bytes, min_bytes, max_bytes);
  }

  /// Whether a connection holding `unsent` bytes not yet sent and draining at
  /// `rate_bytes_per_s` may take a record now.
  /// @return std::nullopt: take one now (also when the rate is unknown, 0); else how long to
  ///         wait before asking again: until the queue has drained to half the limit at the
  ///         rate, at least min_wait
  constexpr std::optional<std::chrono::microseconds> wait(
      std::uint64_t unsent, std::uint64_t rate_bytes_per_s) const noexcept {
    if (rate_bytes_per_s == 0 || unsent == 0) return std::nullopt;
    const std::uint64_t lim = limit(rate_bytes_per_s);
    if (unsent < lim) return std::nullopt;
    const std::uint64_t us = (unsent - lim / 2) * 1'000'000 / rate_bytes_per_s;
    return std::max(std::chrono::microseconds(
                        static_cast<std::int64_t>(std::min<std::uint64_t>(us, 10'000'000))),
                    min_wait);
  }
};

/// A connection the sender paces (--unicast-max-rate): 50 ms of its rate, at least 8 KiB.
inline constexpr send_queue_rule paced_queue{};

/// A connection left to the kernel's pacing: 50 ms of the kernel's pacing rate, at least two
/// full segments (2 x 1448 bytes). The floor is lower than a paced connection's because here
/// it decides how unevenly the last records spread: on Ladha & Amer's 1 Mbit/s link each of
/// four connections drains about 31 kB/s, and 8 KiB would be a quarter second of its share.
inline constexpr send_queue_rule unpaced_queue{.min_bytes = 2 * 1448};

}  // namespace mcdist::unicast
