#include "common/daemon/daemon_shell.hpp"

#include "common/sys/logging.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <string>

namespace mcdist {

daemon_shell::daemon_shell(boost::asio::io_context& io, std::shared_ptr<spdlog::logger> log,
                           hooks h)
    : m_log(std::move(log)), m_hooks(std::move(h)), m_signals(io, SIGINT, SIGTERM, SIGHUP),
      m_watchdog(io) {
  wait_signal();
}

void daemon_shell::wait_signal() {
  m_signals.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec || m_closed) return;
    if (sig == SIGHUP) {
      // After logrotate moved the file away: later lines go to a new file at the path.
      std::string error;
      if (reopen_log_files(*m_log, error)) {
        m_log->info("SIGHUP: log file reopened");
      } else {
        m_log->error("SIGHUP: cannot reopen the log file ({}); still writing to the old one",
                     error);
      }
      if (!m_stopping && m_hooks.reload) m_hooks.reload();
    } else {
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (m_stopping) {
        m_hooks.stop_again(name);
      } else {
        stopping();
        m_hooks.stop(name);
      }
    }
    if (!m_closed) wait_signal();
  });
}

void daemon_shell::ready(std::string_view status) {
  if (!m_notifier.enabled()) return;
  if (auto ec = m_notifier.ready(status)) {
    m_log->warn("cannot notify the service manager ($NOTIFY_SOCKET): {}", ec.message());
  }
  arm_watchdog();
}

void daemon_shell::arm_watchdog() {
  const auto interval = m_notifier.watchdog_interval();
  if (!interval || m_stopping) return;
  // sd_watchdog_enabled(3): ping at half the interval.
  if (auto ec = m_notifier.watchdog()) m_log->warn("cannot send WATCHDOG=1: {}", ec.message());
  m_watchdog.expires_after(std::max(*interval / 2, std::chrono::microseconds(1000)));
  m_watchdog.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) arm_watchdog();
  });
}

void daemon_shell::stopping() {
  if (m_stopping) return;
  m_stopping = true;
  (void)m_notifier.stopping();
  m_watchdog.cancel();
}

void daemon_shell::close() {
  m_closed = true;
  m_signals.cancel();
  m_watchdog.cancel();
}

}  // namespace mcdist
