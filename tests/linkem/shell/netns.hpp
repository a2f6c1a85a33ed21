// Named network namespaces, created and removed the way ip-netns(8) does it (a bind
// mount of the namespace file on /run/netns/NAME), so that `ip netns exec NAME ...`
// works on them, and a run lock that tells a later --cleanup which runs are alive.
#pragma once

#include <string>
#include <system_error>
#include <vector>

#include "tests/linkem/shell/system.hpp"

namespace mcdist::linkem {

/// Directory of named network namespaces (iproute2's NETNS_RUN_DIR).
inline constexpr const char* k_netns_dir = "/run/netns";
/// Directory of mcdist-linkem run locks.
inline constexpr const char* k_lock_dir = "/run/mcdist-linkem";

/// A network namespace bound to /run/netns/NAME. Removed (unmounted and unlinked) on
/// destruction; the namespace itself disappears when the last process and file
/// descriptor in it are gone.
class named_netns {
 public:
  /// Creates a new, empty network namespace named `name`.
  /// @throws setup_error (exit_no_netns when namespaces cannot be created, exit_runtime
  ///         when the name is taken or /run/netns cannot be prepared)
  explicit named_netns(std::string name);
  ~named_netns();
  named_netns(named_netns&& other) noexcept;
  named_netns& operator=(named_netns&&) = delete;
  named_netns(const named_netns&) = delete;
  named_netns& operator=(const named_netns&) = delete;

  [[nodiscard]] const std::string& name() const noexcept { return m_name; }
  [[nodiscard]] std::string path() const { return std::string(k_netns_dir) + "/" + m_name; }
  /// Open descriptor of the namespace (for setns), valid until destruction.
  [[nodiscard]] int fd() const noexcept { return m_fd.get(); }

  /// Removes the name now; idempotent.
  void remove() noexcept;

 private:
  std::string m_name;
  unique_fd m_fd;
  bool m_bound = false;
};

/// Switches the calling thread into a network namespace for its lifetime and back on
/// destruction. Only the calling thread is affected.
class netns_scope {
 public:
  /// @throws setup_error if setns fails
  explicit netns_scope(int netns_fd);
  ~netns_scope();
  netns_scope(const netns_scope&) = delete;
  netns_scope& operator=(const netns_scope&) = delete;

 private:
  unique_fd m_original;
};

/// Removes namespace /run/netns/NAME (umount + unlink).
/// @return empty on success, the unlink error otherwise
std::error_code remove_netns(const std::string& name) noexcept;

/// Names in /run/netns starting with prefix.
std::vector<std::string> list_netns(const std::string& prefix);

/// Exclusive lock of a run id, held for the run's lifetime (flock on
/// /run/mcdist-linkem/RUNID.lock). The kernel drops it if the process dies, which is how
/// --cleanup tells crashed runs from live ones.
class run_lock {
 public:
  /// @throws setup_error if the run id is in use by a live run or the lock cannot be made
  explicit run_lock(const std::string& run_id);
  ~run_lock();
  run_lock(const run_lock&) = delete;
  run_lock& operator=(const run_lock&) = delete;

  /// True if a live process holds the lock of run_id.
  static bool is_held(const std::string& run_id);

 private:
  std::string m_path;
  unique_fd m_fd;
};

/// Removes namespaces "<prefix>-<runid>-h<N>" whose run is not alive, and stale lock
/// files. Prints one line per namespace to stdout.
/// @param force also remove namespaces of live runs
/// @return number of namespaces removed
int cleanup_stale(const std::string& prefix, bool force);

}  // namespace mcdist::linkem
