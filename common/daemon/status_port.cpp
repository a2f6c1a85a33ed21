#include "common/daemon/status_port.hpp"

#include "common/http/html.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace mcdist {

status_port::status_port(std::shared_ptr<spdlog::logger> log, std::optional<endpoint> at,
                         bool at_explicit, std::string cli_option)
    : m_log(std::move(log)), m_at(at), m_explicit(at_explicit), m_cli_option(std::move(cli_option)),
      m_started(std::chrono::system_clock::now()) {
  if (!m_at) return;
  m_ring = std::make_shared<http::log_ring_sink>();
  m_log->sinks().push_back(m_ring);
}

status_port::~status_port() {
  m_server.reset();
  if (m_ring) std::erase(m_log->sinks(), m_ring);
}

void status_port::open(boost::asio::io_context& io, render r) {
  if (!m_at) return;
  m_render = std::move(r);
  try {
    m_server = std::make_unique<http::server>(
        io, *m_at, [this](const http::request& q) { return serve(q); }, http::server_limits{},
        m_log);
  } catch (const std::system_error& e) {
    const std::string cli = m_cli_option.empty() ? "" : " (" + m_cli_option + ")";
    if (m_explicit) {
      throw std::runtime_error(std::string(e.what()) + ": set http = \"ADDR:PORT\"" + cli +
                               " to a free address, or \"off\"");
    }
    m_log->warn(
        "{}: no status page, /metrics or /status (the default address is taken: set "
        "http = \"ADDR:PORT\"{} to another, or \"off\")",
        e.what(), m_cli_option.empty() ? "" : " or " + m_cli_option);
  }
}

bool status_port::start() {
  if (!m_server) return false;
  m_server->start();
  m_log->info("status page on http://{}/ (also /metrics and /status)",
              m_server->local_endpoint().to_string());
  return true;
}

void status_port::stop() {
  if (m_server) m_server->stop();
}

http::response status_port::serve(const http::request& r) const {
  const auto view = r.path == "/status"    ? status_view::json
                    : r.path == "/metrics" ? status_view::metrics
                                           : status_view::page;
  if (view == status_view::page && r.path != "/" && r.path != "/index.html") {
    return {404, "text/plain; charset=utf-8", "404 Not Found: try /, /status or /metrics\n"};
  }
  log_summary log;
  if (m_ring) {
    log.recent = m_ring->recent();
    log.warnings = m_ring->count(spdlog::level::warn);
    log.errors = m_ring->count(spdlog::level::err) + m_ring->count(spdlog::level::critical);
  }
  const std::string_view type = view == status_view::page   ? "text/html; charset=utf-8"
                                : view == status_view::json ? "application/json"
                                                            : http::prometheus_content_type;
  return {200, std::string(type), m_render(view, std::move(log))};
}

std::string status_json_text(const nlohmann::json& doc) {
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

nlohmann::json recent_log_json(const std::vector<http::log_entry>& entries) {
  nlohmann::json log = nlohmann::json::array();
  for (const auto& e : entries) {
    log.push_back({{"time", http::iso_time(e.time)},
                   {"level", http::level_name(e.level)},
                   {"message", e.text}});
  }
  return log;
}

void log_messages_metric(http::prometheus_text& p, std::string_view name, const log_summary& log) {
  p.family(name, http::metric_type::counter, "Log messages at warning level and above, by level.");
  p.sample({{"level", "warning"}}, log.warnings);
  p.sample({{"level", "error"}}, log.errors);
}

}  // namespace mcdist
