#pragma once
/// @file
/// Rate pacing math: a virtual send schedule (a token bucket expressed as the time the link
/// next becomes free), so datagrams leave at the configured rate with a bounded burst.

#include "common/time.hpp"

#include <cstdint>

namespace mcdist {

/// Paces bytes to `rate_bps` bit/s. After idle time the sender may burst up to
/// `burst_bytes` at once (the bucket depth); otherwise every byte advances the schedule by
/// 8 / rate seconds. rate_bps == 0 means unpaced: allowance() is unlimited.
class pacer {
 public:
  pacer() = default;
  /// @param rate_bps     bits per second, 0 = unpaced
  /// @param burst_bytes  bucket depth, bytes; at least one datagram
  pacer(std::uint64_t rate_bps, std::uint64_t burst_bytes) noexcept
      : m_rate_bps(rate_bps), m_burst_bytes(burst_bytes) {}

  std::uint64_t rate_bps() const noexcept { return m_rate_bps; }
  /// Changes the rate; the schedule already consumed stays.
  void set_rate(std::uint64_t rate_bps) noexcept { m_rate_bps = rate_bps; }
  /// Changes the bucket depth, bytes (at least one datagram).
  void set_burst(std::uint64_t burst_bytes) noexcept { m_burst_bytes = burst_bytes; }

  /// Bytes that may be sent at `now` without exceeding the rate.
  std::uint64_t allowance(time_point now) const noexcept;
  /// Records that `bytes` were sent at `now`.
  void consume(time_point now, std::uint64_t bytes) noexcept;
  /// Earliest time at which `bytes` may be sent.
  time_point ready_at(time_point now, std::uint64_t bytes) const noexcept;

 private:
  /// Seconds the link needs for `bytes` at the rate, in ns.
  double ns_for(std::uint64_t bytes) const noexcept {
    return static_cast<double>(bytes) * 8e9 / static_cast<double>(m_rate_bps);
  }
  double start_ns(time_point now) const noexcept;

  std::uint64_t m_rate_bps = 0;
  std::uint64_t m_burst_bytes = 65536;
  /// When the link becomes free again, ns on the core clock; never earlier than now minus
  /// the burst allowance.
  double m_free_ns = 0;
};

}  // namespace mcdist
