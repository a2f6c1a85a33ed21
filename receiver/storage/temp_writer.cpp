#include "receiver/storage/temp_writer.hpp"

#include "common/error.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mcdist::receiver {

namespace {

/// Most bytes the writer re-reads for prefix catch-up between two batches of jobs while data
/// is waiting (1 MiB ~ 0.7 ms of SHA-256 here): writes never wait long behind a closed gap.
constexpr std::uint64_t catchup_slice_bytes = 1u << 20;
/// Least catch-up per batch while data flows (64 KiB), so closed gaps still make progress.
constexpr std::uint64_t catchup_min_bytes = 64u << 10;

}  // namespace

temp_writer::temp_writer(store_context& ctx, chunk_pool& pool, finalizer& fin,
                         std::size_t max_open_files)
    : m_ctx(ctx), m_pool(pool), m_fin(fin), m_max_open_files(max_open_files) {
  bool steps = false;
  if (m_ctx.cfg.preallocate_in_steps) {
    steps = *m_ctx.cfg.preallocate_in_steps;
  } else {
    struct statfs fs {};
    steps = ::statfs(m_ctx.cfg.temp_dir.c_str(), &fs) == 0 &&
            static_cast<unsigned long>(fs.f_type) == TMPFS_MAGIC;
  }
  if (steps) m_preallocate_step = m_ctx.cfg.preallocate_step_bytes;
}

temp_writer::~temp_writer() {
  stop();
  // Temp files stay for resume; close what the writer still had open.
  for (auto& [h, f] : m_files) {
    if (f.fd >= 0) ::close(f.fd);
    f.fd = -1;
  }
}

void temp_writer::start() {
  m_thread = std::thread([this] { run(); });
}

void temp_writer::stop() {
  {
    std::lock_guard lk(m_mutex);
    m_stop = true;
  }
  m_cv.notify_one();
  if (m_thread.joinable()) m_thread.join();
}

void temp_writer::push(writer_job job) {
  bool wake = false;
  {
    std::lock_guard lk(m_mutex);
    m_queue.push_back(std::move(job));
    m_ctx.counters.queue_depth.store(m_queue.size(), std::memory_order_relaxed);
    wake = m_waiting;
  }
  if (wake) m_cv.notify_one();
}

void temp_writer::run() {
  auto& written = m_ctx.counters.bytes_written;
  std::deque<writer_job> batch;
  for (;;) {
    bool idle = false;
    {
      std::unique_lock lk(m_mutex);
      while (m_queue.empty() && !m_stop && m_catchup.empty()) {
        m_waiting = true;
        m_cv.wait(lk);
        m_waiting = false;
      }
      if (m_queue.empty() && m_stop) break;
      batch.swap(m_queue);
      m_ctx.counters.queue_depth.store(0, std::memory_order_relaxed);
      idle = batch.empty();
    }
    const std::uint64_t before = written.load(std::memory_order_relaxed);
    for (auto& job : batch) {
      // Nothing here throws but allocation; a thread that dies takes the daemon with it, so a
      // job that cannot be done is logged and skipped instead.
      try {
        std::visit([this](auto& j) { do_job(j); }, job);
      } catch (const std::exception& e) {
        m_ctx.log().error("storage: writer job failed: {}", e.what());
      }
    }
    batch.clear();
    if (!m_catchup.empty()) {
      // Re-hash at most as much as was just written while data is flowing, a full slice when
      // idle, so closed gaps are hashed in the background without starving writes.
      const std::uint64_t wrote = written.load(std::memory_order_relaxed) - before;
      do_catchup(idle ? catchup_slice_bytes
                      : std::clamp<std::uint64_t>(wrote, catchup_min_bytes, catchup_slice_bytes));
    }
  }
}

std::pair<std::error_code, std::string> temp_writer::check_dest_root(
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
    result = {errno_code(e), fmt::format("cannot stat destination directory {}: {}", root.string(),
                                         std::strerror(e))};
  } else if (!S_ISDIR(st.st_mode)) {
    result = {std::make_error_code(std::errc::not_a_directory),
              fmt::format("destination {} is not a directory", root.string())};
  } else if (st.st_dev != m_ctx.temp_dev) {
    result = {std::make_error_code(std::errc::cross_device_link),
              fmt::format("temp_dir {} and destination {} are on different filesystems, so "
                          "files cannot be renamed into place atomically; set temp_dir to a "
                          "directory on the destination filesystem",
                          m_ctx.cfg.temp_dir.string(), root.string())};
    m_ctx.log().error("storage: {}", result.second);
  }
  if (!result.first) m_dest_checked.emplace(root.native(), result);  // failures: retry later
  return result;
}

void temp_writer::close_fd(wfile& f) {
  if (f.fd < 0) return;
  ::close(f.fd);
  f.fd = -1;
  m_lru.erase(f.lru);
  --m_open_count;
}

std::error_code temp_writer::ensure_open(std::uint64_t handle, wfile& f, bool create,
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
  int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW;
  if (create) flags |= O_CREAT;
  if (truncate) flags |= O_TRUNC;
  // A file started afresh is created with its final mode (never less than the owner's read and
  // write the writer needs to reopen it; the session directory is 0700, so nobody else sees
  // it meanwhile): when the umask leaves that mode whole, the finalizer has no fchmod to do.
  // O_EXCL tells a file created now from a stale one truncated, which keeps its old mode.
  const bool fresh = create && truncate;
  const auto want = static_cast<mode_t>(f.spec.mode);
  const mode_t mode = fresh && (want & ~mode_t{0777}) == 0 ? (want | 0600) : 0600;
  const auto dir = m_session_dirs.find(f.key.session.value);
  const std::string leaf = std::to_string(f.key.file.value) + ".part";
  auto open_with = [&](int fl) {
    return dir != m_session_dirs.end()
               ? m_ctx.io.open(dir->second.get(), leaf.c_str(), fl, mode, &f.key, f.fd)
               : m_ctx.io.open(AT_FDCWD, f.temp_path.c_str(), fl, mode, &f.key, f.fd);
  };
  int e = open_with(fresh ? flags | O_EXCL : flags);
  const bool created = fresh && e == 0;
  if (fresh && e == EEXIST) e = open_with(flags);
  if (e != 0) return errno_code(e);
  if (fresh) {
    f.size_exact = true;
    f.mode_final = created && m_ctx.umask && (mode & ~*m_ctx.umask) == want;
  }
  m_lru.push_front(handle);
  f.lru = m_lru.begin();
  ++m_open_count;
  return {};
}

void temp_writer::unaccount(const wfile& f) {
  const auto it = m_session_bytes.find(f.key.session.value);
  if (it == m_session_bytes.end()) return;
  it->second -= std::min(it->second, f.spec.size);
  if (it->second == 0) m_session_bytes.erase(it);
}

void temp_writer::drop_file(std::uint64_t handle, bool unlink_temp) {
  auto it = m_files.find(handle);
  if (it == m_files.end()) return;
  close_fd(it->second);
  unaccount(it->second);
  if (unlink_temp) ::unlink(it->second.temp_path.c_str());
  m_catchup.erase(handle);
  m_files.erase(it);
}

void temp_writer::fail_file(std::uint64_t handle, std::error_code ec, std::string detail) {
  auto it = m_files.find(handle);
  if (it == m_files.end()) return;
  std::vector<internal_result> r(1);
  r[0].handle = handle;
  r[0].r.key = it->second.key;
  r[0].r.ec = ec;
  r[0].r.detail = std::move(detail);
  r[0].r.bytes = it->second.prefix;
  m_ctx.log().warn("storage: {}", r[0].r.detail);
  drop_file(handle, true);
  m_ctx.counters.files_failed.fetch_add(1, std::memory_order_relaxed);
  m_ctx.post_results(std::move(r));
}

void temp_writer::fail_begin(const begin_job& j, std::error_code ec, std::string detail) {
  std::vector<internal_result> r(1);
  r[0].handle = j.handle;
  r[0].r.key = j.key;
  r[0].r.ec = ec;
  r[0].r.detail = std::move(detail);
  m_ctx.log().warn("storage: {}", r[0].r.detail);
  m_ctx.counters.files_failed.fetch_add(1, std::memory_order_relaxed);
  m_ctx.post_results(std::move(r));
}

bool temp_writer::fits_reserve(const begin_job& j) {
  const storage_config& cfg = m_ctx.cfg;
  const auto now = std::chrono::steady_clock::now();
  auto reserve_of = [&](const free_space& fs) {
    const auto pct_bytes = static_cast<std::uint64_t>(static_cast<double>(fs.total) *
                                                      cfg.disk_reserve_percent / 100.0);
    return std::min(cfg.disk_reserve_bytes, pct_bytes);
  };
  auto fits = [&](const free_space& fs) {
    return j.spec.size <= fs.avail && fs.avail - j.spec.size >= reserve_of(fs);
  };
  // The last answer of fstatvfs, less what was admitted since, while it is fresh and says the
  // file fits; a refusal is always on a fresh answer.
  if (!m_space.known || now - m_space.at > free_space_max_age || !fits(m_space)) {
    struct statvfs sv {};
    if (::fstatvfs(m_ctx.temp_fd.get(), &sv) != 0) return true;  // cannot tell: admit
    const std::uint64_t unit = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
    m_space = {true, now, std::uint64_t{sv.f_bavail} * unit, std::uint64_t{sv.f_blocks} * unit};
  }
  if (!fits(m_space)) {
    fail_begin(j, make_error_code(errc::disk_reserve),
               fmt::format("\"{}\" ({} bytes) does not fit the temp filesystem of {}: {} "
                           "bytes free, {} kept in reserve (disk_reserve, "
                           "disk_reserve_percent); free space there",
                           j.spec.relative_path, j.spec.size, cfg.temp_dir.string(), m_space.avail,
                           reserve_of(m_space)));
    return false;
  }
  m_space.avail -= j.spec.size;
  return true;
}

bool temp_writer::admit(const begin_job& j) {
  // Budgets, before anything is allocated on disk: the session's quota, then the free-space
  // reserve of the temp filesystem. A resumed file already holds its space.
  std::uint64_t& session_bytes = m_session_bytes[j.key.session.value];
  const storage_config& cfg = m_ctx.cfg;
  if (!j.resume && j.spec.size > 0) {
    const std::uint64_t quota = cfg.session_quota_bytes;
    if (quota != 0 && j.spec.size > quota - std::min(quota, session_bytes)) {
      fail_begin(j, make_error_code(errc::quota),
                 fmt::format("\"{}\" ({} bytes) would take session {}'s files being written past "
                             "its quota of {} bytes (session_quota)",
                             j.spec.relative_path, j.spec.size, session_hex(j.key.session), quota));
      if (session_bytes == 0) m_session_bytes.erase(j.key.session.value);
      return false;
    }
    const bool reserve_on = cfg.disk_reserve_bytes != 0 && cfg.disk_reserve_percent > 0;
    if (reserve_on && !fits_reserve(j)) {
      if (session_bytes == 0) m_session_bytes.erase(j.key.session.value);
      return false;
    }
  }
  session_bytes += j.spec.size;
  return true;
}

void temp_writer::do_job(begin_job& j) {
  if (j.replaces != 0) drop_file(j.replaces, false);
  // A session id reused right after close_session(remove_temp): wait until its temp dir is
  // gone, or the removal would take the new file with it. Rare; never on the network thread.
  m_fin.wait_closed(j.key.session);
  const std::string path = temp_file_path(m_ctx.cfg.temp_dir, j.key).string();

  if (!m_session_dirs.contains(j.key.session.value)) {
    const auto dir = m_ctx.cfg.temp_dir / session_hex(j.key.session);
    int e = 0;
    const int fd = m_ctx.open_session_dir(j.key.session, e);
    if (fd < 0) {
      return fail_begin(
          j, errno_code(e),
          e == ELOOP || e == ENOTDIR
              ? fmt::format("temp directory {} is a symlink or not a directory; refused, not "
                            "followed (remove it: nothing but mcdistd should write in "
                            "temp_dir)",
                            dir.string())
              : fmt::format("cannot create temp directory {} (mkdirat): {}; check that "
                            "temp_dir is writable and not full",
                            dir.string(), std::strerror(e)));
    }
    m_session_dirs[j.key.session.value].reset(fd);
  }
  if (auto [ec, detail] = check_dest_root(j.spec.dest_root); ec) {
    return fail_begin(j, ec,
                      fmt::format("{} (while starting \"{}\")", detail, j.spec.relative_path));
  }
  if (!admit(j)) return;

  auto [it, inserted] = m_files.try_emplace(j.handle);
  wfile& f = it->second;
  f.key = j.key;
  f.temp_path = path;
  f.spec = std::move(j.spec);
  if (auto ec = ensure_open(j.handle, f, true, !j.resume)) {
    return fail_file(j.handle, ec,
                     fmt::format("cannot create temp file {} for \"{}\" (open): {}; check "
                                 "temp_dir permissions and free descriptors",
                                 path, f.spec.relative_path, ec.message()));
  }
  if (f.spec.size > 0 && f.spec.size >= m_ctx.cfg.preallocate_min_bytes) {
    f.preallocate_to = f.spec.size;
    preallocate(j.handle, f, 0);
  }
}

bool temp_writer::preallocate(std::uint64_t handle, wfile& f, std::uint64_t end) {
  const std::uint64_t from = f.preallocated;
  const std::uint64_t to =
      m_preallocate_step == 0
          ? f.preallocate_to
          : std::min(f.preallocate_to, std::max(end, from) + m_preallocate_step);
  if (to <= from) return true;
  const int e = m_ctx.io.fallocate(f.fd, from, to - from, &f.key);
  if (e == EOPNOTSUPP || e == ENOSYS) {
    f.preallocate_to = 0;  // not on this filesystem: writes allocate as they go
    return true;
  }
  if (e != 0) {
    fail_file(handle, errno_code(e),
              fmt::format("cannot reserve {} bytes for \"{}\" in temp file {} (fallocate): {}; "
                          "free space on the temp filesystem, the file will be fetched again "
                          "when retried",
                          f.spec.size, f.spec.relative_path, f.temp_path, std::strerror(e)));
    return false;
  }
  f.preallocated = to;
  return true;
}

void temp_writer::flush_handoffs() { m_fin.push(m_handoffs); }

void temp_writer::do_job(chunk_job& j) {
  chunk* c = j.c;
  for (const chunk_entry& e : c->entries) {
    if (e.what == chunk_entry::kind::data) {
      write_range(e.handle, e.offset, c->bytes(e));
    } else {
      hand_off(e.handle, c->digests[e.pos]);
    }
  }
  m_pool.release(c);
  // Finalize requests go to the finalizer only after the chunk is back in the pool, so a
  // store_result proves every chunk queued before its finalize has been returned.
  flush_handoffs();
}

void temp_writer::do_job(finalize_job& j) {
  hand_off(j.handle, j.expected);
  flush_handoffs();
}

void temp_writer::do_job(discard_job& j) { drop_file(j.handle, true); }

void temp_writer::do_job(close_job& j) {
  std::vector<std::uint64_t> handles;
  for (const auto& [h, f] : m_files)
    if (f.key.session == j.session) handles.push_back(h);
  for (auto h : handles) drop_file(h, false);
  m_session_dirs.erase(j.session.value);
  m_session_bytes.erase(j.session.value);
  m_fin.push_close(j.session, j.remove_temp);
}

void temp_writer::do_job(checkpoint_job& j) {
  m_fin.push(fin_checkpoint{j.session, std::move(j.blob)});
}

void temp_writer::hand_off(std::uint64_t handle, const sha256_digest& expected) {
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
  ff.size_exact = f.size_exact;
  ff.mode_final = f.mode_final;
  unaccount(f);
  if (f.fd >= 0) {
    if (m_fin.fd_available()) {
      ff.fd = f.fd;
      ff.fd_counted = true;
      m_fin.take_fd();
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

void temp_writer::write_range(std::uint64_t handle, std::uint64_t offset,
                              std::span<const std::byte> data) {
  auto it = m_files.find(handle);
  if (it == m_files.end()) return;  // failed, discarded or restarted
  wfile& f = it->second;
  const std::uint64_t end = offset + data.size();
  if (end <= f.prefix) return;  // already hashed: a duplicate may not change it
  if (offset < f.prefix) {
    data = data.subspan(static_cast<std::size_t>(f.prefix - offset));
    offset = f.prefix;
  }
  if (auto ec = ensure_open(handle, f, false, false)) {
    return fail_file(handle, ec,
                     fmt::format("cannot reopen temp file {} for \"{}\" (open): {}; was it "
                                 "removed?",
                                 f.temp_path, f.spec.relative_path, ec.message()));
  }
  // Stepwise preallocation stays at least half a step ahead of the data.
  if (f.preallocated < f.preallocate_to && end + m_preallocate_step / 2 > f.preallocated &&
      !preallocate(handle, f, end)) {
    return;
  }
  if (const int e = m_ctx.io.pwrite_all(f.fd, data, offset, &f.key)) {
    return fail_file(
        handle, errno_code(e),
        fmt::format("write of {} bytes at offset {} to temp file {} for \"{}\" "
                    "failed (pwrite): {}; {}",
                    data.size(), offset, f.temp_path, f.spec.relative_path, std::strerror(e),
                    e == ENOSPC || e == EDQUOT
                        ? "free space on the temp filesystem; the file will be "
                          "fetched again when retried"
                        : "check the temp filesystem and the system log"));
  }
  m_ctx.counters.bytes_written.fetch_add(data.size(), std::memory_order_relaxed);

  if (offset == f.prefix) {
    f.hasher.update(data);
    f.prefix = end;
    f.written.erase_below(end);
  } else {
    f.written.insert(offset, end);
  }
  if (auto first = f.written.first(); first && first->first <= f.prefix) m_catchup.insert(handle);
  kick_writeback(f, offset, end);
}

void temp_writer::kick_writeback(wfile& f, std::uint64_t offset, std::uint64_t end) {
  if (m_ctx.cfg.sync == sync_mode::none || m_ctx.cfg.writeback_bytes == 0) return;
  f.wb_lo = std::min(f.wb_lo, offset);
  f.wb_hi = std::max(f.wb_hi, end);
  f.wb_bytes += end - offset;
  if (f.wb_bytes < m_ctx.cfg.writeback_bytes) return;
  // Start writeback now so the fsync at finalize has little left to do. Advisory: errors
  // surface at fsync.
  ::sync_file_range(f.fd, static_cast<off_t>(f.wb_lo), static_cast<off_t>(f.wb_hi - f.wb_lo),
                    SYNC_FILE_RANGE_WRITE);
  f.wb_lo = UINT64_MAX;
  f.wb_hi = 0;
  f.wb_bytes = 0;
}

std::uint64_t temp_writer::do_catchup(std::uint64_t budget) {
  std::uint64_t done = 0;
  if (!m_buffer) m_buffer = std::make_unique_for_overwrite<std::byte[]>(reread_buffer_bytes);
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
    if (int e = m_ctx.io.read_hash(f.fd, from, to, f.hasher, {m_buffer.get(), reread_buffer_bytes},
                                   &f.key, &m_ctx.counters.bytes_reread)) {
      fail_file(handle, errno_code(e),
                fmt::format("read-back of temp file {} for \"{}\" failed (pread): {}; check "
                            "the temp filesystem and the system log",
                            f.temp_path, f.spec.relative_path, std::strerror(e)));
      continue;
    }
    f.prefix = to;
    f.written.erase_below(to);
    done += to - from;
    if (auto next = f.written.first(); !next || next->first > f.prefix) m_catchup.erase(handle);
  }
  return done;
}

}  // namespace mcdist::receiver
