#include "receiver/storage/group_commit.hpp"

#include <fcntl.h>

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#ifdef MCDIST_HAVE_LIBURING
#include <liburing.h>
#endif

namespace mcdist::receiver {

#ifdef MCDIST_HAVE_LIBURING
namespace {
/// Submission queue entries of the ring: one batch (finalizer::batch_max) at a time.
constexpr unsigned ring_entries = 256;
}  // namespace

/// An io_uring sized for one batch, kept for the life of the finalizer.
struct group_commit::ring {
  io_uring r{};
  bool up = false;  ///< io_uring_queue_init succeeded
  ~ring() {
    if (up) io_uring_queue_exit(&r);
  }
};
#else
struct group_commit::ring {};
#endif

std::optional<std::uint64_t> machine_dirty_bytes() noexcept {
  // One read: /proc/meminfo is ~1.5 kB and generated whole at open.
  const int fd = ::open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  const std::string_view text(buf, static_cast<std::size_t>(n));
  // "Dirty:             10140 kB": the value in KiB.
  auto field = [&](std::string_view name) -> std::optional<std::uint64_t> {
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t eol = std::min(text.find('\n', at), text.size());
      const std::string_view line = text.substr(at, eol - at);
      at = eol + 1;
      if (!line.starts_with(name) || line.size() <= name.size() || line[name.size()] != ':')
        continue;
      std::size_t i = name.size() + 1;
      while (i < line.size() && line[i] == ' ') ++i;
      std::uint64_t kib = 0;
      const auto [end, ec] = std::from_chars(line.data() + i, line.data() + line.size(), kib);
      if (ec != std::errc{} || end == line.data() + i) return std::nullopt;
      return kib * 1024;
    }
    return std::nullopt;
  };
  const auto dirty = field("Dirty");
  const auto writeback = field("Writeback");
  if (!dirty || !writeback) return std::nullopt;
  return *dirty + *writeback;
}

group_commit::group_commit(const posix_io& io, const storage_config& cfg, int temp_fd,
                           spdlog::logger& log)
    : m_io(io), m_mode(cfg.sync), m_threads(std::max(1u, cfg.commit_threads)),
      m_dirty_limit(cfg.adaptive_dirty_limit_bytes),
      m_dirty_probe(cfg.dirty_probe ? cfg.dirty_probe : [] { return machine_dirty_bytes(); }),
      m_temp_fd(temp_fd), m_log(log) {
  if (m_mode != sync_mode::uring) return;
#ifdef MCDIST_HAVE_LIBURING
  auto r = std::make_unique<ring>();
  if (const int e = io_uring_queue_init(ring_entries, &r->r, 0); e < 0) {
    m_log.warn(
        "storage: io_uring unavailable ({}); sync \"uring\" uses parallel fdatasync "
        "instead",
        std::strerror(-e));
    m_mode = sync_mode::fdatasync;
    return;
  }
  r->up = true;
  m_ring = std::move(r);
#else
  m_log.warn(
      "storage: this mcdistd was built without liburing; sync \"uring\" uses parallel "
      "fdatasync instead");
  m_mode = sync_mode::fdatasync;
#endif
}

group_commit::~group_commit() = default;

void group_commit::make_durable(std::span<durable_file> files) {
  m_last_by_syncfs = false;
  if (files.empty()) return;
  switch (m_mode) {
    case sync_mode::none: return;
    case sync_mode::file: return per_file(files, storage_op::fsync);
    case sync_mode::syncfs:
      if (files.size() == 1) return per_file(files, storage_op::fsync);
      m_last_by_syncfs = by_syncfs(files);
      return;
    case sync_mode::adaptive: return adaptively(files);
    case sync_mode::fdatasync: return in_parallel(files);
    case sync_mode::range: return by_range(files);
    case sync_mode::uring: return by_uring(files);
  }
}

bool group_commit::by_syncfs(std::span<durable_file> files) {
  const int e = m_io.syncfs(m_temp_fd);
  if (e == 0) return true;
  // Which file lost data is unknown: ask each with fsync, which reports its own error.
  m_log.warn("storage: syncfs of the temp filesystem failed: {}; falling back to fsync per file",
             std::strerror(e));
  per_file(files, storage_op::fsync);
  return false;
}

void group_commit::adaptively(std::span<durable_file> files) {
  if (files.size() > 1) {
    std::uint64_t own = 0;
    for (const auto& f : files) own += f.bytes;
    const auto dirty = m_dirty_probe();
    if (dirty && *dirty <= m_dirty_limit + own) {
      m_log.debug("storage: batch of {} files ({} bytes) by syncfs: {} bytes dirty", files.size(),
                  own, *dirty);
      m_last_by_syncfs = by_syncfs(files);
      return;
    }
    m_log.debug("storage: batch of {} files ({} bytes) by range: {} dirty", files.size(), own,
                dirty ? std::to_string(*dirty) + " bytes" : std::string("unknown"));
  }
  by_range(files);
}

bool group_commit::make_dirs_durable_by_syncfs() {
  if (!m_last_by_syncfs) return false;
  m_last_by_syncfs = false;
  if (const int e = m_io.syncfs(m_temp_fd)) {
    m_log.warn(
        "storage: syncfs of the temp filesystem failed: {}; falling back to fsync per "
        "directory",
        std::strerror(e));
    return false;
  }
  return true;
}

void group_commit::per_file(std::span<durable_file> files, storage_op op) {
  for (auto& f : files) {
    f.error = op == storage_op::fsync ? m_io.fsync(f.fd, f.key) : m_io.fdatasync(f.fd, f.key);
    f.failed_op = op;
  }
}

void group_commit::in_parallel(std::span<durable_file> files) {
  const auto n = static_cast<unsigned>(std::min<std::size_t>(m_threads, files.size()));
  if (n <= 1) return per_file(files, storage_op::fdatasync);
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < files.size(); i = next++) {
      files[i].error = m_io.fdatasync(files[i].fd, files[i].key);
      files[i].failed_op = storage_op::fdatasync;
    }
  };
  {
    // Threads per batch rather than a pool: starting one costs tens of microseconds, a
    // journal commit milliseconds, and nothing idles between batches.
    std::vector<std::jthread> helpers;
    helpers.reserve(n - 1);
    for (unsigned t = 1; t < n; ++t) helpers.emplace_back(work);
    work();
  }
}

void group_commit::by_range(std::span<durable_file> files) {
  // Advisory: an error here surfaces again at fdatasync, which reports it per file.
  for (auto& f : files) ::sync_file_range(f.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  per_file(files, storage_op::fdatasync);
}

void group_commit::by_uring(std::span<durable_file> files) {
#ifdef MCDIST_HAVE_LIBURING
  io_uring& r = m_ring->r;
  for (std::size_t base = 0; base < files.size(); base += ring_entries) {
    const std::size_t end = std::min<std::size_t>(files.size(), base + ring_entries);
    unsigned queued = 0;
    for (std::size_t i = base; i < end; ++i) {
      durable_file& f = files[i];
      f.failed_op = storage_op::fdatasync;
      if ((f.error = m_io.inject(storage_op::fdatasync, f.key)) != 0) continue;
      io_uring_sqe* sqe = io_uring_get_sqe(&r);  // never null: at most `entries` per round
      io_uring_prep_fsync(sqe, f.fd, IORING_FSYNC_DATASYNC);
      io_uring_sqe_set_data64(sqe, i);
      ++queued;
    }
    if (queued == 0) continue;
    const int submitted = io_uring_submit_and_wait(&r, queued);
    if (submitted < 0 || static_cast<unsigned>(submitted) != queued) {
      // Not submitted (or only in part): the ring is unusable, which is not these files'
      // fault. Drain what was submitted, then make the batch durable the plain way.
      m_log.warn(
          "storage: io_uring submission failed ({}); sync \"uring\" uses parallel "
          "fdatasync from now on",
          submitted < 0 ? std::strerror(-submitted) : "short submit");
      for (int k = 0; k < std::max(submitted, 0); ++k) {
        io_uring_cqe* cqe = nullptr;
        if (io_uring_wait_cqe(&r, &cqe) == 0) io_uring_cqe_seen(&r, cqe);
      }
      m_mode = sync_mode::fdatasync;
      return in_parallel(files.subspan(base));
    }
    std::vector<bool> pending(end - base);
    for (std::size_t i = base; i < end; ++i) pending[i - base] = files[i].error == 0;
    for (unsigned k = 0; k < queued; ++k) {
      io_uring_cqe* cqe = nullptr;
      int e = io_uring_wait_cqe(&r, &cqe);
      while (e == -EINTR) e = io_uring_wait_cqe(&r, &cqe);
      if (e < 0) {
        // The ring broke with syncs in flight: their outcome is unknown, so those files
        // fail (they are fetched again), and the ring is not used again.
        m_log.error(
            "storage: waiting for io_uring completions failed ({}); sync \"uring\" "
            "uses parallel fdatasync from now on",
            std::strerror(-e));
        for (std::size_t i = base; i < end; ++i)
          if (pending[i - base]) files[i].error = -e;
        m_ring.reset();
        m_mode = sync_mode::fdatasync;
        return in_parallel(files.subspan(end));
      }
      const auto i = static_cast<std::size_t>(io_uring_cqe_get_data64(cqe));
      if (i >= base && i < end) {
        pending[i - base] = false;
        if (cqe->res < 0) files[i].error = -cqe->res;
      }
      io_uring_cqe_seen(&r, cqe);
    }
  }
#else
  in_parallel(files);
#endif
}

}  // namespace mcdist::receiver
