#pragma once
/// @file
/// A small HTTP/1.1 server (Boost.Beast) for a daemon's status port: /metrics, /status, the
/// status page. It runs in the daemon's own io_context and thread (docs/architecture.md "Layers":
/// one io_context, one network thread); each connection is a C++20 coroutine, as in Beast's
/// `example/http/server/awaitable/http_server_awaitable.cpp`.
///
/// Everything a client sends is untrusted and bounded, so that no client can end the daemon,
/// stall its io thread or grow its memory:
///   - at most server_limits::max_connections connections; a connection over the limit evicts
///     the oldest one still waiting for its request (so idle or trickling clients cannot lock
///     out the scraper), else it is closed at once;
///   - request head at most max_header_bytes, body at most max_body_bytes (Beast's parser
///     limits), else 431/413 and close;
///   - the whole request must arrive within request_timeout of its first byte being awaited
///     (a client trickling one byte a second is cut off: slowloris), the response must be taken
///     within write_timeout;
///   - at most max_requests_per_connection requests on one keep-alive connection;
///   - GET and HEAD only (405 otherwise); the handler is called synchronously on the io thread
///     and must be quick (it renders from counters in memory).

#include "common/endpoint.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace spdlog {
class logger;
}

namespace mcdist::http {

/// What the handler sees of a request.
struct request {
  std::string method;  ///< "GET" or "HEAD" (others never reach the handler)
  std::string path;    ///< target without its query string, e.g. "/metrics"
  std::string query;   ///< after '?', undecoded; empty if none
};

/// What the handler answers. HEAD gets the same headers and no body.
struct response {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

/// Answers one request; called on the io thread.
using handler = std::function<response(const request&)>;

/// Bounds of the server (see the file comment for what each defends against).
struct server_limits {
  /// Concurrent connections (32: a scraper, a few browsers and a few scripts on a status port).
  std::size_t max_connections = 32;
  /// Request line + headers (8 KiB, Beast's default, as nginx's default buffer; a browser's
  /// GET is under 1 KiB).
  std::size_t max_header_bytes = 8 * 1024;
  /// Request body (1 KiB: GET and HEAD carry none; a small one is read and ignored).
  std::size_t max_body_bytes = 1024;
  /// From awaiting a request to having all of it, and idle time between keep-alive requests
  /// (10 s: a browser or Prometheus sends a request in milliseconds).
  std::chrono::milliseconds request_timeout = std::chrono::seconds(10);
  /// For the client to take the whole response (10 s: a page is ~100 KB).
  std::chrono::milliseconds write_timeout = std::chrono::seconds(10);
  /// Requests on one keep-alive connection before it is closed (100, as nginx's
  /// keepalive_requests default).
  std::size_t max_requests_per_connection = 100;
};

/// The server. Construct (binds and listens), start(), and destroy or stop() to end every
/// connection. Not thread-safe: use it from the io_context's thread.
class server {
 public:
  /// Binds and listens on `at` (TCP).
  /// @throws std::system_error when the address cannot be bound (in use, not local)
  server(boost::asio::io_context& io, const endpoint& at, handler h, server_limits limits = {},
         std::shared_ptr<spdlog::logger> log = nullptr);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Starts accepting connections.
  void start();
  /// Closes the listening socket and every connection; the handler is not called again.
  void stop();

  /// The bound address (port 0 in the constructor picks a free port).
  endpoint local_endpoint() const;
  /// Connections open now.
  std::size_t connections() const noexcept;

 private:
  struct impl;
  std::shared_ptr<impl> m_impl;
};

}  // namespace mcdist::http
