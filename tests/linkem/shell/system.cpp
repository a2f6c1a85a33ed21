#include "tests/linkem/shell/system.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

namespace mcdist::linkem {
namespace {

constexpr unsigned k_cap_net_admin = 12;  // linux/capability.h
constexpr unsigned k_cap_sys_admin = 21;

}  // namespace

std::string errno_message(const std::string& what) { return what + ": " + std::strerror(errno); }

void unique_fd::reset() noexcept {
  if (m_fd >= 0) {
    ::close(m_fd);
    m_fd = -1;
  }
}

std::chrono::nanoseconds monotonic_now() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

privileges current_privileges() {
  privileges p;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      const unsigned long long caps = std::stoull(line.substr(7), nullptr, 16);
      p.net_admin = ((caps >> k_cap_net_admin) & 1U) != 0;
      p.sys_admin = ((caps >> k_cap_sys_admin) & 1U) != 0;
    }
  }
  return p;
}

void check_environment() {
  const privileges p = current_privileges();
  if (!p.sys_admin || !p.net_admin) {
    std::string missing;
    if (!p.sys_admin) {
      missing += "CAP_SYS_ADMIN (to create network namespaces and mount them in /run/netns)";
    }
    if (!p.net_admin) {
      missing += std::string(missing.empty() ? "" : " and ") +
                 "CAP_NET_ADMIN (to create and configure TUN devices)";
    }
    throw setup_error(exit_no_privilege, "mcdist-linkem needs root privileges: missing " + missing +
                                             ". Run it as root (e.g. with sudo).");
  }
  struct stat st {};
  if (::stat("/dev/net/tun", &st) != 0 || !S_ISCHR(st.st_mode)) {
    throw setup_error(exit_no_tun,
                      "TUN devices unavailable: /dev/net/tun is missing. Load the tun module "
                      "(modprobe tun) or, in a container, pass --device /dev/net/tun.");
  }
  {
    const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      throw setup_error(exit_no_tun, errno_message("TUN devices unavailable: cannot open "
                                                   "/dev/net/tun"));
    }
    ::close(fd);
  }
  // Try a network namespace in a throw-away thread, so this thread's namespace is
  // untouched whatever happens.
  int unshare_errno = 0;
  std::thread probe([&unshare_errno] {
    if (::unshare(CLONE_NEWNET) != 0) {
      unshare_errno = errno;
    }
  });
  probe.join();
  if (unshare_errno != 0) {
    throw setup_error(exit_no_netns,
                      std::string("network namespaces unavailable: unshare(CLONE_NEWNET) "
                                  "failed: ") +
                          std::strerror(unshare_errno) +
                          ". The kernel needs CONFIG_NET_NS and the process must not be "
                          "confined by seccomp/AppArmor against it.");
  }
}

}  // namespace mcdist::linkem
