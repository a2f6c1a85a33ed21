#pragma once
/// @file
/// One session's --rate auto reports (TFMCC, RFC 4654; docs/design-notes.md "Rate auto",
/// "Receiver overrun"): the loss history of its multicast datagrams (loss_estimator), the rate
/// this receiver asks for (its TCP-friendly rate after a loss event, its receive rate while
/// the sender is in slow start), the cap a loss event puts on it, the report timing
/// (rate_feedback) and when an overrun of this host's socket buffer is reported. The engine
/// feeds in sequence numbers, markers and timers and sends the NAKs this says to send.
/// Pure: the time, the RTT and the random draws come in as arguments.

#include "common/time.hpp"
#include "receiver/core/loss_estimator.hpp"
#include "receiver/core/rate_feedback.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>

namespace mcdist::wire {
class marker;
class nak;
}  // namespace mcdist::wire

namespace mcdist::receiver {

/// Rate reports of one session.
class rate_reporter {
 public:
  /// RTTs below this count as this in the rate equation (the sender's GRTT floor, grtt_min).
  static constexpr duration min_rtt = std::chrono::milliseconds(1);
  /// After its first overrun report, a session reports again only while the sender's rate is
  /// at least this share of its sustained receive rate, taking the sender's rate, until the
  /// next marker, as at most wire::overrun_cap_share of the rate it reported (the sender's cap).
  static constexpr double overrun_report_fraction = 0.9;

  /// @param block_size  the session's block size, bytes: rates count whole IP packets of a
  ///                    full block (what --rate counts)
  explicit rate_reporter(std::uint32_t block_size) noexcept;

  /// The RTT rates are computed with: the registration's round trip when measured (non-zero),
  /// else the sender's GRTT (the group's largest: a conservative stand-in); at least min_rtt.
  static duration rtt_of(duration register_rtt, duration grtt) noexcept {
    return std::max(register_rtt > duration::zero() ? register_rtt : grtt, min_rtt);
  }
  /// Bytes of a whole IP packet of a full block.
  std::uint32_t packet_bytes() const noexcept { return m_packet_bytes; }

  /// What one datagram changed in the loss history.
  struct seen {
    std::uint64_t overrun_lost = 0;  ///< datagrams found lost to this host's full socket buffer
    std::uint64_t lost = 0;          ///< datagrams found lost to the path
    bool loss_event = false;         ///< a new loss event began (on_loss_event follows)
  };
  /// A multicast data or parity datagram with sequence number `seq` arrived at `arrival`.
  /// @param overrun  the kernel dropped datagrams of the session's socket just before it: its
  ///                 gap is this host's overrun, not the path's loss
  seen on_datagram(std::uint32_t seq, time_point arrival, duration rtt, bool overrun) noexcept;
  /// The loss event on_datagram reported: caps the reports of a loss event other than the
  /// first at loss_estimator::first_rate_share of what got through up to it (for
  /// event_span_rtts RTTs, then while the open interval is shorter than the mean), and tells
  /// the report timer. @return this receiver's rate now, bit/s (own_rate_bps)
  double on_loss_event(time_point now, time_point arrival, duration rtt) noexcept;

  /// A marker's rate fields, in a receiving session on multicast: schedules a report when this
  /// receiver should send one. The sender's rate assumed since an overrun report is dropped.
  /// @param is_clr  the marker names this receiver the CLR
  /// @param random  a uniformly distributed 64-bit value for the report timer
  void on_marker(const wire::marker& m, bool is_clr, std::uint64_t random, duration rtt,
                 time_point now) noexcept;
  /// The report timer fired (at or after due()): true when the report is to be sent now.
  bool fire(time_point now, duration rtt) noexcept;
  /// When a rate report is due, if one is.
  std::optional<time_point> due() const noexcept { return m_feedback.due(); }
  /// True when the latest marker said the session's rate is auto (reports wanted).
  bool enabled() const noexcept { return m_feedback.enabled(); }

  /// Sets a NAK's rate fields (40-45) when the session is in --rate auto: rate, loss event
  /// rate and RTT after a loss event; the receive rate and RTT while the sender is in slow
  /// start without one; nothing otherwise.
  void fill(wire::nak& m, time_point now, duration rtt) const noexcept;

  /// The overrun report due now, bit/s (the sustained receive rate), or nullopt: not --rate
  /// auto, no receive rate measured, one already sent within an RTT, or after the first, the
  /// sender's rate (the latest marker's, or below wire::overrun_cap_share of the last report
  /// until a marker says more) is under overrun_report_fraction of this rate: its cap holds
  /// and the queue is draining. A report returned counts as sent.
  std::optional<double> take_overrun(time_point now, duration rtt) noexcept;

  /// The rate this receiver's reports carry, bit/s: its TCP-friendly rate after a loss event
  /// (capped after a later event, see on_loss_event); before one, its receive rate while the
  /// sender is in slow start (0 while none is measured); +infinity otherwise (it limits
  /// nothing).
  double own_rate_bps(time_point now, duration rtt) const noexcept;
  /// The loss history.
  const loss_estimator& loss() const noexcept { return m_loss; }

 private:
  std::uint32_t m_packet_bytes;
  loss_estimator m_loss;
  rate_feedback m_feedback;
  /// The latest marker said the sender is in slow start (its receive-rate reports wanted).
  bool m_slow_start = false;
  /// After a loss event other than the first: the reports ask for at most this, bit/s, until
  /// m_cap_until and then while the open loss interval is shorter than the mean one. 0: no cap.
  double m_cap_bps = 0;
  time_point m_cap_until{};
  /// When this session last reported an overrun, and the rate the sender holds below after it
  /// (wire::overrun_cap_share of what it reported) until the next marker tells the sender's
  /// rate itself; 0: take the marker's.
  std::optional<time_point> m_overrun_reported;
  double m_overrun_assumed_bps = 0;
};

}  // namespace mcdist::receiver
