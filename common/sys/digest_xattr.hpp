#pragma once
/// @file
/// A file's SHA-256 remembered in an extended attribute, so a file hashed once is not hashed
/// again while it is unchanged: `user.mcdist.sha256 = "<64 hex> <size> <mtime_ns>"`, trusted only
/// while the file's size and mtime are those recorded (the same quick check rsync relies on).
/// Receivers set it on every file they deliver; the sender sets it on files it has hashed.

#include "common/sha256.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mcdist {

/// Name of the attribute.
inline constexpr const char* digest_xattr_name = "user.mcdist.sha256";
/// Longest value read: 64 hex + space + 20 digits + space + 20 digits, with room to spare.
inline constexpr std::size_t max_digest_xattr_bytes = 128;

/// Formats the value for `d` of a file of `size` bytes modified at `mtime_ns`.
std::string digest_xattr_value(const sha256_digest& d, std::uint64_t size, std::int64_t mtime_ns);

/// Parses a value; nullopt unless well formed and recording exactly `size` and `mtime_ns`.
std::optional<sha256_digest> parse_digest_xattr(std::string_view v, std::uint64_t size,
                                                std::int64_t mtime_ns);

/// Reads the record of the open file `fd`; nullopt when absent, stale, malformed or the
/// filesystem has no user xattrs.
std::optional<sha256_digest> read_digest_xattr(int fd, std::uint64_t size, std::int64_t mtime_ns);
/// The same for the file at `path` (symbolic links followed), without opening it: one
/// getxattr(2) where open, fgetxattr and close are three (a sender's start-up reads 20,000).
std::optional<sha256_digest> read_digest_xattr(const char* path, std::uint64_t size,
                                               std::int64_t mtime_ns);

/// Records `d` on the open file `fd`. @return 0, or the errno of fsetxattr (ENOTSUP on
/// filesystems without user xattrs, EACCES/EPERM without write permission).
int write_digest_xattr(int fd, const sha256_digest& d, std::uint64_t size, std::int64_t mtime_ns);

}  // namespace mcdist
