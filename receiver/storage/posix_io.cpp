#include "receiver/storage/posix_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace mcdist::receiver {

std::string_view to_string(storage_op op) noexcept {
  switch (op) {
    case storage_op::open: return "open";
    case storage_op::fallocate: return "fallocate";
    case storage_op::pwrite: return "pwrite";
    case storage_op::pread: return "pread";
    case storage_op::fsync: return "fsync";
    case storage_op::fdatasync: return "fdatasync";
    case storage_op::syncfs: return "syncfs";
    case storage_op::fchmod: return "fchmod";
    case storage_op::futimens: return "futimens";
    case storage_op::setxattr: return "setxattr";
    case storage_op::mkdir: return "mkdir";
    case storage_op::rename: return "rename";
    case storage_op::dir_fsync: return "dir_fsync";
    case storage_op::count_: break;
  }
  return "?";
}

fail_nth::fail_nth(storage_op op, std::uint64_t n, int error, std::optional<file_key> only)
    : m_op(op), m_n(n), m_error(error), m_only(only),
      m_count(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

int fail_nth::operator()(storage_op op, const file_key* key) const {
  if (op != m_op) return 0;
  if (m_only && (key == nullptr || !(*key == *m_only))) return 0;
  const std::uint64_t n = m_count->fetch_add(1) + 1;
  return n == m_n ? m_error : 0;
}

std::uint64_t fail_nth::seen() const noexcept { return m_count->load(); }

int posix_io::open(int dir, const char* path, int flags, mode_t mode, const file_key* key,
                   int& fd) const {
  fd = -1;
  if (int e = inject(storage_op::open, key)) return e;
  fd = ::openat(dir, path, flags, mode);
  return fd < 0 ? errno : 0;
}

int posix_io::fallocate(int fd, std::uint64_t offset, std::uint64_t length,
                        const file_key* key) const {
  if (int e = inject(storage_op::fallocate, key)) return e;
  return ::fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(length)) != 0 ? errno
                                                                                         : 0;
}

int posix_io::pwrite_all(int fd, std::span<const std::byte> data, std::uint64_t offset,
                         const file_key* key) const {
  if (int e = inject(storage_op::pwrite, key)) return e;
  while (!data.empty()) {
    const ssize_t n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    data = data.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return 0;
}

int posix_io::read_hash(int fd, std::uint64_t from, std::uint64_t to, sha256_hasher& h,
                        std::span<std::byte> buf, const file_key* key,
                        std::atomic<std::uint64_t>* reread) const {
  while (from < to) {
    if (int e = inject(storage_op::pread, key)) return e;
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(to - from, buf.size()));
    const ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(from));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return ENODATA;  // shorter than expected
    h.update(buf.first(static_cast<std::size_t>(n)));
    from += static_cast<std::uint64_t>(n);
    if (reread != nullptr)
      reread->fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
  }
  return 0;
}

int posix_io::pread_all(int fd, std::span<std::byte> out, std::uint64_t offset,
                        const file_key* key) const {
  while (!out.empty()) {
    if (int e = inject(storage_op::pread, key)) return e;
    const ssize_t n = ::pread(fd, out.data(), out.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return ENODATA;  // shorter than expected
    out = out.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return 0;
}

int posix_io::fsync(int fd, const file_key* key) const {
  if (int e = inject(storage_op::fsync, key)) return e;
  return ::fsync(fd) != 0 ? errno : 0;
}

int posix_io::fdatasync(int fd, const file_key* key) const {
  if (int e = inject(storage_op::fdatasync, key)) return e;
  return ::fdatasync(fd) != 0 ? errno : 0;
}

int posix_io::dir_fsync(int fd) const {
  if (int e = inject(storage_op::dir_fsync, nullptr)) return e;
  return ::fsync(fd) != 0 ? errno : 0;
}

int posix_io::syncfs(int fd) const {
  if (int e = inject(storage_op::syncfs, nullptr)) return e;
  return ::syncfs(fd) != 0 ? errno : 0;
}

int posix_io::fchmod(int fd, mode_t mode, const file_key* key) const {
  if (int e = inject(storage_op::fchmod, key)) return e;
  return ::fchmod(fd, mode) != 0 ? errno : 0;
}

int posix_io::futimens(int fd, const struct timespec* times, const file_key* key) const {
  if (int e = inject(storage_op::futimens, key)) return e;
  return ::futimens(fd, times) != 0 ? errno : 0;
}

int posix_io::fsetxattr(int fd, const char* name, std::string_view value,
                        const file_key* key) const {
  if (int e = inject(storage_op::setxattr, key)) return e;
  return ::fsetxattr(fd, name, value.data(), value.size(), 0) != 0 ? errno : 0;
}

int posix_io::mkdir(int dir, const char* name, mode_t mode) const {
  if (int e = inject(storage_op::mkdir, nullptr)) return e;
  return ::mkdirat(dir, name, mode) != 0 && errno != EEXIST ? errno : 0;
}

int posix_io::rename(int from_dir, const char* from, int to_dir, const char* to,
                     const file_key* key) const {
  if (int e = inject(storage_op::rename, key)) return e;
  return ::renameat(from_dir, from, to_dir, to) != 0 ? errno : 0;
}

}  // namespace mcdist::receiver
