#pragma once
/// @file
/// Time as the protocol cores see it. The cores never read a clock: the shells pass `now` in,
/// converted from std::chrono::steady_clock, and the simulation passes virtual time.

#include <chrono>
#include <cstdint>

namespace mcdist {

/// A clock without now(): only the type of the time points the cores are given.
struct core_clock {
  using rep = std::int64_t;
  using period = std::nano;
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<core_clock>;
  static constexpr bool is_steady = true;
};

using duration = core_clock::duration;
using time_point = core_clock::time_point;

/// Wall-clock time (std::chrono::system_clock): the dates of products, sessions and log lines
/// as journals, pages, metrics and signed timestamps carry them. Never used for intervals
/// (a stepped clock would bend them): those are time_point.
using wall_time = std::chrono::system_clock::time_point;

/// Converts a steady_clock reading into core time (same epoch, nanoseconds).
inline time_point from_steady(std::chrono::steady_clock::time_point t) noexcept {
  return time_point{std::chrono::duration_cast<duration>(t.time_since_epoch())};
}

/// Converts core time back to a steady_clock reading, for arming timers in the shells.
inline std::chrono::steady_clock::time_point to_steady(time_point t) noexcept {
  return std::chrono::steady_clock::time_point{
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(t.time_since_epoch())};
}

/// Microseconds since the core clock's epoch, as carried in wire timestamps.
inline std::uint64_t to_wire_us(time_point t) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count());
}

/// Milliseconds as a double, for logs and summaries.
inline double to_ms(duration d) noexcept {
  return std::chrono::duration<double, std::milli>(d).count();
}

/// Seconds as a double, for logs and summaries.
inline double to_seconds(duration d) noexcept { return std::chrono::duration<double>(d).count(); }

}  // namespace mcdist
