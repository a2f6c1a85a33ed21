#pragma once
/// @file
/// When a receiver reports its TCP-friendly rate in a --rate auto session (TFMCC's feedback,
/// RFC 4654 section 3.6; docs/design-notes.md "Rate auto"). The sender numbers feedback rounds
/// in its markers. At the start of a round a receiver whose rate is below the sender's draws a
/// report time t = max(T (1 + ln(u) / ln(N)), 0) in [0, T) (RFC 4654 section 3.6's exponentially
/// distributed timers, u uniform in (0, 1], N an upper bound of the group size), so a few
/// report early and the sender echoes the lowest rate heard in its next markers; when its timer
/// fires, a receiver whose rate is not at least 10 % below that echo keeps quiet (the
/// suppression). The current limiting receiver (CLR), named in the markers, is exempt: it
/// reports at every marker, at most once per RTT, so the sender follows its rate. A receiver
/// whose new loss event puts its rate below half the sender's reports at once, without timer or
/// suppression (at most once per RTT): a slow start overshooting a bottleneck must hear of it
/// within a round trip, not a feedback round (4 GRTT) later, or it keeps doubling into the loss.
/// So does the CLR when a new loss event puts its rate below the sender's (the report then asks
/// for at most what got through: docs/design-notes.md "A loss event caps the report").
///
/// Pure: time and the random draw are passed in.

#include "common/time.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

namespace mcdist::receiver {

/// One session's rate-report timing.
class rate_feedback {
 public:
  /// N of the timer formula: the group size the timers are spread for (RFC 4654 section 3.6
  /// suggests an upper bound of the receivers; 10,000 is mcdist's max_receivers default).
  static constexpr double group_bound = 10'000;
  /// A receiver reports only if its rate is below this fraction of the lowest echoed rate.
  static constexpr double suppress_fraction = 0.9;
  /// A new loss event that puts a receiver's rate below this fraction of the sender's is
  /// reported at once.
  static constexpr double urgent_fraction = 0.5;

  /// The report time drawn at the start of a round. @param round_len T @param u in (0, 1]
  static duration delay(duration round_len, double u) noexcept {
    const double f =
        std::max(0.0, 1 + std::log(std::clamp(u, 1e-300, 1.0)) / std::log(group_bound));
    return std::chrono::duration_cast<duration>(round_len * f);
  }

  /// A marker's rate fields arrived.
  /// @param sender_bps  the sender's rate (0: not --rate auto; no reports)
  /// @param is_clr      the marker names this receiver the CLR
  /// @param round       the feedback round
  /// @param round_len   T, the round's length
  /// @param lowest_bps  the lowest rate reported this round (0: none yet)
  /// @param own_bps     this receiver's rate (+infinity: no loss event yet)
  /// @param rtt         this receiver's RTT (the CLR reports at most once per RTT)
  /// @param u           a uniform draw in (0, 1] for the timer
  /// @param slow_start  the sender is in slow start: own_bps is this receiver's receive rate
  ///                    (it has no loss event), and as the CLR it reports every RTT, not only
  ///                    at markers, since each doubling waits for a report of the last
  /// @param clr_named   the marker names a CLR (any receiver); in slow start without one,
  ///                    this receiver reports at once (at most once per RTT), so that the
  ///                    sender has a receive rate within a round trip, not a round
  void on_marker(std::uint64_t sender_bps, bool is_clr, std::uint32_t round, duration round_len,
                 std::uint64_t lowest_bps, double own_bps, duration rtt, double u, time_point now,
                 bool slow_start = false, bool clr_named = true) noexcept {
    m_sender_bps = sender_bps;
    m_lowest_bps = lowest_bps;
    m_clr = is_clr && std::isfinite(own_bps);
    m_slow_start = slow_start;
    m_rtt = rtt;
    if (sender_bps == 0) {
      m_due.reset();
      return;
    }
    if (slow_start && !clr_named && std::isfinite(own_bps) &&
        (!m_last_report || now - *m_last_report >= rtt)) {
      m_round = round;  // this is its report of the round
      m_due = now;
      m_urgent = true;
      return;
    }
    if (m_clr) {
      if (!m_last_report || now - *m_last_report >= rtt) {
        m_due = now;
      } else if (slow_start) {
        m_due = *m_last_report + rtt;
      }
      return;
    }
    if (m_round && *m_round == round) return;
    m_round = round;
    m_due.reset();
    if (std::isfinite(own_bps) && own_bps < static_cast<double>(sender_bps)) {
      m_due = now + delay(round_len, u);
    }
  }

  /// A new loss event was seen. @param first it is this receiver's first (it ends slow start,
  /// which RFC 4654 section 3.4 ends at any receiver's first loss: reported at once whatever
  /// the rate) @param own_bps this receiver's rate now @param rtt its RTT
  /// Reported at once, too: a loss event that puts the CLR's rate below the sender's (the
  /// sender follows the CLR; its next marker may be a feedback round away, while the queue that
  /// overflowed stays full at the sender's rate), and one that puts any receiver's below half.
  void on_loss_event(bool first, double own_bps, duration rtt, time_point now) noexcept {
    const auto sender = static_cast<double>(m_sender_bps);
    if (m_sender_bps == 0 ||
        !(first || own_bps < urgent_fraction * sender || (m_clr && own_bps < sender))) {
      return;
    }
    // The first is reported even right after a slow start's receive-rate report: it ends the
    // slow start, and it comes once.
    if (!first && m_last_report && now - *m_last_report < rtt) return;
    m_due = now;
    m_urgent = true;
  }

  /// True when the latest marker said the session's rate is auto (reports wanted).
  bool enabled() const noexcept { return m_sender_bps > 0; }
  /// The sender's rate as of the latest marker, bit/s (0: not --rate auto).
  std::uint64_t sender_bps() const noexcept { return m_sender_bps; }

  /// When a report is due, if one is.
  std::optional<time_point> due() const noexcept { return m_due; }

  /// The report timer fired at `now`. @param own_bps this receiver's rate now
  /// @return true: send the report now; false: suppressed (or no longer below the sender)
  bool fire(time_point now, double own_bps) noexcept {
    m_due.reset();
    const bool urgent = m_urgent;
    m_urgent = false;
    // The CLR of a slow start reports again an RTT later, marker or not.
    if (m_clr && m_slow_start)
      m_due = now + std::max(m_rtt, duration{std::chrono::milliseconds(1)});
    if (!std::isfinite(own_bps)) return false;
    if (!m_clr && !urgent) {
      if (own_bps >= static_cast<double>(m_sender_bps)) return false;
      if (m_lowest_bps > 0 && own_bps >= suppress_fraction * static_cast<double>(m_lowest_bps)) {
        return false;
      }
    }
    m_last_report = now;
    return true;
  }

 private:
  std::uint64_t m_sender_bps = 0;
  std::uint64_t m_lowest_bps = 0;
  bool m_clr = false;
  bool m_slow_start = false;
  duration m_rtt{};
  bool m_urgent = false;
  std::optional<std::uint32_t> m_round;
  std::optional<time_point> m_due;
  std::optional<time_point> m_last_report;
};

}  // namespace mcdist::receiver
