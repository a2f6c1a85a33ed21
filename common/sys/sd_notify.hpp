#pragma once
/// @file
/// systemd service notifications (sd_notify(3)) without libsystemd: the NOTIFY_SOCKET datagram
/// protocol, as documented in sd_notify(3) "Notes" and systemd's "Interface Portability and
/// Stability" page: one AF_UNIX SOCK_DGRAM datagram per message, newline-separated KEY=VALUE
/// assignments, to the path in $NOTIFY_SOCKET (a leading '@' names an abstract socket).
/// Outside systemd (no NOTIFY_SOCKET) every call does nothing.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace mcdist {

/// The service manager's notification socket and watchdog settings, read once from the
/// environment ($NOTIFY_SOCKET, $WATCHDOG_USEC, $WATCHDOG_PID).
class service_notifier {
 public:
  /// Reads the environment. Does not unset it (children of the daemon are not expected).
  service_notifier();

  /// Whether $NOTIFY_SOCKET named a socket.
  bool enabled() const { return !m_socket.empty(); }

  /// The watchdog interval from $WATCHDOG_USEC when set (and $WATCHDOG_PID, if present, is this
  /// process): the daemon must send WATCHDOG=1 at least this often; sd_watchdog_enabled(3)
  /// advises every half of it.
  std::optional<std::chrono::microseconds> watchdog_interval() const { return m_watchdog; }

  /// Sends one message, e.g. "READY=1\nSTATUS=listening". Returns the error of socket() or
  /// sendto() (nothing when notifications are disabled). Never blocks: the socket is
  /// non-blocking, a full manager queue drops the message.
  std::error_code notify(std::string_view message) const;

  /// "READY=1" with a STATUS= line (sd_notify(3): startup finished).
  std::error_code ready(std::string_view status) const;
  /// "WATCHDOG=1" (keep-alive ping).
  std::error_code watchdog() const;
  /// "STOPPING=1" (shutdown begun).
  std::error_code stopping() const;
  /// "RELOADING=1" followed later by ready(): a reload in progress.
  std::error_code reloading() const;

 private:
  std::string m_socket;  ///< path, or '\0'-prefixed abstract name
  std::optional<std::chrono::microseconds> m_watchdog;
};

}  // namespace mcdist
