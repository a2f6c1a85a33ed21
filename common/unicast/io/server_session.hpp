#pragma once
/// @file
/// Internals of the unicast server shared by its transports (not a public header): the state
/// every session can reach, and the transport-independent half of a session (credentials,
/// request validation, record scheduling, acks, idle watchdog, the end report).

#include "common/log_limit.hpp"
#include "common/sys/single_thread.hpp"
#include "common/unicast/frame.hpp"
#include "common/unicast/handshake_gate.hpp"
#include "common/unicast/io/server.hpp"
#include "common/unicast/record_scheduler.hpp"
#include "common/unicast/record_seal.hpp"

#include <boost/asio/steady_timer.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace mcdist::unicast {

class server_session;
class tcp_listener;

/// Everything the sessions of one server share. Owned by the server and by every live
/// session (so a session finishing after the server is gone touches nothing freed).
struct server_state : std::enable_shared_from_this<server_state> {
  server_state(boost::asio::io_context& io_, byte_source* source_, server_options options_,
               server_events events_)
      : io(io_), source(source_), options(std::move(options_)), events(std::move(events_)) {}

  boost::asio::io_context& io;
  /// The files of the server's one session; null for a server shared by several sessions,
  /// whose grants each name their own (client_grant::source).
  byte_source* source;
  server_options options;
  server_events events;
  grant_table grants;
  server_counters counters;
  /// Log rate limits (common/log_limit.hpp): TCP connections dropped before a session,
  /// connections refused for their source's handshake limit or evicted at the total one, and
  /// socket options the kernel refuses (logged once, then rarely).
  log_limiter dropped_connection_log{10};
  log_limiter per_source_log{10};
  log_limiter eviction_log{10};
  log_limiter pacing_failure_log{1};
  log_limiter congestion_failure_log{1};
  bool stopped = false;
  /// Callbacks are suppressed once the server object is destroyed.
  bool silent = false;
  /// The thread of `io`: the server, its listeners and sessions are used there only
  /// (common/sys/single_thread.hpp).
  single_thread io_thread;
  /// The active session of each token.
  std::map<fallback_token, std::shared_ptr<server_session>> sessions;
  /// The client nonce of each token's last ended session, while its grant stands (at most one
  /// entry per grant): see is_late.
  std::map<fallback_token, std::uint64_t> ended_nonces;
  /// Connections/associations accepted but not yet past their hello, by source: the limits
  /// on them and who gives up a slot (handshake_gate.hpp).
  handshake_gate gate{
      {.per_source = options.max_handshakes_per_source, .total = options.max_handshakes}};
  /// How to abort each of them (by its gate ticket), for eviction and stop().
  std::unordered_map<handshake_gate::ticket, std::function<void()>> pending;

  std::shared_ptr<tcp_listener> tcp;
  std::unique_ptr<sctp_listener> sctp_udp;
  std::unique_ptr<sctp_listener> sctp_kernel;

  /// Checks a hello's credentials (constant-time token comparison; for a grant with a proof
  /// key, the hello's proof over `c`, the challenge this connection was sent) and the session
  /// limit. @return the grant, or nullptr with `why` filled for the refuse frame.
  const client_grant* authenticate(const hello& h, const challenge& c, const endpoint& from,
                                   refuse& why);

  /// True when `h` comes from the client of a session of its token that has ended: one of its
  /// connections or associations came up after the session's end (a handshake retransmitted
  /// after a loss, or begun when the FALLBACK order asked for more, on a set small enough to
  /// be done first). Such a hello is dropped with its connection (counters.late_hellos)
  /// instead of starting a second session that would wait out the idle timeout. A client that
  /// connects again after a failure is a new client with a new nonce.
  bool is_late(const hello& h) const;

  /// Accepts a new association from an SCTP listener.
  void on_sctp_association(std::unique_ptr<sctp_assoc> a, transport_kind kind);

  /// Gives a new, unauthenticated connection or association from `from` a handshake slot,
  /// `abort` being how to close it (for an eviction or stop()). At max_handshakes the oldest
  /// pending handshake of the source holding the most is aborted first (counted, logged
  /// rate-limited). @return its ticket, or nullopt when the server stops or `from`'s source
  /// holds max_handshakes_per_source already (counted): the caller closes it then.
  std::optional<handshake_gate::ticket> begin_handshake(const endpoint& from,
                                                        std::function<void()> abort);
  /// The handshake of `id` is over (hello handled, timed out, closed); harmless twice or after
  /// its eviction.
  void end_handshake(handshake_gate::ticket id);

  /// Counts a framing or protocol error by kind.
  void count_error(const std::error_code& ec);
};

/// The transport-independent half of a session. Transports derive from it.
class server_session : public std::enable_shared_from_this<server_session> {
 public:
  server_session(std::shared_ptr<server_state> state, const client_grant& grant,
                 transport_kind kind, endpoint remote, std::size_t connections,
                 std::size_t active_files, std::uint64_t nonce);
  virtual ~server_session() = default;
  server_session(const server_session&) = delete;
  server_session& operator=(const server_session&) = delete;

  const session_info& info() const noexcept { return m_info; }
  std::uint64_t nonce() const noexcept { return m_nonce; }
  bool finished() const noexcept { return m_finished; }

  /// Ends the session once: tears the transport down (aborting unless `graceful`), leaves the
  /// server's table, counts, and reports on_session_end (unless the server is being destroyed).
  void finish(const std::error_code& ec, const std::string& detail, bool graceful = false);

  /// Registers in the server's table (replacing an older session of the same token) and
  /// reports on_session_start; starts the idle watchdog.
  void begin();

 protected:
  /// Handles one control frame from the client. @return an error to drop the session, with
  /// `detail` saying what was wrong.
  std::error_code handle_control(frame_type type, std::span<const std::byte> body,
                                 std::string& detail);
  /// The next record to send, if any.
  std::optional<record> next_record() { return m_scheduler.next(); }
  bool has_pending() const noexcept { return !m_scheduler.empty(); }
  /// Fills `buf` with the record's data frame (header + payload from the byte source); with a
  /// `sealer` (encrypted sessions), sealed for `stream` (record_seal.hpp).
  std::error_code fill_record(const record& r, std::vector<std::byte>& buf,
                              frame_sealer* sealer = nullptr, std::uint32_t stream = 0);
  /// Accounts a record handed to the transport.
  void record_sent(const record& r) {
    m_stats.bytes_sent += r.length;
    ++m_stats.records_sent;
    touch();
  }
  /// Something moved: resets the idle watchdog.
  void touch() noexcept { m_last_activity = std::chrono::steady_clock::now(); }
  bool bye_received() const noexcept { return m_bye; }

  /// Tears the transport down; called once by finish().
  virtual void close_transport(bool graceful) = 0;
  /// New records are pending: wake the writers.
  virtual void on_new_requests() = 0;
  /// What the transport still holds for the client (SCTP: unacked + pending chunks; TCP:
  /// unacknowledged bytes in the socket send queues). Any change counts as activity: once
  /// everything is queued, a slow link may take minutes to drain the buffers while we, above
  /// the transport, see nothing move.
  virtual std::uint64_t transport_backlog() = 0;
  /// Transport state for the periodic debug log line.
  virtual std::string transport_state() { return {}; }

  std::shared_ptr<server_state> m_state;
  session_info m_info;

 private:
  void do_watchdog();

  client_grant m_grant;   ///< a copy: the grant may be withdrawn while we run
  byte_source& m_source;  ///< the grant's files (client_grant::source, else the server's)
  std::uint64_t m_nonce;
  record_scheduler m_scheduler;
  session_stats m_stats;
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point m_last_activity = m_start;
  boost::asio::steady_timer m_watchdog;
  std::uint64_t m_last_backlog = 0;
  bool m_bye = false;
  bool m_finished = false;
  bool m_registered = false;
};

/// Creates the TCP listener of a server (tcp_server.cpp).
std::shared_ptr<tcp_listener> open_tcp_listener(std::shared_ptr<server_state> state,
                                                const endpoint& local, std::error_code& ec,
                                                std::string& detail);
/// The bound address of a TCP listener.
endpoint tcp_listener_endpoint(const tcp_listener& l);
/// Closes a TCP listener (sessions already accepted continue).
void close_tcp_listener(tcp_listener& l);

}  // namespace mcdist::unicast
