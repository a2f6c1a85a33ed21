#pragma once
/// @file
/// The throughput of the last hour, as both daemons keep and show it: bytes counted into
/// whole UTC minutes, and the status pages' bar chart of them. Pure: the caller passes the
/// wall time.

#include "common/time.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mcdist::http {

/// Minutes since the Unix epoch of `t` (floored; UTC minutes, since the epoch has no leap
/// seconds).
std::int64_t minute_of(wall_time t) noexcept;

/// Bytes per minute over the last `minutes_kept` minutes: a ring of (minute, bytes) entries,
/// at most one per minute in which something was counted. O(minutes_kept) memory.
class minute_ring {
 public:
  static constexpr std::size_t minutes_kept = 60;

  /// Adds `bytes` to the minute of `now`. A clock stepped back adds to the newest minute
  /// rather than reorder the ring.
  void add(std::uint64_t bytes, wall_time now);
  /// Bytes in each of the last minutes_kept minutes, oldest first, the last entry being the
  /// (partial) minute of `now`; minutes_kept entries.
  std::vector<std::uint64_t> per_minute(wall_time now) const;

 private:
  std::deque<std::pair<std::int64_t, std::uint64_t>> m_minutes;  ///< (minute_of, bytes)
};

/// The status pages' "Throughput, last hour" section: a heading and a figure holding a bar
/// chart (svg_bar_chart) of `per_minute` (bytes, oldest first, the last entry the minute of
/// `now`), each bar's tooltip its UTC minute, bytes and mean rate (bits per second), and a
/// caption `caption` followed by the peak rate.
/// @param what  the chart's accessible name, e.g. "bytes received per minute over the last hour"
std::string throughput_figure(std::span<const std::uint64_t> per_minute, wall_time now,
                              std::string_view what, std::string_view caption);

}  // namespace mcdist::http
