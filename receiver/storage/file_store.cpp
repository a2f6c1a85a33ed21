#include "receiver/storage/file_store.hpp"

#include "common/error.hpp"
#include "common/path_check.hpp"
#include "receiver/storage/chunk_pool.hpp"
#include "receiver/storage/finalizer.hpp"
#include "receiver/storage/held_scanner.hpp"
#include "receiver/storage/store_context.hpp"
#include "receiver/storage/temp_writer.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <unordered_map>

namespace mcdist::receiver {

std::size_t store_descriptors(std::size_t max_open_files) noexcept {
  // Descriptors left for everything else in the process: sockets, logs, directories walked.
  constexpr std::size_t fd_reserve = 64;
  return max_open_files + finalizer::fd_budget + 2 * finalizer::batch_max + fd_reserve;
}

namespace {

/// How many temp files the writer may keep open: `wanted`, unless RLIMIT_NOFILE cannot be
/// raised to cover it plus the finalizer's descriptors (then less, with a warning).
std::size_t fit_open_files(std::size_t wanted, spdlog::logger& log) {
  const std::uint64_t others = store_descriptors(0);
  const std::uint64_t needed = store_descriptors(wanted);
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return wanted;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
    struct rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? needed : rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= needed) return wanted;
  const std::uint64_t fit = rl.rlim_cur > others + 16 ? rl.rlim_cur - others : 16;
  const std::size_t n = std::min<std::size_t>(wanted, fit);
  log.warn(
      "storage: RLIMIT_NOFILE is {} (hard {}), below the {} needed; keeping at most {} "
      "temp files open. Raise the limit (LimitNOFILE= in the unit file).",
      static_cast<std::uint64_t>(rl.rlim_cur), static_cast<std::uint64_t>(rl.rlim_max), needed, n);
  return n;
}

/// Checks `cfg` and opens its temp_dir into `ctx`. Throws for the operator.
void open_temp_dir(store_context& ctx) {
  const storage_config& cfg = ctx.cfg;
  if (cfg.temp_dir.empty())
    throw std::invalid_argument(
        "storage: temp_dir is empty; set it to a directory on the "
        "destination filesystem");
  if (cfg.max_open_files == 0)
    throw std::invalid_argument("storage: max_open_files must be at least 1");
  std::error_code ec;
  std::filesystem::create_directories(cfg.temp_dir, ec);
  if (ec) throw std::system_error(ec, "storage: cannot create temp_dir " + cfg.temp_dir.string());
  ctx.temp_fd.reset(::open(cfg.temp_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!ctx.temp_fd)
    throw std::system_error(errno_code(errno),
                            "storage: cannot open temp_dir " + cfg.temp_dir.string());
  struct stat st {};
  if (::fstat(ctx.temp_fd.get(), &st) != 0)
    throw std::system_error(errno_code(errno), "storage: cannot stat temp_dir");
  ctx.temp_dev = st.st_dev;
  ctx.umask = read_process_umask();
}

}  // namespace

// ============================================================================================

struct file_store::impl {
  using post_fn = std::function<void(std::function<void()>)>;

  impl(storage_config cfg, post_fn post, std::function<void(store_result)> on_stored,
       std::function<void(session_id, std::vector<held_answer>)> on_held,
       recovered_fn on_recovered);
  ~impl() { shutdown(); }

  void start(const std::shared_ptr<impl>& self);
  void shutdown();

  // network thread
  void begin_file(file_key key, file_spec spec, bool resume);
  bool write(file_key key, std::uint64_t offset, std::span<const std::byte> data);
  void finalize(file_key key, const sha256_digest& expected);
  void discard_file(file_key key);
  void close_session(session_id session, bool remove_temp);
  bool write_parity(session_id session, std::uint32_t fec_block, std::uint32_t index,
                    std::span<const std::byte> data);
  void recover(session_id session, recovery_request request);
  void on_results(std::vector<internal_result>& results);
  void deliver_file(file_key key, std::uint32_t channel, file_spec spec, std::string temp_path,
                    const sha256_digest& expected, std::function<void(store_result)> done);
  /// deliver_file's callbacks by handle (their results bypass m_front and on_stored).
  std::unordered_map<std::uint64_t, std::function<void(store_result)>> m_delivered;
  void post_results(std::vector<internal_result> results);

  /// The network thread's view of a begun file.
  struct front_file {
    enum class state : std::uint8_t { active, failed, finalizing };
    std::uint64_t handle = 0;
    std::uint64_t size = 0;
    state st = state::active;
    /// begin_file called while finalizing: (spec, resume) to begin once the result is in.
    std::optional<std::pair<file_spec, bool>> deferred;
  };

  post_fn m_post;
  std::function<void(store_result)> m_on_stored;
  std::function<void(session_id, std::vector<held_answer>)> m_on_held;
  recovered_fn m_on_recovered;
  std::weak_ptr<impl> m_self;
  store_context m_ctx;
  // Declared in the order they may be destroyed backwards: the writer uses the pool and the
  // finalizer, the finalizer and scanner only the context.
  finalizer m_finalizer;
  held_scanner m_scanner;
  chunk_pool m_pool;
  temp_writer m_writer;

  std::unordered_map<file_key, front_file> m_front;
  std::uint64_t m_next_handle = 1;
  bool m_stopped = false;
};

file_store::impl::impl(storage_config cfg, post_fn post,
                       std::function<void(store_result)> on_stored,
                       std::function<void(session_id, std::vector<held_answer>)> on_held,
                       recovered_fn on_recovered)
    : m_post(std::move(post)), m_on_stored(std::move(on_stored)), m_on_held(std::move(on_held)),
      m_on_recovered(std::move(on_recovered)),
      m_ctx{std::move(cfg), posix_io{}, nullptr, unique_fd{}, 0, {}, {}, nullptr, {}},
      m_finalizer(m_ctx), m_scanner(m_ctx),
      m_pool(m_ctx.cfg.buffer_pool_bytes, m_ctx.cfg.chunk_bytes,
             [this](chunk* c) { m_writer.push(chunk_job{c}); }),
      m_writer(m_ctx, m_pool, m_finalizer,
               fit_open_files(m_ctx.cfg.max_open_files,
                              m_ctx.cfg.log ? *m_ctx.cfg.log : *spdlog::default_logger())) {
  m_ctx.logger = m_ctx.cfg.log ? m_ctx.cfg.log : spdlog::default_logger();
  m_ctx.io = posix_io(m_ctx.cfg.fault);
  if (!m_post) throw std::invalid_argument("storage: post function is empty");
  open_temp_dir(m_ctx);
  m_ctx.post_results = [this](std::vector<internal_result> r) { post_results(std::move(r)); };
  m_ctx.parity = std::make_unique<parity_store>(m_ctx.cfg.parity_memory_bytes);
  m_ctx.post_recovered = [this](session_id s, std::uint32_t fb, std::error_code ec) {
    m_post([weak = m_self, s, fb, ec] {
      if (auto self = weak.lock(); self && self->m_on_recovered) self->m_on_recovered(s, fb, ec);
    });
  };
}

void file_store::impl::start(const std::shared_ptr<impl>& self) {
  m_self = self;
  m_writer.start();
  m_finalizer.start();
  m_scanner.start();
}

void file_store::impl::shutdown() {
  if (m_stopped) return;
  m_stopped = true;
  m_pool.leave_slab();
  m_writer.stop();
  m_finalizer.stop();
  m_scanner.stop();
}

void file_store::impl::post_results(std::vector<internal_result> results) {
  if (results.empty()) return;
  m_post([weak = m_self, results = std::move(results)]() mutable {
    if (auto self = weak.lock()) self->on_results(results);
  });
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
    if (replaces != 0) m_writer.push(discard_job{replaces});
    m_ctx.counters.files_failed.fetch_add(1, std::memory_order_relaxed);
    std::vector<internal_result> r(1);
    r[0].handle = f.handle;
    r[0].r.key = key;
    r[0].r.ec = ec;
    r[0].r.detail = std::move(detail);
    post_results(std::move(r));
    return;
  }
  spec.mode &= 07777u & ~static_cast<std::uint32_t>(S_ISUID | S_ISGID);
  m_writer.push(begin_job{f.handle, replaces, key, std::move(spec), resume});
}

bool file_store::impl::write(file_key key, std::uint64_t offset, std::span<const std::byte> data) {
  auto it = m_front.find(key);
  if (it == m_front.end() || it->second.st != front_file::state::active) return false;
  const front_file& f = it->second;
  if (offset > f.size || data.size() > f.size - offset) return false;
  return m_pool.add_data(f.handle, offset, data);
}

void file_store::impl::finalize(file_key key, const sha256_digest& expected) {
  auto it = m_front.find(key);
  if (it == m_front.end() || it->second.st != front_file::state::active) return;
  front_file& f = it->second;
  f.st = front_file::state::finalizing;
  if (!m_pool.add_finalize(f.handle, expected)) m_writer.push(finalize_job{f.handle, expected});
}

void file_store::impl::discard_file(file_key key) {
  auto it = m_front.find(key);
  if (it == m_front.end() || it->second.st == front_file::state::finalizing) return;
  const std::uint64_t handle = it->second.handle;
  m_front.erase(it);
  m_writer.push(discard_job{handle});
}

void file_store::impl::close_session(session_id session, bool remove_temp) {
  m_pool.submit_current();  // finalize requests of the session riding in it complete first
  std::erase_if(m_front, [&](const auto& kv) { return kv.first.session == session; });
  m_ctx.parity->drop_session(session);
  m_writer.push(close_job{session, remove_temp});
}

bool file_store::impl::write_parity(session_id session, std::uint32_t fec_block,
                                    std::uint32_t index, std::span<const std::byte> data) {
  store_counters& c = m_ctx.counters;
  if (m_ctx.parity->keep(session, fec_block, index, data)) {
    c.parity_kept.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // The engine NAKs this FEC block's blocks one by one from now on and never asks to decode
  // it: what was kept for it is of no use.
  c.parity_refused.fetch_add(1, std::memory_order_relaxed);
  m_ctx.parity->drop(session, fec_block);
  return false;
}

void file_store::impl::recover(session_id session, recovery_request request) {
  recover_job j;
  j.session = session;
  j.handles.assign(request.sources.size(), 0);
  for (std::size_t i = 0; i < request.sources.size(); ++i) {
    const fec_source& src = request.sources[i];
    const auto it = m_front.find({session, src.file});
    if (it == m_front.end()) continue;  // delivered (stored or held), or never begun
    const front_file& f = it->second;
    if (f.st == front_file::state::active ||
        (src.available && f.st == front_file::state::finalizing)) {
      j.handles[i] = f.handle;
    }
  }
  const auto& roots = m_ctx.cfg.dest_roots;
  if (request.channel < roots.size()) j.dest_root = roots[request.channel];
  j.request = std::move(request);
  // The sources' blocks riding in the current chunk are written before the job reads them.
  m_pool.submit_current();
  m_writer.push(std::move(j));
}

void file_store::impl::deliver_file(file_key key, std::uint32_t channel, file_spec spec,
                                    std::string temp_path, const sha256_digest& expected,
                                    std::function<void(store_result)> done) {
  const std::uint64_t handle = m_next_handle++;
  const auto& roots = m_ctx.cfg.dest_roots;
  std::error_code ec = check_relative_path(spec.relative_path);
  spec.channel = channel;
  if (channel < roots.size()) {
    spec.dest_root = roots[channel];
  } else if (!ec) {
    ec = std::make_error_code(std::errc::invalid_argument);
  }
  if (ec) {
    ::unlink(temp_path.c_str());
    m_ctx.counters.files_failed.fetch_add(1, std::memory_order_relaxed);
    store_result r;
    r.key = key;
    r.ec = ec;
    r.detail = fmt::format("\"{}\" refused: {}; not stored", spec.relative_path, ec.message());
    m_post([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
    return;
  }
  spec.mode &= 07777u & ~static_cast<std::uint32_t>(S_ISUID | S_ISGID);
  m_delivered.emplace(handle, std::move(done));
  fin_file f;
  f.handle = handle;
  f.key = key;
  f.spec = std::move(spec);
  f.expected = expected;
  f.temp_path = std::move(temp_path);
  f.keep_newer = true;
  m_finalizer.push(fin_job(std::move(f)));
}

void file_store::impl::on_results(std::vector<internal_result>& results) {
  for (auto& ir : results) {
    if (const auto d = m_delivered.find(ir.handle); d != m_delivered.end()) {
      auto done = std::move(d->second);
      m_delivered.erase(d);
      if (done) done(std::move(ir.r));
      continue;
    }
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
// file_store

file_store::file_store(storage_config cfg, std::function<void(std::function<void()>)> post,
                       std::function<void(store_result)> on_stored,
                       std::function<void(session_id, std::vector<held_answer>)> on_held,
                       recovered_fn on_recovered)
    : m_impl(std::make_shared<impl>(std::move(cfg), std::move(post), std::move(on_stored),
                                    std::move(on_held), std::move(on_recovered))) {
  m_impl->start(m_impl);
}

file_store::~file_store() {
  if (m_impl) m_impl->shutdown();
}

void file_store::deliver_file(file_key key, std::uint32_t channel, file_spec spec,
                              std::string temp_path, const sha256_digest& expected,
                              std::function<void(store_result)> done) {
  m_impl->deliver_file(key, channel, std::move(spec), std::move(temp_path), expected,
                       std::move(done));
}

void file_store::begin_file(file_key key, file_spec spec, bool resume) {
  m_impl->begin_file(key, std::move(spec), resume);
}

void file_store::begin_file(file_key key, std::uint32_t channel, const manifest_entry& entry,
                            bool resume) {
  const auto& roots = m_impl->m_ctx.cfg.dest_roots;
  file_spec spec;
  if (channel < roots.size()) spec.dest_root = roots[channel];  // else refused: no destination
  spec.relative_path = entry.path;
  spec.size = entry.size;
  spec.mtime_ns = entry.mtime_ns;
  spec.mode = entry.mode;
  spec.channel = channel;
  if (const auto& key_of = m_impl->m_ctx.cfg.sender_key_of) spec.sender_key = key_of(key.session);
  m_impl->begin_file(key, std::move(spec), resume);
}

bool file_store::write(file_key key, std::uint64_t offset, std::span<const std::byte> data) {
  return m_impl->write(key, offset, data);
}

bool file_store::decodes_parity() const { return m_impl->m_ctx.cfg.parity_memory_bytes > 0; }

bool file_store::write_parity(session_id session, std::uint32_t fec_block, std::uint32_t index,
                              std::span<const std::byte> data) {
  return m_impl->write_parity(session, fec_block, index, data);
}

void file_store::recover(session_id session, recovery_request request) {
  m_impl->recover(session, std::move(request));
}

void file_store::flush() { m_impl->m_pool.submit_current(); }

void file_store::finalize(file_key key, const sha256_digest& expected) {
  m_impl->finalize(key, expected);
}

void file_store::discard_file(file_key key) { m_impl->discard_file(key); }

void file_store::close_session(session_id session, bool remove_temp) {
  m_impl->close_session(session, remove_temp);
}

void file_store::checkpoint(session_id session, std::string blob) {
  m_impl->m_pool.submit_current();
  m_impl->m_writer.push(checkpoint_job{session, std::move(blob)});
}

void file_store::query_held(std::vector<held_query> queries, std::filesystem::path dest_root,
                            std::function<void(std::vector<held_answer>)> done) {
  m_impl->m_scanner.push(
      scan_job{std::move(queries), std::move(dest_root),
               [post = m_impl->m_post, weak = std::weak_ptr<impl>(m_impl),
                done = std::move(done)](std::vector<held_answer> answers) mutable {
                 post([weak, done = std::move(done), answers = std::move(answers)]() mutable {
                   if (weak.lock() && done) done(std::move(answers));
                 });
               }});
}

void file_store::add_dest_root(std::filesystem::path root) {
  m_impl->m_ctx.cfg.dest_roots.push_back(std::move(root));
}

void file_store::query_held(session_id session, std::uint32_t channel,
                            std::vector<held_query> queries) {
  const auto& roots = m_impl->m_ctx.cfg.dest_roots;
  if (channel >= roots.size()) return;
  // Runs on the network thread, and only while the impl is alive (see the overload above).
  query_held(std::move(queries), roots[channel],
             [p = m_impl.get(), session](std::vector<held_answer> answers) {
               if (p->m_on_held) p->m_on_held(session, std::move(answers));
             });
}

file_store::stats file_store::get_stats() const {
  const store_counters& c = m_impl->m_ctx.counters;
  stats s;
  s.bytes_written = c.bytes_written.load(std::memory_order_relaxed);
  s.files_stored = c.files_stored.load(std::memory_order_relaxed);
  s.files_failed = c.files_failed.load(std::memory_order_relaxed);
  s.pool_exhausted = m_impl->m_pool.exhausted();
  s.chunks_in_flight = m_impl->m_pool.chunks_in_flight();
  s.queue_depth = c.queue_depth.load(std::memory_order_relaxed);
  s.bytes_reread = c.bytes_reread.load(std::memory_order_relaxed);
  s.parity_kept = c.parity_kept.load(std::memory_order_relaxed);
  s.parity_refused = c.parity_refused.load(std::memory_order_relaxed);
  s.parity_bytes = m_impl->m_ctx.parity->bytes();
  s.fec_blocks_recovered = c.fec_blocks_recovered.load(std::memory_order_relaxed);
  s.blocks_recovered = c.blocks_recovered.load(std::memory_order_relaxed);
  s.decode_failures = c.decode_failures.load(std::memory_order_relaxed);
  s.commit_batches = c.commit_batches.load(std::memory_order_relaxed);
  s.commit_batches_syncfs = c.commit_batches_syncfs.load(std::memory_order_relaxed);
  return s;
}

std::size_t file_store::free_bytes() const noexcept { return m_impl->m_pool.free_bytes(); }

std::filesystem::path file_store::temp_path(const std::filesystem::path& temp_dir, file_key key) {
  return temp_file_path(temp_dir, key);
}

}  // namespace mcdist::receiver
