#include "feed/spool_file.hpp"

#include "common/path_check.hpp"
#include "common/sys/path_walk.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace mcdist::feed {

namespace {

std::error_code errno_error(int e) { return {e, std::generic_category()}; }

/// Opens the directory holding `relative`'s last component below `root` without following
/// links (as open_below walks), and gives that component's name.
std::error_code open_parent(const std::filesystem::path& root, std::string_view relative,
                            unique_fd& parent, std::string& leaf) {
  unique_fd cur(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cur) return errno_error(errno);
  auto comps = split_path(relative);
  leaf.assign(comps.back());
  comps.pop_back();
  for (auto c : comps) {
    const std::string comp(c);
    unique_fd next(
        ::openat(cur.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next)
      return errno_error(errno == ENOTDIR && is_symlink_at(cur.get(), comp.c_str()) ? ELOOP
                                                                                    : errno);
    cur = std::move(next);
  }
  parent = std::move(cur);
  return {};
}

/// Whether `leaf` in `dir` (not followed) is still the file `sent`.
std::error_code check_same(int dir, const std::string& leaf, const file_identity& sent) {
  struct stat st {};
  if (::fstatat(dir, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return errno_error(errno);
  if (file_identity{st.st_dev, st.st_ino} != sent)
    return std::make_error_code(std::errc::file_exists);
  return {};
}

/// Copies the content of `fd` into a new file `to`, through a temporary name beside it.
std::error_code copy_fd(int fd, const std::filesystem::path& to) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_error(errno);
  const auto tmp = to.parent_path() / ("." + to.filename().string() + ".copy");
  unique_fd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                       st.st_mode & 0777));
  if (!out) return errno_error(errno);
  off_t off = 0;
  std::error_code ec;
  while (off < st.st_size) {
    const ssize_t n = ::copy_file_range(fd, &off, out.get(), nullptr,
                                        static_cast<std::size_t>(st.st_size - off), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ec = errno_error(errno);
      break;
    }
    if (n == 0) break;  // shorter than its fstat: copied as it is
  }
  // The copy keeps the file's mtime: a retained copy is opened later against the size and
  // mtime the journal holds.
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  if (!ec && ::futimens(out.get(), times) != 0) ec = errno_error(errno);
  if (!ec && ::fsync(out.get()) != 0) ec = errno_error(errno);
  out.reset();
  if (!ec && ::rename(tmp.c_str(), to.c_str()) != 0) ec = errno_error(errno);
  if (ec) ::unlink(tmp.c_str());
  return ec;
}

}  // namespace

std::optional<file_identity> identity_of(const std::filesystem::path& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return std::nullopt;
  return file_identity{st.st_dev, st.st_ino};
}

std::optional<opened_product> open_product(const std::filesystem::path& root,
                                           std::string_view relative, const expected_file& expected,
                                           const std::vector<file_identity>& forbidden,
                                           std::string& why) {
  if (auto problem = product_name_problem(relative); !problem.empty()) {
    why = problem;
    return std::nullopt;
  }
  const unique_fd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) {
    why = "cannot open its spool " + root.string() + ": " + std::strerror(errno);
    return std::nullopt;
  }
  int raw = -1;
  if (const int e = open_below(dir.get(), relative, raw)) {
    why = e == ENOENT ? "vanished before it was sent"
          : e == ELOOP || e == ENOTDIR
              ? "a symbolic link (below the spool, links are never followed)"
              : std::string("cannot be opened: ") + std::strerror(e);
    return std::nullopt;
  }
  opened_product out;
  auto fd = std::make_shared<unique_fd>(raw);
  if (::fstat(fd->get(), &out.st) != 0) {
    why = std::string("cannot be examined: ") + std::strerror(errno);
    return std::nullopt;
  }
  if (!S_ISREG(out.st.st_mode)) {
    why = S_ISFIFO(out.st.st_mode)   ? "a FIFO, not a regular file"
          : S_ISSOCK(out.st.st_mode) ? "a socket, not a regular file"
          : S_ISDIR(out.st.st_mode)  ? "a directory, not a regular file"
                                     : "a device, not a regular file";
    return std::nullopt;
  }
  for (const auto& f : forbidden) {
    if (out.identity() == f) {
      why = "a link to one of the hub's own files (its key or journal): refused";
      return std::nullopt;
    }
  }
  if (static_cast<std::uint64_t>(out.st.st_size) != expected.size ||
      mtime_ns_of(out.st) != expected.mtime_ns) {
    why = "changed in the spool since it was queued (its new version is queued on its own)";
    return std::nullopt;
  }
  out.fd = std::move(fd);
  return out;
}

std::optional<std::filesystem::path> spool_root_of(std::string_view spool_path,
                                                   std::string_view name) {
  if (name.empty() || spool_path.size() <= name.size() + 1 || !spool_path.ends_with(name) ||
      spool_path[spool_path.size() - name.size() - 1] != '/') {
    return std::nullopt;
  }
  return std::filesystem::path(spool_path.substr(0, spool_path.size() - name.size() - 1));
}

std::string product_name_problem(std::string_view name) {
  if (auto ec = check_relative_path(name)) {
    return "its name is not deliverable (" + ec.message() + ")";
  }
  return {};
}

std::error_code remove_if_same(const std::filesystem::path& root, std::string_view relative,
                               const file_identity& sent) {
  unique_fd dir;
  std::string leaf;
  if (auto ec = open_parent(root, relative, dir, leaf)) return ec;
  if (auto ec = check_same(dir.get(), leaf, sent)) return ec;
  if (::unlinkat(dir.get(), leaf.c_str(), 0) != 0) return errno_error(errno);
  return {};
}

std::error_code move_if_same(const std::filesystem::path& root, std::string_view relative,
                             const file_identity& sent, int fd, const std::filesystem::path& to) {
  unique_fd dir;
  std::string leaf;
  if (auto ec = open_parent(root, relative, dir, leaf)) return ec;
  if (auto ec = check_same(dir.get(), leaf, sent)) return ec;
  std::error_code ec;
  std::filesystem::create_directories(to.parent_path(), ec);
  if (ec) return ec;
  if (::renameat(dir.get(), leaf.c_str(), AT_FDCWD, to.c_str()) == 0) return {};
  if (errno != EXDEV) return errno_error(errno);
  if (auto cec = copy_fd(fd, to)) return cec;
  // The copy is in place; the spool file goes only if it is still the one copied.
  if (auto sec = check_same(dir.get(), leaf, sent)) return sec;
  if (::unlinkat(dir.get(), leaf.c_str(), 0) != 0) return errno_error(errno);
  return {};
}

std::error_code link_or_copy_fd(int fd, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::create_directories(to.parent_path(), ec);
  if (ec) return ec;
  std::filesystem::remove(to, ec);
  // The descriptor's file, not whatever its spool name leads to now: /proc/self/fd/N is the
  // open file itself, and AT_SYMLINK_FOLLOW links that (open(2), O_TMPFILE).
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, to.c_str(), AT_SYMLINK_FOLLOW) == 0) return {};
  return copy_fd(fd, to);
}

}  // namespace mcdist::feed
