#include "receiver/io/file_store.hpp"

#include "common/digest_xattr.hpp"

#include "common/error.hpp"
#include "common/path_check.hpp"
#include "receiver/io/storage_interval_set.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <variant>

namespace mcdist::receiver {

namespace {

/// Read-back size when hashing written data (prefix catch-up, finalize tail, query_held):
/// 1 MiB amortises the syscall to nothing and is small next to the chunk pool.
constexpr std::size_t reread_buffer_bytes = 1u << 20;
/// Most bytes the writer re-reads for prefix catch-up between two batches of jobs while data
/// is waiting (1 MiB ~ 0.7 ms of SHA-256 here): writes never wait long behind a closed gap.
constexpr std::uint64_t catchup_slice_bytes = 1u << 20;
/// Temp file descriptors the writer may hand to the finalizer's queue; past that it closes
/// them and the finalizer reopens (an open costs microseconds; a descriptor leak costs EMFILE).
constexpr std::size_t finalize_fd_budget = 256;
/// Descriptors left for everything else in the process: sockets, logs, directories walked.
constexpr std::uint64_t fd_reserve = 64;
/// Largest checkpoint load_checkpoints accepts: a bitmap of every 1400-byte block of 2 TiB
/// is 196 MB; anything bigger is damage, not state.
constexpr std::uintmax_t max_checkpoint_bytes = 256u << 20;
/// Chunk entries reserved per chunk up front (a chunk of in-order blocks needs one; random
/// blocks of 1400 bytes need ~190 and the vector grows once, then keeps its capacity).
constexpr std::size_t chunk_entries_reserve = 64;
/// Largest chunk accepted: entry lengths are 32-bit.
constexpr std::size_t max_chunk_bytes = 1u << 30;

std::error_code errno_code(int e) { return {e, std::generic_category()}; }

std::string session_hex(session_id s) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", s.value);
  return buf;
}

/// Owns a file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : m_fd(fd) {}
  unique_fd(unique_fd&& o) noexcept : m_fd(std::exchange(o.m_fd, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.m_fd, -1));
    return *this;
  }
  ~unique_fd() { reset(); }
  void reset(int fd = -1) noexcept {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = fd;
  }
  int get() const noexcept { return m_fd; }
  int release() noexcept { return std::exchange(m_fd, -1); }
  explicit operator bool() const noexcept { return m_fd >= 0; }

 private:
  int m_fd = -1;
};

/// Splits a checked relative path into its components.
std::vector<std::string_view> split_path(std::string_view p) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start <= p.size()) {
    const std::size_t slash = p.find('/', start);
    const std::size_t end = slash == std::string_view::npos ? p.size() : slash;
    out.push_back(p.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

std::int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

struct timespec timespec_of_ns(std::int64_t ns) {
  std::int64_t sec = ns / 1'000'000'000;
  std::int64_t rem = ns % 1'000'000'000;
  if (rem < 0) {  // floor division for times before 1970
    rem += 1'000'000'000;
    --sec;
  }
  struct timespec ts {};
  ts.tv_sec = static_cast<time_t>(sec);
  ts.tv_nsec = static_cast<long>(rem);
  return ts;
}

/// A chunk of the buffer pool: data bytes plus the ordered operations that use them.
struct chunk_entry {
  enum class kind : std::uint8_t { data, finalize };
  kind what = kind::data;
  std::uint64_t handle = 0;
  std::uint64_t offset = 0;  ///< file offset (data)
  std::uint32_t pos = 0;     ///< data: position in the chunk buffer; finalize: digest index
  std::uint32_t len = 0;     ///< data bytes
};

/// One chunk_bytes buffer of the pool. The network thread carves consecutive chunks out of
/// it (a flush() ends a chunk, not the slab), so frequent flushes waste no memory; the slab
/// returns to the pool when the network thread has moved on and the writer has handled every
/// chunk cut from it.
struct slab {
  std::byte* data = nullptr;
  int refs = 0;  ///< chunks in flight + 1 while the network thread fills it; under the pool mutex
};

/// A run of bytes of one slab handed to the writer, with the ordered operations using them.
struct chunk {
  slab* s = nullptr;
  std::vector<chunk_entry> entries;
  std::vector<sha256_digest> digests;  ///< expected digests of finalize entries
  void clear() {
    s = nullptr;
    entries.clear();
    digests.clear();
  }
};

// --- writer jobs ---
struct begin_job {
  std::uint64_t handle;
  std::uint64_t replaces;  ///< earlier handle of the same key to drop first, or 0
  file_key key;
  file_spec spec;
  bool resume;
};
struct chunk_job {
  chunk* c;
};
struct finalize_job {
  std::uint64_t handle;
  sha256_digest expected;
};
struct discard_job {
  std::uint64_t handle;
};
struct close_job {
  session_id session;
  bool remove_temp;
};
struct checkpoint_job {
  session_id session;
  std::string blob;
};
using writer_job =
    std::variant<begin_job, chunk_job, finalize_job, discard_job, close_job, checkpoint_job>;

// --- finalizer jobs ---
struct fin_file {
  std::uint64_t handle = 0;
  file_key key;
  file_spec spec;
  sha256_digest expected{};
  std::string temp_path;
  int fd = -1;              ///< open temp file from the writer, or -1: reopen
  bool fd_counted = false;  ///< fd counts against finalize_fd_budget
  sha256_hasher hasher;     ///< state after `prefix` bytes
  std::uint64_t prefix = 0;
};
struct fin_checkpoint {
  session_id session;
  std::string blob;
};
struct fin_close {
  session_id session;
  bool remove_temp;
};
using fin_job = std::variant<fin_file, fin_checkpoint, fin_close>;

struct scan_job {
  std::vector<held_file_query> queries;
  std::filesystem::path dest_root;
  std::function<void(std::vector<held_answer>)> done;
};

/// A store_result tagged with the begin_file it answers.
struct internal_result {
  std::uint64_t handle = 0;
  store_result r;
};

}  // namespace

std::string_view to_string(sync_mode m) noexcept {
  switch (m) {
    case sync_mode::batch: return "batch";
    case sync_mode::file: return "file";
    case sync_mode::none: return "none";
  }
  return "?";
}

std::string_view to_string(storage_op op) noexcept {
  switch (op) {
    case storage_op::open: return "open";
    case storage_op::fallocate: return "fallocate";
    case storage_op::pwrite: return "pwrite";
    case storage_op::pread: return "pread";
    case storage_op::fsync: return "fsync";
    case storage_op::syncfs: return "syncfs";
    case storage_op::fchmod: return "fchmod";
    case storage_op::futimens: return "futimens";
    case storage_op::setxattr: return "setxattr";
    case storage_op::mkdir: return "mkdir";
    case storage_op::rename: return "rename";
    case storage_op::dir_fsync: return "dir_fsync";
    case storage_op::count_: break;
  }
  return "?";
}

fail_nth::fail_nth(storage_op op, std::uint64_t n, int error, std::optional<file_key> only)
    : m_op(op),
      m_n(n),
      m_error(error),
      m_only(only),
      m_count(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

int fail_nth::operator()(storage_op op, const file_key* key) const {
  if (op != m_op) return 0;
  if (m_only && (key == nullptr || !(*key == *m_only))) return 0;
  const std::uint64_t n = m_count->fetch_add(1) + 1;
  return n == m_n ? m_error : 0;
}

std::uint64_t fail_nth::seen() const noexcept { return m_count->load(); }

std::filesystem::path file_store::temp_path(const std::filesystem::path& temp_dir, file_key key) {
  return temp_dir / session_hex(key.session) / (std::to_string(key.file.value) + ".part");
}

// ============================================================================================

struct file_store::impl {
  impl(storage_config cfg, std::function<void(std::function<void()>)> post,
       std::function<void(store_result)> on_stored);
  ~impl();

  void start(const std::shared_ptr<impl>& self);
  void shutdown();

  // network thread
  void begin_file(file_key key, file_spec spec, bool resume);
  bool write(file_key key, std::uint64_t offset, std::span<const std::byte> data);
  void flush();
  void finalize(file_key key, const sha256_digest& expected);
  void discard_file(file_key key);
  void close_session(session_id session, bool remove_temp);
  void checkpoint(session_id session, std::string blob);
  void query_held(std::vector<held_file_query> q, std::filesystem::path dest_root,
                  std::function<void(std::vector<held_answer>)> done);
  void on_results(std::vector<internal_result>& results);

  // any thread
  file_store::stats get_stats() const;
  std::size_t free_bytes() const noexcept;
  void post_results(std::vector<internal_result> results);
  int inject(storage_op op, const file_key* key) const {
    return m_cfg.fault ? m_cfg.fault(op, key) : 0;
  }
  spdlog::logger& log() const { return *m_log; }

  // --- configuration, shared ---
  storage_config m_cfg;
  std::function<void(std::function<void()>)> m_post;
  std::function<void(store_result)> m_on_stored;
  std::shared_ptr<spdlog::logger> m_log;
  std::weak_ptr<impl> m_self;
  std::size_t m_max_open_files = 0;
  unique_fd m_temp_fd;  ///< temp_dir, for syncfs and device checks
  dev_t m_temp_dev = 0;

  // --- counters ---
  std::atomic<std::uint64_t> m_bytes_written{0};
  std::atomic<std::uint64_t> m_files_stored{0};
  std::atomic<std::uint64_t> m_files_failed{0};
  std::atomic<std::uint64_t> m_pool_exhausted{0};
  std::atomic<std::uint64_t> m_chunks_in_flight{0};
  std::atomic<std::uint64_t> m_queue_depth{0};
  std::atomic<std::uint64_t> m_bytes_reread{0};
  std::atomic<bool> m_xattr_warned{false};

  // --- buffer pool (network thread takes, writer returns) ---
  std::unique_ptr<std::byte[]> m_pool_memory;
  std::vector<slab> m_slabs;
  std::mutex m_pool_mutex;
  std::vector<slab*> m_free;  ///< LIFO, so the hottest buffers are reused first
  std::vector<std::unique_ptr<chunk>> m_chunks;  ///< every chunk descriptor ever made
  std::vector<chunk*> m_free_chunks;             ///< descriptors to reuse

  /// Writer: the chunk is written; drop its slab reference and recycle it.
  void release_chunk(chunk* c);
  /// Network thread, pool mutex held: a chunk descriptor on `s`.
  chunk* new_chunk_locked(slab* s);
  /// Network thread, pool mutex held: drops one reference of `s`.
  void unref_slab_locked(slab* s);

  // --- network-thread state ---
  struct front_file {
    enum class state : std::uint8_t { active, failed, finalizing };
    std::uint64_t handle = 0;
    std::uint64_t size = 0;
    state st = state::active;
    /// begin_file called while finalizing: (spec, resume) to begin once the result is in.
    std::optional<std::pair<file_spec, bool>> deferred;
  };
  std::unordered_map<file_key, front_file> m_front;
  std::uint64_t m_next_handle = 1;
  slab* m_slab = nullptr;       ///< slab being filled
  std::size_t m_slab_pos = 0;   ///< bytes of m_slab used
  chunk* m_current = nullptr;   ///< chunk being filled, on m_slab
  bool m_stopped = false;

  void submit_current();
  /// Ends the current chunk and gives up the current slab.
  void leave_slab();
  void append(chunk& c, std::uint64_t handle, std::uint64_t offset,
              std::span<const std::byte> data);

  // --- writer queue ---
  std::mutex m_wq_mutex;
  std::condition_variable m_wq_cv;
  std::deque<writer_job> m_wq;
  bool m_wq_stop = false;
  bool m_writer_waiting = false;
  std::thread m_writer;
  void push_writer(writer_job job);

  // --- writer thread state ---
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
  };
  std::unordered_map<std::uint64_t, wfile> m_files;
  std::list<std::uint64_t> m_lru;  ///< handles with an open fd, most recent first
  std::size_t m_open_count = 0;
  std::unordered_set<std::uint64_t> m_catchup;  ///< handles whose prefix can grow by re-reading
  /// Session temp dirs opened (openat, O_NOFOLLOW) by the writer: temp files are opened
  /// relative to these descriptors.
  std::unordered_map<std::uint32_t, unique_fd> m_session_dirs;
  /// Bytes of each session's files being written (begun, not handed off or dropped), for
  /// session_quota_bytes.
  std::unordered_map<std::uint32_t, std::uint64_t> m_session_bytes;
  void unaccount(const wfile& f);
  std::unordered_map<std::string, std::pair<std::error_code, std::string>> m_dest_checked;
  std::unique_ptr<std::byte[]> m_writer_buffer;
  std::vector<fin_job> m_handoffs;

  void writer_main();
  void do_job(begin_job& j);
  void do_job(chunk_job& j);
  void do_job(finalize_job& j);
  void do_job(discard_job& j);
  void do_job(close_job& j);
  void do_job(checkpoint_job& j);
  void write_range(std::uint64_t handle, std::uint64_t offset, const std::byte* p,
                   std::uint64_t len);
  void hand_off(std::uint64_t handle, const sha256_digest& expected);
  std::error_code ensure_open(std::uint64_t handle, wfile& f, bool create, bool truncate);
  void close_fd(wfile& f);
  void drop_file(std::uint64_t handle, bool unlink_temp);
  void fail_file(std::uint64_t handle, std::error_code ec, std::string detail);
  std::uint64_t do_catchup(std::uint64_t budget);
  std::pair<std::error_code, std::string> check_dest_root(const std::filesystem::path& root);

  // --- finalizer queue ---
  std::mutex m_fq_mutex;
  std::condition_variable m_fq_cv;
  std::condition_variable m_closed_cv;  ///< a session's temp dir removal finished
  std::deque<fin_job> m_fq;
  bool m_fq_stop = false;
  std::unordered_map<std::uint32_t, int> m_closing;  ///< sessions whose temp dir is going
  std::atomic<std::size_t> m_fin_fds{0};
  std::thread m_finalizer;
  std::unique_ptr<std::byte[]> m_fin_buffer;

  void finalizer_main();
  void finalize_batch(std::vector<fin_file>& batch);
  void do_fin(fin_checkpoint& j);
  void do_fin(fin_close& j);

  // --- scanner ---
  std::mutex m_sq_mutex;
  std::condition_variable m_sq_cv;
  std::deque<scan_job> m_sq;
  bool m_sq_stop = false;
  std::thread m_scanner;
  std::unique_ptr<std::byte[]> m_scan_buffer;

  void scanner_main();
  std::vector<held_answer> scan(const scan_job& j);

  // --- helpers for all threads ---
  std::error_code read_hash(int fd, const file_key* key, std::uint64_t from, std::uint64_t to,
                            sha256_hasher& h, std::byte* buf, std::atomic<std::uint64_t>* count);
  /// Creates (mkdirat) and opens temp_dir/<session hex> relative to m_temp_fd without
  /// following a symlink. @return the descriptor, or -1 with `e` set (ELOOP or ENOTDIR when
  /// something other than a directory sits there).
  int open_session_dir(session_id s, int& e) const;
};

int file_store::impl::open_session_dir(session_id s, int& e) const {
  const std::string hex = session_hex(s);
  e = inject(storage_op::mkdir, nullptr);
  if (e == 0 && ::mkdirat(m_temp_fd.get(), hex.c_str(), 0700) != 0 && errno != EEXIST) e = errno;
  if (e != 0) return -1;
  const int fd =
      ::openat(m_temp_fd.get(), hex.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    e = errno;
    // O_DIRECTORY reports a symlink as ENOTDIR; name it for what it is.
    struct stat st {};
    if (e == ENOTDIR && ::fstatat(m_temp_fd.get(), hex.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode)) {
      e = ELOOP;
    }
  }
  return fd;
}

void file_store::impl::unaccount(const wfile& f) {
  const auto it = m_session_bytes.find(f.key.session.value);
  if (it == m_session_bytes.end()) return;
  it->second -= std::min(it->second, f.spec.size);
  if (it->second == 0) m_session_bytes.erase(it);
}

// ---------------------------------------------------------------------------------------------
// construction

file_store::impl::impl(storage_config cfg, std::function<void(std::function<void()>)> post,
                       std::function<void(store_result)> on_stored)
    : m_cfg(std::move(cfg)), m_post(std::move(post)), m_on_stored(std::move(on_stored)) {
  m_log = m_cfg.log ? m_cfg.log : spdlog::default_logger();
  if (m_cfg.temp_dir.empty())
    throw std::invalid_argument("storage: temp_dir is empty; set it to a directory on the "
                                "destination filesystem");
  if (m_cfg.chunk_bytes == 0 || m_cfg.chunk_bytes > max_chunk_bytes)
    throw std::invalid_argument("storage: chunk_bytes must be between 1 and 1 GiB");
  if (m_cfg.buffer_pool_bytes < m_cfg.chunk_bytes)
    throw std::invalid_argument("storage: buffer_pool_bytes must hold at least one chunk");
  if (m_cfg.max_open_files == 0)
    throw std::invalid_argument("storage: max_open_files must be at least 1");
  if (!m_post) throw std::invalid_argument("storage: post function is empty");

  std::error_code ec;
  std::filesystem::create_directories(m_cfg.temp_dir, ec);
  if (ec)
    throw std::system_error(ec, "storage: cannot create temp_dir " + m_cfg.temp_dir.string());
  m_temp_fd.reset(::open(m_cfg.temp_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!m_temp_fd)
    throw std::system_error(errno_code(errno),
                            "storage: cannot open temp_dir " + m_cfg.temp_dir.string());
  struct stat st {};
  if (::fstat(m_temp_fd.get(), &st) != 0)
    throw std::system_error(errno_code(errno), "storage: cannot stat temp_dir");
  m_temp_dev = st.st_dev;

  // Descriptors: the writer's LRU, the finalizer's queue and batch, and the rest.
  m_max_open_files = m_cfg.max_open_files;
  const std::uint64_t needed =
      m_max_open_files + finalize_fd_budget + 2 * finalize_batch_max + fd_reserve;
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
      struct rlimit raised = rl;
      raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? needed : rl.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
      const std::uint64_t others = finalize_fd_budget + 2 * finalize_batch_max + fd_reserve;
      const std::uint64_t fit = rl.rlim_cur > others + 16 ? rl.rlim_cur - others : 16;
      m_max_open_files = std::min<std::size_t>(m_max_open_files, fit);
      log().warn("storage: RLIMIT_NOFILE is {} (hard {}), below the {} needed; keeping at most "
                 "{} temp files open. Raise the limit (LimitNOFILE= in the unit file).",
                 static_cast<std::uint64_t>(rl.rlim_cur), static_cast<std::uint64_t>(rl.rlim_max),
                 needed, m_max_open_files);
    }
  }

  // The pool: one reservation, pages touched only when a chunk is first used.
  const std::size_t n_slabs = m_cfg.buffer_pool_bytes / m_cfg.chunk_bytes;
  m_pool_memory = std::make_unique_for_overwrite<std::byte[]>(n_slabs * m_cfg.chunk_bytes);
  m_slabs.resize(n_slabs);
  m_free.reserve(n_slabs);
  for (std::size_t i = n_slabs; i-- > 0;) {
    m_slabs[i].data = m_pool_memory.get() + i * m_cfg.chunk_bytes;
    m_free.push_back(&m_slabs[i]);
  }
}

void file_store::impl::start(const std::shared_ptr<impl>& self) {
  m_self = self;
  m_writer = std::thread([this] { writer_main(); });
  m_finalizer = std::thread([this] { finalizer_main(); });
  m_scanner = std::thread([this] { scanner_main(); });
}

void file_store::impl::shutdown() {
  if (m_stopped) return;
  m_stopped = true;
  leave_slab();
  {
    std::lock_guard lk(m_wq_mutex);
    m_wq_stop = true;
  }
  m_wq_cv.notify_one();
  if (m_writer.joinable()) m_writer.join();
  {
    std::lock_guard lk(m_fq_mutex);
    m_fq_stop = true;
  }
  m_fq_cv.notify_one();
  if (m_finalizer.joinable()) m_finalizer.join();
  {
    std::lock_guard lk(m_sq_mutex);
    m_sq_stop = true;
  }
  m_sq_cv.notify_one();
  if (m_scanner.joinable()) m_scanner.join();
  // Temp files stay for resume; close what the writer still had open.
  for (auto& [h, f] : m_files) {
    if (f.fd >= 0) ::close(f.fd);
    f.fd = -1;
  }
}

file_store::impl::~impl() { shutdown(); }

std::size_t file_store::impl::free_bytes() const noexcept {
  const std::uint64_t used = m_chunks_in_flight.load(std::memory_order_relaxed);
  const std::uint64_t total = m_slabs.size();
  return used >= total ? 0 : static_cast<std::size_t>(total - used) * m_cfg.chunk_bytes;
}

file_store::stats file_store::impl::get_stats() const {
  stats s;
  s.bytes_written = m_bytes_written.load(std::memory_order_relaxed);
  s.files_stored = m_files_stored.load(std::memory_order_relaxed);
  s.files_failed = m_files_failed.load(std::memory_order_relaxed);
  s.pool_exhausted = m_pool_exhausted.load(std::memory_order_relaxed);
  s.chunks_in_flight = m_chunks_in_flight.load(std::memory_order_relaxed);
  s.queue_depth = m_queue_depth.load(std::memory_order_relaxed);
  s.bytes_reread = m_bytes_reread.load(std::memory_order_relaxed);
  return s;
}

void file_store::impl::post_results(std::vector<internal_result> results) {
  if (results.empty()) return;
  m_post([weak = m_self, results = std::move(results)]() mutable {
    if (auto self = weak.lock()) self->on_results(results);
  });
}

// ---------------------------------------------------------------------------------------------
// network thread

void file_store::impl::unref_slab_locked(slab* s) {
  if (--s->refs == 0) {
    m_free.push_back(s);
    m_chunks_in_flight.fetch_sub(1, std::memory_order_relaxed);
  }
}

chunk* file_store::impl::new_chunk_locked(slab* s) {
  chunk* c = nullptr;
  if (!m_free_chunks.empty()) {
    c = m_free_chunks.back();
    m_free_chunks.pop_back();
  } else {
    m_chunks.push_back(std::make_unique<chunk>());
    c = m_chunks.back().get();
    c->entries.reserve(chunk_entries_reserve);
  }
  c->s = s;
  ++s->refs;
  return c;
}

void file_store::impl::release_chunk(chunk* c) {
  slab* s = c->s;
  c->clear();
  std::lock_guard lk(m_pool_mutex);
  unref_slab_locked(s);
  m_free_chunks.push_back(c);
}

void file_store::impl::push_writer(writer_job job) {
  bool wake = false;
  {
    std::lock_guard lk(m_wq_mutex);
    m_wq.push_back(std::move(job));
    m_queue_depth.store(m_wq.size(), std::memory_order_relaxed);
    wake = m_writer_waiting;
  }
  if (wake) m_wq_cv.notify_one();
}

void file_store::impl::submit_current() {
  if (m_current == nullptr) return;
  chunk* c = std::exchange(m_current, nullptr);
  if (c->entries.empty()) {
    release_chunk(c);
    return;
  }
  push_writer(chunk_job{c});
}

void file_store::impl::leave_slab() {
  submit_current();
  if (m_slab == nullptr) return;
  std::lock_guard lk(m_pool_mutex);
  unref_slab_locked(std::exchange(m_slab, nullptr));
  m_slab_pos = 0;
}

void file_store::impl::append(chunk& c, std::uint64_t handle, std::uint64_t offset,
                              std::span<const std::byte> data) {
  std::memcpy(m_slab->data + m_slab_pos, data.data(), data.size());
  if (!c.entries.empty()) {
    chunk_entry& last = c.entries.back();
    if (last.what == chunk_entry::kind::data && last.handle == handle &&
        last.offset + last.len == offset && last.pos + last.len == m_slab_pos) {
      last.len += static_cast<std::uint32_t>(data.size());
      m_slab_pos += data.size();
      return;
    }
  }
  c.entries.push_back(chunk_entry{chunk_entry::kind::data, handle, offset,
                                  static_cast<std::uint32_t>(m_slab_pos),
                                  static_cast<std::uint32_t>(data.size())});
  m_slab_pos += data.size();
}

void file_store::impl::begin_file(file_key key, file_spec spec, bool resume) {
  auto [it, inserted] = m_front.try_emplace(key);
  front_file& f = it->second;
  if (!inserted && f.st == front_file::state::finalizing) {
    f.deferred.emplace(std::move(spec), resume);
    return;
  }
  const std::uint64_t replaces = inserted ? 0 : f.handle;
  f = front_file{};
  f.handle = m_next_handle++;
  f.size = spec.size;

  std::error_code ec = check_relative_path(spec.relative_path);
  std::string detail;
  if (ec) {
    detail = fmt::format("manifest path \"{}\" refused ({}); the file is not stored",
                         spec.relative_path, to_string(static_cast<errc>(ec.value())));
  } else if (spec.dest_root.empty()) {
    ec = std::make_error_code(std::errc::invalid_argument);
    detail = fmt::format("no destination directory configured for \"{}\"", spec.relative_path);
  }
  if (ec) {
    f.st = front_file::state::failed;
    if (replaces != 0) push_writer(discard_job{replaces});
    m_files_failed.fetch_add(1, std::memory_order_relaxed);
    std::vector<internal_result> r(1);
    r[0].handle = f.handle;
    r[0].r.key = key;
    r[0].r.ec = ec;
    r[0].r.detail = std::move(detail);
    post_results(std::move(r));
    return;
  }
  spec.mode &= 07777u & ~static_cast<std::uint32_t>(S_ISUID | S_ISGID);
  push_writer(begin_job{f.handle, replaces, key, std::move(spec), resume});
}

bool file_store::impl::write(file_key key, std::uint64_t offset, std::span<const std::byte> data) {
  auto it = m_front.find(key);
  if (it == m_front.end() || it->second.st != front_file::state::active) return false;
  const front_file& f = it->second;
  if (offset > f.size || data.size() > f.size - offset) return false;
  if (data.empty()) return true;

  const std::size_t cb = m_cfg.chunk_bytes;
  const std::size_t space = m_slab != nullptr ? cb - m_slab_pos : 0;
  // All or nothing: take every slab this block needs before copying any of it.
  slab* spare[8];
  std::size_t n_spare = 0;
  std::vector<slab*> many;
  if (data.size() > space) {
    const std::size_t need = (data.size() - space + cb - 1) / cb;
    std::lock_guard lk(m_pool_mutex);
    if (m_free.size() < need) {
      m_pool_exhausted.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    for (std::size_t i = 0; i < need; ++i) {
      slab* sl = m_free.back();
      m_free.pop_back();
      sl->refs = 1;  // the network thread's own reference while it fills the slab
      if (n_spare < std::size(spare)) spare[n_spare++] = sl;
      else many.push_back(sl);
    }
    m_chunks_in_flight.fetch_add(need, std::memory_order_relaxed);
  }
  std::size_t next_spare = 0;
  std::size_t next_many = 0;
  while (!data.empty()) {
    if (m_slab == nullptr || m_slab_pos == cb) {
      leave_slab();
      m_slab = next_spare < n_spare ? spare[next_spare++] : many[next_many++];
      m_slab_pos = 0;
    }
    if (m_current == nullptr) {
      std::lock_guard lk(m_pool_mutex);
      m_current = new_chunk_locked(m_slab);
    }
    const std::size_t n = std::min(data.size(), cb - m_slab_pos);
    append(*m_current, f.handle, offset, data.first(n));
    offset += n;
    data = data.subspan(n);
  }
  if (m_slab_pos == cb) leave_slab();
  return true;
}

void file_store::impl::flush() { submit_current(); }

void file_store::impl::finalize(file_key key, const sha256_digest& expected) {
  auto it = m_front.find(key);
  if (it == m_front.end() || it->second.st != front_file::state::active) return;
  front_file& f = it->second;
  f.st = front_file::state::finalizing;
  if (m_current != nullptr) {
    // Rides behind the file's last bytes in the same chunk: no extra hand-off per small file.
    m_current->entries.push_back(chunk_entry{chunk_entry::kind::finalize, f.handle, 0,
                                             static_cast<std::uint32_t>(m_current->digests.size()),
                                             0});
    m_current->digests.push_back(expected);
  } else {
    push_writer(finalize_job{f.handle, expected});
  }
}

void file_store::impl::discard_file(file_key key) {
  auto it = m_front.find(key);
  if (it == m_front.end() || it->second.st == front_file::state::finalizing) return;
  const std::uint64_t handle = it->second.handle;
  m_front.erase(it);
  push_writer(discard_job{handle});
}

void file_store::impl::close_session(session_id session, bool remove_temp) {
  submit_current();  // finalize requests of the session riding in it complete first
  std::erase_if(m_front, [&](const auto& kv) { return kv.first.session == session; });
  push_writer(close_job{session, remove_temp});
}

void file_store::impl::checkpoint(session_id session, std::string blob) {
  submit_current();
  push_writer(checkpoint_job{session, std::move(blob)});
}

void file_store::impl::query_held(std::vector<held_file_query> q, std::filesystem::path dest_root,
                                  std::function<void(std::vector<held_answer>)> done) {
  {
    std::lock_guard lk(m_sq_mutex);
    m_sq.push_back(scan_job{std::move(q), std::move(dest_root), std::move(done)});
  }
  m_sq_cv.notify_one();
}

void file_store::impl::on_results(std::vector<internal_result>& results) {
  for (auto& ir : results) {
    auto it = m_front.find(ir.r.key);
    if (it != m_front.end() && it->second.handle == ir.handle) {
      front_file& f = it->second;
      if (f.deferred) {
        auto d = std::move(*f.deferred);
        f.deferred.reset();
        f.st = front_file::state::failed;  // so begin_file restarts it
        begin_file(ir.r.key, std::move(d.first), d.second);
      } else if (f.st == front_file::state::finalizing || !ir.r.ec) {
        m_front.erase(it);
      } else {
        f.st = front_file::state::failed;
      }
    }
    if (m_on_stored) m_on_stored(std::move(ir.r));
  }
}

// ---------------------------------------------------------------------------------------------
// writer thread

void file_store::impl::writer_main() {
  std::deque<writer_job> batch;
  for (;;) {
    bool idle = false;
    {
      std::unique_lock lk(m_wq_mutex);
      while (m_wq.empty() && !m_wq_stop && m_catchup.empty()) {
        m_writer_waiting = true;
        m_wq_cv.wait(lk);
        m_writer_waiting = false;
      }
      if (m_wq.empty() && m_wq_stop) break;
      batch.swap(m_wq);
      m_queue_depth.store(0, std::memory_order_relaxed);
      idle = batch.empty();
    }
    const std::uint64_t before = m_bytes_written.load(std::memory_order_relaxed);
    for (auto& job : batch) {
      // Nothing here throws but allocation; a thread that dies takes the daemon with it, so a
      // job that cannot be done is logged and skipped instead.
      try {
        std::visit([this](auto& j) { do_job(j); }, job);
      } catch (const std::exception& e) {
        log().error("storage: writer job failed: {}", e.what());
      }
    }
    batch.clear();
    if (!m_catchup.empty()) {
      // Re-hash at most as much as was just written while data is flowing, a full slice when
      // idle, so closed gaps are hashed in the background without starving writes.
      const std::uint64_t wrote = m_bytes_written.load(std::memory_order_relaxed) - before;
      do_catchup(idle ? catchup_slice_bytes
                      : std::clamp<std::uint64_t>(wrote, 64u << 10, catchup_slice_bytes));
    }
  }
}

std::pair<std::error_code, std::string> file_store::impl::check_dest_root(
    const std::filesystem::path& root) {
  auto found = m_dest_checked.find(root.native());
  if (found != m_dest_checked.end()) return found->second;
  std::pair<std::error_code, std::string> result;
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  struct stat st {};
  if (ec) {
    result = {ec, fmt::format("cannot create destination directory {}: {}; check that it is "
                              "writable by the receiver",
                              root.string(), ec.message())};
  } else if (::stat(root.c_str(), &st) != 0) {
    const int e = errno;
    result = {errno_code(e), fmt::format("cannot stat destination directory {}: {}",
                                         root.string(), std::strerror(e))};
  } else if (!S_ISDIR(st.st_mode)) {
    result = {std::make_error_code(std::errc::not_a_directory),
              fmt::format("destination {} is not a directory", root.string())};
  } else if (st.st_dev != m_temp_dev) {
    result = {std::make_error_code(std::errc::cross_device_link),
              fmt::format("temp_dir {} and destination {} are on different filesystems, so "
                          "files cannot be renamed into place atomically; set temp_dir to a "
                          "directory on the destination filesystem",
                          m_cfg.temp_dir.string(), root.string())};
    log().error("storage: {}", result.second);
  }
  if (!result.first) m_dest_checked.emplace(root.native(), result);  // failures: retry later
  return result;
}

void file_store::impl::close_fd(wfile& f) {
  if (f.fd < 0) return;
  ::close(f.fd);
  f.fd = -1;
  m_lru.erase(f.lru);
  --m_open_count;
}

std::error_code file_store::impl::ensure_open(std::uint64_t handle, wfile& f, bool create,
                                              bool truncate) {
  if (f.fd >= 0) {
    m_lru.splice(m_lru.begin(), m_lru, f.lru);
    return {};
  }
  while (m_open_count >= m_max_open_files && !m_lru.empty()) {
    auto victim = m_files.find(m_lru.back());
    if (victim == m_files.end()) {  // cannot happen; keep the list honest anyway
      m_lru.pop_back();
      continue;
    }
    close_fd(victim->second);
  }
  if (int e = inject(storage_op::open, &f.key)) return errno_code(e);
  int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW;
  if (create) flags |= O_CREAT;
  if (truncate) flags |= O_TRUNC;
  const auto dir = m_session_dirs.find(f.key.session.value);
  const int fd =
      dir != m_session_dirs.end()
          ? ::openat(dir->second.get(), (std::to_string(f.key.file.value) + ".part").c_str(),
                     flags, 0600)
          : ::open(f.temp_path.c_str(), flags, 0600);
  if (fd < 0) return errno_code(errno);
  f.fd = fd;
  m_lru.push_front(handle);
  f.lru = m_lru.begin();
  ++m_open_count;
  return {};
}

void file_store::impl::drop_file(std::uint64_t handle, bool unlink_temp) {
  auto it = m_files.find(handle);
  if (it == m_files.end()) return;
  close_fd(it->second);
  unaccount(it->second);
  if (unlink_temp) ::unlink(it->second.temp_path.c_str());
  m_catchup.erase(handle);
  m_files.erase(it);
}

void file_store::impl::fail_file(std::uint64_t handle, std::error_code ec, std::string detail) {
  auto it = m_files.find(handle);
  if (it == m_files.end()) return;
  std::vector<internal_result> r(1);
  r[0].handle = handle;
  r[0].r.key = it->second.key;
  r[0].r.ec = ec;
  r[0].r.detail = std::move(detail);
  r[0].r.bytes = it->second.prefix;
  log().warn("storage: {}", r[0].r.detail);
  drop_file(handle, true);
  m_files_failed.fetch_add(1, std::memory_order_relaxed);
  post_results(std::move(r));
}

void file_store::impl::do_job(begin_job& j) {
  if (j.replaces != 0) drop_file(j.replaces, false);
  {
    // A session id reused right after close_session(remove_temp): wait until its temp dir is
    // gone, or the removal would take the new file with it. Rare; never on the network thread.
    std::unique_lock lk(m_fq_mutex);
    m_closed_cv.wait(lk, [&] { return !m_closing.contains(j.key.session.value); });
  }
  const std::string path = file_store::temp_path(m_cfg.temp_dir, j.key).string();
  auto report = [&](std::error_code ec, std::string detail) {
    std::vector<internal_result> r(1);
    r[0].handle = j.handle;
    r[0].r.key = j.key;
    r[0].r.ec = ec;
    r[0].r.detail = std::move(detail);
    log().warn("storage: {}", r[0].r.detail);
    m_files_failed.fetch_add(1, std::memory_order_relaxed);
    post_results(std::move(r));
  };

  if (!m_session_dirs.contains(j.key.session.value)) {
    const auto dir = m_cfg.temp_dir / session_hex(j.key.session);
    int e = 0;
    const int fd = open_session_dir(j.key.session, e);
    if (fd < 0) {
      report(errno_code(e),
             e == ELOOP || e == ENOTDIR
                 ? fmt::format("temp directory {} is a symlink or not a directory; refused, not "
                               "followed (remove it: nothing but mcdistd should write in "
                               "temp_dir)",
                               dir.string())
                 : fmt::format("cannot create temp directory {} (mkdirat): {}; check that "
                               "temp_dir is writable and not full",
                               dir.string(), std::strerror(e)));
      return;
    }
    m_session_dirs[j.key.session.value].reset(fd);
  }
  if (auto [ec, detail] = check_dest_root(j.spec.dest_root); ec) {
    report(ec, fmt::format("{} (while starting \"{}\")", detail, j.spec.relative_path));
    return;
  }
  // Budgets, before anything is allocated on disk: the session's quota, then the free-space
  // reserve of the temp filesystem. A resumed file already holds its space.
  std::uint64_t& session_bytes = m_session_bytes[j.key.session.value];
  if (!j.resume && j.spec.size > 0) {
    const std::uint64_t quota = m_cfg.session_quota_bytes;
    if (quota != 0 && j.spec.size > quota - std::min(quota, session_bytes)) {
      report(make_error_code(errc::quota),
             fmt::format("\"{}\" ({} bytes) would take session {}'s files being written past "
                         "its quota of {} bytes (session_quota)",
                         j.spec.relative_path, j.spec.size, session_hex(j.key.session), quota));
      if (session_bytes == 0) m_session_bytes.erase(j.key.session.value);
      return;
    }
    struct statvfs sv {};
    const bool reserve_on = m_cfg.disk_reserve_bytes != 0 && m_cfg.disk_reserve_percent > 0;
    if (reserve_on && ::fstatvfs(m_temp_fd.get(), &sv) == 0) {
      const std::uint64_t unit = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
      const std::uint64_t avail = std::uint64_t{sv.f_bavail} * unit;
      const auto pct_bytes = static_cast<std::uint64_t>(
          static_cast<double>(sv.f_blocks) * static_cast<double>(unit) *
          m_cfg.disk_reserve_percent / 100.0);
      const std::uint64_t reserve = std::min(m_cfg.disk_reserve_bytes, pct_bytes);
      if (j.spec.size > avail || avail - j.spec.size < reserve) {
        report(make_error_code(errc::disk_reserve),
               fmt::format("\"{}\" ({} bytes) does not fit the temp filesystem of {}: {} bytes "
                           "free, {} kept in reserve (disk_reserve, disk_reserve_percent); free "
                           "space there",
                           j.spec.relative_path, j.spec.size, m_cfg.temp_dir.string(), avail,
                           reserve));
        if (session_bytes == 0) m_session_bytes.erase(j.key.session.value);
        return;
      }
    }
  }
  session_bytes += j.spec.size;

  auto [it, inserted] = m_files.try_emplace(j.handle);
  wfile& f = it->second;
  f.key = j.key;
  f.temp_path = path;
  f.spec = std::move(j.spec);
  if (auto ec = ensure_open(j.handle, f, true, !j.resume)) {
    fail_file(j.handle, ec,
              fmt::format("cannot create temp file {} for \"{}\" (open): {}; check temp_dir "
                          "permissions and free descriptors",
                          path, f.spec.relative_path, ec.message()));
    return;
  }
  if (f.spec.size > 0 && f.spec.size >= m_cfg.preallocate_min_bytes) {
    int e = inject(storage_op::fallocate, &f.key);
    if (e == 0 && ::fallocate(f.fd, 0, 0, static_cast<off_t>(f.spec.size)) != 0) e = errno;
    if (e != 0 && e != EOPNOTSUPP && e != ENOSYS) {
      fail_file(j.handle, errno_code(e),
                fmt::format("cannot reserve {} bytes for \"{}\" in temp file {} (fallocate): "
                            "{}; free space on the temp filesystem, the file will be fetched "
                            "again when retried",
                            f.spec.size, f.spec.relative_path, path, std::strerror(e)));
      return;
    }
  }
}

void file_store::impl::do_job(chunk_job& j) {
  chunk* c = j.c;
  for (const chunk_entry& e : c->entries) {
    if (e.what == chunk_entry::kind::data) {
      write_range(e.handle, e.offset, c->s->data + e.pos, e.len);
    } else {
      hand_off(e.handle, c->digests[e.pos]);
    }
  }
  release_chunk(c);
  // Finalize requests go to the finalizer only after the chunk is back in the pool, so a
  // store_result proves every chunk queued before its finalize has been returned.
  if (!m_handoffs.empty()) {
    {
      std::lock_guard lk(m_fq_mutex);
      for (auto& h : m_handoffs) m_fq.push_back(std::move(h));
    }
    m_handoffs.clear();
    m_fq_cv.notify_one();
  }
}

void file_store::impl::do_job(finalize_job& j) {
  hand_off(j.handle, j.expected);
  if (!m_handoffs.empty()) {
    {
      std::lock_guard lk(m_fq_mutex);
      for (auto& h : m_handoffs) m_fq.push_back(std::move(h));
    }
    m_handoffs.clear();
    m_fq_cv.notify_one();
  }
}

void file_store::impl::do_job(discard_job& j) { drop_file(j.handle, true); }

void file_store::impl::do_job(close_job& j) {
  std::vector<std::uint64_t> handles;
  for (const auto& [h, f] : m_files)
    if (f.key.session == j.session) handles.push_back(h);
  for (auto h : handles) drop_file(h, false);
  m_session_dirs.erase(j.session.value);
  m_session_bytes.erase(j.session.value);
  {
    std::lock_guard lk(m_fq_mutex);
    if (j.remove_temp) ++m_closing[j.session.value];
    m_fq.push_back(fin_close{j.session, j.remove_temp});
  }
  m_fq_cv.notify_one();
}

void file_store::impl::do_job(checkpoint_job& j) {
  {
    std::lock_guard lk(m_fq_mutex);
    m_fq.push_back(fin_checkpoint{j.session, std::move(j.blob)});
  }
  m_fq_cv.notify_one();
}

void file_store::impl::hand_off(std::uint64_t handle, const sha256_digest& expected) {
  auto it = m_files.find(handle);
  if (it == m_files.end()) return;  // failed or discarded: already reported
  wfile& f = it->second;
  fin_file ff;
  ff.handle = handle;
  ff.key = f.key;
  ff.expected = expected;
  ff.temp_path = f.temp_path;
  ff.prefix = f.prefix;
  ff.hasher = std::move(f.hasher);
  unaccount(f);
  if (f.fd >= 0) {
    if (m_fin_fds.load(std::memory_order_relaxed) < finalize_fd_budget) {
      ff.fd = f.fd;
      ff.fd_counted = true;
      m_fin_fds.fetch_add(1, std::memory_order_relaxed);
      m_lru.erase(f.lru);
      --m_open_count;
      f.fd = -1;
    } else {
      close_fd(f);
    }
  }
  ff.spec = std::move(f.spec);
  m_catchup.erase(handle);
  m_files.erase(it);
  m_handoffs.emplace_back(std::move(ff));
}

void file_store::impl::write_range(std::uint64_t handle, std::uint64_t offset, const std::byte* p,
                                   std::uint64_t len) {
  auto it = m_files.find(handle);
  if (it == m_files.end()) return;  // failed, discarded or restarted
  wfile& f = it->second;
  const std::uint64_t end = offset + len;
  if (end <= f.prefix) return;  // already hashed: a duplicate may not change it
  if (offset < f.prefix) {
    p += f.prefix - offset;
    offset = f.prefix;
    len = end - offset;
  }
  if (auto ec = ensure_open(handle, f, false, false)) {
    fail_file(handle, ec,
              fmt::format("cannot reopen temp file {} for \"{}\" (open): {}; was it removed?",
                          f.temp_path, f.spec.relative_path, ec.message()));
    return;
  }
  int e = inject(storage_op::pwrite, &f.key);
  if (e == 0) {
    const std::byte* q = p;
    std::uint64_t left = len;
    std::uint64_t at = offset;
    while (left > 0) {
      const ssize_t n = ::pwrite(f.fd, q, left, static_cast<off_t>(at));
      if (n < 0) {
        if (errno == EINTR) continue;
        e = errno;
        break;
      }
      if (n == 0) {
        e = EIO;
        break;
      }
      q += n;
      left -= static_cast<std::uint64_t>(n);
      at += static_cast<std::uint64_t>(n);
    }
  }
  if (e != 0) {
    fail_file(handle, errno_code(e),
              fmt::format("write of {} bytes at offset {} to temp file {} for \"{}\" failed "
                          "(pwrite): {}; {}",
                          len, offset, f.temp_path, f.spec.relative_path, std::strerror(e),
                          e == ENOSPC || e == EDQUOT
                              ? "free space on the temp filesystem; the file will be fetched "
                                "again when retried"
                              : "check the temp filesystem and the system log"));
    return;
  }
  m_bytes_written.fetch_add(len, std::memory_order_relaxed);

  if (offset == f.prefix) {
    f.hasher.update(std::span<const std::byte>(p, len));
    f.prefix = end;
    f.written.erase_below(end);
  } else {
    f.written.insert(offset, end);
  }
  if (auto first = f.written.first(); first && first->first <= f.prefix) m_catchup.insert(handle);

  if (m_cfg.sync != sync_mode::none && m_cfg.writeback_bytes != 0) {
    f.wb_lo = std::min(f.wb_lo, offset);
    f.wb_hi = std::max(f.wb_hi, end);
    f.wb_bytes += len;
    if (f.wb_bytes >= m_cfg.writeback_bytes) {
      // Start writeback now so the fsync at finalize has little left to do. Advisory: errors
      // surface at fsync.
      ::sync_file_range(f.fd, static_cast<off_t>(f.wb_lo), static_cast<off_t>(f.wb_hi - f.wb_lo),
                        SYNC_FILE_RANGE_WRITE);
      f.wb_lo = UINT64_MAX;
      f.wb_hi = 0;
      f.wb_bytes = 0;
    }
  }
}

std::error_code file_store::impl::read_hash(int fd, const file_key* key, std::uint64_t from,
                                            std::uint64_t to, sha256_hasher& h, std::byte* buf,
                                            std::atomic<std::uint64_t>* count) {
  while (from < to) {
    if (int e = inject(storage_op::pread, key)) return errno_code(e);
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(to - from, reread_buffer_bytes));
    const ssize_t n = ::pread(fd, buf, want, static_cast<off_t>(from));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_code(errno);
    }
    if (n == 0) return errno_code(ENODATA);  // shorter than expected
    h.update(std::span<const std::byte>(buf, static_cast<std::size_t>(n)));
    from += static_cast<std::uint64_t>(n);
    if (count != nullptr) count->fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
  }
  return {};
}

std::uint64_t file_store::impl::do_catchup(std::uint64_t budget) {
  std::uint64_t done = 0;
  if (!m_writer_buffer) m_writer_buffer = std::make_unique_for_overwrite<std::byte[]>(reread_buffer_bytes);
  while (done < budget && !m_catchup.empty()) {
    const std::uint64_t handle = *m_catchup.begin();
    auto it = m_files.find(handle);
    if (it == m_files.end()) {
      m_catchup.erase(handle);
      continue;
    }
    wfile& f = it->second;
    auto first = f.written.first();
    if (!first || first->first > f.prefix) {
      m_catchup.erase(handle);
      continue;
    }
    const std::uint64_t to =
        std::min(first->second, f.prefix + std::min(budget - done, catchup_slice_bytes));
    if (auto ec = ensure_open(handle, f, false, false)) {
      fail_file(handle, ec,
                fmt::format("cannot reopen temp file {} for \"{}\" (open): {}; was it removed?",
                            f.temp_path, f.spec.relative_path, ec.message()));
      continue;
    }
    const std::uint64_t from = f.prefix;
    if (auto ec = read_hash(f.fd, &f.key, from, to, f.hasher, m_writer_buffer.get(),
                            &m_bytes_reread)) {
      fail_file(handle, ec,
                fmt::format("read-back of temp file {} for \"{}\" failed (pread): {}; check "
                            "the temp filesystem and the system log",
                            f.temp_path, f.spec.relative_path, ec.message()));
      continue;
    }
    f.prefix = to;
    f.written.erase_below(to);
    done += to - from;
    if (auto next = f.written.first(); !next || next->first > f.prefix) m_catchup.erase(handle);
  }
  return done;
}

// ---------------------------------------------------------------------------------------------
// finalizer thread

void file_store::impl::finalizer_main() {
  // sync_mode::file makes each file durable on its own: batches of one.
  const std::size_t cap = m_cfg.sync == sync_mode::file ? 1 : finalize_batch_max;
  std::vector<fin_file> batch;
  for (;;) {
    std::optional<fin_job> other;
    {
      std::unique_lock lk(m_fq_mutex);
      m_fq_cv.wait(lk, [&] { return !m_fq.empty() || m_fq_stop; });
      if (m_fq.empty()) return;
      if (std::holds_alternative<fin_file>(m_fq.front())) {
        while (!m_fq.empty() && batch.size() < cap &&
               std::holds_alternative<fin_file>(m_fq.front())) {
          batch.push_back(std::move(std::get<fin_file>(m_fq.front())));
          m_fq.pop_front();
        }
      } else {
        other.emplace(std::move(m_fq.front()));
        m_fq.pop_front();
      }
    }
    try {
      if (!batch.empty()) {
        finalize_batch(batch);
      } else if (other) {
        std::visit(
            [this](auto& j) {
              if constexpr (!std::is_same_v<std::decay_t<decltype(j)>, fin_file>) do_fin(j);
            },
            *other);
      }
    } catch (const std::exception& e) {
      log().error("storage: finalizer job failed: {}", e.what());
    }
    batch.clear();
  }
}

namespace {

/// One file in a finalize batch.
struct fin_work {
  fin_file* f = nullptr;
  bool ok = true;
  bool renamed = false;
  store_result r;
  int dir_fd = -1;  ///< destination directory (owned by the batch's directory cache)
  std::string leaf;
  std::string dest;  ///< dest_root/relative_path, for messages
};

/// Destination directories opened for one batch, and the directories to fsync after it.
struct dir_cache {
  struct entry {
    int fd = -1;
    std::error_code ec;
    std::string detail;
  };
  std::unordered_map<std::string, entry> dirs;        ///< root '\0' parent -> fd
  std::unordered_map<std::string, entry> roots;       ///< dest_root -> fd
  std::map<std::pair<dev_t, ino_t>, int> to_sync;     ///< directories to fsync, deduplicated
  std::vector<int> owned;                              ///< every fd to close at the end

  ~dir_cache() {
    for (int fd : owned) ::close(fd);
  }
  int own(int fd) {
    owned.push_back(fd);
    return fd;
  }
  void add_sync(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) == 0) to_sync.emplace(std::make_pair(st.st_dev, st.st_ino), fd);
  }
};

}  // namespace

void file_store::impl::finalize_batch(std::vector<fin_file>& batch) {
  if (!m_fin_buffer) m_fin_buffer = std::make_unique_for_overwrite<std::byte[]>(reread_buffer_bytes);
  std::vector<fin_work> work(batch.size());
  dir_cache dirs;

  auto fail = [&](fin_work& w, std::error_code ec, std::string detail) {
    w.ok = false;
    w.r.ec = ec;
    w.r.detail = std::move(detail);
    if (!w.renamed) ::unlink(w.f->temp_path.c_str());
  };

  // 1. Verify: hash what the writer has not, compare; set mode, mtime and the digest xattr.
  for (std::size_t i = 0; i < batch.size(); ++i) {
    fin_work& w = work[i];
    fin_file& f = batch[i];
    w.f = &f;
    w.r.key = f.key;
    w.dest = (f.spec.dest_root / f.spec.relative_path).string();
    if (f.fd < 0) {
      int e = inject(storage_op::open, &f.key);
      if (e == 0) {
        f.fd = ::open(f.temp_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (f.fd < 0) e = errno;
      }
      if (e != 0) {
        fail(w, errno_code(e),
             fmt::format("cannot open temp file {} to finalize {} (open): {}", f.temp_path,
                         w.dest, std::strerror(e)));
        continue;
      }
    }
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) {
      const int e = errno;
      fail(w, errno_code(e), fmt::format("cannot stat temp file {} (fstat): {}", f.temp_path,
                                         std::strerror(e)));
      continue;
    }
    const auto size = f.spec.size;
    if (static_cast<std::uint64_t>(st.st_size) > size && ::ftruncate(f.fd, static_cast<off_t>(size)) != 0) {
      const int e = errno;
      fail(w, errno_code(e), fmt::format("cannot trim temp file {} to {} bytes (ftruncate): {}",
                                         f.temp_path, size, std::strerror(e)));
      continue;
    }
    if (static_cast<std::uint64_t>(st.st_size) < size) {
      w.r.bytes = static_cast<std::uint64_t>(st.st_size);
      fail(w, make_error_code(errc::digest_mismatch),
           fmt::format("temp file {} holds {} of the {} bytes of {}: finalized before all "
                       "data was written; not delivered, it will be fetched again",
                       f.temp_path, st.st_size, size, w.dest));
      continue;
    }
    if (auto ec = read_hash(f.fd, &f.key, f.prefix, size, f.hasher, m_fin_buffer.get(),
                            &m_bytes_reread)) {
      fail(w, ec, fmt::format("read-back of temp file {} for {} failed (pread): {}; check the "
                              "temp filesystem and the system log",
                              f.temp_path, w.dest, ec.message()));
      continue;
    }
    w.r.digest = f.hasher.finish();
    w.r.bytes = size;
    if (w.r.digest != f.expected) {
      fail(w, make_error_code(errc::digest_mismatch),
           fmt::format("received data for {} hashes to {}, the manifest says {}; not delivered, "
                       "it will be fetched again",
                       w.dest, to_hex(w.r.digest), to_hex(f.expected)));
      continue;
    }
    int e = inject(storage_op::fchmod, &f.key);
    if (e == 0 && ::fchmod(f.fd, static_cast<mode_t>(f.spec.mode)) != 0) e = errno;
    if (e != 0) {
      fail(w, errno_code(e), fmt::format("cannot set mode {:o} on temp file {} (fchmod): {}",
                                         f.spec.mode, f.temp_path, std::strerror(e)));
      continue;
    }
    const struct timespec times[2] = {{0, UTIME_NOW}, timespec_of_ns(f.spec.mtime_ns)};
    e = inject(storage_op::futimens, &f.key);
    if (e == 0 && ::futimens(f.fd, times) != 0) e = errno;
    if (e != 0) {
      fail(w, errno_code(e), fmt::format("cannot set mtime on temp file {} (futimens): {}",
                                         f.temp_path, std::strerror(e)));
      continue;
    }
    if (m_cfg.record_digest_xattr) {
      const std::string v = digest_xattr_value(w.r.digest, size, f.spec.mtime_ns);
      e = inject(storage_op::setxattr, &f.key);
      if (e == 0 && ::fsetxattr(f.fd, digest_xattr_name, v.data(), v.size(), 0) != 0) e = errno;
      if (e != 0 && !m_xattr_warned.exchange(true)) {
        // Not fatal: the file is right; query_held will hash it instead.
        log().warn("storage: cannot record {} on {} (fsetxattr): {}; held files will be hashed "
                   "to be recognised (further such failures are not logged)",
                   digest_xattr_name, f.temp_path, std::strerror(e));
      }
    }
  }

  // 2. Destination directories: walk from dest_root without following symlinks, mkdir -p.
  for (fin_work& w : work) {
    if (!w.ok) continue;
    const fin_file& f = *w.f;
    const std::string& root = f.spec.dest_root.native();
    auto [rit, rnew] = dirs.roots.try_emplace(root);
    if (rnew) {
      int e = inject(storage_op::open, nullptr);
      int fd = -1;
      if (e == 0) {
        fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) {
          std::error_code cec;
          std::filesystem::create_directories(f.spec.dest_root, cec);
          fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        }
        if (fd < 0) e = errno;
      }
      if (e != 0) {
        rit->second.ec = errno_code(e);
        rit->second.detail = fmt::format("cannot open destination directory {}: {}", root,
                                         std::strerror(e));
      } else {
        rit->second.fd = dirs.own(fd);
      }
    }
    if (rit->second.fd < 0) {
      fail(w, rit->second.ec, rit->second.detail);
      continue;
    }
    auto comps = split_path(f.spec.relative_path);
    w.leaf = std::string(comps.back());
    comps.pop_back();
    std::string parent;
    for (auto c : comps) {
      if (!parent.empty()) parent += '/';
      parent += c;
    }
    std::string cache_key = root;
    cache_key += '\0';
    cache_key += parent;
    auto [dit, dnew] = dirs.dirs.try_emplace(cache_key);
    if (dnew) {
      dir_cache::entry& d = dit->second;
      int cur = rit->second.fd;
      bool cur_owned = false;
      std::string walked;
      for (auto c : comps) {
        const std::string comp(c);
        if (!walked.empty()) walked += '/';
        walked += comp;
        int e = inject(storage_op::open, nullptr);
        int next = -1;
        if (e == 0) {
          next = ::openat(cur, comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (next < 0) e = errno;
        }
        if (e == ENOENT) {
          e = inject(storage_op::mkdir, nullptr);
          if (e == 0 && ::mkdirat(cur, comp.c_str(), 0755) != 0 && errno != EEXIST) e = errno;
          if (e == 0) {
            // The new entry lives in `cur`: fsync it after the renames.
            if (cur_owned) {
              dirs.own(cur);
              cur_owned = false;
            }
            dirs.add_sync(cur);
            e = inject(storage_op::open, nullptr);
            if (e == 0) {
              next = ::openat(cur, comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
              if (next < 0) e = errno;
            }
          }
        }
        if (e == ENOTDIR) {
          // O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR: tell the two apart.
          struct stat lst {};
          if (::fstatat(cur, comp.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
            e = ELOOP;
        }
        if (e != 0) {
          d.ec = errno_code(e);
          if (e == ENOTDIR) {
            d.detail = fmt::format("{}/{} exists and is not a directory, so {} cannot be "
                                   "created there; remove it or fix the manifest",
                                   root, walked, f.spec.relative_path);
          } else if (e == ELOOP) {
            d.detail = fmt::format("{}/{} is a symbolic link; files are never written through "
                                   "links below the destination root; replace it by a directory",
                                   root, walked);
          } else {
            d.detail = fmt::format("cannot open or create directory {}/{}: {}", root, walked,
                                   std::strerror(e));
          }
          break;
        }
        if (cur_owned) ::close(cur);
        cur = next;
        cur_owned = true;
      }
      if (!d.ec) {
        d.fd = cur_owned ? dirs.own(cur) : cur;
      } else if (cur_owned) {
        ::close(cur);
      }
    }
    if (dit->second.fd < 0) {
      fail(w, dit->second.ec, dit->second.detail);
      continue;
    }
    w.dir_fd = dit->second.fd;
    struct stat st {};
    if (::fstatat(w.dir_fd, w.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
      fail(w, std::make_error_code(std::errc::is_a_directory),
           fmt::format("destination {} exists and is a directory; remove it so the file can be "
                       "delivered",
                       w.dest));
      continue;
    }
  }

  // 3. Durability of the data before any rename makes it visible.
  if (m_cfg.sync != sync_mode::none) {
    std::vector<fin_work*> ok;
    for (auto& w : work)
      if (w.ok) ok.push_back(&w);
    bool per_file = m_cfg.sync == sync_mode::file || ok.size() == 1;
    if (!per_file && !ok.empty()) {
      int e = inject(storage_op::syncfs, nullptr);
      if (e == 0 && ::syncfs(m_temp_fd.get()) != 0) e = errno;
      if (e != 0) {
        // Which file lost data is unknown: ask each with fsync, which reports its own error.
        log().warn("storage: syncfs on temp_dir {} failed: {}; falling back to fsync per file",
                   m_cfg.temp_dir.string(), std::strerror(e));
        per_file = true;
      }
    }
    if (per_file) {
      for (fin_work* w : ok) {
        int e = inject(storage_op::fsync, &w->f->key);
        if (e == 0 && ::fsync(w->f->fd) != 0) e = errno;
        if (e != 0) {
          fail(*w, errno_code(e),
               fmt::format("cannot make temp file {} for {} durable (fsync): {}; not delivered; "
                           "check the temp filesystem and the system log",
                           w->f->temp_path, w->dest, std::strerror(e)));
        }
      }
    }
  }

  // 4. Rename into place: atomic, replaces an existing file. The shell's hook sees them first.
  if (m_cfg.before_renames) {
    std::vector<pending_rename> intents;
    for (const auto& w : work)
      if (w.ok) intents.push_back({w.f->key, &w.f->spec, w.r.digest});
    if (!intents.empty()) {
      try {
        m_cfg.before_renames(intents);
      } catch (const std::exception& e) {
        for (auto& w : work)
          if (w.ok)
            fail(w, std::make_error_code(std::errc::io_error),
                 fmt::format("{} not delivered: {}", w.dest, e.what()));
      }
    }
  }
  for (auto& w : work) {
    if (!w.ok) continue;
    int e = inject(storage_op::rename, &w.f->key);
    if (e == 0 && ::renameat(AT_FDCWD, w.f->temp_path.c_str(), w.dir_fd, w.leaf.c_str()) != 0)
      e = errno;
    if (e != 0) {
      std::string why;
      if (e == EXDEV)
        why = "temp_dir and the destination are on different filesystems; set temp_dir on the "
              "destination filesystem";
      else if (e == EISDIR)
        why = "the destination is a directory; remove it";
      else
        why = "check permissions and space on the destination filesystem";
      fail(w, errno_code(e), fmt::format("cannot rename {} to {} (renameat): {}; {}",
                                         w.f->temp_path, w.dest, std::strerror(e), why));
      continue;
    }
    w.renamed = true;
    dirs.add_sync(w.dir_fd);
  }

  // 5. Make the renames (and created directories) durable: each directory once.
  if (m_cfg.sync != sync_mode::none) {
    for (auto& [id, fd] : dirs.to_sync) {
      int e = inject(storage_op::dir_fsync, nullptr);
      if (e == 0 && ::fsync(fd) != 0) e = errno;
      if (e != 0) {
        log().error("storage: fsync of a destination directory failed: {}", std::strerror(e));
        for (auto& w : work) {
          if (w.renamed && w.dir_fd == fd && w.ok)
            fail(w, errno_code(e),
                 fmt::format("{} was renamed into place but its directory could not be made "
                             "durable (fsync): {}; it may vanish after a crash, so it is "
                             "reported failed and will be fetched again",
                             w.dest, std::strerror(e)));
        }
      }
    }
  }

  // 6. Report.
  std::vector<internal_result> results;
  results.reserve(work.size());
  for (auto& w : work) {
    fin_file& f = *w.f;
    if (f.fd >= 0) ::close(f.fd);
    f.fd = -1;
    if (f.fd_counted) m_fin_fds.fetch_sub(1, std::memory_order_relaxed);
    if (w.ok) {
      m_files_stored.fetch_add(1, std::memory_order_relaxed);
    } else {
      m_files_failed.fetch_add(1, std::memory_order_relaxed);
      log().warn("storage: {}", w.r.detail);
    }
    results.push_back(internal_result{f.handle, std::move(w.r)});
  }
  post_results(std::move(results));
}

void file_store::impl::do_fin(fin_checkpoint& j) {
  const auto dir = m_cfg.temp_dir / session_hex(j.session);
  const bool sync = m_cfg.sync != sync_mode::none;
  auto failed = [&](const char* call, int e) {
    log().error("storage: checkpoint of session {} not saved ({} on {}): {}; the previous "
                "state stays",
                session_hex(j.session), call, dir.string(), std::strerror(e));
  };
  int e = 0;
  unique_fd dfd(open_session_dir(j.session, e));
  if (!dfd) {
    return failed(e == ELOOP || e == ENOTDIR ? "openat (a symlink, not followed)" : "mkdirat", e);
  }
  if (sync) {
    // Every write queued before the checkpoint has been pwritten (the writer handles jobs in
    // order); make it durable so the state never claims blocks a crash lost.
    e = inject(storage_op::syncfs, nullptr);
    if (e == 0 && ::syncfs(m_temp_fd.get()) != 0) e = errno;
    if (e != 0) return failed("syncfs", e);
  }
  e = inject(storage_op::open, nullptr);
  unique_fd fd;
  if (e == 0) {
    fd.reset(::openat(dfd.get(), "state.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                      0600));
    if (!fd) e = errno;
  }
  if (e != 0) return failed("open", e);
  e = inject(storage_op::pwrite, nullptr);
  std::size_t off = 0;
  while (e == 0 && off < j.blob.size()) {
    const ssize_t n = ::pwrite(fd.get(), j.blob.data() + off, j.blob.size() - off,
                               static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      e = n < 0 ? errno : EIO;
      break;
    }
    off += static_cast<std::size_t>(n);
  }
  if (e != 0) return failed("pwrite", e);
  if (sync) {
    e = inject(storage_op::fsync, nullptr);
    if (e == 0 && ::fsync(fd.get()) != 0) e = errno;
    if (e != 0) return failed("fsync", e);
  }
  fd.reset();
  e = inject(storage_op::rename, nullptr);
  if (e == 0 && ::renameat(dfd.get(), "state.tmp", dfd.get(), "state") != 0) e = errno;
  if (e != 0) return failed("rename", e);
  if (sync) {
    e = inject(storage_op::dir_fsync, nullptr);
    if (e == 0 && ::fsync(dfd.get()) != 0) e = errno;
    if (e != 0) return failed("fsync of directory", e);
  }
}

void file_store::impl::do_fin(fin_close& j) {
  if (j.remove_temp) {
    const auto dir = m_cfg.temp_dir / session_hex(j.session);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec)
      log().warn("storage: cannot remove temp directory {}: {}", dir.string(), ec.message());
    {
      std::lock_guard lk(m_fq_mutex);
      auto it = m_closing.find(j.session.value);
      if (it != m_closing.end() && --it->second == 0) m_closing.erase(it);
    }
    m_closed_cv.notify_all();
  }
}

// ---------------------------------------------------------------------------------------------
// scanner thread

void file_store::impl::scanner_main() {
  for (;;) {
    scan_job job;
    {
      std::unique_lock lk(m_sq_mutex);
      m_sq_cv.wait(lk, [&] { return !m_sq.empty() || m_sq_stop; });
      if (m_sq_stop) return;  // queries are advisory: not worth delaying shutdown
      job = std::move(m_sq.front());
      m_sq.pop_front();
    }
    std::vector<held_answer> answers;
    try {
      answers = scan(job);
    } catch (const std::exception& e) {
      log().error("storage: query of held files failed: {}", e.what());
    }
    m_post([weak = m_self, done = std::move(job.done), answers = std::move(answers)]() mutable {
      if (weak.lock() && done) done(std::move(answers));
    });
  }
}

std::vector<held_answer> file_store::impl::scan(const scan_job& j) {
  std::vector<held_answer> out;
  if (!m_scan_buffer) m_scan_buffer = std::make_unique_for_overwrite<std::byte[]>(reread_buffer_bytes);
  unique_fd root(::open(j.dest_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return out;
  for (const auto& q : j.queries) {
    if (check_relative_path(q.relative_path)) continue;
    auto comps = split_path(q.relative_path);
    const std::string leaf(comps.back());
    comps.pop_back();
    unique_fd dir;
    int cur = root.get();
    bool ok = true;
    for (auto c : comps) {
      const std::string comp(c);
      const int next = ::openat(cur, comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next < 0) {
        ok = false;
        break;
      }
      dir.reset(next);
      cur = next;
    }
    if (!ok) continue;
    if (inject(storage_op::open, nullptr)) continue;
    unique_fd fd(::openat(cur, leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) continue;
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (static_cast<std::uint64_t>(st.st_size) != q.size || mtime_ns_of(st) != q.mtime_ns) continue;
    char xbuf[max_digest_xattr_bytes];
    const ssize_t xn = ::fgetxattr(fd.get(), digest_xattr_name, xbuf, sizeof xbuf);
    if (xn > 0) {
      if (auto d = parse_digest_xattr(std::string_view(xbuf, static_cast<std::size_t>(xn)), q.size,
                                      q.mtime_ns)) {
        out.push_back(held_answer{q.file, *d});
        continue;
      }
    }
    if (q.size > m_cfg.hash_held_max_bytes) continue;
    sha256_hasher h;
    if (read_hash(fd.get(), nullptr, 0, q.size, h, m_scan_buffer.get(), nullptr)) continue;
    struct stat after {};
    // Changed while being read: not a held copy we can vouch for.
    if (::fstat(fd.get(), &after) != 0 || after.st_size != st.st_size ||
        mtime_ns_of(after) != q.mtime_ns)
      continue;
    out.push_back(held_answer{q.file, h.finish()});
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// file_store

file_store::file_store(storage_config cfg, std::function<void(std::function<void()>)> post,
                       std::function<void(store_result)> on_stored)
    : m_impl(std::make_shared<impl>(std::move(cfg), std::move(post), std::move(on_stored))) {
  m_impl->start(m_impl);
}

file_store::~file_store() {
  if (m_impl) m_impl->shutdown();
}

void file_store::begin_file(file_key key, file_spec spec, bool resume) {
  m_impl->begin_file(key, std::move(spec), resume);
}

bool file_store::write(file_key key, std::uint64_t offset, std::span<const std::byte> data) {
  return m_impl->write(key, offset, data);
}

void file_store::flush() { m_impl->flush(); }

void file_store::finalize(file_key key, const sha256_digest& expected) {
  m_impl->finalize(key, expected);
}

void file_store::discard_file(file_key key) { m_impl->discard_file(key); }

void file_store::close_session(session_id session, bool remove_temp) {
  m_impl->close_session(session, remove_temp);
}

void file_store::checkpoint(session_id session, std::string blob) {
  m_impl->checkpoint(session, std::move(blob));
}

void file_store::query_held(session_id, std::vector<held_file_query> queries,
                            std::filesystem::path dest_root,
                            std::function<void(std::vector<held_answer>)> done) {
  m_impl->query_held(std::move(queries), std::move(dest_root), std::move(done));
}

file_store::stats file_store::get_stats() const { return m_impl->get_stats(); }

std::size_t file_store::free_bytes() const noexcept { return m_impl->free_bytes(); }

std::vector<std::pair<session_id, std::string>> file_store::load_checkpoints(
    const std::filesystem::path& temp_dir) {
  std::vector<std::pair<session_id, std::string>> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(temp_dir, ec);
  if (ec) return out;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.size() != 8) continue;
    std::uint32_t id = 0;
    auto [ptr, perr] = std::from_chars(name.data(), name.data() + name.size(), id, 16);
    if (perr != std::errc{} || ptr != name.data() + name.size()) continue;
    std::error_code lec;
    if (entry.is_symlink(lec) || !entry.is_directory(lec)) continue;  // never followed
    const auto state = entry.path() / "state";
    std::error_code sec;
    const auto size = std::filesystem::file_size(state, sec);
    if (sec) continue;
    if (size > max_checkpoint_bytes) {
      spdlog::warn("storage: checkpoint {} is {} bytes, over the {} limit; ignored",
                   state.string(), size, max_checkpoint_bytes);
      continue;
    }
    std::ifstream in(state, std::ios::binary);
    std::string blob(static_cast<std::size_t>(size), '\0');
    if (!in.read(blob.data(), static_cast<std::streamsize>(size))) {
      spdlog::warn("storage: cannot read checkpoint {}; ignored", state.string());
      continue;
    }
    out.emplace_back(session_id{id}, std::move(blob));
  }
  return out;
}

std::size_t file_store::sweep_temp(const std::filesystem::path& temp_dir,
                                   const std::vector<session_id>& keep, spdlog::logger& log) {
  std::size_t removed = 0;
  std::error_code ec;
  std::filesystem::directory_iterator it(temp_dir, ec);
  if (ec) return 0;
  std::vector<std::filesystem::path> doomed;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.size() != 8) continue;
    std::uint32_t id = 0;
    auto [ptr, perr] = std::from_chars(name.data(), name.data() + name.size(), id, 16);
    if (perr != std::errc{} || ptr != name.data() + name.size()) continue;
    if (std::find(keep.begin(), keep.end(), session_id{id}) != keep.end()) continue;
    doomed.push_back(entry.path());
  }
  for (const auto& p : doomed) {
    // remove_all removes a symlink itself, never what it points to.
    std::error_code rec;
    std::filesystem::remove_all(p, rec);
    if (rec) {
      log.warn("storage: cannot remove temp directory {} of an unknown session: {}", p.string(),
               rec.message());
    } else {
      ++removed;
    }
  }
  if (removed > 0) {
    log.info("storage: removed {} temp directories of sessions without usable saved state",
             removed);
  }
  return removed;
}

}  // namespace mcdist::receiver
