#pragma once
/// @file
/// mcdistctl's side door into mcdist-feed: a Unix stream socket (Asio local::stream_protocol)
/// served in the daemon's own io_context and thread, speaking feed/control_protocol.hpp (one
/// JSON request per line, one JSON answer per line) and answering through the daemon's
/// control_handler (control_handler::answer_async: the answer may come later, e.g. from the
/// daemon's query worker; the connection waits for it, others go on). Each connection is a
/// C++20 coroutine, as common/http/server.hpp.
///
/// Access: the socket file is created mode 0660 (never wider, even for a moment: the umask is
/// tightened around bind) and given to the configured operator group, so only the daemon's user
/// and that group can connect. A path that exists and is not a socket is refused (a typo must not
/// delete a file); a socket nobody listens on (left by a crash) is replaced; a socket a live daemon
/// listens on is refused (two daemons on one journal).
///
/// Everything a client sends is untrusted and bounded, so that no client can end the daemon,
/// stall its io thread or grow its memory: a request line is at most max_request_bytes (a longer
/// one gets an error answer and the connection is closed); bad JSON, unknown commands and bad
/// fields get {"ok":false,"error":...} and the connection stays; at most max_connections at
/// once: a connection over the limit evicts the one that has waited longest for a request line
/// (as common/http/server.hpp does), so idle or trickling clients cannot lock the operators out;
/// a connection whose request is being answered is never evicted, and only when all are is a new
/// one closed at once; the first request line must arrive within first_request_timeout of
/// connecting, a later one within request_timeout, and an answer be taken within write_timeout;
/// a client that goes away mid-answer costs one failed write (MSG_NOSIGNAL: no SIGPIPE).

#include "feed/control_protocol.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace spdlog {
class logger;
}

namespace mcdist::feed {

/// Where and for whom the socket is made.
struct control_socket_options {
  std::filesystem::path path;  ///< e.g. /run/mcdist-feed/control.sock; its directory must exist
  /// Group given the socket (the operators); empty: the daemon's primary group.
  std::string group;
};

/// Bounds of the server.
struct control_limits {
  /// Concurrent connections (8: an operator or two and a monitoring script; mcdistctl opens one
  /// per command). A connection over the limit evicts the one idle longest (waiting for a
  /// request line); it is refused only when every connection has a request under way.
  std::size_t max_connections = 8;
  /// From connecting to having the whole first request line (5 s: mcdistctl writes its request
  /// as soon as it is connected, so a client silent this long is stuck or hostile; it would be
  /// evicted by the next connection anyway, this frees its slot when no one else comes).
  std::chrono::milliseconds first_request_timeout = std::chrono::seconds(5);
  /// From awaiting a later request line to having all of it, i.e. idle time between requests
  /// (30 s: a person typing requests into `socat`; a forgotten session is cut off).
  std::chrono::milliseconds request_timeout = std::chrono::seconds(30);
  /// For the client to take the whole answer (30 s: a day's history is tens of MB over a local
  /// socket, well under a second).
  std::chrono::milliseconds write_timeout = std::chrono::seconds(30);
};

/// The server. Construct (creates and binds the socket file), start(), and destroy or stop()
/// (closes every connection and removes the socket file). Use from the io_context's thread.
class control_server {
 public:
  /// @throws std::system_error when the path exists and is not a socket, is a socket another
  ///         process listens on, cannot be bound, or cannot be chmod/chown-ed; std::runtime_error
  ///         when the group does not exist. Messages name the path and what to do.
  control_server(boost::asio::io_context& io, const control_socket_options& opts,
                 control_handler& handler, control_limits limits = {},
                 std::shared_ptr<spdlog::logger> log = nullptr);
  ~control_server();
  control_server(const control_server&) = delete;
  control_server& operator=(const control_server&) = delete;

  /// Starts accepting connections.
  void start();
  /// Closes the socket and every connection, removes the socket file; the handler is not called
  /// again.
  void stop();

  const std::filesystem::path& path() const noexcept;
  /// Connections open now.
  std::size_t connections() const noexcept;
  /// Requests answered with "ok":false, and connections closed for an over-long line or a
  /// timeout, since start (for the daemon's status page).
  std::uint64_t bad_requests() const noexcept;

 private:
  struct impl;
  std::shared_ptr<impl> m_impl;
};

}  // namespace mcdist::feed
