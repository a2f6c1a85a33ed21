#pragma once
/// @file
/// Step 3 of the finalizer (finalizer.hpp): making the data of a batch of verified temp files
/// durable before any of them is renamed into place, by one of the methods of sync_mode.
/// Every system call goes through posix_io, so a test fails the fdatasync of one file and sees
/// that file, and only that one, fail with its reason.
///
/// Why several methods (docs/design-notes.md "Durability", measured in docs/benchmarks.md
/// "Group commit"): syncfs makes a batch durable with one call, but it writes back every dirty
/// page of the filesystem, so a bulletin waits for whatever another process is writing (a
/// 4 GB copy: seconds). fdatasync of each file waits for that file and for the journal
/// commit that records it, and concurrent calls share one commit (ext4's jbd2 batches the
/// syncs of a transaction), so the calls are made in parallel or submitted together. On ext4
/// without a journal each fdatasync flushes the device cache, so a batch of a thousand small
/// files costs a thousand flushes where syncfs costs one: sync_mode::adaptive takes syncfs
/// while the page cache holds little besides the batch, range otherwise.

#include "receiver/storage/posix_io.hpp"
#include "receiver/storage/storage_config.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// One file of a batch to make durable.
struct durable_file {
  int fd = -1;                               ///< the open temp file
  const file_key* key = nullptr;             ///< for failure injection (posix_io)
  std::uint64_t bytes = 0;                   ///< the file's size (sync_mode::adaptive)
  int error = 0;                             ///< out: 0, or the errno of the call that failed
  storage_op failed_op = storage_op::fsync;  ///< out: that call, for the message
};

/// The machine's dirty page cache: Dirty + Writeback of /proc/meminfo, bytes (both counted
/// over every filesystem; tmpfs pages are in neither). @return nullopt when /proc/meminfo
/// cannot be read or lacks either line
std::optional<std::uint64_t> machine_dirty_bytes() noexcept;

/// Makes batches of temp files durable by one sync_mode. Used by the finalizer thread only;
/// not thread-safe.
class group_commit {
 public:
  /// @param io       the store's system calls (failure injection)
  /// @param cfg      sync (the method; sync_mode::none makes nothing durable),
  ///                 commit_threads (parallel calls of sync_mode::fdatasync, at least 1),
  ///                 adaptive_dirty_limit_bytes and dirty_probe (sync_mode::adaptive)
  /// @param temp_fd  the temp directory, for syncfs
  /// @param log      where a method that is unavailable (io_uring) or failed (syncfs) is
  ///                 reported, once
  group_commit(const posix_io& io, const storage_config& cfg, int temp_fd, spdlog::logger& log);
  ~group_commit();
  group_commit(const group_commit&) = delete;
  group_commit& operator=(const group_commit&) = delete;

  /// Makes the data of every file durable; sets `error` (and `failed_op`) of each file whose
  /// call failed. A failed syncfs does not say which file lost data: then each file is asked
  /// with fsync, which reports its own error. Never throws for an I/O error.
  void make_durable(std::span<durable_file> files);

  /// Makes the renames of the batch last made durable and the directories they created
  /// durable, when that batch was made durable by one syncfs: one more syncfs stands for
  /// the fsync of each directory. @return false when it did not (another method, a batch of
  /// one, or the syncfs failed): then the caller fsyncs each directory.
  bool make_dirs_durable_by_syncfs();

  /// The method in use: the configured one, or sync_mode::fdatasync once io_uring turned out
  /// to be unavailable.
  sync_mode mode() const noexcept { return m_mode; }

  /// Whether the last make_durable made its batch durable by one syncfs (sync_mode::syncfs,
  /// or sync_mode::adaptive's choice), until make_dirs_durable_by_syncfs.
  bool last_by_syncfs() const noexcept { return m_last_by_syncfs; }

 private:
  struct ring;  ///< the io_uring of sync_mode::uring

  void per_file(std::span<durable_file> files, storage_op op);
  /// One syncfs for the batch; fsync of each file if it fails. @return whether it succeeded
  bool by_syncfs(std::span<durable_file> files);
  /// sync_mode::adaptive: by_syncfs or by_range, by the dirty page cache.
  void adaptively(std::span<durable_file> files);
  void in_parallel(std::span<durable_file> files);
  void by_range(std::span<durable_file> files);
  void by_uring(std::span<durable_file> files);

  const posix_io& m_io;
  sync_mode m_mode;
  unsigned m_threads;
  std::uint64_t m_dirty_limit;
  std::function<std::optional<std::uint64_t>()> m_dirty_probe;
  int m_temp_fd;
  spdlog::logger& m_log;
  std::unique_ptr<ring> m_ring;
  bool m_last_by_syncfs = false;  ///< the last batch was made durable by one syncfs
};

}  // namespace mcdist::receiver
