#pragma once
/// @file
/// The receiver's storage path (DESIGN.md "Receiver storage"): blocks from the network thread
/// are copied into a bounded pool of coalescing chunks and written by a writer thread with
/// pwrite into preallocated temp files, hashed as the in-order prefix grows; a finalizer thread
/// hashes the tail, verifies the SHA-256, sets mode and mtime, makes the data durable (group
/// commit) and renames the file atomically into the destination tree. Nothing partial or
/// corrupt ever appears in the destination.
///
/// Threads: the network thread calls the public API (never blocks on disk: only a mutex and a
/// queue push); one writer thread; one finalizer thread; one scanner thread for query_held.
/// Every callback runs through the `post` function given at construction, i.e. on the network
/// thread, and never after the file_store has been destroyed.
///
/// Temp layout: `temp_dir/<session id as 8 lower-case hex digits>/<file index>.part` and the
/// session's checkpoint `temp_dir/<session hex>/state`. Session directories are created with
/// mkdirat and opened with openat(O_DIRECTORY | O_NOFOLLOW) from temp_dir's descriptor, and
/// temp files opened relative to that: a symlink planted at temp_dir/<session hex> is refused.
///
/// Hashing (DESIGN.md): a chunk landing exactly at a file's hashed prefix is hashed from the
/// buffer; ranges written past the prefix are remembered (interval_set) and, once the gap
/// before them closes, hashed by reading them back in the writer's spare time; the finalizer
/// reads back only what is still unhashed. Bytes below the prefix are never rewritten, so the
/// hash always describes the file's content.
///
/// Memory: the pool (buffer_pool_bytes) bounds data in flight; the network thread carves
/// chunks out of pool buffers so a flush() per receive batch wastes none of it. Measured with
/// the default 32 MiB pool: peak RSS 42 MiB receiving 1 GB (tests/receiver/io/file_store_bench).

#include "common/ids.hpp"
#include "common/sha256.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// How finalized data is made durable before it is renamed into the destination.
enum class sync_mode : std::uint8_t {
  /// Group commit: the finalizer takes every finalize request waiting (up to
  /// file_store::finalize_batch_max), verifies them, makes them durable together (one
  /// syncfs() on the temp filesystem when more than one file, fsync for one), renames each and
  /// fsyncs each distinct destination directory once. Measured here: 1000 small files cost
  /// ~40 ms with one syncfs against ~450 ms with an fsync each.
  batch,
  /// fsync each file before its rename, then its directory.
  file,
  /// No fsync at all: for tmpfs and tests. A crash may leave renamed files with lost data.
  none,
};

/// Name of a sync mode: "batch", "file" or "none".
std::string_view to_string(sync_mode m) noexcept;

/// The system calls file_store makes on files and directories, named for failure injection.
enum class storage_op : std::uint8_t {
  open,       ///< open/openat of a temp file, destination directory or checkpoint file
  fallocate,  ///< preallocation of a temp file at begin_file
  pwrite,     ///< a write of file data or of a checkpoint
  pread,      ///< a read-back of written data for hashing (prefix catch-up, finalize tail)
  fsync,      ///< fsync of one file (sync_mode::file, a batch of one, syncfs fallback, state)
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

/// Identifies one file of one session.
struct file_key {
  session_id session;
  file_index file;

  friend bool operator==(const file_key&, const file_key&) = default;
};

/// Failure injection (after Boost.Beast's test::fail_count): called on the writer, finalizer
/// or scanner thread just before each system call named by `op`, with the file it concerns
/// (nullptr for checkpoints, directories and other non-file operations). Return 0 to let the
/// call run, or an errno value to make it fail with that error without running it. It may
/// block (tests use that to hold the writer). Must be thread-safe.
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

struct pending_rename;

/// Configuration. Checked by the file_store constructor, which throws std::invalid_argument
/// on nonsense (operator-facing message).
struct storage_config {
  /// Directory for temp files and checkpoints; created if missing. Must be on the same
  /// filesystem as every destination tree so the final rename is atomic: begin_file fails a
  /// file whose dest_root is on another device, with a message saying so.
  std::filesystem::path temp_dir;
  /// Bytes of chunk buffers for data in flight to disk (32 MiB: ~50 ms at 5 Gbit/s, enough to
  /// ride out a page-cache writeback stall). Reserved at construction, touched lazily. When all
  /// are in flight write() returns false.
  std::size_t buffer_pool_bytes = 32u << 20;
  /// Size of one coalescing chunk, bytes (256 KiB: 187 blocks of 1400 bytes per pwrite, big
  /// enough that syscall cost is noise, small enough that 128 of them fit the pool).
  std::size_t chunk_bytes = 256u << 10;
  /// Most temp files the writer keeps open (LRU); others are reopened on demand.
  std::size_t max_open_files = 1024;
  /// Files at least this big (bytes) are fallocate()d at begin_file, so a full disk fails the
  /// file at once instead of midway (1 MiB: below that the allocation is cheap either way).
  std::uint64_t preallocate_min_bytes = 1u << 20;
  /// Start asynchronous writeback (sync_file_range SYNC_FILE_RANGE_WRITE) every this many
  /// bytes written to a file, so the fsync at finalize is short (8 MiB ~ 15 ms of disk at
  /// 500 MB/s). Not done in sync_mode::none. 0 disables.
  std::uint64_t writeback_bytes = 8u << 20;
  sync_mode sync = sync_mode::batch;
  /// Store "user.mcdist.sha256" = "<64 hex> <size> <mtime_ns>" on delivered files, so
  /// query_held need not hash them again.
  bool record_digest_xattr = true;
  /// query_held hashes a destination file without a usable xattr only up to this size, bytes
  /// (64 MiB ~ 50 ms of SHA-256 here).
  std::uint64_t hash_held_max_bytes = 64u << 20;
  /// Free space kept on the temp filesystem: a new file is started only if, after its size,
  /// at least min(disk_reserve_bytes, disk_reserve_percent % of the filesystem) stays free
  /// (statvfs f_bavail); otherwise it fails with errc::disk_reserve. 1 GiB or 5 %: room for
  /// the system's logs and for files already being written (which are not preallocated below
  /// preallocate_min_bytes), while a small filesystem is not reserved entirely. Either 0
  /// turns the check off (then a full disk fails the file at fallocate or pwrite, ENOSPC).
  std::uint64_t disk_reserve_bytes = std::uint64_t{1} << 30;
  double disk_reserve_percent = 5;
  /// Most bytes of one session's files being written at once (begun, not yet handed to the
  /// finalizer or dropped); a file that would exceed it fails with errc::quota. 0: no quota.
  /// 256 GiB: far above a day's products, it stops one announced session from claiming a
  /// whole filesystem by itself.
  std::uint64_t session_quota_bytes = std::uint64_t{256} << 30;
  /// Where warnings and errors go; null: spdlog's default logger.
  std::shared_ptr<spdlog::logger> log;
  /// Tests only: failure injection; empty in production.
  fault_hook fault;
  /// Called on the finalizer thread once per finalize batch with the files that passed
  /// verification and whose data is durable, just before any of them is renamed into place
  /// (mcdistd journals them here, so a crash between rename and report cannot lose a
  /// delivery: receiver/io/delivery_journal.hpp). If it throws, none of them is renamed: each
  /// fails with std::errc::io_error and the exception's message. Empty: not called.
  std::function<void(std::span<const pending_rename>)> before_renames;
};

/// What to deliver, from the manifest.
struct file_spec {
  /// Destination tree root; created (mkdir -p) if missing. Symlinks in it are followed (the
  /// operator configured it); symlinks below it are not.
  std::filesystem::path dest_root;
  /// '/'-separated path below dest_root. Re-checked with check_relative_path; refused if bad.
  std::string relative_path;
  /// File size, bytes.
  std::uint64_t size = 0;
  /// Modification time set on the delivered file, ns since the Unix epoch.
  std::int64_t mtime_ns = 0;
  /// Permission bits; applied masked with 07777 & ~S_ISUID & ~S_ISGID.
  std::uint32_t mode = 0644;
};

/// A verified file about to be renamed into its destination (storage_config::before_renames).
struct pending_rename {
  file_key key;
  const file_spec* spec = nullptr;  ///< valid during the call only
  sha256_digest digest{};           ///< what the file hashed to (= the manifest's digest)
};

/// Outcome of one begun file: exactly one is reported per begin_file, unless the file is
/// discarded, its session closed before finalize, or the file_store destroyed first.
struct store_result {
  file_key key;
  /// Empty: delivered. Otherwise why not: errc::digest_mismatch, errc::path_* (refused path),
  /// errc::disk_reserve, errc::quota (storage_config budgets), too_many_symbolic_link_levels
  /// (temp_dir/<session> is a symlink: refused, not followed),
  /// std::errc::no_space_on_device, io_error, permission_denied, is_a_directory,
  /// not_a_directory, too_many_symbolic_link_levels (symlink in the path),
  /// cross_device_link (temp_dir on another filesystem), ...
  std::error_code ec;
  /// Operator-facing: which path, which system call, what to do. Empty when delivered.
  std::string detail;
  /// What the received data hashed to (all zero if the file failed before finalize).
  sha256_digest digest{};
  /// Delivered: the file size. Failed: how far the data was hashed or found (a hint for logs).
  std::uint64_t bytes = 0;
};

/// One manifest entry to look for in the destination tree. (Not named held_query: the core's
/// receiver_engine.hpp defines mcdist::receiver::held_query with the same fields.)
struct held_file_query {
  file_index file;
  std::string relative_path;
  std::uint64_t size = 0;    ///< bytes
  std::int64_t mtime_ns = 0; ///< ns since the Unix epoch
};

/// A file already held: same size and mtime at dest_root/relative_path, and this digest.
struct held_answer {
  file_index file;
  sha256_digest digest{};
};

/// The storage path of the receiver daemon. See the file comment for threads and layout.
/// The public member functions other than get_stats and load_checkpoints must be called from
/// one thread (the network thread), which must also be the thread that runs posted closures
/// and destroys the file_store.
class file_store {
 public:
  /// Most finalize requests verified and made durable together in sync_mode::batch (256:
  /// amortises the ~1 ms fixed cost of a syncfs to ~4 us per file while bounding the open
  /// descriptors the finalizer holds and the delay before the first file of a batch is
  /// reported).
  static constexpr std::size_t finalize_batch_max = 256;

  /// Counters; readable from any thread.
  struct stats {
    std::uint64_t bytes_written = 0;     ///< file data bytes pwritten
    std::uint64_t files_stored = 0;      ///< files delivered
    std::uint64_t files_failed = 0;      ///< failed store_results reported
    std::uint64_t pool_exhausted = 0;    ///< write() calls refused for want of a chunk
    /// Pool buffers (chunk_bytes each) taken: the one being filled plus those the writer has
    /// not finished with. At most buffer_pool_bytes / chunk_bytes.
    std::uint64_t chunks_in_flight = 0;
    std::uint64_t queue_depth = 0;       ///< jobs waiting for the writer thread
    std::uint64_t bytes_reread = 0;      ///< bytes read back from temp files for hashing
  };

  /// Starts the writer, finalizer and scanner threads; creates temp_dir; raises the soft
  /// RLIMIT_NOFILE towards the hard limit if it is below what max_open_files needs.
  /// @param cfg        configuration; see storage_config
  /// @param post       hands a closure to the network thread (the shell: asio::post on its
  ///                   io_context; tests: a queue). Called from the store's threads.
  /// @param on_stored  receives every store_result, through `post`
  /// @throws std::invalid_argument on a bad configuration, std::system_error if temp_dir
  ///         cannot be created or opened (start-up errors, for the operator)
  file_store(storage_config cfg, std::function<void(std::function<void()>)> post,
             std::function<void(store_result)> on_stored);
  /// Hands pending data to the writer, lets the threads finish every queued job (writes,
  /// finalizes, checkpoints), then joins them. Temp files of unfinished files stay (resume).
  /// Results produced during destruction are not delivered.
  ~file_store();
  file_store(const file_store&) = delete;
  file_store& operator=(const file_store&) = delete;

  // --- network-thread API: never blocks on disk ---

  /// Starts (or restarts) a file: the writer creates its temp file (truncated unless `resume`)
  /// and preallocates it if spec.size >= preallocate_min_bytes. Failures (bad path, ENOSPC,
  /// temp_dir on another filesystem than dest_root, ...) arrive as a store_result. Calling it
  /// for a file that failed or is active restarts it; for a file whose finalize has not been
  /// reported yet, the restart is deferred until it has.
  /// @param resume  the temp file may already hold data from an earlier run: keep it
  void begin_file(file_key key, file_spec spec, bool resume = false);

  /// Copies `data` for bytes [offset, offset + data.size()) of a begun file into the current
  /// chunk. Bytes already hashed are not rewritten (a duplicate block cannot change them).
  /// @return true when accepted; false when the file is unknown, failed, being finalized, the
  ///         range lies past spec.size, or the buffer pool is exhausted (stats.pool_exhausted;
  ///         the caller drops the block and it will be asked for again).
  bool write(file_key key, std::uint64_t offset, std::span<const std::byte> data);

  /// Hands the partially filled chunk to the writer. Call after each receive batch.
  void flush();

  /// All bytes of the file have been written: the finalizer verifies the SHA-256 against
  /// `expected`, sets mode and mtime, makes it durable (sync_mode) and renames it into
  /// dest_root/relative_path, creating parent directories. The outcome arrives through
  /// on_stored. No-op for an unknown or failed file (the failure was or will be reported).
  /// The finalize request rides in the current chunk: call flush() to start it now.
  void finalize(file_key key, const sha256_digest& expected);

  /// Forgets a file and deletes its temp file; no store_result follows. No-op for an unknown
  /// file or one already being finalized (its result still comes).
  void discard_file(file_key key);

  /// Drops every file of a session (no store_results for them, except those already being
  /// finalized, which complete first).
  /// @param remove_temp  also delete temp_dir/<session hex>/ with its .part files and state
  void close_session(session_id session, bool remove_temp);

  /// Saves `blob` (the core's resume state) as temp_dir/<session hex>/state: write state.tmp,
  /// fsync, rename, fsync the directory; in sync modes other than none, every write queued
  /// before this call is made durable first (syncfs), so the state never claims data a crash
  /// lost. Failures are logged (the previous state stays).
  void checkpoint(session_id session, std::string blob);

  /// Every saved session state under `temp_dir` (start-up, before constructing the store).
  /// Unreadable or oversized states are skipped with a log line.
  /// @return (session, blob) pairs in no particular order
  static std::vector<std::pair<session_id, std::string>> load_checkpoints(
      const std::filesystem::path& temp_dir);

  /// Removes every session temp directory (`temp_dir/<8 hex digits>`) whose session is not in
  /// `keep` (start-up, after restoring checkpoints): temp files of sessions that left no
  /// usable state would otherwise stay forever. Symlinks of that name are removed, not
  /// followed; other names are left alone. Errors are logged.
  /// @return how many directories were removed
  static std::size_t sweep_temp(const std::filesystem::path& temp_dir,
                                const std::vector<session_id>& keep, spdlog::logger& log);

  /// Asynchronously checks which files are already held at dest_root: a regular file (no
  /// symlink anywhere below dest_root) with the query's size and mtime, whose digest comes
  /// from its user.mcdist.sha256 xattr when that records the same size and mtime, else from
  /// hashing it if its size <= hash_held_max_bytes. Runs on the scanner thread; `done`
  /// receives the answers (only for files held) through `post`.
  void query_held(session_id session, std::vector<held_file_query> queries,
                  std::filesystem::path dest_root,
                  std::function<void(std::vector<held_answer>)> done);

  /// A snapshot of the counters. Any thread.
  stats get_stats() const;

  /// Bytes of the buffer pool not holding data now. Any thread. Lets the shell stop reading its
  /// sockets while the writer catches up, so datagrams wait in the kernel's socket buffer
  /// instead of being dropped and fetched again.
  std::size_t free_bytes() const noexcept;

  /// The temp file path of a file: temp_dir/<session hex>/<file index>.part.
  static std::filesystem::path temp_path(const std::filesystem::path& temp_dir, file_key key);

  struct impl;

 private:
  std::shared_ptr<impl> m_impl;
};

}  // namespace mcdist::receiver

template <>
struct std::hash<mcdist::receiver::file_key> {
  std::size_t operator()(const mcdist::receiver::file_key& k) const noexcept {
    // Fibonacci hashing of the packed pair: session ids are random, file indexes dense.
    const std::uint64_t packed = (std::uint64_t{k.session.value} << 32) | k.file.value;
    return static_cast<std::size_t>(packed * 0x9E3779B97F4A7C15ull);
  }
};
