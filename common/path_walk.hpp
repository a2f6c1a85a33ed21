#pragma once
/// @file
/// Walking a tree relative to directory descriptors (openat with O_NOFOLLOW, never a path string
/// through a symlink): the receiver's storage in its destination and temp trees, the hub in its
/// spools, where whoever may write there could plant a link to a file of ours.

#include <fcntl.h>
#include <sys/stat.h>
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

/// Opens `relative` (accepted by check_relative_path) below the directory `root` for reading:
/// every directory below root with openat(O_DIRECTORY | O_NOFOLLOW), the file with O_NOFOLLOW
/// and O_NONBLOCK, so no symlink below root is followed and a FIFO or device planted there
/// opens at once instead of blocking (the caller fstat()s the descriptor and takes only what
/// it expects, S_ISREG for a product).
/// @return 0 with `fd` set (the caller closes it), or an errno value
inline int open_below(int root, std::string_view relative, int& fd) {
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
  fd = ::openat(cur, leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  const int e = errno;
  if (owned >= 0) ::close(owned);
  return fd < 0 ? e : 0;
}

/// A stat's mtime in ns since the Unix epoch.
inline std::int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

}  // namespace mcdist
