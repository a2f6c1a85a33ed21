#pragma once
/// @file
/// The hub's side of the spool trust boundary (docs/security.md "Producers"): whoever may write
/// a spool directory may put anything there (a symbolic link to the hub's key, a FIFO, a
/// directory swapped for a link, a name that is not UTF-8), and may change it between the
/// moment the watcher saw it and the moment a batch sends it. So a product is opened once, at
/// the start of its batch, relative to its spool directory without following any link
/// (common/sys/path_walk.hpp open_below, O_NOFOLLOW | O_NONBLOCK on the file), its descriptor is
/// fstat()ed, and only a regular file with the size and mtime the journal recorded is taken;
/// from then on the session hashes, sends, retains and announces it through that descriptor.
/// The spool file is disposed of (delete, move) only while its name still leads to that same
/// file, so a new version dropped during the session is never deleted unsent.
///
/// Everything here is a few system calls on one file: nothing blocks on what a producer
/// planted (a FIFO opens at once with O_NONBLOCK and is refused by its fstat).

#include "common/sys/unique_fd.hpp"

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace mcdist::feed {

/// Where spool files refused at intake go, below the root of their spool (a dot-directory, so
/// the watcher never takes it for products), keeping their name below the spool.
inline constexpr std::string_view rejected_dir_name = ".rejected";

/// A file's identity on this host (device and inode), to recognise it whatever its name.
struct file_identity {
  dev_t dev = 0;
  ino_t ino = 0;
  friend bool operator==(const file_identity&, const file_identity&) = default;
};

/// The identity of `path`, following links (the hub's own files: key, site keys, journal);
/// std::nullopt when it cannot be stat()ed.
std::optional<file_identity> identity_of(const std::filesystem::path& path);

/// A product opened for sending.
struct opened_product {
  std::shared_ptr<const unique_fd> fd;  ///< read-only, O_CLOEXEC; shared with the session
  struct stat st {};                    ///< fstat() of fd
  file_identity identity() const noexcept { return {st.st_dev, st.st_ino}; }
};

/// What the journal recorded of a product, checked against the file opened.
struct expected_file {
  std::uint64_t size = 0;     ///< bytes
  std::int64_t mtime_ns = 0;  ///< ns since the Unix epoch
};

/// Opens `relative` below the directory `root` for sending (see the file comment). Refused
/// (std::nullopt, `why` says it for the journal and the log): a name that is not a valid
/// manifest path (product_name_problem), anything but a regular file (a symbolic link
/// anywhere below root, a FIFO, a socket, a device, a directory), a file whose size or mtime
/// differ from `expected` (it changed since it was queued: its new version is queued on its
/// own), and any file whose identity is one of `forbidden` (the hub's key and journal, should a
/// producer hard-link one into a spool).
std::optional<opened_product> open_product(const std::filesystem::path& root,
                                           std::string_view relative, const expected_file& expected,
                                           const std::vector<file_identity>& forbidden,
                                           std::string& why);

/// The spool directory a journaled product was found in: its `spool_path` without the trailing
/// "/" + `name` (the watcher joined them). std::nullopt when the path does not end so.
std::optional<std::filesystem::path> spool_root_of(std::string_view spool_path,
                                                   std::string_view name);

/// Why `name` (a path below a spool) cannot be a product, or empty when it can: not valid UTF-8
/// (RFC 3629; receivers take manifest paths as UTF-8 text) or not a safe manifest path
/// (common/path_check.hpp: control characters, over-long, too deep). Checked at intake, so one
/// bad name is refused alone instead of failing the batch it would have joined.
std::string product_name_problem(std::string_view name);

/// Removes the spool file `relative` below `root` if its name still leads to the file `sent`
/// (without following links): a new version renamed over it is left for its own batch.
/// @return an error; std::errc::no_such_file_or_directory when it is already gone;
///         std::errc::file_exists (nothing done) when the name now holds another file
std::error_code remove_if_same(const std::filesystem::path& root, std::string_view relative,
                               const file_identity& sent);

/// Moves the spool file `relative` below `root` to `to` (a path below the operator's `move:`
/// directory, created as needed) if its name still leads to `sent`; across file systems by a
/// copy from `fd` (then the spool file is removed as by remove_if_same).
/// @return an error, as remove_if_same
std::error_code move_if_same(const std::filesystem::path& root, std::string_view relative,
                             const file_identity& sent, int fd, const std::filesystem::path& to);

/// Makes `to` a hard link to the open file `fd` (linkat through /proc/self/fd), else a copy of
/// its content written beside `to` and renamed over it; parent directories are created.
/// @return an error (the copy's, when both failed)
std::error_code link_or_copy_fd(int fd, const std::filesystem::path& to);

}  // namespace mcdist::feed
