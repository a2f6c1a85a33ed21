#include "receiver/storage/finalizer.hpp"

#include "common/error.hpp"
#include "common/sys/digest_xattr.hpp"
#include "common/sys/path_walk.hpp"
#include "receiver/storage/checkpoint_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <type_traits>
#include <unordered_set>

namespace mcdist::receiver {

namespace {

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

}  // namespace

std::optional<fin_job> take_finalizer_work(std::deque<fin_job>& queue, std::size_t cap,
                                           std::vector<fin_file>& batch) {
  if (queue.empty()) return std::nullopt;
  if (!std::holds_alternative<fin_file>(queue.front())) {
    std::optional<fin_job> other(std::move(queue.front()));
    queue.pop_front();
    return other;
  }
  while (!queue.empty() && batch.size() < cap && std::holds_alternative<fin_file>(queue.front())) {
    batch.push_back(std::move(std::get<fin_file>(queue.front())));
    queue.pop_front();
  }
  return std::nullopt;
}

/// One file of a finalize batch.
struct finalizer::work {
  fin_file* f = nullptr;
  bool ok = true;
  bool renamed = false;
  bool journaled = false;  ///< seen by before_renames: after_renames hears if it fails
  store_result r;
  int dir_fd = -1;  ///< destination directory (owned by the batch's directory cache)
  std::string leaf;
  std::string dest;  ///< dest_root/relative_path, for messages
};

/// Destination directories opened for one batch, and the directories to fsync after it.
struct finalizer::dir_cache {
  struct entry {
    int fd = -1;
    std::error_code ec;
    std::string detail;
  };
  std::unordered_map<std::string, entry> dirs;     ///< root '\0' parent -> fd
  std::unordered_map<std::string, entry> roots;    ///< dest_root -> fd
  std::unordered_map<std::string, int> temps;      ///< a temp file's directory -> fd, or -1
  std::map<std::pair<dev_t, ino_t>, int> to_sync;  ///< directories to fsync, deduplicated
  std::unordered_set<int> added;                   ///< descriptors given to add_sync already
  std::vector<int> owned;                          ///< every fd to close at the end

  ~dir_cache() {
    for (int fd : owned) ::close(fd);
  }
  int own(int fd) {
    owned.push_back(fd);
    return fd;
  }
  /// The directory of `temp_path` (the daemon's own temp tree) and the file's name in it, for
  /// an open or rename of one component instead of the whole path (a session's temp files
  /// share one directory). @return AT_FDCWD and the whole path when it cannot be opened
  std::pair<int, const char*> temp_at(const std::string& temp_path) {
    const std::size_t slash = temp_path.rfind('/');
    if (slash == std::string::npos || slash == 0) return {AT_FDCWD, temp_path.c_str()};
    auto [it, fresh] = temps.try_emplace(temp_path.substr(0, slash), -1);
    if (fresh) {
      const int fd = ::open(it->first.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0) it->second = own(fd);
    }
    if (it->second < 0) return {AT_FDCWD, temp_path.c_str()};
    return {it->second, temp_path.c_str() + slash + 1};
  }
  /// A directory to fsync after the batch; one fstat per descriptor, not per file renamed.
  void add_sync(int fd) {
    if (!added.insert(fd).second) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0) to_sync.emplace(std::make_pair(st.st_dev, st.st_ino), fd);
  }
};

finalizer::finalizer(store_context& ctx) : m_ctx(ctx) {}

finalizer::~finalizer() { stop(); }

void finalizer::start() {
  // Here, not in the constructor: file_store fills the context (logger, temp_fd) after
  // constructing its components.
  m_commit = std::make_unique<group_commit>(m_ctx.io, m_ctx.cfg, m_ctx.temp_fd.get(), m_ctx.log());
  m_thread = std::thread([this] { run(); });
}

void finalizer::stop() {
  {
    std::lock_guard lk(m_mutex);
    m_stop = true;
  }
  m_cv.notify_one();
  if (m_thread.joinable()) m_thread.join();
}

bool finalizer::note_queued() {
  if (!m_batch_opened) m_batch_opened = std::chrono::steady_clock::now();
  return !m_lingering || m_queue.size() >= batch_max;
}

void finalizer::push(std::vector<fin_job>& jobs) {
  if (jobs.empty()) return;
  bool wake = false;
  {
    std::lock_guard lk(m_mutex);
    for (auto& j : jobs) m_queue.push_back(std::move(j));
    wake = note_queued();
  }
  jobs.clear();
  if (wake) m_cv.notify_one();
}

void finalizer::push(fin_job job) {
  bool wake = false;
  {
    std::lock_guard lk(m_mutex);
    m_queue.push_back(std::move(job));
    wake = note_queued();
  }
  if (wake) m_cv.notify_one();
}

void finalizer::push_close(session_id session, bool remove_temp) {
  bool wake = false;
  {
    std::lock_guard lk(m_mutex);
    if (remove_temp) ++m_closing[session.value];
    m_queue.emplace_back(fin_close{session, remove_temp});
    wake = note_queued();
  }
  if (wake) m_cv.notify_one();
}

void finalizer::wait_closed(session_id session) {
  std::unique_lock lk(m_mutex);
  m_closed_cv.wait(lk, [&] { return !m_closing.contains(session.value); });
}

void finalizer::run() {
  // sync_mode::file makes each file durable on its own: batches of one.
  const std::size_t cap = m_ctx.cfg.sync == sync_mode::file ? 1 : batch_max;
  const auto linger = cap > 1 ? m_ctx.cfg.finalize_linger : std::chrono::microseconds{0};
  std::vector<fin_file> batch;
  for (;;) {
    std::optional<fin_job> other;
    {
      std::unique_lock lk(m_mutex);
      m_cv.wait(lk, [&] { return !m_queue.empty() || m_stop; });
      if (m_queue.empty()) return;
      // A batch not full waits for more files until its linger is over (pushes meanwhile do
      // not wake this thread unless the batch fills); a stop ends the wait.
      if (linger.count() > 0 && !m_stop && m_queue.size() < cap && m_batch_opened) {
        m_lingering = true;
        m_cv.wait_until(lk, *m_batch_opened + linger,
                        [&] { return m_queue.size() >= cap || m_stop; });
        m_lingering = false;
      }
      other = take_finalizer_work(m_queue, cap, batch);
      // What is left was queued while the last batch ran: it has waited its turn already.
      m_batch_opened.reset();
      if (!m_queue.empty()) m_batch_opened = std::chrono::steady_clock::time_point{};
    }
    try {
      if (!batch.empty()) {
        finalize_batch(batch);
      } else if (auto* cp = other ? std::get_if<fin_checkpoint>(&*other) : nullptr) {
        save_checkpoint(m_ctx, cp->session, cp->blob);
      } else if (auto* cl = other ? std::get_if<fin_close>(&*other) : nullptr) {
        close_session(*cl);
      }
    } catch (const std::exception& e) {
      m_ctx.log().error("storage: finalizer job failed: {}", e.what());
    }
    batch.clear();
  }
}

namespace {

/// Marks `w` failed; removes its temp file unless it is already in place.
/// (`detail` is a sink, moved into the result; clang-tidy 14 does not see a move of a parameter
/// in a template and asks for a const reference, hence the NOLINT.)
template <class Work>
void fail(Work& w, std::error_code ec,
          std::string detail) {  // NOLINT(performance-unnecessary-value-param)
  w.ok = false;
  w.r.ec = ec;
  w.r.detail = std::move(detail);
  if (!w.renamed) ::unlink(w.f->temp_path.c_str());
}

}  // namespace

void finalizer::verify(work& w, dir_cache& dirs) {
  fin_file& f = *w.f;
  const posix_io& io = m_ctx.io;
  if (f.fd < 0) {
    const auto [at, name] = dirs.temp_at(f.temp_path);
    if (int e = io.open(at, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0, &f.key, f.fd)) {
      return fail(w, errno_code(e),
                  fmt::format("cannot open temp file {} to finalize {} (open): {}", f.temp_path,
                              w.dest, std::strerror(e)));
    }
  }
  const auto size = f.spec.size;
  if (!(f.size_exact && f.prefix == size)) {
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) {
      const int e = errno;
      return fail(
          w, errno_code(e),
          fmt::format("cannot stat temp file {} (fstat): {}", f.temp_path, std::strerror(e)));
    }
    if (static_cast<std::uint64_t>(st.st_size) > size &&
        ::ftruncate(f.fd, static_cast<off_t>(size)) != 0) {
      const int e = errno;
      return fail(w, errno_code(e),
                  fmt::format("cannot trim temp file {} to {} bytes (ftruncate): {}", f.temp_path,
                              size, std::strerror(e)));
    }
    if (static_cast<std::uint64_t>(st.st_size) < size) {
      w.r.bytes = static_cast<std::uint64_t>(st.st_size);
      return fail(w, make_error_code(errc::digest_mismatch),
                  fmt::format("temp file {} holds {} of the {} bytes of {}: finalized before all "
                              "data was written; not delivered, it will be fetched again",
                              f.temp_path, st.st_size, size, w.dest));
    }
  }
  if (!m_buffer) m_buffer = std::make_unique_for_overwrite<std::byte[]>(reread_buffer_bytes);
  if (int e = io.read_hash(f.fd, f.prefix, size, f.hasher, {m_buffer.get(), reread_buffer_bytes},
                           &f.key, &m_ctx.counters.bytes_reread)) {
    return fail(w, errno_code(e),
                fmt::format("read-back of temp file {} for {} failed (pread): {}; check the "
                            "temp filesystem and the system log",
                            f.temp_path, w.dest, std::strerror(e)));
  }
  w.r.digest = f.hasher.finish();
  w.r.bytes = size;
  if (w.r.digest != f.expected) {
    return fail(w, make_error_code(errc::digest_mismatch),
                fmt::format("received data for {} hashes to {}, the manifest says {}; not "
                            "delivered, it will be fetched again",
                            w.dest, to_hex(w.r.digest), to_hex(f.expected)));
  }
  if (int e = f.mode_final ? 0 : io.fchmod(f.fd, static_cast<mode_t>(f.spec.mode), &f.key)) {
    return fail(w, errno_code(e),
                fmt::format("cannot set mode {:o} on temp file {} (fchmod): {}", f.spec.mode,
                            f.temp_path, std::strerror(e)));
  }
  const struct timespec times[2] = {{0, UTIME_NOW}, timespec_of_ns(f.spec.mtime_ns)};
  if (int e = io.futimens(f.fd, times, &f.key)) {
    return fail(w, errno_code(e),
                fmt::format("cannot set mtime on temp file {} (futimens): {}", f.temp_path,
                            std::strerror(e)));
  }
  if (m_ctx.cfg.record_digest_xattr) {
    const std::string v = digest_xattr_value(w.r.digest, size, f.spec.mtime_ns);
    const int e = io.fsetxattr(f.fd, digest_xattr_name, v, &f.key);
    if (e != 0 && !m_xattr_warned.exchange(true)) {
      // Not fatal: the file is right; query_held will hash it instead.
      m_ctx.log().warn(
          "storage: cannot record {} on {} (fsetxattr): {}; held files will be "
          "hashed to be recognised (further such failures are not logged)",
          digest_xattr_name, f.temp_path, std::strerror(e));
    }
  }
}

void finalizer::open_dest_dir(work& w, dir_cache& dirs) {
  const fin_file& f = *w.f;
  const posix_io& io = m_ctx.io;
  const std::string& root = f.spec.dest_root.native();
  auto [rit, rnew] = dirs.roots.try_emplace(root);
  if (rnew) {
    int fd = -1;
    int e = io.open(AT_FDCWD, root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, nullptr, fd);
    if (e == ENOENT) {
      std::error_code cec;
      std::filesystem::create_directories(f.spec.dest_root, cec);
      e = io.open(AT_FDCWD, root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, nullptr, fd);
    }
    if (e != 0) {
      rit->second.ec = errno_code(e);
      rit->second.detail =
          fmt::format("cannot open destination directory {}: {}", root, std::strerror(e));
    } else {
      rit->second.fd = dirs.own(fd);
    }
  }
  if (rit->second.fd < 0) return fail(w, rit->second.ec, rit->second.detail);

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
  // The usual case, a directory that exists: one lookup (open_dir_below) instead of one open
  // per component. Anything else (missing, a link, not a directory) takes the walk below,
  // which creates what is missing and names what is wrong.
  if (dnew && !parent.empty()) {
    int fd = -1;
    if (open_dir_below(rit->second.fd, parent, fd) == 0) dit->second.fd = dirs.own(fd);
  }
  if (dnew && dit->second.fd < 0) {
    dir_cache::entry& d = dit->second;
    int cur = rit->second.fd;
    bool cur_owned = false;
    std::string walked;
    for (auto c : comps) {
      const std::string comp(c);
      if (!walked.empty()) walked += '/';
      walked += comp;
      constexpr int dir_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
      int next = -1;
      int e = io.open(cur, comp.c_str(), dir_flags, 0, nullptr, next);
      if (e == ENOENT) {
        e = io.mkdir(cur, comp.c_str(), 0755);
        if (e == 0) {
          // The new entry lives in `cur`: fsync it after the renames.
          if (cur_owned) {
            dirs.own(cur);
            cur_owned = false;
          }
          dirs.add_sync(cur);
          e = io.open(cur, comp.c_str(), dir_flags, 0, nullptr, next);
        }
      }
      if (e == ENOTDIR && is_symlink_at(cur, comp.c_str())) e = ELOOP;
      if (e != 0) {
        d.ec = errno_code(e);
        if (e == ENOTDIR) {
          d.detail = fmt::format(
              "{}/{} exists and is not a directory, so {} cannot be "
              "created there; remove it or fix the manifest",
              root, walked, f.spec.relative_path);
        } else if (e == ELOOP) {
          d.detail = fmt::format(
              "{}/{} is a symbolic link; files are never written through "
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
  if (dit->second.fd < 0) return fail(w, dit->second.ec, dit->second.detail);
  // A directory where the file goes fails the file at its rename (EISDIR), not by a stat of
  // every destination beforehand.
  w.dir_fd = dit->second.fd;
}

void finalizer::make_durable(std::vector<work>& batch) {
  std::vector<work*> ok;
  std::vector<durable_file> files;
  for (auto& w : batch) {
    if (!w.ok) continue;
    ok.push_back(&w);
    files.push_back(durable_file{w.f->fd, &w.f->key, w.f->spec.size});
  }
  m_commit->make_durable(files);
  if (!files.empty() && m_ctx.cfg.sync != sync_mode::none) {
    m_ctx.counters.commit_batches.fetch_add(1, std::memory_order_relaxed);
    if (m_commit->last_by_syncfs())
      m_ctx.counters.commit_batches_syncfs.fetch_add(1, std::memory_order_relaxed);
  }
  for (std::size_t i = 0; i < ok.size(); ++i) {
    const durable_file& d = files[i];
    if (d.error == 0) continue;
    work& w = *ok[i];
    fail(w, errno_code(d.error),
         fmt::format("cannot make temp file {} for {} durable ({}): {}; not delivered; check "
                     "the temp filesystem and the system log",
                     w.f->temp_path, w.dest, to_string(d.failed_op), std::strerror(d.error)));
  }
}

void finalizer::before_renames(std::vector<work>& batch) {
  if (!m_ctx.cfg.before_renames) return;
  std::vector<pending_rename> files;
  for (const auto& w : batch)
    if (w.ok) files.push_back(pending_rename{w.f->key, &w.f->spec, w.r.digest});
  if (files.empty()) return;
  try {
    m_ctx.cfg.before_renames(files);
    for (auto& w : batch) w.journaled = w.ok;
  } catch (const std::exception& e) {
    // The hook could not record them (the delivery journal): none is renamed, each fails and
    // is fetched again, rather than appearing in dest unrecorded.
    for (auto& w : batch)
      if (w.ok)
        fail(w, std::make_error_code(std::errc::io_error),
             fmt::format("{} not delivered: {}", w.dest, e.what()));
  }
}

void finalizer::after_renames(std::vector<work>& batch) {
  if (!m_ctx.cfg.after_renames) return;
  bool any = false;
  std::vector<pending_rename> failed;
  for (const auto& w : batch) {
    any = any || w.journaled;
    if (w.journaled && !w.ok) failed.push_back(pending_rename{w.f->key, &w.f->spec, w.r.digest});
  }
  if (!any) return;
  try {
    m_ctx.cfg.after_renames(failed);
  } catch (const std::exception& e) {
    m_ctx.log().error("storage: after renames: {}", e.what());
  }
}

void finalizer::rename_all(std::vector<work>& batch, dir_cache& dirs) {
  for (auto& w : batch) {
    if (!w.ok) continue;
    if (w.f->keep_newer) {
      struct stat st {};
      if (::fstatat(w.dir_fd, w.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          mtime_ns_of(st) >= w.f->spec.mtime_ns) {
        fail(w, make_error_code(errc::stale),
             fmt::format("{} is not older than the version offered (mtime {} ns, offered {} "
                         "ns): an older version never replaces a newer one; left as it is",
                         w.dest, mtime_ns_of(st), w.f->spec.mtime_ns));
        continue;
      }
    }
    const auto [at, name] = dirs.temp_at(w.f->temp_path);
    if (int e = m_ctx.io.rename(at, name, w.dir_fd, w.leaf.c_str(), &w.f->key)) {
      std::string why;
      if (e == EXDEV)
        why =
            "temp_dir and the destination are on different filesystems; set temp_dir on the "
            "destination filesystem";
      else if (e == EISDIR)
        why = "the destination exists and is a directory; remove it so the file can be delivered";
      else
        why = "check permissions and space on the destination filesystem";
      fail(w, errno_code(e),
           fmt::format("cannot rename {} to {} (renameat): {}; {}", w.f->temp_path, w.dest,
                       std::strerror(e), why));
      continue;
    }
    w.renamed = true;
    dirs.add_sync(w.dir_fd);
  }
}

void finalizer::sync_dirs(std::vector<work>& batch, dir_cache& dirs) {
  if (m_ctx.cfg.sync == sync_mode::none) return;
  // One syncfs for every directory of a batch whose data went by syncfs: one flush, not one
  // per directory (ext4 without a journal flushes the device on each fsync).
  if (dirs.to_sync.size() > 1 && m_commit->make_dirs_durable_by_syncfs()) return;
  for (auto& [id, fd] : dirs.to_sync) {
    const int e = m_ctx.io.dir_fsync(fd);
    if (e == 0) continue;
    m_ctx.log().error("storage: fsync of a destination directory failed: {}", std::strerror(e));
    for (auto& w : batch) {
      if (w.renamed && w.dir_fd == fd && w.ok)
        fail(w, errno_code(e),
             fmt::format("{} was renamed into place but its directory could not be made "
                         "durable (fsync): {}; it may vanish after a crash, so it is reported "
                         "failed and will be fetched again",
                         w.dest, std::strerror(e)));
    }
  }
}

void finalizer::report(std::vector<work>& batch) {
  std::vector<internal_result> results;
  results.reserve(batch.size());
  for (auto& w : batch) {
    fin_file& f = *w.f;
    if (f.fd >= 0) ::close(f.fd);
    f.fd = -1;
    if (f.fd_counted) m_fds.fetch_sub(1, std::memory_order_relaxed);
    if (w.ok) {
      m_ctx.counters.files_stored.fetch_add(1, std::memory_order_relaxed);
    } else {
      m_ctx.counters.files_failed.fetch_add(1, std::memory_order_relaxed);
      m_ctx.log().warn("storage: {}", w.r.detail);
    }
    results.push_back(internal_result{f.handle, std::move(w.r)});
  }
  m_ctx.post_results(std::move(results));
}

void finalizer::finalize_batch(std::vector<fin_file>& files) {
  std::vector<work> batch(files.size());
  dir_cache dirs;
  for (std::size_t i = 0; i < files.size(); ++i) {
    work& w = batch[i];
    w.f = &files[i];
    w.r.key = files[i].key;
    w.dest = (files[i].spec.dest_root / files[i].spec.relative_path).string();
    verify(w, dirs);
  }
  for (work& w : batch)
    if (w.ok) open_dest_dir(w, dirs);
  make_durable(batch);  // before any rename makes the data visible
  before_renames(batch);
  rename_all(batch, dirs);
  sync_dirs(batch, dirs);  // the renames and created directories, each directory once
  after_renames(batch);
  report(batch);
}

void finalizer::close_session(const fin_close& j) {
  if (!j.remove_temp) return;
  const auto dir = m_ctx.cfg.temp_dir / session_hex(j.session);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec)
    m_ctx.log().warn("storage: cannot remove temp directory {}: {}", dir.string(), ec.message());
  {
    std::lock_guard lk(m_mutex);
    auto it = m_closing.find(j.session.value);
    if (it != m_closing.end() && --it->second == 0) m_closing.erase(it);
  }
  m_closed_cv.notify_all();
}

}  // namespace mcdist::receiver
