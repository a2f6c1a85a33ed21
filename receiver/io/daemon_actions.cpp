// The daemon's delivery journal, actions on receipt and retention (delivery_journal.hpp,
// action_runner.hpp, docs/actions.md).

#include "common/digest_xattr.hpp"
#include "receiver/io/daemon.hpp"

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mcdist::receiver {

namespace {

/// Deliveries looked at per retention pass and channel (bounds one pass's time on the io
/// thread; the next pass goes on).
constexpr std::size_t retention_batch = 1000;

std::int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

/// The file's SHA-256, from its digest xattr when that records this size and mtime, else by
/// hashing it. std::nullopt when it cannot be read.
std::optional<sha256_digest> digest_of(int fd, std::uint64_t size, std::int64_t mtime_ns) {
  if (auto d = read_digest_xattr(fd, size, mtime_ns)) return d;
  sha256_hasher h;
  std::vector<std::byte> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    h.update(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n)));
  }
  return h.finish();
}

}  // namespace

void daemon::open_journal() {
  const auto file = m_cfg.journal.empty() ? m_cfg.temp / "journal.db" : m_cfg.journal;
  try {
    m_journal = std::make_unique<delivery_journal>(file, m_cfg.sync == sync_mode::none
                                                             ? sqlite::durability::normal
                                                             : sqlite::durability::full);
  } catch (const sqlite::error& e) {
    throw config_error(std::string("delivery journal: ") + e.what() +
                       " (set journal = \"FILE\" to a writable place)");
  }
  m_actions = std::make_unique<action_runner>(m_io, m_cfg.actions, *m_journal, m_log);
  m_log->info("delivery journal {}; {} action{} on receipt", file.string(), m_cfg.actions.size(),
              m_cfg.actions.size() == 1 ? "" : "s");
}

void daemon::journal_intents(std::span<const pending_rename> intents) {
  // Finalizer thread: a reload changes m_cfg on the io thread, so the channels' names come
  // from m_dest_names under its mutex; the journal has its own.
  std::vector<std::pair<std::filesystem::path, std::string>> names;
  {
    std::lock_guard lock(m_dest_names_mutex);
    names = m_dest_names;
  }
  std::vector<delivery_intent> rows;
  rows.reserve(intents.size());
  for (const auto& i : intents) {
    delivery_intent d;
    // The channel by its destination tree (channels sharing one dest are told apart only
    // by the delivery itself: deliver() matches intents by dest, path and digest).
    for (const auto& [dest, name] : names) {
      if (dest == i.spec->dest_root) {
        d.channel = name;
        break;
      }
    }
    d.dest = i.spec->dest_root.string();
    d.relpath = i.spec->relative_path;
    d.size = i.spec->size;
    d.mtime_ns = i.spec->mtime_ns;
    d.sha256 = to_hex(i.digest);
    d.session = fmt::format("{}", i.key.session);
    rows.push_back(std::move(d));
  }
  // An exception fails the batch's files (not renamed): they are fetched again.
  m_journal->record_intents(rows);
}

void daemon::journal_delivery(const file_outcome& o, const std::string* key) {
  if (!m_journal || o.channel >= m_cfg.channels.size()) return;
  const auto& ch = m_cfg.channels[o.channel];
  try {
    if (!o.stored || !o.digest) {
      m_journal->drop_intents(ch.dest.string(), std::string(o.path));
      return;
    }
    delivery_row d;
    d.channel = ch.name;
    d.dest = ch.dest.string();
    d.relpath = std::string(o.path);
    d.path = (ch.dest / d.relpath).string();
    d.size = o.size;
    d.mtime_ns = o.mtime_ns;
    d.sha256 = to_hex(*o.digest);
    d.session = fmt::format("{}", o.session);
    // The pinned trusted sender key that verified the session ("mcdist-ed25519:BASE64", as in
    // trusted_senders); "" (NULL in the journal) for an unsigned session.
    d.sender_key = key ? *key : sender_key(o.session);
    d.delivered_at = std::chrono::system_clock::now();
    auto names = m_actions->matching(d.channel, d.relpath);
    if (m_unjournaled.empty()) boost::asio::post(m_io, [this] { flush_deliveries(); });
    m_unjournaled.push_back({std::move(d), std::move(names), {}});
  } catch (const std::exception& e) {
    m_log->error("journal {}: cannot drop the intent of {} ({})", m_journal->file().string(),
                 std::string(o.path), e.what());
  }
}

void daemon::flush_deliveries() {
  if (m_unjournaled.empty()) return;
  auto batch = std::move(m_unjournaled);
  m_unjournaled.clear();
  try {
    m_journal->deliver_batch(batch);
  } catch (const std::exception& e) {
    // The intents stay: the next start finds these files in place and journals them then.
    m_log->error(
        "journal {}: cannot record {} deliver{} ({}): their actions run after the "
        "next restart",
        m_journal->file().string(), batch.size(), batch.size() == 1 ? "y" : "ies", e.what());
    return;
  }
  for (const auto& e : batch) {
    for (std::size_t i = 0; i < e.actions.size(); ++i) {
      m_actions->submit(e.run_ids[i], e.actions[i], e.row);
    }
  }
}

void daemon::recover_intents() {
  std::vector<delivery_intent> left;
  try {
    left = m_journal->intents();
  } catch (const std::exception& e) {
    m_log->error("journal {}: cannot read intents: {}", m_journal->file().string(), e.what());
    return;
  }
  std::size_t delivered = 0;
  for (const auto& i : left) {
    const std::filesystem::path path = std::filesystem::path(i.dest) / i.relpath;
    bool in_place = false;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
      struct stat st {};
      if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
          static_cast<std::uint64_t>(st.st_size) == i.size && mtime_ns_of(st) == i.mtime_ns) {
        const auto d = digest_of(fd, i.size, i.mtime_ns);
        in_place = d && to_hex(*d) == i.sha256;
      }
      ::close(fd);
    }
    try {
      if (!in_place) {
        m_journal->drop_intent(i.id);
        continue;
      }
      delivery_row d;
      d.channel = i.channel;
      d.dest = i.dest;
      d.relpath = i.relpath;
      d.path = path.string();
      d.size = i.size;
      d.mtime_ns = i.mtime_ns;
      d.sha256 = i.sha256;
      d.session = i.session;
      d.delivered_at = std::chrono::system_clock::now();
      const auto names = m_actions->matching(d.channel, d.relpath);
      std::vector<std::int64_t> ids;
      m_journal->deliver(d, names, ids);  // removes the intent; resume_runs() queues the runs
      ++delivered;
    } catch (const std::exception& e) {
      m_log->error("journal {}: cannot recover the delivery of {}: {}", m_journal->file().string(),
                   path.string(), e.what());
    }
  }
  if (!left.empty()) {
    m_log->info(
        "journal: {} product{} renamed into place before the last stop were not yet "
        "journaled as delivered: {} found in place (journaled now, actions queued), {} "
        "dropped",
        left.size(), left.size() == 1 ? "" : "s", delivered, left.size() - delivered);
  }
}

void daemon::resume_runs() {
  std::vector<action_run_row> runs;
  try {
    runs = m_journal->unfinished_runs();
  } catch (const std::exception& e) {
    m_log->error("journal {}: cannot read unfinished action runs: {}", m_journal->file().string(),
                 e.what());
    return;
  }
  if (!runs.empty()) {
    m_log->info("journal: {} action run{} left pending or running: running again", runs.size(),
                runs.size() == 1 ? "" : "s");
  }
  for (const auto& r : runs) m_actions->submit(r.id, r.action, r.product, r.attempt);
}

void daemon::run_retention() {
  if (m_stopping) return;
  const auto now = std::chrono::system_clock::now();
  for (std::size_t c = 0; c < m_cfg.channels.size(); ++c) {
    const auto& ch = m_cfg.channels[c];
    // A channel a reload removed or replaced: its live successor (same name) does this.
    if (m_channels.retired(c) || !ch.retention_max_age) continue;
    const auto before = now - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                  *ch.retention_max_age);
    std::vector<delivery_row> rows;
    try {
      rows = m_journal->expired(ch.name, before, retention_batch);
    } catch (const std::exception& e) {
      m_log->error("journal {}: retention: {}", m_journal->file().string(), e.what());
      continue;
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
                 mtime_ns_of(st) != d.mtime_ns) {
        reason = "changed";
      } else if (::unlink(path.c_str()) != 0) {
        m_log->warn("retention: cannot delete {}: {}", path.string(), std::strerror(errno));
        continue;  // tried again next pass
      }
      if (reason == "deleted") {
        ++m_retention_deleted;
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
        ++m_retention_skipped;
      }
      try {
        m_journal->mark_removed(d.id, reason, now);
      } catch (const std::exception& e) {
        m_log->error("journal {}: retention: {}", m_journal->file().string(), e.what());
      }
    }
  }
  try {
    const auto cut = now - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                               m_cfg.journal_max_age);
    if (const auto n = m_journal->prune(cut)) {
      m_log->info("journal: {} deliveries older than journal_max_age forgotten", n);
    }
  } catch (const std::exception& e) {
    m_log->error("journal {}: pruning: {}", m_journal->file().string(), e.what());
  }
  m_retention_timer.expires_after(m_cfg.retention_interval);
  m_retention_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) run_retention();
  });
}

}  // namespace mcdist::receiver
