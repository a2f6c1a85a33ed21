#pragma once
/// @file
/// A receiver's loss event rate p for --rate auto (docs/design-notes.md "Rate auto"), the
/// receiver half of TFMCC (RFC 4654 section 3.2, which takes it from TFRC, RFC 5348 section 5).
///
/// Fed with the sequence number of every multicast data and parity datagram the receiver gets
/// (wire::data_header::seq, one number per datagram the sender sends, repairs included), in
/// arrival order. A gap in the numbers is lost datagrams. Losses less than two RTTs after the
/// start of the current loss event belong to it (event_span_rtts; RFC 5348 section 5.2 says
/// one RTT); a later loss starts a new event. A loss interval is the count of sequence numbers
/// from the first loss of one event to the first loss of the next (RFC 5348 section 5.3); the
/// open interval I_0 runs from the latest event's first loss to the highest number seen.
///
/// p = 1 / I_mean with the weighted average of RFC 5348 section 5.4 over n = 8 intervals,
/// weights 1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2:
///     I_tot0 = sum_{i=0}^{n-1} I_i w_i,  I_tot1 = sum_{i=1}^{n} I_i w_{i-1},
///     I_mean = max(I_tot0, I_tot1) / W_tot.
/// With k < n closed intervals the sums run over the intervals there are, each divided by its
/// own weight total. History discounting (RFC 5348 section 5.5): when I_0 is more than twice
/// the mean of the closed intervals, their weights in I_tot0 are multiplied by
/// DF = max(0.5, 2 I_mean / I_0) (one factor for all, where the RFC keeps one per interval).
///
/// The first interval is synthesised (RFC 5348 section 6.3.1): the interval 1/p whose p makes
/// the TCP throughput equation give first_rate_share of the receive rate X_recv measured
/// first_loss_settle after the first loss (datagrams received in the last whole window of
/// max(RTT, 10 ms), or in the last 10 or more whole milliseconds holding at least 100 datagrams
/// if that is higher, times the packet size), so the rate right after the first loss is just
/// under what got through, not what a slow start overshooting a bottleneck lost. The first
/// loss event is made then (by the first datagram at least first_loss_settle after the first
/// loss and after the last silence, see first_loss_settle). Without a measured window (the first
/// loss came less than min_rate_window after the first datagram) it is the count of numbers from
/// the first datagram seen to the first loss.
///
/// Gaps the receiver's own kernel made (its socket buffer overran: SO_RXQ_OVFL counted drops
/// before the datagram that reveals the gap) are not loss events: they say this host could not
/// keep up, not that the path is congested, and go to the sender as an overrun report instead
/// (docs/design-notes.md "Receiver overrun"). They are counted in overrun_lost().
///
/// Departures from the RFC, for simplicity: a loss is dated at the arrival of the datagram that
/// reveals the gap (not interpolated between its neighbours), and reordered and duplicate
/// datagrams (a number not after the highest) are ignored: a reordering is counted as a loss.
///
/// Pure: no clock; the caller passes `now` and its RTT.

#include "common/time.hpp"
#include "common/wire.hpp"

#include <chrono>

#include <array>
#include <cstddef>
#include <cstdint>

namespace mcdist::receiver {

/// Loss intervals and the loss event rate of one session's multicast datagrams.
class loss_estimator {
 public:
  /// Loss intervals averaged (RFC 5348 section 5.4: n = 8).
  static constexpr std::size_t intervals = 8;
  /// Their weights, newest first (RFC 5348 section 5.4).
  static constexpr std::array<double, intervals> weights = {1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2};
  /// The smallest history discount factor (RFC 5348 section 5.5: 0.5).
  static constexpr double discount_floor = 0.5;

  /// How long after the first loss its loss event is made, with the first interval
  /// synthesised from the receive rate then: the first datagram at least this long after it,
  /// and at least this long after the end of the last silence (a gap of silence_gap or more
  /// between datagrams), does it. A loss revealed in a burst (a held-up path delivering what
  /// it held at once), or followed by a hold, is then measured with the whole burst, not with
  /// its first datagrams and the silence before it. Losses meanwhile belong to that event. Not
  /// in RFC 5348.
  static constexpr duration first_loss_settle = std::chrono::milliseconds(2);
  /// A gap between datagrams this long or longer is a silence (first_loss_settle).
  static constexpr duration silence_gap = std::chrono::milliseconds(2);
  /// The first loss event is made at the first datagram this long after the first loss
  /// whatever the silences: below about 6 Mbit/s every gap is one (and there the receive rate
  /// is the window's, which bursts do not mislead).
  static constexpr duration first_loss_settle_max = std::chrono::milliseconds(20);

  /// Shortest window the receive rate X_recv is measured over (RFC 5348: one RTT; loopback RTTs
  /// of microseconds would measure a handful of datagrams).
  static constexpr duration min_rate_window = std::chrono::milliseconds(10);

  /// @param packet_bytes  s of the throughput equation: a whole IP packet of a full block,
  ///                      bytes (what --rate counts), for the synthetic first interval
  explicit loss_estimator(std::uint32_t packet_bytes = static_cast<std::uint32_t>(
                              wire::default_block_size + wire::data_header_size +
                              packet::ipv4_udp_overhead)) noexcept
      : m_packet_bytes(packet_bytes) {}

  /// Sets how long after the first loss its loss event is made (first_loss_settle unless set;
  /// 0 makes it at once, as RFC 5348 does: for tests of the loss history itself).
  void set_first_loss_settle(duration d) noexcept { m_first_settle = d; }

  /// Sets s (the session's block size is known once its announce arrived).
  void set_packet_bytes(std::uint32_t packet_bytes) noexcept { m_packet_bytes = packet_bytes; }

  /// The receive rate of the last whole window, datagrams per second (0: none measured yet).
  double receive_rate_pps() const noexcept { return m_recv_pps; }

  /// The share of the receive rate before the first loss that the synthetic first interval
  /// gives back through the equation. Slow start's end leaves a bottleneck's queue full; at
  /// exactly the rate that got through it never drains, the next overflow comes within a few
  /// RTTs as a second loss event and halves the mean interval (runs whose estimate came out a
  /// fraction of a percent above a bottleneck's rate went on at well below it: docs/benchmarks.md
  /// "Rate auto"). At 0.95 a full queue drains in 20 times its delay. A choice, not from RFC 5348
  /// (which takes X_recv whole: its slow start is held to twice X_recv, ours is not).
  static constexpr double first_rate_share = 0.95;

  /// How long a loss event lasts, in RTTs: losses within this many RTTs of its first loss
  /// belong to it. RFC 5348 section 5.2 says one; two, because the RTT here is the
  /// registration's (no queueing delay) and what the sender sent before the event's report
  /// reached it arrives a round trip after the first loss, behind the full queue: with one,
  /// a rate 4 % above a 200 Mbit/s bottleneck at a 40 ms RTT took two more loss events 42 and
  /// 83 ms after the first and fell to 124 Mbit/s (docs/design-notes.md "Rate auto").
  static constexpr int event_span_rtts = 2;

  /// The shortest span of the recent receive rate, ms: the whole milliseconds just before a
  /// first loss whose rate the synthetic first interval takes when it is higher than the last
  /// window's ...
  static constexpr std::int64_t recent_span_ms = 10;
  /// ... long enough to hold this many datagrams, so that one datagram more or less moves the
  /// rate by at most 1 % (at 1 Mbit/s a 10 ms span holds 0, 1 or 2 datagrams: no rate at all).
  static constexpr std::uint64_t recent_min_datagrams = 100;
  /// The receive rate from the start of the shortest span of at least recent_span_ms whole
  /// milliseconds before the one `now` falls in, to `now`, that holds recent_min_datagrams
  /// (counting those of `now`'s millisecond so far), datagrams per second; 0 when no span of up
  /// to 62 ms does (below about 19 Mbit/s, or too early). A span that would start in
  /// milliseconds without arrivals (a silence: a path held up, that then delivers what it held
  /// in one burst) starts at the last one with arrivals, where the silence began (up to 62 ms
  /// back), so the burst is counted over the time it was held, not as a rate the path does
  /// not have.
  /// @param min_span_ms  the shortest span, whole ms (recent_span_ms unless said)
  double recent_rate_pps(time_point now, std::int64_t min_span_ms = recent_span_ms) const noexcept;

  /// The shortest span of the receive rate a slow-start report gives (X_recv, RFC 4654 section
  /// 3.4), ms. The sender holds slow start to twice the reported rate, so each doubling waits
  /// for a report of the last one: the shorter the span, the sooner (at 8 Gbit/s a millisecond
  /// holds 690 datagrams; at 1 Gbit/s 100 datagrams take 1.2 ms).
  static constexpr std::int64_t slow_start_span_ms = 1;
  /// X_recv for a slow-start report, datagrams per second: the rate of the last
  /// slow_start_span_ms or more whole milliseconds holding recent_min_datagrams, or below
  /// about 19 Mbit/s (no 62 ms span holds 100) the last whole window's; 0 when neither is
  /// measured yet.
  double slow_start_rate_pps(time_point now) const noexcept {
    const double recent = recent_rate_pps(now, slow_start_span_ms);
    return recent > 0 ? recent : m_recv_pps;
  }

  /// Shortest window of the sustained receive rate (an overrun report's rate): long enough to
  /// span the pauses of a receiver whose storage holds its reading back, so it is the rate
  /// the host keeps up, not that of a burst between pauses.
  static constexpr duration sustained_window = std::chrono::milliseconds(100);
  /// The sustained receive rate at `now`, datagrams per second: of the last whole window of
  /// sustained_window, or before the first, of the datagrams since the first (once
  /// min_rate_window has passed); 0 when neither is measured.
  double sustained_rate_pps(time_point now) const noexcept;

  /// The interval 1/p whose p makes the throughput equation give `rate_bps` for `packet_bytes`
  /// packets at `rtt` (RFC 5348 section 6.3.1), at least 1.
  static double synthetic_interval(double rate_bps, std::uint32_t packet_bytes,
                                   duration rtt) noexcept;

  /// A datagram with sequence number `seq` arrived at `now`.
  /// @param rtt      the receiver's round-trip time to the sender: losses within
  ///                 event_span_rtts of it after the current loss event's start are part of it
  /// @param overrun  the receiver's socket dropped datagrams just before this one (a full
  ///                 buffer): a gap it reveals is counted in overrun_lost(), not as a loss event
  void on_datagram(std::uint32_t seq, time_point now, duration rtt, bool overrun = false) noexcept;

  /// The loss event rate p in (0, 1], or 0 before the first loss event.
  double loss_event_rate() const noexcept;
  /// True once a loss event was seen.
  bool has_loss() const noexcept { return m_events > 0; }
  /// Loss events seen.
  std::uint64_t loss_events() const noexcept { return m_events; }
  /// Datagrams counted lost (sequence numbers skipped), socket overruns excluded.
  std::uint64_t lost() const noexcept { return m_lost; }
  /// Datagrams skipped in gaps the receiver's socket overrun made (not loss events).
  std::uint64_t overrun_lost() const noexcept { return m_overrun_lost; }
  /// The closed loss intervals kept (at most `intervals`), newest first, in sequence numbers.
  std::size_t closed_intervals() const noexcept { return m_closed_count; }
  std::uint64_t closed_interval(std::size_t i) const noexcept { return m_closed[i]; }
  /// The open interval I_0: from the latest loss event's first loss to the highest number seen,
  /// inclusive; 0 before the first loss event.
  std::uint64_t open_interval() const noexcept;

 private:
  /// Datagrams that arrived in one millisecond (time since the clock's epoch).
  struct ms_count {
    std::int64_t ms = -1;
    std::uint32_t count = 0;
  };

  /// Datagrams that arrived in millisecond `ms` (since the clock's epoch), 0 when its slot of
  /// m_recent no longer holds it.
  std::uint32_t arrivals(std::int64_t ms) const noexcept;
  /// Counts a datagram in its millisecond of m_recent.
  void count_recent(time_point now) noexcept;
  /// Pushes a closed loss interval (newest first, at least 1).
  void close_interval(std::uint64_t interval) noexcept;

  std::uint32_t m_packet_bytes;
  /// The last milliseconds' arrivals, a ring indexed by ms modulo its size (a span uses at most
  /// size - 2 slots, so it never shares one with the current millisecond).
  std::array<ms_count, 64> m_recent{};
  std::int64_t m_first_ms = 0;  ///< the millisecond of the first datagram
  time_point m_window_start{};
  std::uint64_t m_window_count = 0;
  double m_recv_pps = 0;
  bool m_started = false;
  std::uint32_t m_first = 0;      ///< first number seen
  std::uint32_t m_highest = 0;    ///< highest number seen (wraparound-safe order)
  std::uint32_t m_event_seq = 0;  ///< first lost number of the latest (or pending) loss event
  time_point m_event_at{};        ///< when the latest (or pending) loss event started
  bool m_first_pending = false;   ///< a first loss seen, its event not yet made
  time_point m_last_arrival{};    ///< the latest datagram's arrival
  time_point m_burst_start{};     ///< the first datagram after the latest silence
  duration m_first_settle = first_loss_settle;
  std::uint64_t m_events = 0;
  std::uint64_t m_lost = 0;
  std::uint64_t m_overrun_lost = 0;
  time_point m_sustained_start{};
  std::uint64_t m_sustained_count = 0;
  double m_sustained_pps = 0;
  /// Closed intervals I_1..I_n, newest first.
  std::array<std::uint64_t, intervals> m_closed{};
  std::size_t m_closed_count = 0;
};

}  // namespace mcdist::receiver
