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
/// @param scale  window_control::scale(): 1 while losses are shared, less while they are not
inline duration nak_window(std::uint32_t group, duration grtt, double scale = 1.0) noexcept {
  const duration spread = nak_spread(group, grtt);
  if (group <= suppression_threshold) return spread;
  const double lambda = std::log(static_cast<double>(group)) + 1.0;
  const auto t =
      duration(static_cast<duration::rep>(scale * lambda / 2 * static_cast<double>(grtt.count())));
  return std::clamp<duration>(t, spread, max_nak_window);
}

/// Whether receivers share their losses, judged from the NAKs themselves, so that the backoff's
/// delay is paid only where it buys suppression. The exponential backoff makes a loss the
/// whole group shares cost a few NAKs instead of N, but it delays a loss no one else has (a
/// lone receiver's timer fires late in the window, about 0.87 T at 1,000 receivers) for
/// nothing. The sender sees which case it is in: with the full window, a shared loss is still
/// named by about 3 receivers (the ones whose timers fire within one reaction time, see
/// nak_window), a loss no one shares by one. So it measures the blocks its NAKs name per
/// block they newly ask for (`redundancy`) and halves the window while that stays below
/// `share_threshold`, back to full as soon as it is above (one round of N NAKs at most when a
/// fade comes after quiet independent losses: one datagram per receiver, a range each).
/// Pure; a few counters.
class window_control {
 public:
  /// Blocks named per newly asked-for block at or above which losses count as shared.
  static constexpr double share_threshold = 2.0;
  /// Newly asked-for blocks a judgement needs (fewer: the scale stays as it is).
  static constexpr std::uint64_t min_sample = 16;
  /// Smallest scale: below it the window is the plain spread anyway.
  static constexpr double min_scale = 1.0 / 64;

  /// A NAK named `named` blocks, of which `fresh` were not wanted already.
  void on_nak(std::uint64_t named, std::uint64_t fresh) noexcept {
    m_named += named;
    m_fresh += fresh;
  }
  /// Judges the NAKs since the last judgement (call it once per marker).
  void update() noexcept {
    if (m_fresh < min_sample) return;
    const double redundancy = static_cast<double>(m_named) / static_cast<double>(m_fresh);
    m_scale = redundancy >= share_threshold ? 1.0 : std::max(min_scale, m_scale / 2);
    m_named = 0;
    m_fresh = 0;
  }
  /// The fraction of nak_window() in force, in [min_scale, 1]; 1 before any judgement.
  double scale() const noexcept { return m_scale; }

 private:
  std::uint64_t m_named = 0;
  std::uint64_t m_fresh = 0;
  double m_scale = 1.0;
};

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
  const auto by_time =
      static_cast<std::uint32_t>(std::clamp<std::int64_t>(per_timeout, 1, 1 << 16));
  return std::max<std::uint32_t>(1, std::min(by_count, by_time));
}

}  // namespace mcdist::sender
