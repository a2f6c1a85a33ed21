#include "tests/linkem/shell/netns.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

namespace mcdist::linkem {
namespace {

/// Makes /run/netns a shared mount point, as iproute2's netns_add does, so that a
/// namespace unmounted here is unmounted in every mount namespace and can be freed.
void prepare_netns_dir() {
  if (::mkdir(k_netns_dir, 0755) != 0 && errno != EEXIST) {
    throw setup_error(exit_no_netns, errno_message(std::string("cannot create ") + k_netns_dir));
  }
  bool made_mount_point = false;
  while (::mount("", k_netns_dir, "none", MS_SHARED | MS_REC, nullptr) != 0) {
    if (errno != EINVAL || made_mount_point) {
      throw setup_error(exit_no_netns,
                        errno_message(std::string("mount --make-shared ") + k_netns_dir));
    }
    if (::mount(k_netns_dir, k_netns_dir, "none", MS_BIND | MS_REC, nullptr) != 0) {
      throw setup_error(exit_no_netns, errno_message(std::string("mount --bind ") + k_netns_dir));
    }
    made_mount_point = true;
  }
}

}  // namespace

named_netns::named_netns(std::string name) : m_name(std::move(name)) {
  prepare_netns_dir();
  const std::string p = path();
  const int created = ::open(p.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
  if (created < 0) {
    if (errno == EEXIST) {
      throw setup_error(exit_runtime, "network namespace '" + m_name +
                                          "' already exists; if it is left over from a "
                                          "crashed run, remove it with mcdist-linkem --cleanup");
    }
    throw setup_error(exit_no_netns, errno_message("cannot create " + p));
  }
  ::close(created);

  // Create the namespace on this thread, bind it to the name, and come back.
  unique_fd original(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!original) {
    ::unlink(p.c_str());
    throw setup_error(exit_no_netns, errno_message("cannot open /proc/thread-self/ns/net"));
  }
  if (::unshare(CLONE_NEWNET) != 0) {
    const std::string msg = errno_message("unshare(CLONE_NEWNET) for '" + m_name + "'");
    ::unlink(p.c_str());
    throw setup_error(exit_no_netns, "network namespaces unavailable: " + msg);
  }
  const bool bound = ::mount("/proc/thread-self/ns/net", p.c_str(), "none", MS_BIND, nullptr) == 0;
  const int bind_errno = errno;
  if (::setns(original.get(), CLONE_NEWNET) != 0) {
    // Cannot happen with CAP_SYS_ADMIN; continuing in the wrong namespace would be worse.
    std::perror("mcdist-linkem: setns back to the original namespace");
    std::abort();
  }
  if (!bound) {
    ::unlink(p.c_str());
    throw setup_error(exit_no_netns,
                      "cannot bind network namespace to " + p + ": " + std::strerror(bind_errno));
  }
  m_bound = true;
  m_fd = unique_fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!m_fd) {
    const std::string msg = errno_message("cannot open " + p);
    remove();
    throw setup_error(exit_runtime, msg);
  }
}

named_netns::named_netns(named_netns&& other) noexcept
    : m_name(std::move(other.m_name)), m_fd(std::move(other.m_fd)),
      m_bound(std::exchange(other.m_bound, false)) {}

named_netns::~named_netns() { remove(); }

void named_netns::remove() noexcept {
  m_fd.reset();
  if (m_bound) {
    (void)remove_netns(m_name);  // best effort in a destructor; --cleanup handles leftovers
    m_bound = false;
  }
}

std::error_code remove_netns(const std::string& name) noexcept {
  const std::string p = std::string(k_netns_dir) + "/" + name;
  ::umount2(p.c_str(), MNT_DETACH);
  if (::unlink(p.c_str()) != 0) {
    return {errno, std::generic_category()};
  }
  return {};
}

std::vector<std::string> list_netns(const std::string& prefix) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(k_netns_dir);
  if (dir == nullptr) {
    return names;
  }
  while (const dirent* e = ::readdir(dir)) {
    const std::string n = e->d_name;
    if (n != "." && n != ".." && n.rfind(prefix, 0) == 0) {
      names.push_back(n);
    }
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

netns_scope::netns_scope(int netns_fd)
    : m_original(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) {
  if (!m_original) {
    throw setup_error(exit_runtime, errno_message("cannot open /proc/thread-self/ns/net"));
  }
  if (::setns(netns_fd, CLONE_NEWNET) != 0) {
    throw setup_error(exit_runtime, errno_message("setns into emulated host namespace"));
  }
}

netns_scope::~netns_scope() {
  if (::setns(m_original.get(), CLONE_NEWNET) != 0) {
    std::perror("mcdist-linkem: setns back to the original namespace");
    std::abort();
  }
}

run_lock::run_lock(const std::string& run_id)
    : m_path(std::string(k_lock_dir) + "/" + run_id + ".lock") {
  if (::mkdir(k_lock_dir, 0755) != 0 && errno != EEXIST) {
    throw setup_error(exit_runtime, errno_message(std::string("cannot create ") + k_lock_dir));
  }
  m_fd = unique_fd(::open(m_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!m_fd) {
    throw setup_error(exit_runtime, errno_message("cannot create lock " + m_path));
  }
  if (::flock(m_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    throw setup_error(exit_runtime, "run id '" + run_id +
                                        "' is in use by a running mcdist-linkem; choose "
                                        "another --run-id");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(m_fd.get(), 0) != 0 || ::write(m_fd.get(), pid.data(), pid.size()) < 0) {
    // The pid in the file is informational only.
  }
}

run_lock::~run_lock() {
  if (m_fd) {
    ::unlink(m_path.c_str());
  }
}

bool run_lock::is_held(const std::string& run_id) {
  const std::string p = std::string(k_lock_dir) + "/" + run_id + ".lock";
  unique_fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return false;
  }
  if (::flock(fd.get(), LOCK_SH | LOCK_NB) != 0) {
    return errno == EWOULDBLOCK;
  }
  ::flock(fd.get(), LOCK_UN);
  return false;
}

int cleanup_stale(const std::string& prefix, bool force) {
  int removed = 0;
  const std::string start = prefix + "-";
  for (const auto& name : list_netns(start)) {
    // name = PREFIX-RUNID-hN; RUNID may itself contain '-'.
    const auto host_sep = name.rfind("-h");
    const std::string run_id = host_sep != std::string::npos && host_sep > start.size()
                                   ? name.substr(start.size(), host_sep - start.size())
                                   : std::string();
    if (!force && !run_id.empty() && run_lock::is_held(run_id)) {
      std::printf("keep   %s (run %s is alive; use --force to remove anyway)\n", name.c_str(),
                  run_id.c_str());
      continue;
    }
    if (const std::error_code ec = remove_netns(name)) {
      std::printf("failed %s: %s\n", name.c_str(), ec.message().c_str());
    } else {
      std::printf("remove %s\n", name.c_str());
      ++removed;
    }
  }
  // Lock files of dead runs.
  if (DIR* dir = ::opendir(k_lock_dir)) {
    std::vector<std::string> stale;
    while (const dirent* e = ::readdir(dir)) {
      const std::string n = e->d_name;
      const std::string suffix = ".lock";
      if (n.size() > suffix.size() &&
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
        const std::string id = n.substr(0, n.size() - suffix.size());
        if (!run_lock::is_held(id)) {
          stale.push_back(std::string(k_lock_dir) + "/" + n);
        }
      }
    }
    ::closedir(dir);
    for (const auto& p : stale) {
      ::unlink(p.c_str());
    }
  }
  std::fflush(stdout);
  return removed;
}

}  // namespace mcdist::linkem
