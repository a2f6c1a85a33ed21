#include "feed/feed_http.hpp"

#include "common/http/prometheus_text.hpp"
#include "common/version.hpp"
#include "feed/feed_render.hpp"

#include <spdlog/spdlog.h>

namespace mcdist::feed {

feed_http::feed_http(boost::asio::io_context& io, const feed_config& cfg, const feed_daemon& daemon,
                     std::shared_ptr<http::log_ring_sink> ring, std::shared_ptr<spdlog::logger> log)
    : m_cfg(cfg), m_daemon(daemon), m_ring(std::move(ring)), m_log(std::move(log)),
      m_started(std::chrono::system_clock::now()) {
  if (!m_cfg.http) return;
  try {
    m_server = std::make_unique<http::server>(
        io, *m_cfg.http, [this](const http::request& r) { return serve(r); }, http::server_limits{},
        m_log);
  } catch (const std::system_error& e) {
    if (m_cfg.http_explicit) {
      throw std::runtime_error(std::string(e.what()) +
                               ": set http = \"ADDR:PORT\" to a free address, or \"off\"");
    }
    m_log->warn(
        "{}: no status page, /metrics or /status (the default address is taken: set "
        "http = \"ADDR:PORT\" to another, or \"off\")",
        e.what());
  }
}

feed_http::~feed_http() = default;

void feed_http::start() {
  if (!m_server) return;
  m_server->start();
  m_log->info("status page on http://{}/ (also /metrics and /status)",
              m_server->local_endpoint().to_string());
}

void feed_http::stop() {
  if (m_server) m_server->stop();
}

std::optional<endpoint> feed_http::local_endpoint() const {
  if (!m_server) return std::nullopt;
  return m_server->local_endpoint();
}

http::response feed_http::serve(const http::request& r) const {
  const bool metrics = r.path == "/metrics";
  const bool status = r.path == "/status";
  const bool page = r.path == "/" || r.path == "/index.html";
  if (!metrics && !status && !page) {
    return {404, "text/plain; charset=utf-8", "404 Not Found: try /, /status or /metrics\n"};
  }
  feed_snapshot s;
  s.version = mcdist::version();
  s.now = std::chrono::system_clock::now();
  s.started = m_started;
  s.cfg = &m_daemon.config();  // the reloaded one (channels by index, as the board)
  s.daemon = m_daemon.status();
  s.board = &m_daemon.board();
  if (m_ring) {
    s.recent_log = m_ring->recent();
    s.warnings_logged = m_ring->count(spdlog::level::warn);
    s.errors_logged = m_ring->count(spdlog::level::err) + m_ring->count(spdlog::level::critical);
  }
  if (metrics) return {200, std::string(http::prometheus_content_type), render_feed_metrics(s)};
  if (page) return {200, "text/html; charset=utf-8", render_feed_page(s)};
  // Product and site names come from spools and the network: invalid UTF-8 is replaced.
  return {
      200, "application/json",
      render_feed_status(s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"};
}

}  // namespace mcdist::feed
