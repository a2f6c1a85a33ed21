#pragma once
/// @file
/// Watches the spool directories of every channel and reports each product once it is
/// complete: inotify(7) IN_CLOSE_WRITE (a writer closed it) and IN_MOVED_TO (renamed into the
/// spool, the atomic way to drop a product), on the daemon's io_context. Subdirectories are
/// watched as they appear; a product's name is its path below the spool directory, the name
/// receivers store it under. At start, and after the kernel's event queue overflowed
/// (IN_Q_OVERFLOW), every spool is scanned and everything there is reported: the journal's
/// idempotent enqueue makes a second report of the same file harmless.
///
/// Not detected: a file still open for writing when the daemon starts (or rescans) is reported
/// as it is; writers that may race the daemon's start write to a dot-file and rename it.

#include "feed/feed_config.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::feed {

/// A complete file found in a spool.
struct spooled_file {
  std::size_t channel = 0;     ///< index into feed_config::channels
  std::string name;            ///< path below the spool directory ("a/b.grib")
  std::filesystem::path path;  ///< absolute path of the spool file
  std::uint64_t size = 0;      ///< bytes
  std::int64_t mtime_ns = 0;   ///< modification time, ns since the epoch
};

/// True when `name` (relative to its spool) is not a product: a path component starts with '.'
/// or the file name or the whole name matches one of the fnmatch(3) `globs`.
bool ignored_name(const std::string& name, const std::vector<std::string>& globs);

/// The inotify watches of every channel's spools.
class spool_watcher {
 public:
  using handler = std::function<void(spooled_file)>;

  /// @param found called on the io_context's thread for every complete file
  /// @throws std::system_error when inotify cannot be set up
  spool_watcher(boost::asio::io_context& io, const std::vector<channel_config>& channels,
                handler found, std::shared_ptr<spdlog::logger> log);
  ~spool_watcher();
  spool_watcher(const spool_watcher&) = delete;
  spool_watcher& operator=(const spool_watcher&) = delete;

  /// Adds the watches (creating missing spool directories), scans every spool, then reads
  /// events. @throws std::system_error for a spool that cannot be created or watched
  void start();

  /// Reports everything in every spool again (after IN_Q_OVERFLOW).
  void rescan();
  /// A reload removed channel `channel` (or is about to change its spools): its watches go and
  /// rescans skip it; events already read for it are dropped.
  void remove_channel(std::size_t channel);
  /// A reload added channel `channel` (an index of the channels vector given at construction,
  /// which the caller has grown) or changed its spools: watches them (creating missing ones)
  /// and reports what is there. @throws std::system_error as start()
  void add_channel(std::size_t channel);

  /// Directories watched (for status).
  std::size_t watches() const { return m_watches.size(); }

 private:
  struct watch {
    std::size_t channel;
    std::filesystem::path root;  ///< the spool directory
    std::filesystem::path dir;   ///< the watched directory (root or below it)
  };

  void add_tree(std::size_t channel, const std::filesystem::path& root,
                const std::filesystem::path& dir, bool report);
  void report(std::size_t channel, const std::filesystem::path& root,
              const std::filesystem::path& file);
  void do_read();
  void on_events(std::size_t bytes);

  boost::asio::io_context& m_io;
  const std::vector<channel_config>& m_channels;
  handler m_found;
  std::shared_ptr<spdlog::logger> m_log;
  boost::asio::posix::stream_descriptor m_fd;
  std::unordered_map<int, watch> m_watches;
  std::vector<char> m_buffer;
  std::vector<bool> m_removed;  ///< per channel index: remove_channel() and no add since
};

}  // namespace mcdist::feed
