#pragma once
/// @file
/// The finalizer thread of the storage path (docs/architecture.md "Data flow in one session":
/// verify SHA-256, fsync, set mtime and mode, rename atomically). It takes finalize requests in
/// batches (group commit; a batch gathers for storage_config::finalize_linger unless it fills
/// sooner) and, for each batch, in five steps:
///
///   1. verify    hash what the writer has not, compare with the manifest; mode, mtime, xattr
///   2. dirs      open each destination directory from dest_root without following symlinks,
///                creating missing ones (mkdir -p)
///   3. durable   the data of every file of the batch, by the sync_mode's method
///                (group_commit.hpp: syncfs, parallel fdatasync, ...); nothing in none
///   -  before_renames: storage_config::before_renames sees the files about to be renamed
///   4. rename    renameat each file into place (atomic, replaces an existing file)
///   5. dir sync  fsync each distinct destination directory once
///   -  after_renames: storage_config::after_renames hears which of the files before_renames
///      saw did not end in place
///
/// then reports every file of the batch through store_context::post_results. Checkpoint saves
/// (checkpoint_file) and session closes are queued in the same order as the files, so a
/// checkpoint never lands before the data queued ahead of it.

#include "receiver/storage/group_commit.hpp"
#include "receiver/storage/store_context.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

namespace mcdist::receiver {

/// Writer to finalizer: one file whose data is all written, to verify and deliver.
struct fin_file {
  std::uint64_t handle = 0;
  file_key key;
  file_spec spec;
  sha256_digest expected{};
  std::string temp_path;
  int fd = -1;              ///< open temp file from the writer, or -1: reopen
  bool fd_counted = false;  ///< fd counts against finalizer::fd_budget
  sha256_hasher hasher;     ///< state after `prefix` bytes
  std::uint64_t prefix = 0;
  /// The writer created the temp file empty in this run and wrote every byte through it
  /// (prefix == spec.size): its length is spec.size, so verify needs no fstat.
  bool size_exact = false;
  /// The temp file was created with spec.mode exactly (umask included): no fchmod.
  bool mode_final = false;
  /// Never renamed over a destination file whose mtime is not older than spec.mtime_ns
  /// (file_store::deliver_file: an older version fetched by catch-up must not replace a newer
  /// one that a session delivered meanwhile). Checked just before the rename, on this thread,
  /// where every delivery is renamed: nothing can come in between.
  bool keep_newer = false;
};
/// Save a session's checkpoint (checkpoint_file::save).
struct fin_checkpoint {
  session_id session;
  std::string blob;
};
/// A session is closed; remove its temp directory if asked.
struct fin_close {
  session_id session;
  bool remove_temp;
};
/// One finalizer job, in queue order.
using fin_job = std::variant<fin_file, fin_checkpoint, fin_close>;

/// Group commit's batching rule: takes from the front of `queue` either the run of fin_file
/// jobs there, at most `cap` of them, into `batch` (returns nullopt), or the one other job at
/// the front (returned; `batch` untouched). Files never jump over a checkpoint or close queued
/// before them, nor the other way round. Pure; the caller holds the queue's lock.
std::optional<fin_job> take_finalizer_work(std::deque<fin_job>& queue, std::size_t cap,
                                           std::vector<fin_file>& batch);

/// The finalizer thread and its queue.
class finalizer {
 public:
  /// Most finalize requests verified and made durable together in sync_mode::batch (256:
  /// amortises the ~1 ms fixed cost of a syncfs to ~4 us per file while bounding the open
  /// descriptors the finalizer holds and the delay before the first file of a batch is
  /// reported).
  static constexpr std::size_t batch_max = 256;
  /// Temp file descriptors the writer may hand to the finalizer's queue; past that it closes
  /// them and the finalizer reopens (a descriptor leak costs EMFILE). Small files arrive faster
  /// than they are finalized on a loaded host, and the queue then holds a thousand or more:
  /// each closed and reopened cost a close and an open (several microseconds each) per file.
  static constexpr std::size_t fd_budget = 1024;

  /// @param ctx  shared store state; must outlive the finalizer
  explicit finalizer(store_context& ctx);
  /// Finishes every queued job, then joins the thread.
  ~finalizer();
  finalizer(const finalizer&) = delete;
  finalizer& operator=(const finalizer&) = delete;

  /// Starts the thread.
  void start();
  /// Lets the thread finish every queued job, then joins it. Idempotent.
  void stop();

  /// Queues `jobs` in order and clears the vector. Any thread.
  void push(std::vector<fin_job>& jobs);
  /// Queues one job. Any thread.
  void push(fin_job job);
  /// Queues a session close; with `remove_temp` the session counts as closing until its temp
  /// directory is gone (wait_closed). Any thread.
  void push_close(session_id session, bool remove_temp);
  /// Blocks until no removal of `session`'s temp directory is pending (the writer, before
  /// creating a file of a reused session id).
  void wait_closed(session_id session);

  /// Whether the writer may hand one more open descriptor over (then it calls take_fd()).
  bool fd_available() const noexcept { return m_fds.load(std::memory_order_relaxed) < fd_budget; }
  /// Counts one descriptor handed over with a fin_file (fd_counted).
  void take_fd() noexcept { m_fds.fetch_add(1, std::memory_order_relaxed); }

 private:
  struct work;  ///< one file of a batch
  struct dir_cache;

  void run();
  /// After a push, under m_mutex: opens the batch's linger if none is open. @return whether
  /// to wake the thread.
  bool note_queued();
  void finalize_batch(std::vector<fin_file>& batch);
  void verify(work& w, dir_cache& dirs);
  void open_dest_dir(work& w, dir_cache& dirs);
  void make_durable(std::vector<work>& batch);
  void before_renames(std::vector<work>& batch);
  void after_renames(std::vector<work>& batch);
  void rename_all(std::vector<work>& batch, dir_cache& dirs);
  void sync_dirs(std::vector<work>& batch, dir_cache& dirs);
  void report(std::vector<work>& batch);
  void close_session(const fin_close& j);

  store_context& m_ctx;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::condition_variable m_closed_cv;  ///< a session's temp dir removal finished
  std::deque<fin_job> m_queue;
  bool m_stop = false;
  /// The thread waits for the batch to gather (storage_config::finalize_linger): a push wakes
  /// it only when the batch is full.
  bool m_lingering = false;
  /// When the first job after the last batch taken was queued: the batch's linger runs from it.
  std::optional<std::chrono::steady_clock::time_point> m_batch_opened;
  std::unordered_map<std::uint32_t, int> m_closing;  ///< sessions whose temp dir is going
  std::atomic<std::size_t> m_fds{0};
  std::atomic<bool> m_xattr_warned{false};
  std::unique_ptr<std::byte[]> m_buffer;
  std::unique_ptr<group_commit> m_commit;  ///< step 3 (made by start()); finalizer thread only
  std::thread m_thread;
};

}  // namespace mcdist::receiver
