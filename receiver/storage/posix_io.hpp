#pragma once
/// @file
/// The system calls of the storage path, each behind one function that first asks the fault
/// hook (after Boost.Beast's test::fail_count) and then makes the call. Every storage component
/// goes through a posix_io, so a test can fail the Nth pwrite, fsync or rename of the whole
/// store, and the fault-injection-then-syscall idiom is written once, here.
///
/// Errors are errno values (0: success), the currency of the callers' messages; errno_code()
/// turns one into a std::error_code. Calls that the store never fails on purpose (fstat,
/// ftruncate, unlink, close, sync_file_range) are made directly by the components.

#include "common/sha256.hpp"
#include "common/sys/unique_fd.hpp"
#include "receiver/core/storage_port.hpp"

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>

struct timespec;

namespace mcdist::receiver {

/// The system calls file_store makes on files and directories, named for failure injection.
enum class storage_op : std::uint8_t {
  open,       ///< open/openat of a temp file, destination directory or checkpoint file
  fallocate,  ///< preallocation of a temp file (at begin_file, and ahead of the data in steps)
  pwrite,     ///< a write of file data or of a checkpoint
  pread,      ///< a read-back of written data: hashing (catch-up, finalize tail), parity decode
  fsync,      ///< fsync of one file (sync_mode::file, a batch of one, syncfs fallback, state)
  fdatasync,  ///< fdatasync of one file (group commit by fdatasync, range or uring)
  syncfs,     ///< syncfs of the temp filesystem (sync_mode::batch, checkpoint)
  fchmod,
  futimens,
  setxattr,   ///< the user.mcdist.sha256 digest record; failures are logged, not fatal
  mkdir,      ///< a session temp directory or a destination parent directory
  rename,     ///< temp file into the destination; checkpoint state.tmp into state
  dir_fsync,  ///< fsync of a destination or temp directory after a rename or mkdir
  count_      ///< number of ops; not an op
};

/// Name of a storage op, snake_case: "pwrite", "dir_fsync", ...
std::string_view to_string(storage_op op) noexcept;

/// Failure injection: called on the writer, finalizer or scanner thread just before each
/// system call named by `op`, with the file it concerns (nullptr for checkpoints, directories
/// and other non-file operations). Return 0 to let the call run, or an errno value to make it
/// fail with that error without running it. It may block (tests use that to hold the writer).
/// Must be thread-safe.
using fault_hook = std::function<int(storage_op op, const file_key* key)>;

/// Makes the `n`th call (1-based, counted from construction) of `op`, optionally only those
/// concerning `only`, fail with `error`; every other call passes. Thread-safe; copies share
/// their counter.
class fail_nth {
 public:
  /// @param op     which system call to fail
  /// @param n      1-based ordinal among the calls of `op` that match `only`
  /// @param error  errno value to fail with, e.g. ENOSPC
  /// @param only   count only calls for this file; std::nullopt: count every call of `op`
  fail_nth(storage_op op, std::uint64_t n, int error, std::optional<file_key> only = std::nullopt);
  /// The fault_hook signature.
  int operator()(storage_op op, const file_key* key) const;
  /// How many matching calls have been seen so far.
  std::uint64_t seen() const noexcept;

 private:
  storage_op m_op;
  std::uint64_t m_n;
  int m_error;
  std::optional<file_key> m_only;
  std::shared_ptr<std::atomic<std::uint64_t>> m_count;
};

/// An errno value as a std::error_code of the generic category.
inline std::error_code errno_code(int e) { return {e, std::generic_category()}; }

/// The storage path's system calls with failure injection. Thread-safe (const; the hook must
/// be). Every function returns 0 or an errno value; an injected failure skips the call.
class posix_io {
 public:
  /// @param fault  the hook; empty in production (then every call just runs)
  explicit posix_io(fault_hook fault = {}) : m_fault(std::move(fault)) {}

  /// The hook's verdict for `op` on `key`, 0 without a hook.
  int inject(storage_op op, const file_key* key) const { return m_fault ? m_fault(op, key) : 0; }

  /// openat(dir, path, flags, mode) (storage_op::open). @param fd  set to the new descriptor
  /// on success, -1 otherwise
  int open(int dir, const char* path, int flags, mode_t mode, const file_key* key, int& fd) const;
  /// fallocate(fd, 0, offset, length) (storage_op::fallocate).
  int fallocate(int fd, std::uint64_t offset, std::uint64_t length, const file_key* key) const;
  /// Writes all `data` at `offset` (storage_op::pwrite, asked once for the whole range),
  /// retrying on EINTR and short writes; a write of 0 bytes is EIO.
  int pwrite_all(int fd, std::span<const std::byte> data, std::uint64_t offset,
                 const file_key* key) const;
  /// Reads exactly `out.size()` bytes of `fd` at `offset` (storage_op::pread, asked before
  /// each call): a parity decode's source blocks. @return 0, an errno value, or ENODATA when
  /// the file ends first
  int pread_all(int fd, std::span<std::byte> out, std::uint64_t offset, const file_key* key) const;
  /// Reads bytes [from, to) of `fd` into `h` through `buf` (storage_op::pread, asked before
  /// each read of up to buf.size() bytes); a file shorter than `to` is ENODATA.
  /// @param reread  when not null, counts the bytes read
  int read_hash(int fd, std::uint64_t from, std::uint64_t to, sha256_hasher& h,
                std::span<std::byte> buf, const file_key* key,
                std::atomic<std::uint64_t>* reread) const;
  /// fsync of a file (storage_op::fsync).
  int fsync(int fd, const file_key* key) const;
  /// fdatasync of a file (storage_op::fdatasync): its data and the metadata needed to read it
  /// back (size, block allocation), not its times.
  int fdatasync(int fd, const file_key* key) const;
  /// fsync of a directory (storage_op::dir_fsync).
  int dir_fsync(int fd) const;
  /// syncfs of the filesystem holding `fd` (storage_op::syncfs).
  int syncfs(int fd) const;
  /// fchmod (storage_op::fchmod).
  int fchmod(int fd, mode_t mode, const file_key* key) const;
  /// futimens; `times` as for futimens(2) (storage_op::futimens).
  int futimens(int fd, const struct timespec* times, const file_key* key) const;
  /// fsetxattr(fd, name, value, 0) (storage_op::setxattr).
  int fsetxattr(int fd, const char* name, std::string_view value, const file_key* key) const;
  /// mkdirat (storage_op::mkdir); an existing entry of that name is success (EEXIST is not
  /// reported: the caller's openat says whether it is a directory).
  int mkdir(int dir, const char* name, mode_t mode) const;
  /// renameat (storage_op::rename).
  int rename(int from_dir, const char* from, int to_dir, const char* to, const file_key* key) const;

 private:
  fault_hook m_fault;
};

}  // namespace mcdist::receiver
