#pragma once
/// @file
/// The signals and service-manager messages of a daemon (mcdistd, mcdist-feed), in one order:
/// SIGHUP reopens the log file, then reloads; the first SIGTERM or SIGINT sends STOPPING=1 and
/// stops the daemon, a second one hurries the stop. Under systemd (Type=notify): READY=1 once
/// the daemon serves, then WATCHDOG=1 every half $WATCHDOG_USEC from the io_context (a stalled
/// event loop misses it and systemd restarts the daemon) until the stop.

#include "common/sys/sd_notify.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <memory>
#include <string_view>

namespace spdlog {
class logger;
}

namespace mcdist {

/// Signals, sd_notify and the watchdog of one daemon; io thread only.
class daemon_shell {
 public:
  /// What the daemon does at a signal, on the io thread.
  struct hooks {
    /// SIGHUP, after the log file was reopened; not once stopping.
    std::function<void()> reload;
    /// The first SIGTERM or SIGINT (`signal`: "SIGTERM", "SIGINT"), after stopping(): log,
    /// begin the stop, close() once it ended.
    std::function<void(const char* signal)> stop;
    /// A later SIGTERM or SIGINT while stopping: end the stop at once.
    std::function<void(const char* signal)> stop_again;
  };

  /// Handles SIGHUP, SIGTERM and SIGINT from now on (when the io_context runs); reads
  /// $NOTIFY_SOCKET and $WATCHDOG_USEC.
  daemon_shell(boost::asio::io_context& io, std::shared_ptr<spdlog::logger> log, hooks h);

  /// READY=1 with `status` as its STATUS= line (a failure to send is a warning), then the
  /// watchdog pings (at most every millisecond). Nothing outside systemd.
  void ready(std::string_view status);
  /// STOPPING=1 (once) and no more pings; SIGHUP then only reopens the log file.
  void stopping();
  /// Stops handling signals (the stop ended): the io_context can run out of work.
  void close();

 private:
  void wait_signal();
  void arm_watchdog();

  std::shared_ptr<spdlog::logger> m_log;
  hooks m_hooks;
  boost::asio::signal_set m_signals;
  service_notifier m_notifier;
  boost::asio::steady_timer m_watchdog;
  bool m_stopping = false;
  bool m_closed = false;
};

}  // namespace mcdist
