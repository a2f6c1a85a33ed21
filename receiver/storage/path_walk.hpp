#pragma once
/// @file
/// Small helpers of the storage components that walk destination trees relative to directory
/// descriptors (openat with O_NOFOLLOW, never a path string through a symlink).

#include <fcntl.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace mcdist::receiver {

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

/// A stat's mtime in ns since the Unix epoch.
inline std::int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

}  // namespace mcdist::receiver
