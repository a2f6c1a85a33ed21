#pragma once
/// @file
/// mcdist-feed's status port: /metrics, /status and the status page
/// (feed_render.hpp), served by common/http/server.hpp in the daemon's io_context, as mcdistd
/// does (receiver/io/daemon_http.cpp). Each request renders from the daemon's memory
/// (feed_daemon::status() and its feed_board): no journal query, no I/O on the io thread.

#include "common/http/log_ring.hpp"
#include "common/http/server.hpp"
#include "feed/feed_daemon.hpp"

#include <memory>
#include <optional>

namespace mcdist::feed {

/// The status server of a running feed_daemon.
class feed_http {
 public:
  /// Binds cfg.http (does nothing when it is std::nullopt). A default address already in use
  /// is logged as a warning and the daemon runs without a status port; an explicit one
  /// (cfg.http_explicit) is an error.
  /// @param ring  the daemon logger's recent-warnings sink (may be null: no recent errors)
  /// @throws std::runtime_error for an explicit address that cannot be bound (the message names
  ///         it and the `http` key; mcdist-feed exits 1)
  feed_http(boost::asio::io_context& io, const feed_config& cfg, const feed_daemon& daemon,
            std::shared_ptr<http::log_ring_sink> ring, std::shared_ptr<spdlog::logger> log);
  ~feed_http();
  feed_http(const feed_http&) = delete;
  feed_http& operator=(const feed_http&) = delete;

  /// Starts serving (logs "status page on http://ADDR:PORT/").
  void start();
  /// Closes the port and every connection.
  void stop();
  /// The bound address, or std::nullopt when not serving.
  std::optional<endpoint> local_endpoint() const;

  /// Answers one request (also for tests without a socket).
  http::response serve(const http::request& r) const;

 private:
  const feed_config& m_cfg;
  const feed_daemon& m_daemon;
  std::shared_ptr<http::log_ring_sink> m_ring;
  std::shared_ptr<spdlog::logger> m_log;
  wall_time m_started;
  std::unique_ptr<http::server> m_server;
};

}  // namespace mcdist::feed
