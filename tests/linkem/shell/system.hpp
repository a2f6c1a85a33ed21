// Small system helpers of the mcdist-linkem shell: owned file descriptors, set-up errors
// that carry the process exit code, the monotonic clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace mcdist::linkem {

/// Exit codes of mcdist-linkem, distinct so that scripts can tell why it stopped.
enum exit_code : int {
  exit_ok = 0,              ///< success; main commands exited 0 (or forward-only mode ended)
  exit_command_failed = 1,  ///< a main command exited non-zero or was killed
  exit_usage = 2,           ///< bad command line or scenario
  exit_no_privilege = 3,    ///< not root / missing CAP_SYS_ADMIN or CAP_NET_ADMIN
  exit_no_netns = 4,        ///< network namespaces unavailable
  exit_no_tun = 5,          ///< TUN devices unavailable
  exit_runtime = 6,         ///< any other failure during set-up or forwarding
};

/// A failure during set-up, with the exit code that describes it and an operator message
/// saying what failed and what to do.
class setup_error : public std::runtime_error {
 public:
  setup_error(exit_code code, const std::string& message)
      : std::runtime_error(message), m_code(code) {}
  [[nodiscard]] exit_code code() const noexcept { return m_code; }

 private:
  exit_code m_code;
};

/// Message "what: strerror(errno)" for the current errno.
std::string errno_message(const std::string& what);

/// Owned file descriptor, closed on destruction.
class unique_fd {
 public:
  unique_fd() noexcept = default;
  explicit unique_fd(int fd) noexcept : m_fd(fd) {}
  unique_fd(unique_fd&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) {
      reset();
      m_fd = std::exchange(other.m_fd, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  [[nodiscard]] int get() const noexcept { return m_fd; }
  explicit operator bool() const noexcept { return m_fd >= 0; }
  void reset() noexcept;
  int release() noexcept { return std::exchange(m_fd, -1); }

 private:
  int m_fd = -1;
};

/// CLOCK_MONOTONIC now, as nanoseconds since boot. The same clock in every network
/// namespace, so timestamps taken in different emulated hosts compare directly.
std::chrono::nanoseconds monotonic_now() noexcept;

/// Effective capabilities of this process relevant to the emulator.
struct privileges {
  bool sys_admin = false;  ///< CAP_SYS_ADMIN: create namespaces, mount
  bool net_admin = false;  ///< CAP_NET_ADMIN: create and configure TUN devices
};
/// Reads CapEff from /proc/self/status.
privileges current_privileges();

/// Checks that this process can create network namespaces and TUN devices.
/// @throws setup_error with exit_no_privilege, exit_no_tun or exit_no_netns and a message
///         naming what is missing
void check_environment();

}  // namespace mcdist::linkem
