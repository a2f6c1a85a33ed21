#pragma once
/// @file
/// The process-wide usrsctp instance, run without threads of its own inside the program's
/// io_context (docs/design-notes.md "Unicast fallback"): usrsctp_init_nothreads(0, ...) so usrsctp
/// opens no sockets and starts no threads; every association uses an AF_CONN address whose packets
/// we carry over our own UDP sockets (RFC 6951 UDP encapsulation: the SCTP packet is the UDP
/// payload); usrsctp's timers are driven by usrsctp_handle_timers() from an Asio steady_timer.
///
/// usrsctp is a singleton: the first acquire() initializes it, the last release finishes it.
/// It may be driven by one io_context at a time (the program's one network thread).

#include "common/unicast/sctp_flight_cap.hpp"
#include "common/unicast/sctp_loss_probe.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

#include <sys/socket.h>

namespace mcdist::unicast {

/// Process-wide usrsctp settings, applied with usrsctp_sysctl_set_* at initialization (they are
/// global in usrsctp). Each default says why.
struct usrsctp_tuning {
  /// RTO.Min, ms. usrsctp's default is RFC 4960's 1 s; 200 ms is Linux TCP's TCP_RTO_MIN, so
  /// SCTP recovers from a tail loss on a short lossy path (Ladha & Amer's 70 ms, 3 %) as fast
  /// as the TCP it is compared with. Long paths are unaffected: RTO >= SRTT + 4 RTTVAR there.
  std::uint32_t rto_min_ms = 200;
  /// RTO.Initial, ms: RFC 9260 section 16 (and RFC 6298) say 1 s (usrsctp default 3 s).
  /// Still above a 700 ms geostationary RTT, so the INIT is not retransmitted needlessly.
  std::uint32_t rto_initial_ms = 1000;
  /// RTO.Max, ms. RFC 4960 says 60 s, which equals our idle timeout: one backed-off
  /// retransmission would outlast it. 10 s keeps several retransmissions inside it at 3-10 %
  /// loss while still far above any satellite RTT.
  std::uint32_t rto_max_ms = 10000;
  /// Delayed SACK, ms (usrsctp default 200). 40 ms is Linux TCP's minimum delayed ACK; it must
  /// stay well under rto_min_ms or a lone final packet would be retransmitted spuriously.
  std::uint32_t delayed_sack_ms = 40;
  /// SACK every this many packets (usrsctp default 2). SCTP grows cwnd per SACK by at most
  /// one MTU in slow start (RFC 9260 section 7.2.1), so SACKing every other packet halves the
  /// growth after each loss; at 3 % random loss (Ladha & Amer's setting) the window is regrown
  /// all the time. 1 SACKs every packet, as TCP with byte counting effectively grows.
  std::uint32_t sack_freq = 1;
  /// Initial congestion window, in MTUs (usrsctp default 3, RFC 4960's 4380-byte rule). 10 is
  /// RFC 6928's TCP initial window, the one TCP on the same path uses, so neither transport
  /// starts with an advantage; it saves slow-start rounds on a 590 ms satellite path.
  std::uint32_t initial_cwnd_mtus = 10;
  /// Max.Burst (RFC 4960 section 6.1), packets; 0 turns it off (usrsctp default 4). usrsctp
  /// applies it by cutting cwnd to flightsize + Max.Burst x MTU whenever it may send more than
  /// that (Ladha & Amer eq. 1), which turns IW10 into IW4 and collapses cwnd after every loss
  /// recovery. Measured through the link emulator (1.536 Mbit/s, 590 ms RTT, 50-packet queue,
  /// 10 x 1 MB): 170 s with 4, 59 s with 0 (TCP: 61 s); first record 3.7 s vs 3.1 s after
  /// start. Our sender keeps the window full (every request pipelined), so nothing is lost by
  /// letting cwnd alone decide, as TCP does.
  std::uint32_t max_burst = 0;
  /// Chunks one association may hold queued, send or reassembly side (usrsctp default 512,
  /// i.e. ~700 kB of 1400-byte chunks, less than one window on a long fat path: chunks beyond
  /// it are dropped on receive). 16384 covers an 8 MiB buffer of 512-byte chunks.
  std::uint32_t max_chunks_on_queue = 16384;
  /// Default congestion control module: 0 = RFC 4960 (NewReno-like, TCP-friendly, the paper's
  /// setting), 1 = HighSpeed TCP, 2 = H-TCP, 3 = RTCC. Use 2 only for dedicated long fat links:
  /// in Ladha & Amer's setting (1 Mbit/s, 70 ms, 3 % loss) H-TCP took 16-17 s against 10 s.
  std::uint32_t cc_module = 0;
  /// Check CRC32c on input and compute it on output (RFC 9260 section 6.8). Turning it off
  /// ("offload") roughly doubles usrsctp's loopback throughput but then only the UDP checksum
  /// guards the payload and peers that do check CRC32c drop our packets; files are still
  /// verified by SHA-256 end to end.
  bool crc32c = true;
  /// Repair the losses SCTP would leave to its T3 timer (a loss among the last packets of a
  /// flight, a lost fast retransmission) by sending the packet again from our UDP path, after
  /// RACK-TLP (sctp_loss_probe.hpp). Ladha & Amer's setting with three associations: median
  /// session 0.3-0.4 s shorter in paired runs; one association there needs no repair; about 4 %
  /// of loopback throughput (docs/benchmarks.md "SCTP loss repair and association 0's
  /// handshake").
  bool loss_repair = true;
  /// Hold a site's new DATA packets in the sender while its associations have more in flight
  /// than twice the bandwidth-delay product their acknowledgements measure (sctp_flight_cap.hpp,
  /// after BBR), so their windows do not overflow the path's queue together. Ladha & Amer's
  /// setting, two associations (the automatic count) with the cap against one without (main
  /// before), paired, median of 10: 3 % 9.14 s against 9.94 s and 9.03 s against 10.25 s;
  /// 1 % 8.79 s against 9.10 s (docs/benchmarks.md "An in-flight cap beneath usrsctp"). No cap
  /// above sctp_flight_cap::max_rtprop.
  bool flight_cap = true;
};

/// One way out for packets of an AF_CONN address: a UDP socket and, when it is not connected,
/// a destination.
struct conn_route {
  int fd = -1;
  sockaddr_storage to{};
  socklen_t to_len = 0;  ///< 0: the socket is connected, use send()
};

/// Counters of the packet path (process-wide).
struct usrsctp_counters {
  std::uint64_t packets_out = 0;
  std::uint64_t packets_in = 0;
  std::uint64_t send_dropped = 0;  ///< sendto failed (EAGAIN: socket buffer full; counted as loss)
  std::uint64_t no_route_dropped = 0;  ///< packet for an address already removed
  std::uint64_t loss_repairs = 0;      ///< packets sent again by the loss probe
  std::uint64_t cap_held = 0;          ///< DATA packets that waited for a site's flight cap
  std::uint64_t cap_dropped = 0;       ///< DATA packets dropped when a site's wait queue was full
};

class usrsctp_stack {
 public:
  /// Returns the process's stack, initializing usrsctp on first use (tuning applies then; a
  /// later caller's tuning is ignored while the stack lives) and driving its timers on `io`.
  /// @return nullptr with `ec` = error::usrsctp_unavailable when the stack is alive and bound
  ///         to another io_context.
  static std::shared_ptr<usrsctp_stack> acquire(boost::asio::io_context& io,
                                                const usrsctp_tuning& tuning, std::error_code& ec);

  ~usrsctp_stack();
  usrsctp_stack(const usrsctp_stack&) = delete;
  usrsctp_stack& operator=(const usrsctp_stack&) = delete;

  /// Registers a new AF_CONN address (usrsctp_register_address) whose packets leave by
  /// `route`. The address is an opaque unique token, never reused in this process; usrsctp only
  /// compares it and hands it back to conn_output.
  void* add_address(const conn_route& route);
  /// Points an address at another route (e.g. a peer's UDP source changed). No-op if unknown.
  void update_route(void* addr, const conn_route& route);
  /// Deregisters an address; packets usrsctp still emits for it are dropped.
  void remove_address(void* addr);

  /// Hands one received SCTP packet for `addr` to usrsctp (usrsctp_conninput).
  void input(void* addr, const void* data, std::size_t length);

  boost::asio::io_context& io() noexcept { return m_io; }
  const usrsctp_counters& counters() const noexcept { return m_counters; }
  const usrsctp_tuning& tuning() const noexcept { return m_tuning; }

  /// Interval of usrsctp_handle_timers calls: 10 ms, the granularity of usrsctp's own timer
  /// thread (it sleeps 10 ms between ticks), so timers fire when they would with threads.
  static constexpr std::chrono::milliseconds tick_interval{10};

 private:
  usrsctp_stack(boost::asio::io_context& io, const usrsctp_tuning& tuning);
  static int conn_output(void* addr, void* buffer, std::size_t length, std::uint8_t tos,
                         std::uint8_t set_df);
  void do_tick();
  /// Sends one packet by `route`. @return false when the socket refused it (counted).
  bool send_packet(const conn_route& route, const void* data, std::size_t length);
  /// Sends what the addresses' loss probes have due at `now`.
  void repair_losses(std::chrono::steady_clock::time_point now);

  /// One AF_CONN address: where its packets go and what its loss probe has seen.
  struct peer_state {
    conn_route route;
    sctp_loss_probe probe;
    std::string site;            ///< key of its site (site_key)
    bool any_data = false;       ///< a DATA packet has been sent
    std::uint32_t high_tsn = 0;  ///< highest TSN sent, valid with any_data
  };
  /// A DATA packet waiting for its site's flight cap.
  struct held_packet {
    void* addr;
    std::vector<std::byte> bytes;
  };
  /// The associations that share one path: same UDP socket, same peer IP address (a site's
  /// associations differ in UDP port only). Their new DATA packets wait here while the data
  /// they have in flight reaches the cap.
  struct site_state {
    sctp_flight_cap cap;
    std::vector<void*> members;
    std::deque<held_packet> held;
    std::size_t held_bytes = 0;
    bool bound = false;  ///< a packet waited since the last delivery was counted
  };
  /// Bytes held at most per site (8.4 s at 1 Mbit/s, 84 ms at 100 Mbit/s). Dropping sooner, at
  /// the cap's worth, cost 0.4 s a session in Ladha & Amer's setting (docs/benchmarks.md).
  static constexpr std::size_t max_held_bytes = 1024 * 1024;

  /// The site key of `route`: its socket and the peer's IP address without the port.
  static std::string site_key(const conn_route& route);
  void join_site(void* addr, peer_state& peer);
  void leave_site(void* addr, peer_state& peer);
  /// Bytes in flight of `site`'s associations (their loss probes' count).
  std::size_t in_flight(const site_state& site) const;
  /// Sends `site`'s held packets while its data in flight is below the cap.
  void release(site_state& site, std::chrono::steady_clock::time_point now);
  /// Sends a DATA packet now, or holds it for its site's cap (`new_data`; a retransmission is
  /// never held). A packet held past max_held_bytes pushes the oldest held one out (counted
  /// in usrsctp_counters::cap_dropped).
  void send_data(void* addr, peer_state& peer, std::span<const std::byte> packet, bool new_data,
                 std::chrono::steady_clock::time_point now);

  boost::asio::io_context& m_io;
  usrsctp_tuning m_tuning;
  boost::asio::steady_timer m_timer;
  std::chrono::steady_clock::time_point m_last_tick;
  std::unordered_map<void*, peer_state> m_routes;
  std::unordered_map<std::string, site_state> m_sites;
  usrsctp_counters m_counters;
  std::shared_ptr<bool> m_alive = std::make_shared<bool>(true);
};

}  // namespace mcdist::unicast
