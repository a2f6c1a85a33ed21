#include "common/sys/sd_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace mcdist {

namespace {

std::optional<unsigned long long> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  unsigned long long n = 0;
  const auto end = v + std::strlen(v);
  const auto [p, ec] = std::from_chars(v, end, n);
  if (ec != std::errc() || p != end) return std::nullopt;
  return n;
}

}  // namespace

service_notifier::service_notifier() {
  if (const char* s = std::getenv("NOTIFY_SOCKET"); s && (s[0] == '/' || s[0] == '@')) {
    m_socket = s;
    if (m_socket[0] == '@') m_socket[0] = '\0';
    if (m_socket.size() >= sizeof(sockaddr_un::sun_path)) m_socket.clear();
  }
  // sd_watchdog_enabled(3): WATCHDOG_PID, when set, must be our PID; WATCHDOG_USEC > 0.
  if (const auto pid = env_number("WATCHDOG_PID");
      pid && *pid != static_cast<unsigned long long>(::getpid())) {
    return;
  }
  if (const auto usec = env_number("WATCHDOG_USEC"); usec && *usec > 0) {
    m_watchdog = std::chrono::microseconds(*usec);
  }
}

std::error_code service_notifier::notify(std::string_view message) const {
  if (m_socket.empty()) return {};
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return {errno, std::generic_category()};
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, m_socket.data(), m_socket.size());
  // An abstract name's length is exact (no terminating NUL); a path's includes its NUL.
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + m_socket.size() +
                                          (m_socket[0] == '\0' ? 0 : 1));
  std::error_code ec;
  if (::sendto(fd, message.data(), message.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&a),
               len) < 0) {
    ec = {errno, std::generic_category()};
  }
  ::close(fd);
  return ec;
}

std::error_code service_notifier::ready(std::string_view status) const {
  std::string m = "READY=1\nSTATUS=";
  m += status;
  return notify(m);
}

std::error_code service_notifier::watchdog() const { return notify("WATCHDOG=1"); }

std::error_code service_notifier::stopping() const { return notify("STOPPING=1\nSTATUS=stopping"); }

std::error_code service_notifier::reloading() const { return notify("RELOADING=1"); }

}  // namespace mcdist
