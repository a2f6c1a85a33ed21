#pragma once
/// @file
/// Opening below a directory descriptor without following a symlink at any step (openat2 with
/// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or openat with O_NOFOLLOW component by component;
/// never a path string through a link): the receiver's storage in its destination and temp
/// trees, the hub in its spools, where whoever may write there could plant a link to a file of
/// ours.

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist {

/// Splits a relative path already accepted by check_relative_path into its components.
inline std::vector<std::string_view> split_path(std::string_view p) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start <= p.size()) {
    const std::size_t slash = p.find('/', start);
    const std::size_t end = slash == std::string_view::npos ? p.size() : slash;
    out.push_back(p.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

/// True when `name` in directory `dir` is a symbolic link. openat(O_DIRECTORY | O_NOFOLLOW)
/// reports a symlink as ENOTDIR; this tells the two apart so messages name it (ELOOP).
inline bool is_symlink_at(int dir, const char* name) {
  struct stat st {};
  return ::fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

/// Opens `path` (relative, accepted by check_relative_path) below the directory `root` in one
/// system call: openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
/// so the kernel refuses a symbolic link in any component (ELOOP) and any escape from root
/// (EXDEV), the guarantees of a walk component by component with O_NOFOLLOW, in one lookup
/// instead of one openat and one close per directory (Linux 5.6, openat2(2)).
/// @param flags  open flags (O_CLOEXEC is the caller's to give)
/// @return the descriptor (>= 0), a negative errno value, or `openat2_unavailable` when this
///         kernel, or a seccomp filter in front of it, has no openat2 (the caller then walks)
constexpr int openat2_unavailable = -1'000'000;
inline int openat2_beneath(int root, const char* path, int flags) {
#ifdef SYS_openat2
  struct open_how how {};
  how.flags = static_cast<std::uint64_t>(flags);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (;;) {
    const long fd = ::syscall(SYS_openat2, root, path, &how, sizeof how);
    if (fd >= 0) return static_cast<int>(fd);
    const int e = errno;
    if (e == EINTR) continue;
    // EAGAIN: a concurrent rename or mount made the kernel give up the lookup (openat2(2));
    // ENOSYS, EPERM from seccomp, E2BIG, EINVAL: no openat2 as asked. The walk answers both.
    if (e == EAGAIN || e == ENOSYS || e == EPERM || e == E2BIG || e == EINVAL)
      return openat2_unavailable;
    return -e;
  }
#else
  (void)root;
  (void)path;
  (void)flags;
  return openat2_unavailable;
#endif
}

/// Opens `relative` (accepted by check_relative_path) below the directory `root` for reading:
/// no symlink below root is followed, and the file is opened with O_NONBLOCK so a FIFO or
/// device planted there opens at once instead of blocking (the caller fstat()s the descriptor
/// and takes only what it expects, S_ISREG for a product). One openat2 where the kernel has it;
/// else every directory with openat(O_DIRECTORY | O_NOFOLLOW) and the file with O_NOFOLLOW.
/// A link as a directory component gives ELOOP or ENOTDIR (the walk cannot tell them apart).
/// @return 0 with `fd` set (the caller closes it), or an errno value
inline int open_below(int root, std::string_view relative, int& fd) {
  constexpr int file_flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  const std::string path(relative);
  if (const int r = openat2_beneath(root, path.c_str(), file_flags); r != openat2_unavailable) {
    if (r < 0) return -r;
    fd = r;
    return 0;
  }
  auto comps = split_path(relative);
  const std::string leaf(comps.back());
  comps.pop_back();
  int cur = root;
  int owned = -1;
  for (auto c : comps) {
    const std::string comp(c);
    const int next = ::openat(cur, comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int e = errno;
    if (owned >= 0) ::close(owned);
    if (next < 0) return e;
    cur = owned = next;
  }
  fd = ::openat(cur, leaf.c_str(), file_flags);
  const int e = errno;
  if (owned >= 0) ::close(owned);
  return fd < 0 ? e : 0;
}

/// Opens the directory `relative` (accepted by check_relative_path; empty: `root` itself, as a
/// new descriptor) below `root` with the guarantees of open_below.
/// @return 0 with `fd` set (the caller closes it), or an errno value
inline int open_dir_below(int root, std::string_view relative, int& fd) {
  constexpr int dir_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  const std::string path = relative.empty() ? std::string(".") : std::string(relative);
  if (const int r = openat2_beneath(root, path.c_str(), dir_flags); r != openat2_unavailable) {
    if (r < 0) return -r;
    fd = r;
    return 0;
  }
  int cur = ::openat(root, ".", dir_flags);
  if (cur < 0) return errno;
  if (!relative.empty()) {
    for (auto c : split_path(relative)) {
      const std::string comp(c);
      const int next = ::openat(cur, comp.c_str(), dir_flags);
      const int e = errno;
      ::close(cur);
      if (next < 0) return e;
      cur = next;
    }
  }
  fd = cur;
  return 0;
}

/// A stat's mtime in ns since the Unix epoch.
inline std::int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

}  // namespace mcdist
