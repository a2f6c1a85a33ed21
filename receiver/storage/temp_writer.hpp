#pragma once
/// @file
/// The writer thread of the storage path (docs/architecture.md "Data flow in one session": blocks
/// are written with pwrite into a preallocated file under a temp directory on the destination
/// filesystem, hashed incrementally as the in-order prefix grows). It takes jobs from the network
/// thread in order: begin a file (session directory, destination checks, quota and disk reserve,
/// create and preallocate the temp file), write a chunk of the pool, hand a complete file to
/// the finalizer, discard a file, close a session, pass a checkpoint on.
///
/// Temp layout: `temp_dir/<session id as 8 lower-case hex digits>/<file index>.part`. Session
/// directories are created with mkdirat and opened with openat(O_DIRECTORY | O_NOFOLLOW) from
/// temp_dir's descriptor, and temp files opened relative to that: a symlink planted at
/// temp_dir/<session hex> is refused.
///
/// Hashing: a chunk landing exactly at a file's hashed prefix is hashed from the buffer;
/// ranges written past the prefix are remembered (interval_set) and, once the gap before them
/// closes, hashed by reading them back between batches of jobs (catch-up); the finalizer reads
/// back only what is still unhashed. Bytes below the prefix are never rewritten, so the hash
/// always describes the file's content.
///
/// Creation: a file started afresh is created with O_EXCL and its final mode (at least the
/// owner's read and write), so when the umask leaves that mode whole and the writer wrote every
/// byte, the finalizer needs neither an fchmod nor an fstat of it (fin_file::mode_final,
/// fin_file::size_exact).
///
/// Descriptors: at most max_open_files temp files stay open (LRU); others are reopened.
///
/// Parity: a recover job decodes a FEC block on this thread (parity_store.hpp), after the
/// writes queued before it, and writes the recovered sources through write_range, so hashing,
/// finalize and checkpoints see them as received blocks.

#include "receiver/storage/chunk_pool.hpp"
#include "receiver/storage/finalizer.hpp"
#include "receiver/storage/interval_set.hpp"
#include "receiver/storage/store_context.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

namespace mcdist::receiver {

/// Start (or restart) a file: `replaces` is an earlier handle of the same key to drop first.
struct begin_job {
  std::uint64_t handle;
  std::uint64_t replaces;  ///< or 0
  file_key key;
  file_spec spec;
  bool resume;
};
/// Write a chunk of the pool (data and finalize entries in order), then release it.
struct chunk_job {
  chunk* c;
};
/// Hand a file to the finalizer (a finalize that found no chunk to ride in).
struct finalize_job {
  std::uint64_t handle;
  sha256_digest expected;
};
/// Forget a file and delete its temp file.
struct discard_job {
  std::uint64_t handle;
};
/// Drop every file of a session; pass the close on to the finalizer.
struct close_job {
  session_id session;
  bool remove_temp;
};
/// Pass a checkpoint on to the finalizer, behind every write queued before it.
struct checkpoint_job {
  session_id session;
  std::string blob;
};
/// Decode a FEC block (storage_port::recover; temp_writer_recover.cpp), behind every write
/// queued before it, and write its wanted sources like received blocks.
struct recover_job {
  session_id session;
  recovery_request request;
  /// Per source: the file's handle while the front knows it (begun, not delivered), or 0.
  std::vector<std::uint64_t> handles;
  /// The channel's destination tree, where a delivered (stored or held) source is read.
  std::filesystem::path dest_root;
};
/// One writer job, in queue order.
using writer_job = std::variant<begin_job, chunk_job, finalize_job, discard_job, close_job,
                                checkpoint_job, recover_job>;

/// The writer thread and its queue.
class temp_writer {
 public:
  /// @param ctx             shared store state; must outlive the writer
  /// @param pool            where chunks go back after writing
  /// @param fin             where complete files, checkpoints and closes go
  /// @param max_open_files  temp files kept open at most (LRU), >= 1
  temp_writer(store_context& ctx, chunk_pool& pool, finalizer& fin, std::size_t max_open_files);
  /// stop(), then closes the temp files still open (they stay on disk for resume).
  ~temp_writer();
  temp_writer(const temp_writer&) = delete;
  temp_writer& operator=(const temp_writer&) = delete;

  void start();
  /// Lets the thread finish every queued job, then joins it. Idempotent.
  void stop();
  /// Queues a job (network thread).
  void push(writer_job job);

 private:
  /// A file being written.
  struct wfile {
    file_key key;
    file_spec spec;
    std::string temp_path;
    int fd = -1;
    std::list<std::uint64_t>::iterator lru;
    sha256_hasher hasher;
    std::uint64_t prefix = 0;  ///< bytes [0, prefix) hashed
    interval_set written;      ///< written ranges past prefix, not hashed yet
    std::uint64_t wb_lo = UINT64_MAX, wb_hi = 0, wb_bytes = 0;  ///< dirty since last kick
    std::uint64_t preallocated = 0;    ///< bytes [0, preallocated) reserved with fallocate
    std::uint64_t preallocate_to = 0;  ///< where preallocation ends (0: none wanted)
    bool size_exact = false;           ///< created empty in this run (fin_file::size_exact)
    bool mode_final = false;           ///< created with spec.mode exactly (fin_file::mode_final)
  };

  void run();
  void do_job(begin_job& j);
  void do_job(chunk_job& j);
  void do_job(finalize_job& j);
  void do_job(discard_job& j);
  void do_job(close_job& j);
  void do_job(checkpoint_job& j);
  void do_job(recover_job& j);
  /// Reads available source `i` of a recover_job: from the file the writer holds, else from
  /// its temp file (being finalized), else from the destination, below `dest_root` (the job's
  /// destination root, opened by the first source that needs it). @return 0 or an errno value
  int read_source(const recover_job& j, std::size_t i, std::span<std::byte> out,
                  unique_fd& dest_root);
  /// Quota and disk reserve for a new file; false (reported) when it does not fit.
  bool admit(const begin_job& j);
  /// The disk reserve part of admit(): false (reported) when the temp filesystem's free space
  /// less the file's size would fall below the reserve.
  bool fits_reserve(const begin_job& j);
  void write_range(std::uint64_t handle, std::uint64_t offset, std::span<const std::byte> data);
  void kick_writeback(wfile& f, std::uint64_t offset, std::uint64_t end);
  /// Extends the file's preallocation past `end` (the end of data about to be written): the
  /// whole file at once, or a step (storage_config::preallocate_step_bytes) beyond
  /// max(end, what is preallocated). @return false when it failed (the file was failed)
  bool preallocate(std::uint64_t handle, wfile& f, std::uint64_t end);
  void hand_off(std::uint64_t handle, const sha256_digest& expected);
  void flush_handoffs();
  std::error_code ensure_open(std::uint64_t handle, wfile& f, bool create, bool truncate);
  void close_fd(wfile& f);
  void drop_file(std::uint64_t handle, bool unlink_temp);
  void unaccount(const wfile& f);
  /// Reports `ec` for the file, logs it, deletes its temp file and forgets it.
  void fail_file(std::uint64_t handle, std::error_code ec, std::string detail);
  /// Reports `ec` for a begin_job that never made a file.
  void fail_begin(const begin_job& j, std::error_code ec, std::string detail);
  /// Hashes closed gaps by reading back up to `budget` bytes. @return bytes hashed
  std::uint64_t do_catchup(std::uint64_t budget);
  std::pair<std::error_code, std::string> check_dest_root(const std::filesystem::path& root);

  store_context& m_ctx;
  chunk_pool& m_pool;
  finalizer& m_fin;
  const std::size_t m_max_open_files;
  /// Preallocation step in bytes; 0 = whole files at once (storage_config::preallocate_in_steps).
  std::uint64_t m_preallocate_step = 0;

  // queue
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<writer_job> m_queue;
  bool m_stop = false;
  bool m_waiting = false;
  std::thread m_thread;

  // writer thread state
  std::unordered_map<std::uint64_t, wfile> m_files;
  std::list<std::uint64_t> m_lru;  ///< handles with an open fd, most recent first
  std::size_t m_open_count = 0;
  std::unordered_set<std::uint64_t> m_catchup;  ///< handles whose prefix can grow by re-reading
  /// Session temp dirs opened (openat, O_NOFOLLOW): temp files are opened relative to these.
  std::unordered_map<std::uint32_t, unique_fd> m_session_dirs;
  /// Bytes of each session's files being written (begun, not handed off or dropped), for
  /// session_quota_bytes.
  std::unordered_map<std::uint32_t, std::uint64_t> m_session_bytes;
  /// The temp filesystem's space as fstatvfs last gave it, less the sizes admitted since: an
  /// fstatvfs per file was a system call per 10 kB product. Asked again when older than
  /// free_space_max_age or when a file would not fit by it, so space taken by others is seen
  /// within that age and no file is refused on a stale figure.
  struct free_space {
    bool known = false;
    std::chrono::steady_clock::time_point at;
    std::uint64_t avail = 0;  ///< bytes available to us, less what was admitted since
    std::uint64_t total = 0;  ///< bytes in the filesystem
  };
  static constexpr std::chrono::milliseconds free_space_max_age{10};
  free_space m_space;
  /// Destination roots checked (created, a directory, on temp_dir's filesystem).
  std::unordered_map<std::string, std::pair<std::error_code, std::string>> m_dest_checked;
  std::unique_ptr<std::byte[]> m_buffer;  ///< catch-up read-back
  std::vector<fin_job> m_handoffs;        ///< files for the finalizer, pushed after each job
};

}  // namespace mcdist::receiver
