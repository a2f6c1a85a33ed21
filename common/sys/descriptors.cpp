#include "common/sys/descriptors.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>

namespace mcdist {

std::size_t raise_descriptor_limit() noexcept {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur != rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) (void)::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur == RLIM_INFINITY ? SIZE_MAX : static_cast<std::size_t>(rl.rlim_cur);
}

std::size_t reserve_descriptors(std::size_t count) noexcept {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    count = std::min<std::size_t>(count, rl.rlim_cur);
  if (count < 2) return 0;
  const int top = static_cast<int>(std::min<std::size_t>(count - 1, INT_MAX));
  // Any open descriptor serves as the original: stderr usually, /dev/null for a daemon
  // started with 0-2 closed.
  int original = STDERR_FILENO;
  int opened = -1;
  if (::fcntl(original, F_GETFD) < 0) {
    opened = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (opened < 0) return 0;
    original = opened;
  }
  // The lowest free descriptor at or above `top`: the table grows to hold it.
  const int copy = ::fcntl(original, F_DUPFD_CLOEXEC, top);
  if (opened >= 0) ::close(opened);
  if (copy < 0) return 0;
  ::close(copy);
  return count;
}

}  // namespace mcdist
