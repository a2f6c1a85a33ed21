#pragma once
/// @file
/// The unicast fallback server, run by mcdist-send on its io_context (docs/design-notes.md "Unicast
/// fallback"). It listens on a UDP port (SCTP over UDP, usrsctp), a TCP port and/or a kernel
/// SCTP port; receivers connect to it (sites sit behind firewalls), present a token and their
/// receiver id, send every byte range they want at once, and get records until they say bye.
///
/// Every session, whatever its transport, serves its pending requests round robin, up to
/// `active_files` at once, cut into records of `record_size` bytes:
/// - SCTP: one association; control on stream 0; the records of file f on stream
///   1 + f % (streams - 1) (Ladha & Amer's multistreamed FTP with command pipelining).
/// - TCP: n connections opened by the client; connection 0 carries control; each record goes
///   on whichever connection can take it, i.e. whose socket buffer has room (XFTP, Allman,
///   Ostermann & Kruse).
///
/// Everything read from the network is untrusted: frames are bounded and checked
/// (common/unicast/frame.hpp), tokens compared in constant time, every request checked against
/// the grant and the file sizes; in a signed session the hello must also prove the site's key
/// over the connection's challenge (common/unicast/hello_proof.hpp). A client that breaks any rule
/// is dropped and counted; the others are not disturbed.

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "common/unicast/error.hpp"
#include "common/unicast/frame.hpp"
#include "common/unicast/grant_table.hpp"
#include "common/unicast/io/sctp_assoc.hpp"
#include "common/unicast/io/usrsctp_stack.hpp"
#include "common/unicast/types.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

namespace mcdist::unicast {

/// Server settings. Each default says why.
struct server_options {
  /// UDP address:port for SCTP over UDP (usrsctp, RFC 6951); port 0 = ephemeral.
  std::optional<endpoint> sctp_udp;
  /// TCP address:port for multi-socket TCP; port 0 = ephemeral.
  std::optional<endpoint> tcp;
  /// Address:port for kernel SCTP (only where the kernel has SCTP).
  std::optional<endpoint> sctp_kernel;

  /// Record payload size, bytes, min_record_size..max_record_size.
  std::uint32_t record_size = default_record_size;
  /// Requests served round robin at once over TCP. 8 interleaves small files with a large one
  /// (none waits behind it) while keeping each file's records mostly in order for the
  /// receiver's in-order hashing. For SCTP it is streams - 1 (one file per data stream).
  std::size_t tcp_active_files = 8;
  /// SCTP association settings (streams, path MTU, buffers).
  sctp_socket_options sctp;
  /// Process-wide usrsctp settings, applied when this server initializes usrsctp.
  usrsctp_tuning usrsctp;
  /// SO_SNDBUF/SO_RCVBUF of TCP connections, bytes; 0 leaves Linux's autotuning on, which grows
  /// to net.ipv4.tcp_wmem/rmem max (4/6 MiB stock): far above the 110 kB a 1.5 Mbit/s, 590 ms
  /// path needs, whereas a fixed value is capped at net.core.wmem_max (208 KiB stock).
  int tcp_buffer_bytes = 0;
  /// TCP congestion control for the data connections (TCP_CONGESTION: "cubic", "bbr", ...);
  /// empty = the system's default. Loss-based ones (cubic, reno) are bounded by random loss on
  /// long paths (Mathis et al.), which is what several connections offset; bbr is not.
  std::string tcp_congestion;
  /// Most bit/s sent to one receiver over TCP, counting whole IP packets like the multicast
  /// rate; 0 = no cap. Each of the receiver's n connections is paced (SO_MAX_PACING_RATE) at
  /// 1/n of it. Set to a site's link rate, the fallback fills that link without overflowing
  /// its queue (no slow-start overshoot losses on a long path).
  std::uint64_t tcp_max_rate_bps = 0;

  /// A connection (or association) must present a valid hello within this, else it is dropped:
  /// the time a connection that says nothing holds a handshake slot. A satellite site (700 ms
  /// RTT, 1e-3 loss) gets its hello in 0.7 s after the accept (the challenge out, the hello
  /// back), or 2.8 s when one of the two is lost and resent (1 connection in 500): TCP resends
  /// after 3 x the handshake's RTT (RFC 6298 section 2.2), usrsctp after its RTO.Initial
  /// (1 s) for the challenge and the client's 3 x RTT for the hello. A connection opened ahead
  /// of its order in an open group (2 s registration window) waits up to 2 s more: 4.8 s with
  /// a loss. Two losses in a row (1 in 10^6) cost the site a reconnection. Every second more
  /// is a second a silent connection holds its slot, so a flood needs fewer connections per
  /// second to keep the slots full.
  std::chrono::milliseconds hello_timeout{5'000};
  /// A session where nothing moves either way for this long is dropped (dead peer, stalled
  /// window). 60 s outlasts several SCTP retransmissions at RTO.Max 10 s.
  std::chrono::milliseconds idle_timeout{60'000};
  /// Most sessions at once: one per receiver in fallback; beyond it hellos are refused "busy".
  std::size_t max_sessions = 256;
  /// Most TCP connections / SCTP associations not yet past their hello, all sources together
  /// (bounds what port scanners and floods of silent connections can hold: each holds a
  /// socket, a 64 KiB read buffer over TCP, a timer). At the limit a new connection takes the
  /// slot of the oldest pending one of the source holding the most (handshake_gate.hpp), so
  /// it is never refused for the limit: 256 is 16 sources at their full share.
  std::size_t max_handshakes = 256;
  /// Most of those from one source address (an IPv4 address, an IPv6 /64; handshake_gate.hpp);
  /// beyond it a new connection is closed at once (counters.per_source_refused). A site opens
  /// at most max_connections (16: the client clamps to it, 8 when the count is automatic) TCP
  /// connections or SCTP associations per session, all of them at once at its start: 16 lets
  /// the largest such set in whole, or two automatic sets behind one NAT address (or a site's
  /// reconnection while its last connections are still pending), and keeps a flooding host to
  /// 1/16 of max_handshakes. 0 = no per-source limit.
  std::size_t max_handshakes_per_source = max_connections;
};

/// Who a session is, for callbacks and logs.
struct session_info {
  fallback_token token{};
  std::string receiver_id;
  session_id session{};
  transport_kind kind = transport_kind::sctp_udp;
  endpoint remote;              ///< of the first connection / the association
  std::size_t connections = 1;  ///< TCP connections or SCTP associations announced by the client
};

/// What a session moved.
struct session_stats {
  std::uint64_t bytes_sent = 0;  ///< record payload bytes handed to the transport
  std::uint64_t records_sent = 0;
  std::uint64_t requests = 0;                     ///< ranges received
  std::uint64_t files_acked = 0;                  ///< files the client confirmed complete
  std::chrono::steady_clock::duration elapsed{};  ///< from hello to end
};

/// Server callbacks; any may be empty. They run on the io_context's thread and may call back
/// into the server (register, unregister, abort).
struct server_events {
  /// A client presented valid credentials (for TCP: its first connection did).
  std::function<void(const session_info&)> on_session_start;
  /// The client confirmed it holds every byte it requested of `file`.
  std::function<void(const session_info&, file_index file)> on_file_acked;
  /// The session ended: ec empty when the client said bye, else why (idle_timeout,
  /// connection_lost, protocol_violation, aborted, ...) with an operator-readable detail.
  std::function<void(const session_info&, const session_stats&, const std::error_code& ec,
                     const std::string& detail)>
      on_session_end;
};

/// Counters of refused and failed input (the server's own; each network thread owns its own).
struct server_counters {
  drop_counters frames;              ///< framing errors by reason (mcdist::errc)
  std::uint64_t hellos_refused = 0;  ///< bad credentials (token, id, session; or proof)
  /// Of hellos_refused: right token, id and session, but no valid proof of the site key (a
  /// forged site with a sniffed token, signed sessions only).
  std::uint64_t hellos_bad_proof = 0;
  std::uint64_t busy_refused = 0;  ///< session limit, or a connection while stopping
  /// Connections closed at their accept because their source already held
  /// max_handshakes_per_source pending handshakes (a flooding host, or a scanner).
  std::uint64_t per_source_refused = 0;
  /// Pending handshakes closed to make room for a new connection at max_handshakes: the
  /// oldest of the source holding the most (a flood from many sources).
  std::uint64_t handshakes_evicted = 0;
  std::uint64_t hello_timeouts = 0;
  /// Hellos of a client whose session has ended (server_state::is_late): a connection or
  /// association that came up after the end, closed without starting a session.
  std::uint64_t late_hellos = 0;
  std::uint64_t idle_timeouts = 0;
  std::uint64_t protocol_violations = 0;
  std::uint64_t invalid_requests = 0;
  std::uint64_t connections_accepted = 0;  ///< TCP connections and SCTP associations
  std::uint64_t sessions_started = 0;
  std::uint64_t sessions_completed = 0;  ///< ended by the client's bye
  std::uint64_t sessions_failed = 0;
};

struct server_state;

class server {
 public:
  /// A server for one session's files. @param source must outlive the server
  server(boost::asio::io_context& io, byte_source& source, server_options options,
         server_events events = {});
  /// A server shared by several sessions at once (one usrsctp stack and one set of listeners
  /// per process, as a hub with several channels needs): each grant names its own files
  /// (client_grant::source), and session_info::session tells the events apart.
  server(boost::asio::io_context& io, server_options options, server_events events = {});
  /// Closes the listeners and aborts every session (on_session_end is not called).
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Opens the configured listeners.
  /// @return empty, or the first failure with `detail` naming the transport, address and step
  ///         (e.g. error::kernel_sctp_unavailable for sctp_kernel on a host without SCTP).
  std::error_code start(std::string& detail);

  /// Bound addresses, once started (learn ephemeral ports here).
  std::optional<endpoint> sctp_udp_endpoint() const;
  std::optional<endpoint> tcp_endpoint() const;
  std::optional<endpoint> sctp_kernel_endpoint() const;

  /// Lets a receiver in. @return errc::invalid_field for an all-zero token, a bad receiver id or a
  /// token
  ///         already registered.
  std::error_code register_client(client_grant grant);
  /// Ends every unicast session of multicast session `session` as stop() ends them (done when
  /// `completed` says its receiver completed, else aborted) and withdraws its grants; the
  /// listeners stay open for the other sessions of a shared server.
  void end_session(session_id session,
                   const std::function<bool(const std::string& receiver_id)>& completed = {});
  /// Withdraws a grant and aborts its session if one is active. @return false if unknown.
  bool unregister_client(const fallback_token& token);
  /// Aborts the active session of `token` (the grant stays, so the receiver may come back).
  /// on_session_end reports error::aborted. @return false when no session was active.
  bool abort_client(const fallback_token& token);
  /// Closes the listeners and ends every session, reporting each through on_session_end: as
  /// done (no error, counted in sessions_completed) when `completed` says its receiver
  /// completed the session, otherwise with error::aborted (sessions_failed). The sender stops
  /// the server when its session is over; a receiver's COMPLETE may arrive before its bye and
  /// close do (a lost segment, a close still crossing the path), and such a session is not a
  /// failure. `completed` empty: every session is aborted.
  void stop(const std::function<bool(const std::string& receiver_id)>& completed = {});

  std::size_t active_sessions() const;
  const server_counters& counters() const;
  /// Counters of the SCTP-over-UDP listener's UDP port.
  sctp_listener_counters sctp_udp_counters() const;

 private:
  std::shared_ptr<server_state> m_state;
};

}  // namespace mcdist::unicast
