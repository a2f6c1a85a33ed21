#pragma once
/// @file
/// One rate limit for log lines about events that can arrive at any rate (hostile input, a
/// syscall failing once per connection or datagram): the first few are logged, then ever fewer,
/// so an attacker or a broken peer cannot flood the log however fast it sends. The counts
/// themselves go to counters and metrics; the log only gives examples.

#include <atomic>
#include <bit>
#include <cstdint>

namespace mcdist {

/// True for the 1st..`first`-th occurrence, then for every power-of-two-th one (16th, 32nd,
/// ...): at most `first` + 64 lines over any number of events.
/// @param n the occurrence number, counted from 1
constexpr bool worth_logging(std::uint64_t n, std::uint64_t first = 10) noexcept {
  return n <= first || std::has_single_bit(n);
}

/// A counter of occurrences that says which of them to log (worth_logging). Lives as a member of
/// the object whose events it counts (never a function-local static). Safe to share between
/// threads (relaxed atomic increment).
class log_limiter {
 public:
  /// @param first how many occurrences are all logged before the power-of-two thinning
  ///        (1: log the first only and then rarely, for a setting that fails the same way each
  ///        time)
  constexpr explicit log_limiter(std::uint64_t first = 10) noexcept : m_first(first) {}

  /// Counts one occurrence. @return true when this one should be logged.
  bool tick() noexcept {
    return worth_logging(m_count.fetch_add(1, std::memory_order_relaxed) + 1, m_first);
  }

  /// Occurrences counted so far, logged or not.
  std::uint64_t count() const noexcept { return m_count.load(std::memory_order_relaxed); }

 private:
  std::uint64_t m_first;
  std::atomic<std::uint64_t> m_count{0};
};

}  // namespace mcdist
