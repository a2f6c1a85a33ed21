#pragma once
/// @file
/// The file that keeps a site's replay cache (receiver/core/replay_guard.hpp) across restarts:
/// TEMP/replay, the guard's versioned text. A session taken is appended as one line and made
/// durable (fdatasync) before the engine takes the session, so no file of it can be stored
/// before its entry is on disk; the file is rewritten atomically (temp file, fsync, rename,
/// fsync of the directory) at start and whenever the appended lines outnumber the live ones.
/// Plain file I/O on the daemon's thread: one small write and one fdatasync per new signed
/// session (a few per second at a busy hub's pace), like the sequence state's saves.
///
/// A missing file (a site's first start, or a temp directory wiped) and a damaged one start an
/// empty cache whose floor is the start's time: every session stamped before it is refused, so
/// losing the file never lets an old session's replay in.

#include "receiver/core/replay_guard.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace mcdist::receiver {

/// The wall clock as the cache counts it: Unix time, ms.
std::uint64_t unix_ms_now() noexcept;

/// Name of the file in the temp directory.
inline constexpr const char* replay_file_name = "replay";

/// The replay cache and its file.
class replay_store {
 public:
  /// Reads (or starts) the cache of `file`, drops expired entries and rewrites the file.
  /// `notice` says what happened when the file was missing or damaged (for the log).
  /// @param now_ms  wall clock, Unix ms
  /// @throws std::system_error when the file cannot be written (the daemon cannot run safely)
  replay_store(std::filesystem::path file, replay_guard::limits limits, std::uint64_t now_ms,
               std::string& notice);
  replay_store(const replay_store&) = delete;
  replay_store& operator=(const replay_store&) = delete;

  /// replay_guard::admit, and on errc::ok the entry made durable; when that fails the entry is
  /// taken back and the session refused (errc::replay_cache_unwritable, `detail` says why).
  errc admit(const replay_guard::entry& e, std::uint64_t now_ms, std::string& detail);

  const replay_guard& guard() const noexcept { return m_guard; }

 private:
  std::error_code rewrite(std::string& detail);
  std::filesystem::path m_file;
  replay_guard m_guard;
  std::size_t m_appended = 0;  ///< lines appended since the last rewrite
};

}  // namespace mcdist::receiver
