#include "receiver/io/retention_sweeper.hpp"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include <sys/stat.h>
#include <unistd.h>

namespace mcdist::receiver {

retention_sweeper::retention_sweeper(boost::asio::io_context& io, const daemon_config& cfg,
                                     delivery_journal& journal,
                                     std::function<bool(std::size_t)> live,
                                     std::shared_ptr<spdlog::logger> log)
    : m_cfg(cfg), m_journal(journal), m_live(std::move(live)), m_log(std::move(log)), m_timer(io) {}

void retention_sweeper::stop() {
  m_stopping = true;
  m_timer.cancel();
}

void retention_sweeper::run() {
  if (m_stopping) return;
  const auto now = std::chrono::system_clock::now();
  for (std::size_t c = 0; c < m_cfg.channels.size(); ++c) {
    // A channel a reload removed or replaced: its live successor (same name) does this.
    if (m_live(c) && m_cfg.channels[c].retention_max_age) sweep_channel(m_cfg.channels[c], now);
  }
  try {
    const auto cut = now - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                               m_cfg.journal_max_age);
    if (const auto n = m_journal.prune(cut)) {
      m_log->info("journal: {} deliveries older than journal_max_age forgotten", n);
    }
  } catch (const std::exception& e) {
    m_log->error("journal {}: pruning: {}", m_journal.file().string(), e.what());
  }
  m_timer.expires_after(m_cfg.retention_interval);
  m_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) run();
  });
}

void retention_sweeper::sweep_channel(const channel_config& ch,
                                      std::chrono::system_clock::time_point now) {
  const auto before =
      now - std::chrono::duration_cast<std::chrono::system_clock::duration>(*ch.retention_max_age);
  std::vector<delivery_row> rows;
  try {
    rows = m_journal.expired(ch.name, before, batch);
  } catch (const std::exception& e) {
    m_log->error("journal {}: retention: {}", m_journal.file().string(), e.what());
    return;
  }
  for (const auto& d : rows) {
    // Only what we delivered, and only while it is still what we delivered: a product
    // replaced by a later delivery has a later row; one changed by hand is left alone.
    const std::filesystem::path path(d.path);
    struct stat st {};
    std::string reason = "deleted";
    if (::lstat(path.c_str(), &st) != 0) {
      reason = "gone";
    } else if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != d.size ||
               static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec !=
                   d.mtime_ns) {
      reason = "changed";
    } else if (::unlink(path.c_str()) != 0) {
      m_log->warn("retention: cannot delete {}: {}", path.string(), std::strerror(errno));
      continue;  // tried again next pass
    }
    if (reason == "deleted") {
      ++m_deleted;
      m_log->debug("retention: deleted {} (delivered {:.0f} s ago)", path.string(),
                   journal_time(now) - journal_time(d.delivered_at));
      // Empty parent directories go too, up to (not including) the destination root.
      const auto root = std::filesystem::path(d.dest).lexically_normal();
      for (auto dir = path.parent_path().lexically_normal();
           dir != root && dir.native().size() > root.native().size() &&
           dir.native().starts_with(root.native());
           dir = dir.parent_path()) {
        if (::rmdir(dir.c_str()) != 0) break;  // not empty (or not ours): stop
      }
    } else {
      ++m_skipped;
    }
    try {
      m_journal.mark_removed(d.id, reason, now);
    } catch (const std::exception& e) {
      m_log->error("journal {}: retention: {}", m_journal.file().string(), e.what());
    }
  }
}

}  // namespace mcdist::receiver
