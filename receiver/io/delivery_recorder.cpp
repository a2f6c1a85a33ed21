#include "receiver/io/delivery_recorder.hpp"

#include "common/sys/digest_xattr.hpp"

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mcdist::receiver {

namespace {

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

/// Whether `path` is a regular file (not followed if a symlink) with this size, mtime and
/// SHA-256 (lower-case hex). Whatever else is there (a fifo, a device) is opened without
/// blocking and is not in place.
bool in_place(const std::filesystem::path& path, std::uint64_t size, std::int64_t mtime_ns,
              const std::string& sha256) {
  bool ok = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<std::uint64_t>(st.st_size) == size && mtime_ns_of(st) == mtime_ns) {
    const auto d = digest_of(fd, size, mtime_ns);
    ok = d && to_hex(*d) == sha256;
  }
  ::close(fd);
  return ok;
}

}  // namespace

delivery_recorder::delivery_recorder(boost::asio::io_context& io, const daemon_config& cfg,
                                     std::shared_ptr<spdlog::logger> log)
    : m_io(io), m_log(std::move(log)) {
  const auto file = cfg.journal.empty() ? cfg.temp / "journal.db" : cfg.journal;
  try {
    m_journal = std::make_unique<delivery_journal>(
        file, cfg.sync == sync_mode::none ? sqlite::durability::normal : sqlite::durability::full);
  } catch (const sqlite::error& e) {
    throw config_error(std::string("delivery journal: ") + e.what() +
                       " (set journal = \"FILE\" to a writable place)");
  }
  m_actions = std::make_unique<action_runner>(m_io, cfg.actions, *m_journal, m_log);
  m_log->info("delivery journal {}; {} action{} on receipt", file.string(), cfg.actions.size(),
              cfg.actions.size() == 1 ? "" : "s");
}

delivery_recorder::~delivery_recorder() {
  // The store is gone (its finalizer joined): every batch it journaled and settled is
  // confirmed, so a clean restart has nothing to check.
  if (m_unsettled || m_settled == 0) return;
  try {
    m_journal->confirm_through(m_settled);
  } catch (const std::exception& e) {
    m_log->warn(
        "journal {}: cannot confirm the last deliveries at the stop ({}); the next "
        "start checks them",
        m_journal->file().string(), e.what());
  }
}

void delivery_recorder::publish_config(const std::vector<channel_config>& channels,
                                       const std::vector<action_config>& actions) {
  auto snap = std::make_shared<config_snapshot>();
  snap->channel_names.reserve(channels.size());
  for (const auto& ch : channels) snap->channel_names.push_back(ch.name);
  snap->actions = actions;
  std::lock_guard lock(m_config_mutex);
  m_config = std::move(snap);
}

void delivery_recorder::journal_deliveries(std::span<const pending_rename> files) {
  // Finalizer thread: a reload changes the channels and actions on the io thread, so they
  // come from the snapshot last published.
  std::shared_ptr<const config_snapshot> cfg;
  {
    std::lock_guard lock(m_config_mutex);
    cfg = m_config;
  }
  const auto now = std::chrono::system_clock::now();
  std::vector<delivery_journal::batch_entry> entries(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    const pending_rename& f = files[i];
    delivery_row& d = entries[i].row;
    if (cfg && f.spec->channel < cfg->channel_names.size())
      d.channel = cfg->channel_names[f.spec->channel];
    d.dest = f.spec->dest_root.string();
    d.relpath = f.spec->relative_path;
    d.path = (f.spec->dest_root / d.relpath).string();
    d.size = f.spec->size;
    d.mtime_ns = f.spec->mtime_ns;
    d.sha256 = to_hex(f.digest);
    d.session = fmt::format("{}", f.key.session);
    // The pinned trusted sender key that verified the session or catch-up index
    // ("mcdist-ed25519:BASE64", as in trusted_senders); NULL in the journal when unsigned.
    d.sender_key = f.spec->sender_key;
    d.delivered_at = now;
    if (cfg) {
      for (const auto& a : cfg->actions) {
        if ((a.channel == "*" || a.channel == d.channel) && match_action(a, d.relpath))
          entries[i].actions.push_back(a.name);
      }
    }
  }
  // An exception fails the batch's files (not renamed): they are fetched again.
  m_journal->record_deliveries(entries, m_unsettled ? 0 : m_settled);
  m_batch_last = entries.back().row.id;
  std::lock_guard lock(m_journaled_mutex);
  for (std::size_t i = 0; i < files.size(); ++i) {
    m_journaled[{files[i].key.session.value, files[i].spec->channel, files[i].spec->relative_path}]
        .push_back(std::move(entries[i]));
  }
}

void delivery_recorder::settle_renames(std::span<const pending_rename> failed) noexcept {
  if (!failed.empty()) {
    std::vector<std::int64_t> ids;
    try {
      {
        std::lock_guard lock(m_journaled_mutex);
        for (const auto& f : failed) {
          auto it = m_journaled.find({f.key.session.value, f.spec->channel, f.spec->relative_path});
          if (it == m_journaled.end()) continue;
          // The failed one is the last journaled under its key: an earlier one was renamed.
          ids.push_back(it->second.back().row.id);
          it->second.pop_back();
          if (it->second.empty()) m_journaled.erase(it);
        }
      }
      m_journal->drop_deliveries(ids);
    } catch (const std::exception& e) {
      // Left above the confirmed mark from now on: the next start finds these files not in
      // place and deletes their deliveries.
      m_unsettled = true;
      m_log->error(
          "journal {}: cannot delete the deliveries of {} file{} that did not end "
          "in place ({}); the next start deletes them",
          m_journal->file().string(), failed.size(), failed.size() == 1 ? "" : "s", e.what());
    }
  }
  m_settled = m_batch_last;
}

bool delivery_recorder::take(const file_outcome& o) {
  // A file that failed after journal_deliveries saw it was settled by settle_renames.
  if (!o.stored) return false;
  delivery_journal::batch_entry e;
  {
    std::lock_guard lock(m_journaled_mutex);
    auto it = m_journaled.find({o.session.value, o.channel, std::string(o.path)});
    if (it == m_journaled.end()) return false;
    e = std::move(it->second.front());
    it->second.erase(it->second.begin());
    if (it->second.empty()) m_journaled.erase(it);
  }
  for (std::size_t i = 0; i < e.actions.size(); ++i) {
    m_actions->submit(e.run_ids[i], e.actions[i], e.row);
  }
  return true;
}

void delivery_recorder::record(const file_outcome& o, const channel_config& ch,
                               std::string sender_key) {
  if (!o.stored || !o.digest) return;
  try {
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
    d.sender_key = std::move(sender_key);
    d.delivered_at = std::chrono::system_clock::now();
    auto names = m_actions->matching(d.channel, d.relpath);
    if (m_unjournaled.empty()) boost::asio::post(m_io, [this] { flush(); });
    m_unjournaled.push_back({std::move(d), std::move(names), {}});
  } catch (const std::exception& e) {
    m_log->error("journal {}: cannot queue the delivery of {} ({})", m_journal->file().string(),
                 std::string(o.path), e.what());
  }
}

void delivery_recorder::flush() {
  if (m_unjournaled.empty()) return;
  auto batch = std::move(m_unjournaled);
  m_unjournaled.clear();
  try {
    m_journal->deliver_batch(batch);
  } catch (const std::exception& e) {
    m_log->error(
        "journal {}: cannot record {} deliver{} ({}): they are not journaled and their "
        "actions do not run",
        m_journal->file().string(), batch.size(), batch.size() == 1 ? "y" : "ies", e.what());
    return;
  }
  for (const auto& e : batch) {
    for (std::size_t i = 0; i < e.actions.size(); ++i) {
      m_actions->submit(e.run_ids[i], e.actions[i], e.row);
    }
  }
}

void delivery_recorder::recover() {
  // A schema-1 journal's intents: files its daemon was renaming when it stopped.
  std::vector<delivery_intent> left;
  try {
    left = m_journal->intents();
  } catch (const std::exception& e) {
    m_log->error("journal {}: cannot read intents: {}", m_journal->file().string(), e.what());
  }
  std::size_t delivered = 0;
  for (const auto& i : left) {
    const std::filesystem::path path = std::filesystem::path(i.dest) / i.relpath;
    try {
      if (!in_place(path, i.size, i.mtime_ns, i.sha256)) {
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

  // Deliveries journaled before renames a stop may have cut short: kept when the file is in
  // place (their pending runs are queued by resume_runs), deleted otherwise.
  try {
    const auto unconfirmed = m_journal->unconfirmed();
    std::vector<std::int64_t> gone;
    for (const auto& d : unconfirmed) {
      if (!in_place(d.path, d.size, d.mtime_ns, d.sha256)) gone.push_back(d.id);
    }
    m_journal->drop_deliveries(gone);
    m_journal->confirm_all();
    if (!gone.empty()) {
      m_log->info(
          "journal: {} deliver{} journaled just before the last stop had not been renamed "
          "into place: deleted (their sessions deliver them again); {} in place kept",
          gone.size(), gone.size() == 1 ? "y" : "ies", unconfirmed.size() - gone.size());
    } else if (!unconfirmed.empty()) {
      m_log->debug("journal: the {} last deliveries before the stop are in place",
                   unconfirmed.size());
    }
  } catch (const std::exception& e) {
    m_log->error("journal {}: cannot settle the deliveries journaled before the last stop: {}",
                 m_journal->file().string(), e.what());
  }
}

void delivery_recorder::resume_runs() {
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

}  // namespace mcdist::receiver
