#pragma once
/// @file
/// When a receiver leaves multicast for a unicast fallback, and over which transport
/// (docs/architecture.md "Unicast fallback"). Three triggers: its NAKs exceed a fraction of the
/// data sent (its repairs would cost every other receiver), it still misses data after a number of
/// passes, or the whole set is small enough that unicast to every receiver beats a multicast pass
/// (a cost model run when registration closes). Pure: the session feeds in what it measured and
/// acts on the answers.

#include "common/endpoint.hpp"
#include "common/time.hpp"
#include "common/transport.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace mcdist::sender {

using mcdist::transport_kind;

/// Which fallback the sender may use: off, auto (the shell's best available transport:
/// usrsctp over UDP, else TCP; TCP on long paths), or a fixed transport.
enum class fallback_mode : std::uint8_t { off, automatic, sctp, sctp_kernel, tcp };

/// The policy's settings (sender_config's fallback fields; mcdist-send --fallback-*).
struct fallback_settings {
  fallback_mode mode = fallback_mode::automatic;
  double nak_ratio = 0.05;              ///< NAKed blocks / data datagrams sent above this: unicast
  std::uint64_t min_sample = 2000;      ///< ... once this many data datagrams were sent
  std::uint32_t after_passes = 10;      ///< still missing data after this many passes: unicast
  std::uint64_t unicast_rate_bps = 0;   ///< unicast capacity for the cost model; 0 = model off
  double unicast_threshold = 1.0;       ///< unicast from the start when cost < this x multicast
  bool force_unicast = false;           ///< every receiver over unicast from the start
  std::uint32_t tcp_connections = 0;    ///< per receiver; 0 = auto_unicast_connections
  std::uint32_t sctp_associations = 0;  ///< per receiver over SCTP/UDP; 0 = see connections()
  std::uint64_t unicast_max_rate_bps = 0;  ///< per-receiver unicast cap, bit/s; 0 = none
};

/// TCP connections (or, beyond long_path_rtt, SCTP associations) for a receiver's fallback
/// when the operator gave none: enough that their initial windows together (10 segments of 1448
/// bytes each, RFC 6928) cover the path's bandwidth-delay product, so the first round trip already
/// fills the link, and no fewer than 4 nor more than 8. Allman, Ostermann & Kruse (T1, 590 ms): 1
/// connection reached 24 % of the link, 8 reached 91 %, more overflowed the router queues.
/// @param rate_bps bit/s one receiver can take (its --unicast-max-rate, else the multicast rate;
///        0 = unknown: 4)
/// @param rtt      the receiver's measured round-trip time (zero = unknown: 4)
/// @return 4..8
std::uint32_t auto_unicast_connections(std::uint64_t rate_bps, duration rtt) noexcept;

/// The fallback decisions of one session.
class fallback_policy {
 public:
  /// Above this RTT the automatic mode prefers multi-socket TCP to SCTP: one SCTP
  /// association's loss-based congestion control collapses on long lossy paths (usrsctp,
  /// 10 Mbit/s, 700 ms RTT, 1e-3 loss: 10 MB took 194-231 s against 14-16 s over four TCP
  /// connections, common/unicast/README.md).
  static constexpr duration long_path_rtt = std::chrono::milliseconds(200);
  /// SCTP associations over UDP a receiver opens up to long_path_rtt when the operator gave
  /// none. One association's NewReno window, halved at every random loss, falls under a short
  /// path's bandwidth-delay product (Ladha & Amer, 1 Mbit/s, 70 ms, 3 %: the link idle 1.9 s
  /// of a 9.7 s session); two keep it busy, and usrsctp_stack's flight cap keeps their slow
  /// starts from overflowing the path's queue together. Ladha & Amer's setting, sessions
  /// with the cap (seeds 7007-7437, median of 5): 3 %: 1 = 10.57 s, 2 = 9.17 s, 3 = 9.14 s;
  /// 0 %: 8.70, 8.71, 8.99 s (docs/benchmarks.md "An in-flight cap beneath usrsctp").
  static constexpr std::uint32_t short_path_sctp_associations = 2;

  explicit fallback_policy(fallback_settings s) : m_s(s) {}

  const fallback_settings& settings() const noexcept { return m_s; }

  /// The shell's unicast server takes `k` at `e`; a transport without an endpoint is never
  /// chosen.
  void set_endpoint(transport_kind k, const endpoint& e) { m_endpoints[index(k)] = e; }
  /// Where receivers reach the server over `k` (empty: not offered).
  const std::optional<endpoint>& endpoint_of(transport_kind k) const noexcept {
    return m_endpoints[index(k)];
  }

  /// True when the cost model may send everyone unicast once registration closes, so pass 1
  /// must wait for the registrations (their count and RTT) instead of starting eagerly.
  bool decides_at_registration() const noexcept {
    return m_s.mode != fallback_mode::off && (m_s.force_unicast || m_s.unicast_rate_bps > 0);
  }

  /// The transport for a receiver whose RTT is `rtt` (nullopt: unknown, or any receiver), or
  /// nullopt when the mode is off or its transport has no endpoint.
  std::optional<transport_kind> transport(
      std::optional<duration> rtt = std::nullopt) const noexcept;

  /// The small-set cost model, when registration closed with `receivers` (> 0) registered:
  /// multicast sends the set once at the rate, then needs about two round trips for the tail
  /// NAKs and COMPLETE; unicast needs a connection set-up (about two round trips: SCTP's
  /// four-way handshake, or TCP's plus the request) and sends the set once per receiver
  /// through the sender's unicast capacity.
  /// @param set_bytes bytes of the file set; @param grtt the group RTT estimate
  /// @param multicast_rate_bps the multicast rate (0 = unpaced)
  /// @return why every receiver goes unicast from the start, or nullopt (multicast)
  std::optional<std::string> unicast_from_start(double set_bytes, std::uint32_t receivers,
                                                duration grtt,
                                                std::uint64_t multicast_rate_bps) const;

  /// True when `blocks_naked` of `data_datagrams` sent is above the NAK ratio, once the
  /// sample is large enough (min_sample); false when the mode is off.
  bool over_nak_ratio(std::uint64_t blocks_naked, std::uint64_t data_datagrams) const noexcept;

  /// The NAK-ratio trigger, after a NAK: `blocks_naked` blocks the receiver asked for so far,
  /// of `data_datagrams` sent, and whether another receiver still on multicast is at or below
  /// the ratio (`others_below`). The trigger exists because a lossy receiver's repairs cost
  /// every other receiver; when none is served better (it is the only one left on multicast,
  /// or every one loses as much: a sender rate above what the receivers or the path take, a
  /// fade), moving it off multicast spares no one and trades the paced multicast rate for one
  /// unicast stream (loopback at 8G: 1 GB in 6.8-7.7 s over usrsctp instead of 1.4 s with
  /// repairs, docs/benchmarks.md "1 GB at the machine's limit"). The pass-count trigger
  /// still applies to it.
  /// @return the reason to move it to unicast, or nullopt
  std::optional<std::string> nak_ratio_exceeded(std::uint64_t blocks_naked,
                                                std::uint64_t data_datagrams,
                                                bool others_below = true) const;

  /// The pass-count trigger for a receiver still missing data at the end of pass `pass`.
  /// @return the reason to move it to unicast, or nullopt (too early, or no transport)
  std::optional<std::string> after_passes(std::uint32_t pass) const;

  /// TCP connections or SCTP associations to tell a receiver of RTT `rtt` to open over
  /// transport `t`: the operator's count (--tcp-connections, --sctp-associations), else
  /// auto_unicast_connections of its unicast cap (else `multicast_rate_bps`), except that SCTP
  /// over UDP takes short_path_sctp_associations up to long_path_rtt (and while the RTT is
  /// not known) and kernel SCTP always one (unicast::client_options).
  std::uint32_t connections(transport_kind t, std::uint64_t multicast_rate_bps,
                            duration rtt) const noexcept {
    if (t == transport_kind::sctp_kernel) return 1;
    const std::uint32_t given =
        t == transport_kind::tcp ? m_s.tcp_connections : m_s.sctp_associations;
    if (given) return given;
    if (t == transport_kind::sctp_udp && rtt <= long_path_rtt) return short_path_sctp_associations;
    return auto_unicast_connections(
        m_s.unicast_max_rate_bps ? m_s.unicast_max_rate_bps : multicast_rate_bps, rtt);
  }
  /// True when the operator gave the count for `t` (for logs: "automatic" otherwise).
  bool connections_given(transport_kind t) const noexcept {
    return t == transport_kind::tcp ? m_s.tcp_connections != 0 : m_s.sctp_associations != 0;
  }

 private:
  static std::size_t index(transport_kind k) noexcept { return static_cast<std::size_t>(k); }

  fallback_settings m_s;
  std::array<std::optional<endpoint>, transport_kinds> m_endpoints;
};

}  // namespace mcdist::sender
