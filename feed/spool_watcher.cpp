#include "feed/spool_watcher.hpp"

#include <fnmatch.h>
#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace mcdist::feed {

namespace {

/// Events read per read(2): inotify(7) advises room for at least one event with NAME_MAX.
constexpr std::size_t event_buffer_bytes = 64 * 1024;

/// IN_CLOSE_WRITE | IN_MOVED_TO: a product is complete. IN_CREATE | IN_MOVED_TO with IN_ISDIR:
/// a new subdirectory to watch.
constexpr std::uint32_t watch_mask =
    IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

int open_inotify() {
  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "inotify_init1");
  return fd;
}

}  // namespace

bool ignored_name(const std::string& name, const std::vector<std::string>& globs) {
  const std::filesystem::path p(name);
  for (const auto& part : p) {
    const auto s = part.string();
    if (s.empty() || s[0] == '.') return true;
  }
  const auto base = p.filename().string();
  for (const auto& g : globs) {
    if (::fnmatch(g.c_str(), base.c_str(), 0) == 0) return true;
    if (::fnmatch(g.c_str(), name.c_str(), FNM_PATHNAME) == 0) return true;
  }
  return false;
}

spool_watcher::spool_watcher(boost::asio::io_context& io,
                             const std::vector<channel_config>& channels, handler found,
                             std::shared_ptr<spdlog::logger> log)
    : m_io(io), m_channels(channels), m_found(std::move(found)), m_log(std::move(log)),
      m_fd(io, open_inotify()), m_buffer(event_buffer_bytes) {}

spool_watcher::~spool_watcher() = default;

void spool_watcher::start() {
  for (std::size_t c = 0; c < m_channels.size(); ++c) {
    for (const auto& root : m_channels[c].spools) {
      std::error_code ec;
      std::filesystem::create_directories(root, ec);
      if (ec) {
        throw std::system_error(
            ec, "cannot create the spool " + root.string() + " of channel " + m_channels[c].name);
      }
      add_tree(c, root, root, true);
    }
  }
  do_read();
}

void spool_watcher::rescan() {
  for (std::size_t c = 0; c < m_channels.size(); ++c) {
    if (c < m_removed.size() && m_removed[c]) continue;
    for (const auto& root : m_channels[c].spools) add_tree(c, root, root, true);
  }
}

void spool_watcher::remove_channel(std::size_t channel) {
  if (m_removed.size() <= channel) m_removed.resize(channel + 1, false);
  m_removed[channel] = true;
  for (auto it = m_watches.begin(); it != m_watches.end();) {
    if (it->second.channel == channel) {
      ::inotify_rm_watch(m_fd.native_handle(), it->first);
      it = m_watches.erase(it);
    } else {
      ++it;
    }
  }
}

void spool_watcher::add_channel(std::size_t channel) {
  if (channel < m_removed.size()) m_removed[channel] = false;
  for (const auto& root : m_channels[channel].spools) {
    std::error_code ec;
    std::filesystem::create_directories(root, ec);
    if (ec) {
      throw std::system_error(ec, "cannot create the spool " + root.string() + " of channel " +
                                      m_channels[channel].name);
    }
    add_tree(channel, root, root, true);
  }
}

void spool_watcher::add_tree(std::size_t channel, const std::filesystem::path& root,
                             const std::filesystem::path& dir, bool report_files) {
  // Watch first, then list: a file closed between the two is reported twice, never missed.
  // Below the spool's root a directory is never followed through a link (a producer may swap
  // one in after its IN_CREATE): what is not a directory there is not watched. Products are
  // opened without following links anyway (spool_file.hpp); this keeps a producer from making
  // the feed watch, and list, a directory outside its spools.
  const int wd = ::inotify_add_watch(m_fd.native_handle(), dir.c_str(),
                                     dir == root ? watch_mask : watch_mask | IN_DONT_FOLLOW);
  if (wd < 0) {
    const int e = errno;
    if (dir == root) {
      throw std::system_error(
          e, std::generic_category(),
          "cannot watch the spool " + dir.string() + " of channel " + m_channels[channel].name);
    }
    m_log->error(
        "channel {}: cannot watch {}: {} (its products are picked up at the next "
        "rescan only)",
        m_channels[channel].name, dir.string(), std::strerror(e));
    return;
  }
  m_watches[wd] = watch{channel, root, dir};
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto& p = it->path();
    const auto rel = p.lexically_relative(root).string();
    if (ignored_name(rel, {})) continue;  // dot-directories too
    std::error_code sec;
    const auto st = it->symlink_status(sec);
    if (sec) continue;
    if (std::filesystem::is_directory(st)) {
      add_tree(channel, root, p, report_files);
    } else if (report_files && std::filesystem::is_regular_file(st)) {
      report(channel, root, p);
    }
  }
  if (ec)
    m_log->warn("channel {}: cannot list {}: {}", m_channels[channel].name, dir.string(),
                ec.message());
}

void spool_watcher::report(std::size_t channel, const std::filesystem::path& root,
                           const std::filesystem::path& file) {
  const auto name = file.lexically_relative(root).string();
  if (ignored_name(name, m_channels[channel].ignore)) return;
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;  // gone, or not a file
  spooled_file f;
  f.channel = channel;
  f.name = name;
  f.path = file;
  f.size = static_cast<std::uint64_t>(st.st_size);
  f.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  m_found(std::move(f));
}

void spool_watcher::do_read() {
  m_fd.async_read_some(boost::asio::buffer(m_buffer),
                       [this](const boost::system::error_code& ec, std::size_t n) {
                         if (ec == boost::asio::error::operation_aborted) return;
                         if (ec) {
                           m_log->error("spool watcher: reading inotify events: {}", ec.message());
                           return;
                         }
                         on_events(n);
                         do_read();
                       });
}

void spool_watcher::on_events(std::size_t bytes) {
  bool overflow = false;
  for (std::size_t off = 0; off + sizeof(inotify_event) <= bytes;) {
    inotify_event ev;
    std::memcpy(&ev, m_buffer.data() + off, sizeof ev);
    const char* name_ptr = m_buffer.data() + off + sizeof(inotify_event);
    off += sizeof(inotify_event) + ev.len;
    if (off > bytes) break;  // cannot happen: the kernel writes whole events
    if (ev.mask & IN_Q_OVERFLOW) {
      overflow = true;
      continue;
    }
    const auto it = m_watches.find(ev.wd);
    if (it == m_watches.end()) continue;
    if (ev.mask & IN_IGNORED) {
      m_watches.erase(it);
      continue;
    }
    if (ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
      if (it->second.dir == it->second.root) {
        m_log->error(
            "channel {}: the spool {} was removed or moved; restart the feed once it "
            "is back",
            m_channels[it->second.channel].name, it->second.dir.string());
      }
      continue;
    }
    if (ev.len == 0) continue;
    const watch w = it->second;  // add_tree may rehash m_watches
    const std::string name(name_ptr, ::strnlen(name_ptr, ev.len));
    if (name.empty() || name[0] == '.') continue;
    const auto path = w.dir / name;
    if (ev.mask & IN_ISDIR) {
      // A new subdirectory: files may already be complete in it before the watch was added.
      if (ev.mask & (IN_CREATE | IN_MOVED_TO)) add_tree(w.channel, w.root, path, true);
      continue;
    }
    if (ev.mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) report(w.channel, w.root, path);
  }
  if (overflow) {
    m_log->warn("spool watcher: the kernel's inotify queue overflowed; rescanning every spool");
    rescan();
  }
}

}  // namespace mcdist::feed
