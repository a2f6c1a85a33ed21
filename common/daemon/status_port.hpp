#pragma once
/// @file
/// A daemon's status port (mcdistd's, mcdist-feed's `http` setting): a recent-log ring on its
/// logger, the HTTP server (common/http/server.hpp) and the paths of its three views, / (the
/// page), /status (JSON) and /metrics (Prometheus text), which the daemon renders from memory.

#include "common/endpoint.hpp"
#include "common/http/log_ring.hpp"
#include "common/http/prometheus_text.hpp"
#include "common/http/server.hpp"
#include "common/time.hpp"

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace mcdist {

/// The views of a status port: "/" and "/index.html", "/status", "/metrics".
enum class status_view { page, json, metrics };

/// The log as the status views show it (the port's log ring).
struct log_summary {
  std::vector<http::log_entry> recent;  ///< recent warnings and errors, oldest first
  std::uint64_t warnings = 0;           ///< warnings logged since the start
  std::uint64_t errors = 0;             ///< errors and critical messages logged since the start
};

/// The status port of one daemon; io thread only, but for construction and destruction.
class status_port {
 public:
  /// The body of one view, rendered on the io thread (quickly: from memory).
  using render = std::function<std::string(status_view, log_summary)>;

  /// With `at` set, attaches a log ring to `log`: before other threads log (spdlog's sink list
  /// is not guarded). Binds nothing yet.
  /// @param at           the `http` setting; std::nullopt ("off"): no port, no ring
  /// @param at_explicit  the operator set `at`: an address that cannot be bound is an error
  /// @param cli_option   the command-line option that sets it too ("--http") or ""
  status_port(std::shared_ptr<spdlog::logger> log, std::optional<endpoint> at, bool at_explicit,
              std::string cli_option);
  /// Closes the port and detaches the ring: once no other thread logs.
  ~status_port();

  /// Binds `at`; the default address in use is a warning (no status port).
  /// @throws std::runtime_error for an explicit address that cannot be bound, naming it
  void open(boost::asio::io_context& io, render r);
  /// Starts serving and logs "status page on http://ADDR:PORT/ (also /metrics and /status)".
  /// @return whether it serves (false: no address, or the default one was taken)
  bool start();
  /// Closes the port and every connection.
  void stop();
  /// When the port was made: the daemon's start, for the views.
  wall_time started() const noexcept { return m_started; }

 private:
  http::response serve(const http::request& r) const;

  std::shared_ptr<spdlog::logger> m_log;
  std::optional<endpoint> m_at;
  bool m_explicit;
  std::string m_cli_option;
  wall_time m_started;
  std::shared_ptr<http::log_ring_sink> m_ring;
  render m_render;
  std::unique_ptr<http::server> m_server;
};

/// A /status document as sent: indented, a newline at the end, invalid UTF-8 (names come from
/// spools and the network) replaced.
std::string status_json_text(const nlohmann::json& doc);

/// A /status document's "recent_log": {time (ISO 8601 UTC), level, message}, oldest first.
nlohmann::json recent_log_json(const std::vector<http::log_entry>& entries);

/// The counter family `name` ("mcdist_feed_log_messages_total") of log.warnings and errors.
void log_messages_metric(http::prometheus_text& p, std::string_view name, const log_summary& log);

}  // namespace mcdist
