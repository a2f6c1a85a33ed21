#include "common/sys/digest_xattr.hpp"

#include <sys/xattr.h>

#include <cerrno>
#include <charconv>

namespace mcdist {

std::string digest_xattr_value(const sha256_digest& d, std::uint64_t size, std::int64_t mtime_ns) {
  return to_hex(d) + ' ' + std::to_string(size) + ' ' + std::to_string(mtime_ns);
}

std::optional<sha256_digest> parse_digest_xattr(std::string_view v, std::uint64_t size,
                                                std::int64_t mtime_ns) {
  if (v.size() < 68 || v[64] != ' ') return std::nullopt;
  auto d = digest_from_hex(v.substr(0, 64));
  if (!d) return std::nullopt;
  const std::string_view rest = v.substr(65);
  const std::size_t sp = rest.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  std::uint64_t xsize = 0;
  std::int64_t xmtime = 0;
  const auto r1 = std::from_chars(rest.data(), rest.data() + sp, xsize);
  if (r1.ec != std::errc{} || r1.ptr != rest.data() + sp) return std::nullopt;
  const auto r2 = std::from_chars(rest.data() + sp + 1, rest.data() + rest.size(), xmtime);
  if (r2.ec != std::errc{} || r2.ptr != rest.data() + rest.size()) return std::nullopt;
  if (xsize != size || xmtime != mtime_ns) return std::nullopt;
  return d;
}

std::optional<sha256_digest> read_digest_xattr(int fd, std::uint64_t size, std::int64_t mtime_ns) {
  char buf[max_digest_xattr_bytes];
  const ssize_t n = ::fgetxattr(fd, digest_xattr_name, buf, sizeof buf);
  if (n <= 0) return std::nullopt;
  return parse_digest_xattr(std::string_view(buf, static_cast<std::size_t>(n)), size, mtime_ns);
}

std::optional<sha256_digest> read_digest_xattr(const char* path, std::uint64_t size,
                                               std::int64_t mtime_ns) {
  char buf[max_digest_xattr_bytes];
  const ssize_t n = ::getxattr(path, digest_xattr_name, buf, sizeof buf);
  if (n <= 0) return std::nullopt;
  return parse_digest_xattr(std::string_view(buf, static_cast<std::size_t>(n)), size, mtime_ns);
}

int write_digest_xattr(int fd, const sha256_digest& d, std::uint64_t size, std::int64_t mtime_ns) {
  const std::string v = digest_xattr_value(d, size, mtime_ns);
  return ::fsetxattr(fd, digest_xattr_name, v.data(), v.size(), 0) == 0 ? 0 : errno;
}

}  // namespace mcdist
