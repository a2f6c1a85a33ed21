#pragma once
/// @file
/// The sender half of --rate auto (docs/design-notes.md "Rate auto"): TFMCC's rate control
/// (RFC 4654, Widmer and Handley). Receivers compute a TCP-friendly rate from their loss event
/// rate and RTT (common/tcp_throughput.hpp, receiver/core/loss_estimator.hpp) and report it;
/// this unit keeps the current limiting receiver (CLR: the one with the lowest reported rate
/// still on multicast) and sets the sending rate:
///
/// - Slow start (RFC 4654 section 3.4): before any receiver reported a loss the rate doubles
///   once per RTT (the GRTT passed to update()), from `initial_bps` up to `rate_max_bps`, and
///   never above twice the lowest receive rate (X_recv) the receivers report meanwhile
///   (on_receive_rate). Each doubling therefore waits until a report shows the last one got
///   through: a step past a bottleneck is not followed by another before the loss it causes
///   is heard of. Without receive-rate reports (none yet, or receivers that send none) it
///   doubles unchecked.
/// - A report below the current rate lowers it at once (section 3.5: decreases are immediate),
///   and its receiver becomes the CLR if its rate is the lowest.
/// - A CLR reporting a higher rate raises the rate no faster than one packet per RTT per RTT:
///   d(rate)/dt <= s / R^2 with s the packet size and R the CLR's RTT (section 3.5's increase
///   limit, as in TFRC).
/// - Receiver overrun (docs/design-notes.md "Receiver overrun"; not in RFC 4654, whose losses
///   are the path's): a receiver whose own socket buffer is half full or dropped datagrams
///   reports the rate it takes datagrams in. The rate is capped at overrun_factor times that
///   (so the receiver's queue drains), slow start ends, and the cap then rises by the same
///   increase limit, s / R^2 per second with R the reporter's base RTT (the smallest of its
///   RTTs this session, the sender's echo samples and its reports': the RTT it shows while
///   overrun holds its own queue, which the cap is there to drain), until the ceiling lifts it or
///   another overrun lowers it: a flow-control loop beside TFMCC's congestion control, so a host
///   that cannot keep up is neither overrun for long nor mistaken for a congested path.
/// - A receiver that leaves the decision (moved to unicast, completed, failed: forget()) is no
///   longer a CLR candidate; the lowest recent report of the others becomes the CLR, and with
///   none the rate rises by the increase rule towards rate_max_bps.
///
/// Pure: time is passed in; no clock, no randomness.

#include "common/time.hpp"
#include "common/wire.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace mcdist::sender {

/// Settings of the rate controller. Rates bit/s of whole IP packets (as --rate).
struct rate_controller_config {
  std::uint64_t rate_max_bps = 1'000'000'000;  ///< the ceiling (--rate-max)
  /// Slow start's first rate (RFC 4654 starts at one packet per RTT; 10 Mbit/s reaches 1 Gbit/s
  /// in 7 RTT, which on a 70 ms path is half a second, on loopback a few ms).
  std::uint64_t initial_bps = 10'000'000;
  /// Never below this: a rate of 0 would mean unpaced. 64 kbit/s, about five 1448-byte packets
  /// a second (TFRC's floor is one packet per 64 s; a transfer must still finish).
  std::uint64_t rate_min_bps = 64'000;
  /// s: a whole IP packet of a full block, bytes (1448 for the default block size)
  std::uint32_t packet_bytes = static_cast<std::uint32_t>(
      wire::default_block_size + wire::data_header_size + packet::ipv4_udp_overhead);
  /// RTTs below this count as this (the sender's GRTT floor: timers act no faster).
  duration min_rtt = std::chrono::milliseconds(1);
  /// A report older than this is not a CLR candidate when the CLR leaves.
  duration report_lifetime = std::chrono::seconds(2);
  /// An overrun report caps the rate at this share of the rate the receiver takes datagrams in
  /// (below 1, so its queue drains; receivers assume wire::overrun_cap_share).
  double overrun_factor = wire::overrun_cap_share;
};

/// TFMCC sending-rate control for one session.
class rate_controller {
 public:
  explicit rate_controller(rate_controller_config cfg) noexcept;

  /// Starts slow start at `now` (the transfer begins).
  void start(time_point now) noexcept;

  /// A receiver's rate report.
  /// @param id        its receiver id
  /// @param rate_bps  its TCP-friendly rate, bit/s (meaningful only with has_loss)
  /// @param rtt       its RTT to the sender (for the increase limit while it is the CLR)
  /// @param has_loss  it has seen a loss event; a report without one limits nothing
  void on_feedback(std::string_view id, std::uint64_t rate_bps, duration rtt, bool has_loss,
                   time_point now);

  /// A receiver without a loss event reports the rate it receives at in slow start, X_recv
  /// (RFC 4654 section 3.4): slow start stays at or below twice the lowest recent such report.
  /// The receiver with the lowest is slow start's CLR (clr()). Ignored after slow start.
  /// @param recv_bps bit/s of whole IP packets
  void on_receive_rate(std::string_view id, std::uint64_t recv_bps, duration rtt, time_point now);

  /// Receiver `id` overruns: its socket buffer is half full or dropped datagrams while it took
  /// them in at `recv_bps` (bit/s of whole IP packets). Ends slow start and caps the rate at
  /// overrun_factor x recv_bps (a lower cap than the current one only). @param rtt its RTT as
  /// reported; the cap rises with the smallest RTT of `id` this session (base_rtt())
  void on_overrun(std::string_view id, std::uint64_t recv_bps, duration rtt, time_point now);

  /// An RTT of receiver `id`: the sender's own sample (an echo) or the one a report carries.
  /// Keeps the smallest (its base RTT: the path without the queue of its own socket, which
  /// inflates the RTT it shows while it overruns) and moves the overrun cap's RTT down to it
  /// when `id` set the cap. @return that base RTT
  duration on_rtt_sample(std::string_view id, duration rtt);

  /// Receiver `id` no longer takes part over multicast (unicast, completed, failed).
  void forget(std::string_view id, time_point now);

  /// Changes the ceiling (a hub lowering a session's share of its total rate): the rate is
  /// clamped to it at once, and rises to at most it from then on. At least rate_min_bps.
  void set_ceiling(std::uint64_t rate_max_bps) noexcept;
  /// The ceiling in force, bit/s.
  std::uint64_t ceiling() const noexcept { return m_cfg.rate_max_bps; }

  /// Advances slow start and the increase to `now`. @param grtt the group RTT (slow start's
  /// doubling period) @return the sending rate, bit/s, in [rate_min_bps, rate_max_bps]
  std::uint64_t update(time_point now, duration grtt) noexcept;

  /// The sending rate as of the last update() or report, bit/s.
  std::uint64_t rate_bps() const noexcept { return static_cast<std::uint64_t>(m_rate); }
  bool slow_start() const noexcept { return m_slow_start; }
  /// The current limiting receiver's id; empty when there is none. In slow start, the receiver
  /// with the lowest receive rate (on_receive_rate).
  const std::string& clr() const noexcept { return m_slow_start ? m_ss_clr : m_clr; }
  /// Slow start's limit from the receive rates, bit/s: twice the lowest recent report (0: no
  /// report, or slow start is over).
  std::uint64_t receive_limit_bps() const noexcept {
    return static_cast<std::uint64_t>(m_ss_limit);
  }
  /// The CLR's reported rate, bit/s (rate_max_bps without a CLR).
  std::uint64_t clr_rate_bps() const noexcept;
  /// The lowest rate set after slow start ended, bit/s (0 while in slow start).
  std::uint64_t lowest_bps() const noexcept { return static_cast<std::uint64_t>(m_lowest); }
  /// Receivers with a report kept (CLR candidates).
  std::size_t candidates() const noexcept { return m_reports.size(); }
  /// The overrun cap, bit/s (0: none: no overrun, or the cap has risen to the ceiling).
  std::uint64_t overrun_cap_bps() const noexcept { return static_cast<std::uint64_t>(m_cap); }
  /// The receiver whose overrun set the cap; empty without a cap.
  const std::string& overrun_receiver() const noexcept { return m_cap_owner; }
  /// The RTT the overrun cap rises with: its receiver's base RTT, at least min_rtt (zero
  /// without a cap).
  duration overrun_cap_rtt() const noexcept { return m_cap > 0 ? m_cap_rtt : duration{}; }
  /// The smallest RTT of receiver `id` in this session (on_rtt_sample and the reports; zero:
  /// none, or it left), unfloored.
  duration base_rtt(std::string_view id) const noexcept;

 private:
  struct report {
    double rate_bps = 0;
    duration rtt{};
    time_point at{};
  };
  /// Picks the lowest recent report as the CLR (none: empty), dropping stale ones.
  void choose_clr(time_point now);
  /// Slow start: recomputes m_ss_limit and m_ss_clr from the recent receive-rate reports
  /// (dropping stale ones) and sets the rate to the lower of the doubling's and the limit.
  void apply_receive_limit(time_point now);
  /// Slow start: raises the rate to the lower of the doubling's step and m_ss_limit.
  void raise_to_limit() noexcept;
  /// Slow start is over: the receive-rate reports no longer matter.
  void end_slow_start(time_point now);
  void set_rate(double r) noexcept;
  double target() const noexcept;

  rate_controller_config m_cfg;
  std::map<std::string, report, std::less<>> m_reports;
  std::string m_clr;
  double m_rate;
  double m_lowest = 0;
  bool m_started = false;
  bool m_slow_start = true;
  time_point m_last{};  ///< last doubling (slow start) or last increase step
  /// Slow start: each receiver's latest receive rate, bit/s, and when it came.
  std::map<std::string, std::pair<double, time_point>, std::less<>> m_recv;
  std::string m_ss_clr;
  double m_ss_limit = 0;  ///< twice the lowest recent receive rate (0: none)
  double m_ss_step = 0;   ///< the rate the last doubling allows, bit/s
  double m_cap = 0;       ///< the overrun cap, bit/s (0: none)
  duration m_cap_rtt{};
  std::string m_cap_owner;
  /// Each receiver's smallest RTT, from on_rtt_sample and its reports (one entry per receiver
  /// with an RTT: at most the session's receivers; forget() removes it).
  std::map<std::string, duration, std::less<>> m_base_rtt;
};

}  // namespace mcdist::sender
