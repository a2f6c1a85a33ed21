#pragma once
/// @file
/// Time-based loss repair under a usrsctp association, after RACK-TLP (RFC 8985), for the
/// losses SCTP's own rules leave to the T3 timer (pure; no I/O, no clock of its own).
///
/// SCTP retransmits a chunk early only after three SACKs report it missing (RFC 9260 section
/// 7.2.4); otherwise it waits for T3 (RTO.Min 200 ms here, often more) and then restarts from a
/// one-packet window. On a short lossy path (Ladha & Amer: 70 ms, 3 %) that happens several
/// times a session: a loss among the last packets of a flight (no three SACKs follow), a lost
/// fast retransmission, a whole flight lost. TCP repairs these within a round trip with
/// RACK-TLP; usrsctp has no such rule and no setting for one (docs/benchmarks.md).
///
/// Every packet of a usrsctp association passes through our own UDP path (usrsctp_stack), so
/// this class watches both directions: the TSNs of the DATA packets sent and the cumulative
/// and gap acks of the SACKs received. It keeps a copy of each DATA packet until it is
/// acknowledged and, when SCTP can no longer learn of a loss by itself, hands a copy back to be
/// sent again, byte for byte (the receiver takes it as a duplicate or fills its hole):
///
/// - **Holes** (RACK, RFC 8985 section 6.2): a packet not acknowledged while a packet sent
///   after it was (its TSNs below the highest acknowledged), last sent more than
///   SRTT + reordering window ago, is lost. It is sent again only when nothing sent is left
///   unaccounted for above the highest acknowledged TSN: then no further SACK will come to
///   make SCTP's third miss indication, and SCTP would wait for T3. While packets are still in
///   flight above it, SCTP's own fast retransmit is left to act.
/// - **Tail** (TLP, RFC 8985 section 7): when the newest packet sent is unacknowledged 2 x SRTT
///   after it left and no SACK has come for SRTT since, it is sent again, so its SACK reports
///   what is missing.
///
/// A copy is sent again at most max_repeats times, each time after twice the previous wait
/// (the probe backs off as the RTO does). The round-trip time is measured here from the
/// newest packet a SACK acknowledges for the first time, if it was sent once (Karn's rule,
/// RFC 6298 section 3); nothing is repaired before the first sample.
///
/// Congestion control: usrsctp does not learn of a loss repaired here, so its window is not
/// reduced for it. The repairs are limited to losses that would otherwise cost a T3 timeout
/// (window to one packet); the first loss of a window still goes through SCTP's fast
/// retransmit and halves the window. Memory: copies of at most max_packets packets (beyond
/// them, new packets are not kept and not repaired here).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace mcdist::unicast {

class sctp_loss_probe {
 public:
  /// Times are the shell's steady clock readings, passed in: this class reads no clock.
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  /// Copies kept per association at most (1024 packets of <= 1452 bytes: 1.5 MB).
  static constexpr std::size_t max_packets = 1024;
  /// Copies sent again by one due() call at most: a burst of repairs stays a burst of a few
  /// packets whatever the state (the next call, a tick later, may send more).
  static constexpr std::size_t max_repairs_per_call = 8;
  /// Repairs of one packet at most.
  static constexpr unsigned max_repeats = 4;
  /// Smallest reordering window and smallest tail wait (RFC 8985 section 6.2 uses min_RTT/4;
  /// the floor covers the 10 ms timer granularity of usrsctp_stack).
  static constexpr duration min_window = std::chrono::milliseconds(10);

  /// An SCTP packet `packet` left for the peer at `now`. An INIT or INIT ACK gives the tag the
  /// peer's packets must carry; a DATA-carrying packet is recorded (other packets, and packets
  /// sctp_wire::summarize cannot read whole, are ignored). Records a copy when it carries
  /// new TSNs; a retransmission (its TSNs all sent before) marks the packets holding them as sent
  /// again at `now`.
  void on_sent(std::span<const std::byte> packet, time_point now);

  /// An SCTP packet `packet` came from the peer at `now`; its SACK or NR-SACK, if any,
  /// acknowledges packets (cumulatively or in gap blocks) and may give an RTT sample. A packet
  /// that does not read whole, does not carry the verification tag our INIT or INIT ACK named
  /// (none seen yet: every packet), or acknowledges a TSN never sent, is ignored. Cost: one
  /// pass over the copies held.
  void on_received(std::span<const std::byte> packet, time_point now);

  /// The copies to send again at `now` (see the file comment), in TSN order; each is marked
  /// as sent at `now`. The spans stay valid until the next call of any member.
  std::vector<std::span<const std::byte>> due(time_point now);

  /// Smoothed RTT (RFC 6298), zero before the first sample.
  duration srtt() const noexcept { return m_srtt; }
  /// Packets sent again by due(), in all.
  std::uint64_t repairs() const noexcept { return m_repairs; }
  /// Of them, by the tail rule.
  std::uint64_t tail_probes() const noexcept { return m_tail_probes; }
  /// Copies held.
  std::size_t held() const noexcept { return m_packets.size(); }
  /// Bytes of the copies held that the latest SACK neither acknowledged nor reported in a gap
  /// block: what is in flight, as far as the copies tell (sctp_flight_cap's measure).
  std::size_t in_flight_bytes() const noexcept { return m_in_flight; }
  /// Bytes of copies acknowledged for the first time (cumulatively or in a gap block), in all:
  /// the delivered count of a delivery-rate estimate (sctp_flight_cap).
  std::uint64_t delivered_bytes() const noexcept { return m_delivered; }
  /// RTT samples taken, in all, and the latest of them (zero before the first).
  std::uint64_t rtt_samples() const noexcept { return m_rtt_samples; }
  sctp_loss_probe::duration latest_rtt() const noexcept { return m_latest_rtt; }

 private:
  struct sent_packet {
    std::uint32_t first_tsn = 0;
    std::uint32_t last_tsn = 0;
    time_point last_sent{};
    unsigned sends = 1;        ///< transmissions, ours and SCTP's
    unsigned repeats = 0;      ///< of them, ours
    bool sacked = false;       ///< inside a gap block of the latest SACK
    bool ever_sacked = false;  ///< inside a gap block of some SACK (gives no RTT sample later)
    std::vector<std::byte> bytes;
  };

  void sample_rtt(duration r) noexcept;
  duration wait_for(const sent_packet& p, duration base) const noexcept;

  /// Buffers kept for reuse at most.
  static constexpr std::size_t max_spare = 64;

  std::deque<sent_packet> m_packets;            ///< unacknowledged, in TSN (= send) order
  std::vector<std::vector<std::byte>> m_spare;  ///< buffers of acknowledged copies
  bool m_have_tag = false;
  std::uint32_t m_local_tag = 0;  ///< Initiate Tag of our last INIT or INIT ACK
  bool m_any_sent = false;
  std::uint32_t m_high = 0;  ///< highest TSN sent
  bool m_any_acked = false;
  bool m_any_sacked = false;       ///< some packet has `sacked` set
  std::uint32_t m_cum = 0;         ///< highest cumulative TSN ack seen
  std::uint32_t m_high_acked = 0;  ///< highest TSN acknowledged, cumulatively or in a gap block
  time_point m_last_sack{};
  duration m_srtt{};
  duration m_latest_rtt{};
  std::uint64_t m_rtt_samples = 0;
  std::size_t m_in_flight = 0;
  std::uint64_t m_delivered = 0;
  std::uint64_t m_repairs = 0;
  std::uint64_t m_tail_probes = 0;
};

}  // namespace mcdist::unicast
