// The daemon's status HTTP server: /metrics, /status and the status page (status_render.hpp),
// served by common/http/server.hpp in the daemon's io_context.

#include "common/http/prometheus_text.hpp"
#include "receiver/io/daemon.hpp"
#include "receiver/io/status_render.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace mcdist::receiver {

namespace {

/// How often the bytes-received total is sampled into the per-minute ring (a minute's figure
/// is late by at most this much).
constexpr auto sample_interval = std::chrono::seconds(1);

}  // namespace

void daemon::open_http() {
  if (!m_cfg.http) return;
  try {
    m_http = std::make_unique<http::server>(
        m_io, *m_cfg.http, [this](const http::request& r) { return serve_http(r); },
        http::server_limits{}, m_log);
  } catch (const std::system_error& e) {
    if (m_cfg.http_explicit) {
      throw std::runtime_error(std::string(e.what()) +
                               ": set http = \"ADDR:PORT\" (--http) to a free address, or \"off\"");
    }
    m_log->warn(
        "{}: no status page, /metrics or /status (the default address is taken: set "
        "http = \"ADDR:PORT\" or --http to another, or \"off\")",
        e.what());
    return;
  }
  m_log->info("status page on http://{}/ (also /metrics and /status)",
              m_http->local_endpoint().to_string());
}

std::optional<endpoint> daemon::http_endpoint() const {
  if (!m_http) return std::nullopt;
  return m_http->local_endpoint();
}

void daemon::start_http() {
  if (!m_http) return;
  m_http->start();
  do_sample();
}

void daemon::stop_http() {
  if (m_http) m_http->stop();
  m_sample_timer.cancel();
}

void daemon::do_sample() {
  m_board.observe_bytes(m_engine->stats().data_bytes, std::chrono::system_clock::now());
  m_sample_timer.expires_after(sample_interval);
  m_sample_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !m_stopping) do_sample();
  });
}

void daemon::file_finished(const file_outcome& outcome) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  m_board.file_finished(outcome, std::chrono::system_clock::now());
  journal_delivery(outcome);
  if (!outcome.stored || !outcome.digest) return;
  for (auto& [channel, p] : m_wis2) {
    if (channel == outcome.channel) {
      p->publish(outcome.path, outcome.size, outcome.mtime_ns, *outcome.digest);
    }
  }
}

http::response daemon::serve_http(const http::request& r) {
  const bool metrics = r.path == "/metrics";
  const bool status = r.path == "/status";
  const bool page = r.path == "/" || r.path == "/index.html";
  if (!metrics && !status && !page) {
    return {404, "text/plain; charset=utf-8", "404 Not Found: try /, /status or /metrics\n"};
  }
  status_snapshot s;
  s.id = m_cfg.id;
  s.now = std::chrono::system_clock::now();
  s.started = m_started;
  s.channels = &m_cfg.channels;
  s.retired = &m_retired;
  s.reloads_ok = m_reloads_ok;
  s.reloads_failed = m_reloads_failed;
  s.stats = &m_engine->stats();
  m_board.observe_bytes(s.stats->data_bytes, s.now);
  s.board = &m_board;
  s.sessions_active = m_engine->active_sessions();
  s.unicast_active = m_unicast.size();
  const auto ss = m_store->get_stats();
  s.bytes_written = ss.bytes_written;
  s.parity = {ss.parity_kept,          ss.parity_refused,   ss.parity_bytes,
              ss.fec_blocks_recovered, ss.blocks_recovered, ss.decode_failures};
  s.commit_batches = ss.commit_batches;
  s.commit_batches_syncfs = ss.commit_batches_syncfs;
  s.dropped_by_option = m_dropped_by_option;
  s.not_authenticated = auth_refused();
  s.read_pauses = m_read_pauses;
  s.sequences = m_engine->sequences().status();
  for (const auto& [channel, p] : m_wis2) {
    s.wis2.push_back({p->channel(), p->action().topic, p->stats()});
  }
  if (m_actions) s.actions = m_actions->stats();
  s.retention_deleted = m_retention_deleted;
  s.retention_skipped = m_retention_skipped;
  if (m_log_ring) {
    s.recent_log = m_log_ring->recent();
    s.warnings_logged = m_log_ring->count(spdlog::level::warn);
    s.errors_logged =
        m_log_ring->count(spdlog::level::err) + m_log_ring->count(spdlog::level::critical);
  }
  if (metrics) return {200, std::string(http::prometheus_content_type), render_metrics(s)};
  if (page) return {200, "text/html; charset=utf-8", render_status_page(s)};
  s.status_file = status_json();
  // Paths come from the network: invalid UTF-8 is replaced, not an exception.
  return {
      200, "application/json",
      render_status_json(s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"};
}

}  // namespace mcdist::receiver
