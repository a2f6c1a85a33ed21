#pragma once
/// @file
/// One SCTP association seen through a one-to-one style socket, from usrsctp over UDP
/// (usrsctp_assoc.cpp) or from the kernel (kernel_sctp.cpp), so the server and client sessions
/// are written once. Everything runs on the io_context's thread; readiness is reported by a
/// handler posted to the io_context, never from inside an SCTP call, so the handler may send,
/// receive and close freely.

#include "common/endpoint.hpp"
#include "common/packet.hpp"
#include "common/unicast/io/usrsctp_stack.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>

namespace mcdist::unicast {

/// One log line of an association's SCTP_STATUS (RFC 6458 section 8.2.1): congestion window
/// (bytes), smoothed RTT and RTO (ms), peer receive window, unacknowledged and pending chunks.
/// A template because the kernel's and usrsctp's `sctp_status` are distinct types.
template <class Status>
std::string describe_sctp_status(const Status& st) {
  return "cwnd=" + std::to_string(st.sstat_primary.spinfo_cwnd) +
         " srtt=" + std::to_string(st.sstat_primary.spinfo_srtt) +
         " rto=" + std::to_string(st.sstat_primary.spinfo_rto) +
         " rwnd=" + std::to_string(st.sstat_rwnd) +
         " unacked=" + std::to_string(st.sstat_unackdata) +
         " pending=" + std::to_string(st.sstat_penddata);
}

/// Outbound streams of an association by default: stream 0 for control and 31 for files, so
/// 31 files are in flight at once, each on its own stream (Ladha & Amer section 5.3 use one
/// data stream per transfer; more streams than concurrently active files buy nothing).
inline constexpr std::uint16_t default_sctp_streams = 32;
/// Most streams we ask for or accept: bounds per-association stream state at both ends.
inline constexpr std::uint16_t max_sctp_streams = 256;
/// The SCTP port inside the UDP encapsulation on the server. With AF_CONN addresses the port
/// is only a label (the UDP port is what the network sees); 9899 is the IANA
/// sctp-tunneling port of RFC 6951.
inline constexpr std::uint16_t server_sctp_port = 9899;
/// The client's SCTP port inside the encapsulation (each client has its own AF_CONN address,
/// so all clients can share it).
inline constexpr std::uint16_t client_sctp_port = 9900;
/// Largest UDP datagram the usrsctp listener takes from the network, bytes: SCTP packets are
/// at most the path MTU (default 1452), jumbo frames 9000; anything larger is hostile.
inline constexpr std::size_t max_sctp_datagram = 9216;

/// Per-association socket settings.
struct sctp_socket_options {
  /// Outbound (and accepted inbound) streams, 2..max_sctp_streams.
  std::uint16_t streams = default_sctp_streams;
  /// SCTP packet size for usrsctp, bytes: 1500 - 40 (IPv6) - 8 (UDP) so an encapsulated packet
  /// fits a 1500-byte MTU over IPv4 or IPv6. usrsctp cannot probe the path MTU through AF_CONN
  /// (no ICMP reaches it), so path MTU discovery is off and this is fixed.
  std::uint32_t path_mtu = packet::udp_payload_ethernet_ipv6;
  /// SO_SNDBUF and SO_RCVBUF of the association, bytes. The receive buffer is the advertised
  /// window: it must exceed the bandwidth-delay product (1.5 Mbit/s x 590 ms = 110 kB; 8 MiB
  /// carries 100 Mbit/s at 700 ms).
  int buffer_bytes = 8 << 20;
  /// Stream scheduler of the sending side (RFC 8260; usrsctp SCTP_PLUGGABLE_SS), usrsctp only.
  /// 5 = first come, first served: chunks leave in the order we queued the messages, i.e. our
  /// own round robin of whole records across files, so each record completes as early as
  /// possible. usrsctp's default (0) round-robins per chunk across streams, so 31 queued
  /// records all complete late together (measured: first byte one RTT later at 590 ms).
  std::uint32_t stream_scheduler = 5;
  /// RTO.Initial of this association, ms (SCTP_RTOINFO); 0 = the stack's (usrsctp_tuning::
  /// rto_initial_ms, 1 s). The client sets it from the RTT it measured to the sender at
  /// registration, as RFC 6298 section 2.2 does after a first sample (RTO = R + 4 x R/2 = 3R):
  /// a lost INIT or COOKIE ECHO then costs 3 RTT rather than 1 s (3 % loss each way: one
  /// association set-up in nine loses a packet).
  std::uint32_t initial_rto_ms = 0;
};

/// Counters of an SCTP listener's UDP port (usrsctp only).
struct sctp_listener_counters {
  std::uint64_t datagrams = 0;           ///< received on the UDP port
  std::uint64_t dropped_short = 0;       ///< shorter than an SCTP common + chunk header
  std::uint64_t dropped_unknown = 0;     ///< from an unknown source and not an INIT
  std::uint64_t dropped_peer_limit = 0;  ///< INIT refused: too many peers
  std::uint64_t peers_expired = 0;       ///< peers that never completed an association
  std::uint64_t peers_aborted = 0;       ///< peers forgotten at once: their association aborted
};

/// One end of one association.
class sctp_assoc {
 public:
  /// What receive() got.
  struct received {
    std::size_t bytes = 0;        ///< 0 with no error: the peer shut down (end of stream)
    std::uint16_t stream = 0;     ///< stream of the message the bytes belong to
    bool end_of_message = false;  ///< these bytes end an SCTP message (MSG_EOR)
    bool notification = false;    ///< an SCTP notification, not user data
  };

  virtual ~sctp_assoc() = default;

  /// Sets the handler run (posted) whenever the association may have become readable,
  /// writable, connected or failed. It is level-triggered: call receive()/send() until they
  /// say would_block.
  virtual void set_ready_handler(std::function<void()> fn) = 0;

  /// For an association being connected: empty once established,
  /// std::errc::operation_in_progress while connecting, else why it failed.
  virtual std::error_code connect_status() = 0;

  /// Sends one whole message on `stream`.
  /// @return empty; std::errc::operation_would_block when the send buffer has no room (the
  ///         ready handler runs when it may have); other errors are fatal for the association.
  virtual std::error_code send(std::uint16_t stream, std::span<const std::byte> message) = 0;

  /// Receives what is there into `buffer` (part of a message when it does not fit).
  /// @return empty with `out` filled; std::errc::operation_would_block when nothing is there;
  ///         other errors (e.g. connection_reset when the peer aborted) are fatal.
  virtual std::error_code receive(std::span<std::byte> buffer, received& out) = 0;

  /// Asks for a ready call once the association is writable again (kernel: arms a wait;
  /// usrsctp calls its upcall on every SACK anyway).
  virtual void want_write() = 0;

  /// Graceful shutdown of our sending side (SCTP SHUTDOWN once all data is acknowledged).
  virtual void shutdown_send() = 0;

  /// Aborts the association now (SCTP ABORT) and releases the socket; no ready calls after.
  virtual void abort() = 0;

  /// Closes the socket gracefully (pending data is still delivered); no ready calls after.
  virtual void close() = 0;

  /// Data the association still holds for the peer (unacknowledged + not yet sent), in
  /// transport units (chunks); it changes whenever the peer acknowledges something, so the
  /// idle watchdog can tell a slow but live peer from a dead one after we queued everything.
  virtual std::uint64_t backlog() = 0;

  /// What an association holds for its peer against what it may have in flight, bytes.
  struct send_queue_state {
    std::uint64_t queued_bytes = 0;  ///< unacknowledged + not yet sent
    std::uint64_t cwnd_bytes = 0;    ///< congestion window of the primary path
  };
  /// The association's send queue, for spreading records over a client's associations.
  /// @return nullopt when the stack cannot tell (kernel SCTP) or the association is gone.
  virtual std::optional<send_queue_state> send_queue() = 0;

  /// Transport state for debug logs: "cwnd=... srtt=... rto=... unacked=... pending=...".
  virtual std::string describe() = 0;

  /// Outbound streams negotiated (min of ours and the peer's inbound), 0 if unknown.
  virtual std::uint16_t outbound_streams() = 0;

  /// The peer's network address (the UDP source for usrsctp).
  virtual endpoint remote() const = 0;
};

/// A listening SCTP endpoint that hands over established associations.
class sctp_listener {
 public:
  virtual ~sctp_listener() = default;
  /// Sets the handler given every newly established association.
  virtual void set_accept_handler(std::function<void(std::unique_ptr<sctp_assoc>)> fn) = 0;
  /// The bound address (UDP for usrsctp, SCTP for the kernel).
  virtual endpoint local() const = 0;
  /// Stops listening; associations already handed over are unaffected.
  virtual void close() = 0;
  virtual sctp_listener_counters counters() const = 0;
};

/// Limits of a usrsctp listener's peer table (one entry per UDP source).
struct sctp_listener_limits {
  /// Most UDP sources with state at once (associations + handshakes + lingering closes).
  std::size_t max_peers = 1024;
  /// A source whose INIT did not become an association within this is forgotten.
  std::chrono::milliseconds handshake_timeout{30'000};
  /// After an association is closed its source is kept this long, so the SHUTDOWN exchange
  /// and stray retransmissions still reach usrsctp.
  std::chrono::milliseconds linger{30'000};
};

/// Opens a usrsctp listener on UDP `local` (port 0: ephemeral).
/// @return nullptr with `ec` and an operator-facing `detail` naming the address and step.
std::unique_ptr<sctp_listener> open_usrsctp_listener(boost::asio::io_context& io,
                                                     const endpoint& local,
                                                     const sctp_socket_options& options,
                                                     const usrsctp_tuning& tuning,
                                                     const sctp_listener_limits& limits,
                                                     std::error_code& ec, std::string& detail);

/// Starts a usrsctp association to the server's UDP `remote`, from `local` when given.
/// @return nullptr with `ec`/`detail`, or an association whose connect_status() tells.
std::unique_ptr<sctp_assoc> usrsctp_connect(boost::asio::io_context& io, const endpoint& remote,
                                            const std::optional<endpoint>& local,
                                            const sctp_socket_options& options,
                                            const usrsctp_tuning& tuning, std::error_code& ec,
                                            std::string& detail);

/// Opens a kernel SCTP (lksctp) listener on `local`.
/// @return nullptr with ec = error::kernel_sctp_unavailable when the kernel has no SCTP.
std::unique_ptr<sctp_listener> open_kernel_sctp_listener(boost::asio::io_context& io,
                                                         const endpoint& local,
                                                         const sctp_socket_options& options,
                                                         std::error_code& ec, std::string& detail);

/// Starts a kernel SCTP association to `remote`.
/// @return nullptr with ec = error::kernel_sctp_unavailable when the kernel has no SCTP.
std::unique_ptr<sctp_assoc> kernel_sctp_connect(boost::asio::io_context& io, const endpoint& remote,
                                                const std::optional<endpoint>& local,
                                                const sctp_socket_options& options,
                                                std::error_code& ec, std::string& detail);

}  // namespace mcdist::unicast
