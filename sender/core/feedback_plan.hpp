#pragma once
/// @file
/// How long receivers spread their NAKs and how many of them a status request asks, as the
/// group grows (docs/design-notes.md "Feedback bounded by distinct losses"). The sender puts
/// both in every marker; receivers apply them (receiver/core/nak_scheduler.hpp). Pure
/// functions of the group size and the GRTT.

#include "common/time.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace mcdist::sender {

/// Up to this many registered receivers NAKs are not suppressed: a loss they share costs at
/// most this many NAKs anyway, fewer than the backoff lets through on average (about 3.4,
/// below), so the backoff's delay would buy nothing. The EUMETSAT study's two receivers stay
/// as fast as before.
inline constexpr std::uint32_t suppression_threshold = 4;
/// NAK spreading per registered receiver below the suppression window: 1,000 receivers
/// spread over 20 ms, so the sender's socket buffer never sees them all at once.
inline constexpr duration nak_spread_per_receiver = std::chrono::microseconds(20);
/// Longest window receivers draw their NAK delay from (receivers clamp the marker's value to
/// 10 s as well).
inline constexpr duration max_nak_window = std::chrono::seconds(10);
/// A status request asks about this many receivers at most (one slice of the group), as long
/// as every receiver is still asked often enough for the silence timeout (status_slices).
inline constexpr std::uint32_t status_answers_per_request = 256;

/// The uniform spread of the unsuppressed case: min(GRTT / 2, 20 us x group). The sender also
/// waits this long after the first NAK of a waiting phase before it starts the next pass, so
/// that pass carries the other receivers' NAKs too.
inline duration nak_spread(std::uint32_t group, duration grtt) noexcept {
  return std::min<duration>(grtt / 2, nak_spread_per_receiver * group);
}

/// The window receivers draw their NAK delay from (marker.nak_backoff_us), with the group size
/// (marker.group_size) as the truncated exponential's lambda = ln(group) + 1.
///
/// Above suppression_threshold receivers: T = lambda x GRTT / 2. With the truncated
/// exponential over T, the receivers sharing a loss whose timers fire within one reaction time
/// d of the first (the first NAK's repair or advertisement reaches them one GRTT later) number
/// about 1 + (e^(lambda d / T) - 1) / e for a loss the whole group shares (Nonnenmacher and
/// Biersack, "Optimal multicast feedback", INFOCOM 1998, whose analysis RFC 5740 section 5.3
/// follows): with d = GRTT, lambda d / T = 2 and that is 3.4 whatever the group size. NORM's
/// fixed default (backoff factor 4, group size estimate 1,000) is the same window at 1,000
/// receivers (lambda / 2 = 3.95).
/// At or below it: the uniform spread of nak_spread(), as before suppression.
/// @return at least nak_spread(group, grtt), at most max_nak_window
inline duration nak_window(std::uint32_t group, duration grtt) noexcept {
  const duration spread = nak_spread(group, grtt);
  if (group <= suppression_threshold) return spread;
  const double lambda = std::log(static_cast<double>(group)) + 1.0;
  const auto t = duration(static_cast<duration::rep>(lambda / 2 * static_cast<double>(grtt.count())));
  return std::clamp<duration>(t, spread, max_nak_window);
}

/// Slices a status request divides the incomplete receivers into (marker.status_slices): about
/// status_answers_per_request receivers per request, but few enough slices that each receiver
/// is asked at least four times within the silence timeout (one lost request or answer must not
/// fail it).
/// @param incomplete  receivers the sender still waits for
/// @param interval    time between status requests
/// @param timeout     sender_config::receiver_timeout
/// @return 1 (everyone answers) for small groups
inline std::uint32_t status_slices(std::uint32_t incomplete, duration interval,
                                   duration timeout) noexcept {
  const std::uint32_t by_count =
      (incomplete + status_answers_per_request - 1) / status_answers_per_request;
  const auto per_timeout = interval.count() > 0 ? timeout / (interval * 4) : 1;
  const auto by_time = static_cast<std::uint32_t>(std::clamp<std::int64_t>(per_timeout, 1, 1 << 16));
  return std::max<std::uint32_t>(1, std::min(by_count, by_time));
}

}  // namespace mcdist::sender
