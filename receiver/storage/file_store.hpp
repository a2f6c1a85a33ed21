#pragma once
/// @file
/// The receiver's storage path (docs/architecture.md "Data flow in one session"): blocks from the
/// network thread are copied into a bounded pool of coalescing chunks (chunk_pool) and written by a
/// writer thread with pwrite into preallocated temp files, hashed as the in-order prefix grows
/// (temp_writer); a finalizer thread hashes the tail, verifies the SHA-256, sets mode and
/// mtime, makes the data durable (group commit) and renames the file atomically into the
/// destination tree (finalizer). Nothing partial or corrupt ever appears in the destination.
/// A scanner thread answers query_held (held_scanner); resume state lives in checkpoint_file.
/// Every system call goes through posix_io, which carries the failure injection of the tests.
///
/// file_store is the thin front of those components: it keeps the network thread's view of
/// each file (active, failed, being finalized), implements the core's storage_port directly,
/// and brings results back to the network thread.
///
/// Threads: the network thread calls the public API (never blocks on disk: only a mutex and a
/// queue push); one writer thread; one finalizer thread; one scanner thread for query_held.
/// Every callback runs through the `post` function given at construction, i.e. on the network
/// thread, and never after the file_store has been destroyed.
///
/// Memory: the pool (buffer_pool_bytes) bounds data in flight; the network thread carves
/// chunks out of pool buffers so a flush() per receive batch wastes none of it. Measured with
/// the default 32 MiB pool: peak RSS 42 MiB receiving 1 GB
/// (tests/receiver/storage/file_store_bench).

#include "common/ids.hpp"
#include "common/sha256.hpp"
#include "receiver/core/storage_port.hpp"
#include "receiver/storage/checkpoint_file.hpp"
#include "receiver/storage/posix_io.hpp"
#include "receiver/storage/storage_config.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// Descriptors the store may hold at once with `max_open_files` temp files open: those, the
/// finalizer's (finalizer::fd_budget, and two batches of finalizer::batch_max) and a reserve
/// of 64 for sockets, logs and directories walked. RLIMIT_NOFILE must allow them.
std::size_t store_descriptors(std::size_t max_open_files) noexcept;

/// The storage path of the receiver daemon. See the file comment for threads, temp_writer.hpp
/// for the temp layout.
/// The public member functions other than get_stats and free_bytes must be called from
/// one thread (the network thread), which must also be the thread that runs posted closures
/// and destroys the file_store.
class file_store final : public storage_port {
 public:
  /// Counters; readable from any thread.
  struct stats {
    std::uint64_t bytes_written = 0;   ///< file data bytes pwritten
    std::uint64_t files_stored = 0;    ///< files delivered
    std::uint64_t files_failed = 0;    ///< failed store_results reported
    std::uint64_t pool_exhausted = 0;  ///< write() calls refused for want of a chunk
    /// Pool buffers (chunk_bytes each) taken: the one being filled plus those the writer has
    /// not finished with. At most buffer_pool_bytes / chunk_bytes.
    std::uint64_t chunks_in_flight = 0;
    std::uint64_t queue_depth = 0;   ///< jobs waiting for the writer thread
    std::uint64_t bytes_reread = 0;  ///< bytes read back from temp files for hashing
    // Parity repairs (write_parity, recover; docs/design-notes.md "Parity repairs").
    std::uint64_t parity_kept = 0;     ///< parity blocks kept
    std::uint64_t parity_refused = 0;  ///< refused: parity_memory_bytes full, or out of bounds
    std::uint64_t parity_bytes = 0;    ///< bytes of parity held now, overhead included
    std::uint64_t fec_blocks_recovered = 0;  ///< FEC blocks decoded
    std::uint64_t blocks_recovered = 0;      ///< source blocks decoded and written
    std::uint64_t decode_failures = 0;       ///< recover requests that failed
    /// Group commits (storage_config::sync): batches made durable, and those of them made
    /// durable by one syncfs (sync_mode::syncfs, or sync_mode::adaptive's choice).
    std::uint64_t commit_batches = 0;
    std::uint64_t commit_batches_syncfs = 0;
  };

  /// Outcome of storage_port::recover: the session, the FEC block, and empty or why not.
  using recovered_fn = std::function<void(session_id, std::uint32_t, std::error_code)>;

  /// Starts the writer, finalizer and scanner threads; creates temp_dir; raises the soft
  /// RLIMIT_NOFILE towards the hard limit if it is below what max_open_files needs.
  /// @param cfg        configuration; see storage_config
  /// @param post       hands a closure to the network thread (the shell: asio::post on its
  ///                   io_context; tests: a queue). Called from the store's threads.
  /// @param on_stored  receives every store_result, through `post`
  /// @param on_held    receives the answers of storage_port::query_held, through `post`
  /// @param on_recovered  receives the outcome of every storage_port::recover, through `post`
  /// @throws std::invalid_argument on a bad configuration, std::system_error if temp_dir
  ///         cannot be created or opened (start-up errors, for the operator)
  file_store(storage_config cfg, std::function<void(std::function<void()>)> post,
             std::function<void(store_result)> on_stored,
             std::function<void(session_id, std::vector<held_answer>)> on_held = {},
             recovered_fn on_recovered = {});
  /// Hands pending data to the writer, lets the threads finish every queued job (writes,
  /// finalizes, checkpoints), then joins them. Temp files of unfinished files stay (resume).
  /// Results produced during destruction are not delivered.
  ~file_store() override;
  file_store(const file_store&) = delete;
  file_store& operator=(const file_store&) = delete;

  // --- storage_port (network thread): the channel's tree is storage_config::dest_roots ---

  /// begin_file(key, spec, resume) with the spec of `entry` below dest_roots[channel]; a
  /// channel without a destination fails the file (std::errc::invalid_argument).
  void begin_file(file_key key, std::uint32_t channel, const manifest_entry& entry,
                  bool resume) override;
  /// query_held below dest_roots[channel], answered through on_held (nothing for a channel
  /// without a destination).
  void query_held(session_id session, std::uint32_t channel,
                  std::vector<held_query> queries) override;
  /// A channel added at a reload: its index is the next one in dest_roots (network thread;
  /// only that thread reads dest_roots). Existing indexes keep their roots, so sessions under
  /// way keep their destination.
  void add_dest_root(std::filesystem::path root);

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
  bool write(file_key key, std::uint64_t offset, std::span<const std::byte> data) override;

  /// True unless storage_config::parity_memory_bytes is 0.
  bool decodes_parity() const override;
  /// Keeps a copy of a parity block in memory, charged to parity_memory_bytes (parity_store).
  /// @return false when it does not fit (or is out of bounds, or a duplicate): the FEC block's
  ///         other parity is then forgotten too, since the engine NAKs its blocks one by one
  bool write_parity(session_id session, std::uint32_t fec_block, std::uint32_t index,
                    std::span<const std::byte> data) override;
  /// Decodes a FEC block on the writer thread, after every write queued before this call:
  /// reads its available sources (temp file, or destination once delivered), recovers the
  /// missing ones with the parity kept, writes the wanted ones like received blocks and frees
  /// the parity. The outcome arrives through on_recovered (ec: errc::invalid_field when the
  /// parity or sources do not suffice, an errno code when a read failed).
  void recover(session_id session, recovery_request request) override;

  /// Hands the partially filled chunk to the writer. Call after each receive batch.
  void flush();

  /// All bytes of the file have been written: the finalizer verifies the SHA-256 against
  /// `expected`, sets mode and mtime, makes it durable (sync_mode) and renames it into
  /// dest_root/relative_path, creating parent directories. The outcome arrives through
  /// on_stored. No-op for an unknown or failed file (the failure was or will be reported).
  /// The finalize request rides in the current chunk: call flush() to start it now.
  void finalize(file_key key, const sha256_digest& expected) override;

  /// Delivers a file another component wrote whole under temp_dir (the catch-up client's
  /// download, receiver/io/catch_up_client.hpp) exactly as a received one: the finalizer
  /// re-reads it and checks its SHA-256 against `expected`, sets mode and mtime, records the
  /// digest xattr, makes it durable in the group commit, calls before_renames (the delivery
  /// journal's record), renames it to dest_roots[channel]/spec.relative_path with the same
  /// directory walk (parents created, no link below the root followed) and syncs the
  /// directory. Unlike a session's file it is never renamed over a destination file whose mtime
  /// is not older than spec.mtime_ns (fails with errc::stale; fin_file::keep_newer). The temp
  /// file is removed when it fails. spec.dest_root is taken from dest_roots[channel].
  /// @param key   names the file in its result and to the hooks (session 0 and a number of
  ///              the caller's: nothing of a session)
  /// @param done  receives the result through `post` (not on_stored)
  void deliver_file(file_key key, std::uint32_t channel, file_spec spec, std::string temp_path,
                    const sha256_digest& expected, std::function<void(store_result)> done);

  /// Forgets a file and deletes its temp file; no store_result follows. No-op for an unknown
  /// file or one already being finalized (its result still comes).
  void discard_file(file_key key) override;

  /// Drops every file of a session (no store_results for them, except those already being
  /// finalized, which complete first) and the parity kept for it (recover calls still queued
  /// report a failure, for a session the engine has forgotten).
  /// @param remove_temp  also delete temp_dir/<session hex>/ with its .part files and state
  void close_session(session_id session, bool remove_temp) override;

  /// Saves `blob` (the core's resume state) as temp_dir/<session hex>/state: write state.tmp,
  /// fsync, rename, fsync the directory; in sync modes other than none, every write queued
  /// before this call is made durable first (syncfs), so the state never claims data a crash
  /// lost. Failures are logged (the previous state stays).
  void checkpoint(session_id session, std::string blob) override;

  /// Asynchronously checks which files are already held at dest_root: a regular file (no
  /// symlink anywhere below dest_root) with the query's size and mtime, whose digest comes
  /// from its user.mcdist.sha256 xattr when that records the same size and mtime, else from
  /// hashing it if its size <= hash_held_max_bytes. Runs on the scanner thread; `done`
  /// receives the answers (only for files held) through `post`.
  void query_held(std::vector<held_query> queries, std::filesystem::path dest_root,
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
