#pragma once
/// @file
/// An in-flight cap for one site's SCTP associations over usrsctp, from the bandwidth and
/// round-trip time their acknowledgements measure (pure; no I/O, no clock of its own).
///
/// usrsctp's congestion control (RFC 9260 section 7.2, NewReno-like) grows each association's
/// window until a packet is lost. A site's associations share one path, and on a path with a
/// deep queue and no random loss (Ladha & Amer's: 1 Mbit/s, 70 ms, a 50-packet queue) their
/// slow starts overflow that queue together: every other packet of a window lost, recovery by
/// the T3 timer, 9.5-10.1 s for a set that needs 8.6 s (docs/benchmarks.md). With one
/// association that happens in two runs of five; with three, in every run.
///
/// The cap is BBR's in-flight bound (Cardwell, Cheng, Gunn, Hassas Yeganeh, Jacobson, "BBR:
/// Congestion-Based Congestion Control", ACM Queue 14(5), 2016; draft-cardwell-iccrg-bbr-
/// congestion-control, BBR v1's cwnd_gain of 2):
///
///     cap = gain x BtlBw x RTprop
///
/// with BtlBw the highest delivery rate of the last bw_window_rounds rounds and RTprop the
/// lowest round-trip time of the last rtprop_window (10 minutes, not BBR's 10 s: see there).
/// Packets beyond the cap wait in the sender (usrsctp_stack) instead of in the bottleneck's queue,
/// so the path holds at most about one bandwidth-delay product of queue whatever the associations'
/// windows add up to, and a loss-based window halved by a random loss still sits above the path's
/// bandwidth-delay product when the queue in the sender refills it.
///
/// Delivery rate: bytes acknowledged for the first time (cumulatively or in a gap block) over
/// one round (RTprop, at least min_round), a sample per round. A round in which the cap did
/// not bind (nothing waited for it) is application- or window-limited; its rate only raises
/// the estimate, never lowers it (the application-limited rule of draft-cheng-iccrg-delivery-
/// rate-estimation, which BBR uses). Before the first sample there is no cap.
///
/// Growth: when the cap binds, a round delivers at most cap / RTprop = gain x BtlBw, so the
/// estimate, and with it the cap, can double each round until the path is full (BBR's
/// Startup, with usrsctp's own slow start doing the sending).
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace mcdist::unicast {

class sctp_flight_cap {
 public:
  /// Times are the shell's steady clock readings, passed in: this class reads no clock.
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  /// BBR v1's cwnd_gain (draft-cardwell-iccrg-bbr-congestion-control).
  static constexpr unsigned gain = 2;
  /// Rounds the delivery-rate maximum is kept (BBR's BtlBwFilterLen, 10 round trips).
  static constexpr std::size_t bw_window_rounds = 10;
  /// How long the lowest RTT is kept before a higher one replaces it. BBR keeps it 10 s
  /// (RTpropFilterLen) because it drains the queue every 10 s (ProbeRTT) and so samples the
  /// empty path again; usrsctp's windows cannot be drained from here, so after 10 s a sample
  /// inflated by the queue the cap allows would become RTprop and raise the cap with it. Ten
  /// minutes: a path that became longer is followed, slowly. (Tried against the cap's cost on
  /// Allman's 590 ms path; it did not remove it: max_rtprop.)
  static constexpr duration rtprop_window = std::chrono::minutes(10);
  /// Shortest round: usrsctp_stack's timer granularity. Below it a round's few acks make a
  /// noisy rate, and on loopback (RTT tens of microseconds) the cap would be a few packets
  /// while usrsctp's processing, not the path, sets the pace.
  static constexpr duration min_round = std::chrono::milliseconds(10);
  /// Smallest cap in bytes (about 11 packets of 1452 bytes): a site is never held below what
  /// usrsctp's initial window (10 packets) would send.
  static constexpr std::size_t min_cap_bytes = 16 * 1024;
  /// Above this RTprop there is no cap: on Allman et al.'s 590 ms path (1.536 Mbit/s, 100-packet
  /// queue, eight associations) the cap made usrsctp fast-retransmit ~1000 chunks of 3500 and
  /// took 36-42 s against 31 s without it, for reasons not yet found (docs/benchmarks.md). The
  /// same bound as fallback_policy::long_path_rtt, beyond which `--fallback auto` picks TCP.
  static constexpr duration max_rtprop = std::chrono::milliseconds(200);
  /// The cap before any delivery-rate sample: none.
  static constexpr std::size_t no_cap = std::numeric_limits<std::size_t>::max();

  /// `bytes` were acknowledged for the first time at `now` (sctp_loss_probe::delivered_bytes
  /// differences). `cap_bound`: some packet waited for the cap since the last call (or is
  /// waiting now), so this stretch was not limited by what was offered.
  void on_delivered(std::uint64_t bytes, bool cap_bound, time_point now);

  /// A round-trip sample `rtt` (first acknowledgement of a packet sent once) at `now`.
  void on_rtt(duration rtt, time_point now);

  /// The cap in bytes of data in flight (sent and neither acknowledged nor reported in a gap
  /// block): no_cap before the first rate sample or above max_rtprop, else max(min_cap_bytes,
  /// gain x BtlBw x max(RTprop, min_round)).
  std::size_t cap() const noexcept;

  /// BtlBw in bytes per second (0 before the first sample).
  double bottleneck_bandwidth() const noexcept;
  /// RTprop (zero before the first sample).
  duration rtprop() const noexcept { return m_rtprop; }

 private:
  std::array<double, bw_window_rounds> m_bw{};  ///< bytes/s, one per round, ring
  std::size_t m_rounds = 0;                     ///< rounds sampled in all
  bool m_in_round = false;
  time_point m_round_start{};
  std::uint64_t m_round_bytes = 0;
  bool m_round_bound = false;
  duration m_rtprop{};
  time_point m_rtprop_stamp{};
};

}  // namespace mcdist::unicast
