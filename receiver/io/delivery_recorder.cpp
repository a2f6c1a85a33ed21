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

delivery_recorder::~delivery_recorder() = default;

void delivery_recorder::publish_dest_names(const std::vector<channel_config>& channels) {
  std::vector<std::pair<std::filesystem::path, std::string>> names;
  names.reserve(channels.size());
  for (const auto& ch : channels) names.emplace_back(ch.dest, ch.name);
  std::lock_guard lock(m_dest_names_mutex);
  m_dest_names = std::move(names);
}

void delivery_recorder::journal_intents(std::span<const pending_rename> intents) {
  // Finalizer thread: a reload changes the channels on the io thread, so their names come
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

void delivery_recorder::record(const file_outcome& o, const channel_config& ch,
                               std::string sender_key) {
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
    d.sender_key = std::move(sender_key);
    d.delivered_at = std::chrono::system_clock::now();
    auto names = m_actions->matching(d.channel, d.relpath);
    if (m_unjournaled.empty()) boost::asio::post(m_io, [this] { flush(); });
    m_unjournaled.push_back({std::move(d), std::move(names), {}});
  } catch (const std::exception& e) {
    m_log->error("journal {}: cannot drop the intent of {} ({})", m_journal->file().string(),
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

void delivery_recorder::recover_intents() {
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
