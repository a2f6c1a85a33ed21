#pragma once
/// @file
/// The unicast fallback client, run by mcdistd on its io_context: one per (session, receiver).
/// It connects to the sender (the receiver side opens connections: sites sit behind
/// firewalls), presents its token and receiver id, sends every request at once (pipelined: no
/// file waits on a round trip), and hands every record it receives to on_data.
///
/// Delivery guarantee: every byte passed to on_data is exactly the byte at that offset as the
/// server sent it, inside a range that was requested and not yet received. A connection cut
/// mid-record delivers the part of the record that arrived, nothing else; outstanding() then
/// lists exactly what is missing, to be requested again from a new client.

#include "common/crypto.hpp"
#include "common/endpoint.hpp"
#include "common/unicast/error.hpp"
#include "common/unicast/frame.hpp"
#include "common/unicast/io/sctp_assoc.hpp"
#include "common/unicast/io/usrsctp_stack.hpp"
#include "common/unicast/types.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace mcdist::unicast {

/// TCP connections per client when the options say 0. XFTP (Allman, Ostermann & Kruse) needed
/// 8 connections of 24 KB windows to reach 91 % of a T1 at 590 ms; with window scaling and
/// autotuning one connection's window is no longer the limit, but random loss still is for
/// loss-based congestion control (CUBIC, Debian's default): each loss halves one connection's
/// window, so n connections lose 1/(2n) of the aggregate (Mathis et al.: rate ~ MSS / RTT x
/// 1.22 / sqrt(p)). Measured through the link emulator, 700 ms RTT, 10 Mbit/s, 1e-3 loss,
/// 10 x 1 MB with CUBIC: n = 1 23.9 s, 4 15.7 s, 8 13.6 s, but 8 doubled the drops at the
/// 50-packet bottleneck queue (XFTP saw the same past 8). With BBR, on loopback and on clean
/// paths n makes no difference. So 4.
inline constexpr std::size_t default_tcp_connections = 4;

/// The connections (TCP) or associations (SCTP) a client opens when asked for `requested`:
/// 0 is the default (default_tcp_connections for TCP, one association for SCTP), kernel SCTP
/// always one (it reports no per-association send queue, which the server needs to spread
/// records over several), and never more than max_connections.
inline std::size_t client_connection_count(transport_kind kind, std::size_t requested) noexcept {
  if (kind == transport_kind::sctp_kernel) return 1;
  if (requested == 0) return kind == transport_kind::tcp ? default_tcp_connections : 1;
  return requested < max_connections ? requested : max_connections;
}

/// Client settings.
struct client_options {
  transport_kind kind = transport_kind::sctp_udp;
  /// The sender's unicast endpoint for `kind`: its UDP port for sctp_udp, its TCP port for tcp,
  /// its SCTP port for sctp_kernel.
  endpoint server;
  /// Local address to connect from (port 0 or unset: any).
  std::optional<endpoint> local;
  /// Credentials the sender gave this receiver for this session.
  fallback_token token{};
  /// The credentials (token, proof_key, seal_records) are not known yet: start() connects at
  /// once, but no hello (and so no request) leaves before set_credentials(). A site of a
  /// session served over unicast from the start opens its association while it registers,
  /// before the FALLBACK order brings the token (session_params.unicast_start): the handshake
  /// and the order's round trip overlap instead of following each other.
  bool await_credentials = false;
  session_id session{};
  std::string receiver_id;
  /// Signed sessions: the site's fallback key (receiver_keys::fallback_key). Set, the client
  /// waits for each connection's challenge and proves the key in its hello
  /// (common/unicast/hello_proof.hpp); unset, it sends its hello at once, as to a server of an
  /// unsigned session.
  std::optional<crypto::key32> proof_key;
  /// Encrypted sessions: every frame after the hello travels sealed, both ways, under keys
  /// derived from proof_key and each connection's challenge (common/unicast/record_seal.hpp);
  /// a frame that does not open ends the client (errc::unauthenticated). Needs proof_key
  /// (make_client throws std::invalid_argument otherwise: never plain by mistake).
  bool seal_records = false;
  /// TCP connections, 1..max_connections; 0 = default_tcp_connections.
  std::size_t tcp_connections = 0;
  /// SCTP associations over UDP, 1..max_connections; 0 = 1. Several share the records as
  /// several TCP connections do: a loss shrinks one association's congestion window, not the
  /// session's (docs/design-notes.md "Unicast fallback"). Kernel SCTP always uses one.
  std::size_t sctp_associations = 0;
  /// SCTP association settings (streams we accept, path MTU, buffers).
  sctp_socket_options sctp;
  /// Process-wide usrsctp settings, applied if this client initializes usrsctp.
  usrsctp_tuning usrsctp;
  /// SO_SNDBUF/SO_RCVBUF of TCP connections, bytes; 0 = Linux autotuning (see server_options).
  int tcp_buffer_bytes = 0;
  /// Every connection (or the association) must be up within this. 15 s covers the SCTP INIT
  /// retransmissions (RTO.Initial 1 s, doubling) on a 700 ms path with some loss.
  std::chrono::milliseconds connect_timeout{15'000};
  /// Fail when no byte arrives for this long while bytes are outstanding.
  std::chrono::milliseconds idle_timeout{60'000};
  /// After close(), wait this long for the server to end the session, then just drop it.
  std::chrono::milliseconds close_timeout{10'000};
};

/// Client callbacks; any may be empty. They run on the io_context's thread. A callback may
/// call request() or close(), or destroy the client (no callback follows then).
struct client_events {
  /// Bytes of `file` at `offset`, exact and final. Called many times: in order within a
  /// record, in any order across records and files. `bytes` is valid during the call only.
  std::function<void(file_index file, std::uint64_t offset, std::span<const std::byte> bytes)>
      on_data;
  /// Every requested byte of `file` has arrived (a zero-length request completes at once).
  std::function<void(file_index file)> on_file_done;
  /// Nothing requested is outstanding any more (after the last on_file_done). May come again
  /// after further request() calls.
  std::function<void()> on_complete;
  /// The client is finished; always the last callback, exactly once. ec is empty after a
  /// close() that the server acknowledged (or that timed out politely), else why it failed
  /// (error::refused, connect_timeout, idle_timeout, connection_lost, protocol_violation,
  /// error::kernel_sctp_unavailable, a system error such as connection_refused, ...) with an
  /// operator-readable detail naming the server address and the step.
  std::function<void(const std::error_code& ec, const std::string& detail)> on_closed;
};

/// What a client received.
struct client_stats {
  std::uint64_t bytes_received = 0;  ///< record payload bytes delivered to on_data
  std::uint64_t pieces = 0;          ///< on_data calls
  std::uint64_t files_done = 0;
  /// Payload bytes per TCP connection (index) or per SCTP stream (index = stream id).
  std::vector<std::uint64_t> bytes_per_channel;
  /// Payload bytes per TCP connection or SCTP association (index = its hello's index).
  std::vector<std::uint64_t> bytes_per_connection;
  /// The server's record size and stream/connection counts from its welcome (0 until then).
  std::uint32_t record_size = 0;
  std::uint16_t streams = 0;
  std::uint8_t connections = 0;
};

/// What a client started with client_options::await_credentials still needs: the fields of
/// client_options of the same names.
struct client_credentials {
  fallback_token token{};
  std::optional<crypto::key32> proof_key;
  bool seal_records = false;
};

/// One unicast client. Create with make_client, then start().
class client {
 public:
  virtual ~client() = default;

  /// Starts connecting. Failures (including synchronous ones such as kernel SCTP missing) are
  /// reported through on_closed, posted, never from inside start().
  virtual void start() = 0;

  /// Asks for byte ranges; may be called before the connection is up and any number of times.
  /// The ranges go out at once, in request frames of up to 2048 ranges, without waiting for
  /// anything.
  /// @return errc::invalid_field, and nothing requested, if a range wraps past 2^64 or overlaps
  ///         one still outstanding (or another in the same call); error::aborted after close()
  ///         or failure.
  virtual std::error_code request(std::span<const byte_range> ranges) = 0;

  /// Gives a client created with client_options::await_credentials its credentials: the hello
  /// goes as soon as the transport can carry it (in a signed session, once the server's
  /// challenge is in), the requests queued so far right behind it. Ignored when the client
  /// has its credentials already or has ended.
  /// @throws std::invalid_argument for seal_records without proof_key (as make_client)
  virtual void set_credentials(const client_credentials& credentials) = 0;

  /// Grows a client created with client_options::await_credentials, before set_credentials(),
  /// to `count` TCP connections or SCTP associations over UDP: the new ones start connecting
  /// at once (at start() if it has not been called), and every hello, none of which has left
  /// yet, names the new count. A site's transport opened while it registered holds the
  /// announce's count, computed before any RTT was known; the FALLBACK order's may be higher
  /// (fallback_policy::connections beyond 200 ms), and growing keeps what is up or on its way
  /// instead of setting everything up afresh.
  /// @return true when the client has `count` connections now; false, and nothing changed,
  ///         when it cannot: its credentials came already, it has failed or been closed, it is
  ///         kernel SCTP (always one association), or `count` is below what it has or above
  ///         max_connections (16)
  virtual bool grow(std::size_t count) = 0;

  /// Ends the session politely: bye to the server, then on_closed. Data still arriving after
  /// close() is not delivered.
  virtual void close() = 0;

  /// Flow control: while paused the client reads nothing more from the transport, so the
  /// server is held back by TCP's / SCTP's receive window instead of the receiver dropping
  /// bytes its storage cannot take yet. The idle watchdog does not count paused time.
  virtual void set_paused(bool paused) = 0;

  /// True once the transport can carry the session: SCTP association 0 (the one that carries
  /// control) established, or a TCP connection connected (the first one up is connection 0).
  virtual bool established() const = 0;

  /// Requested bytes not yet received, by file then offset: what to ask a new client for after
  /// a failure.
  virtual std::vector<byte_range> outstanding() const = 0;
  /// Bytes not yet received.
  virtual std::uint64_t outstanding_bytes() const = 0;

  virtual client_stats stats() const = 0;
  virtual transport_kind kind() const = 0;
};

/// Creates a client for `options.kind` (does not connect yet).
/// @throws std::invalid_argument for seal_records without proof_key
std::unique_ptr<client> make_client(boost::asio::io_context& io, client_options options,
                                    client_events events);

}  // namespace mcdist::unicast
