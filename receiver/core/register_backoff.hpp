#pragma once
/// @file
/// When a receiver sends REGISTER again: exponential backoff with random jitter, so that a
/// group of receivers that started (or restarted) together does not retransmit in lockstep.

#include "common/time.hpp"

#include <algorithm>
#include <cstdint>

namespace mcdist::receiver {

/// First REGISTER retransmission backoff, doubling per send (the GRTT-based ceiling stops it).
inline constexpr duration first_register_retry = std::chrono::milliseconds(100);

/// The nominal backoff before REGISTER retransmission number `sends` + 1: 100 ms x 2^sends
/// (the exponent capped at 6), clamped to [floor, max(ceiling, 100 ms)].
/// @param sends    REGISTERs sent so far, minus one (0 after the first)
/// @param floor    receiver_config::retransmit_min
/// @param ceiling  the session's retransmit interval (about 2 x GRTT)
inline duration register_backoff(std::uint32_t sends, duration floor, duration ceiling) noexcept {
  const duration backoff = first_register_retry * (1 << std::min<std::uint32_t>(sends, 6));
  return std::clamp(backoff, floor, std::max(ceiling, first_register_retry));
}

/// The wait before the next REGISTER: the nominal backoff b = register_backoff(...) with
/// "equal jitter", uniform in [b/2, b] (never below `floor`). Randomizing retransmission
/// timers breaks the synchronization of many senders that started together (Floyd and
/// Jacobson, "The Synchronization of Periodic Routing Messages", IEEE/ACM ToN 1994; RFC 8085
/// section 3.1 asks UDP applications for such backoff); keeping half the backoff as a floor,
/// rather than "full jitter" over [0, b] (Brooker, "Exponential Backoff and Jitter", AWS
/// Architecture Blog 2015), spreads a restart storm over b/2 without letting a retry come
/// right after the send it repeats.
/// @param random  a uniformly distributed 64-bit value (the engine's own generator)
inline duration register_retry_delay(std::uint32_t sends, duration floor, duration ceiling,
                                     std::uint64_t random) noexcept {
  const duration b = register_backoff(sends, floor, ceiling);
  const auto half = b.count() / 2;
  const auto span = static_cast<std::uint64_t>(b.count() - half) + 1;
  return std::max(floor, duration(half + static_cast<duration::rep>(random % span)));
}

}  // namespace mcdist::receiver
