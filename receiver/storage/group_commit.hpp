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
/// syncs of a transaction), so the calls are made in parallel or submitted together.

#include "receiver/storage/posix_io.hpp"
#include "receiver/storage/storage_config.hpp"

#include <memory>
#include <span>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// One file of a batch to make durable.
struct durable_file {
  int fd = -1;                               ///< the open temp file
  const file_key* key = nullptr;             ///< for failure injection (posix_io)
  int error = 0;                             ///< out: 0, or the errno of the call that failed
  storage_op failed_op = storage_op::fsync;  ///< out: that call, for the message
};

/// Makes batches of temp files durable by one sync_mode. Used by the finalizer thread only;
/// not thread-safe.
class group_commit {
 public:
  /// @param io       the store's system calls (failure injection)
  /// @param mode     the method; sync_mode::none makes nothing durable
  /// @param threads  parallel calls of sync_mode::fdatasync (at least 1)
  /// @param temp_fd  the temp directory, for syncfs
  /// @param log      where a method that is unavailable (io_uring) or failed (syncfs) is
  ///                 reported, once
  group_commit(const posix_io& io, sync_mode mode, unsigned threads, int temp_fd,
               spdlog::logger& log);
  ~group_commit();
  group_commit(const group_commit&) = delete;
  group_commit& operator=(const group_commit&) = delete;

  /// Makes the data of every file durable; sets `error` (and `failed_op`) of each file whose
  /// call failed. A failed syncfs does not say which file lost data: then each file is asked
  /// with fsync, which reports its own error. Never throws for an I/O error.
  void make_durable(std::span<durable_file> files);

  /// The method in use: the configured one, or sync_mode::fdatasync once io_uring turned out
  /// to be unavailable.
  sync_mode mode() const noexcept { return m_mode; }

 private:
  struct ring;  ///< the io_uring of sync_mode::uring

  void per_file(std::span<durable_file> files, storage_op op);
  void in_parallel(std::span<durable_file> files);
  void by_range(std::span<durable_file> files);
  void by_uring(std::span<durable_file> files);

  const posix_io& m_io;
  sync_mode m_mode;
  unsigned m_threads;
  int m_temp_fd;
  spdlog::logger& m_log;
  std::unique_ptr<ring> m_ring;
};

}  // namespace mcdist::receiver
