#pragma once
/// @file
/// The channel table of TEMP/channels: the index, name and destination of every channel index
/// of a run (retired ones too), so that the next start maps saved sessions' channel indexes to
/// its own. Checkpoints and saved keys name channels by index, and a reload numbers channels
/// unlike a fresh start (a removed channel keeps its index, an added one takes the next).
///
/// Format: one line per index, "INDEX<TAB>NAME<TAB>DEST" (names and paths hold no tab or
/// newline in practice; a line that does not parse is ignored).

#include "receiver/io/daemon_config.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// The previous run's channel indexes mapped to this run's.
class channel_table {
 public:
  /// The table's file name in the temp directory.
  static constexpr const char* file_name = "channels";

  /// Writes `channels` (every index, in order) to `file` atomically (a temp file renamed into
  /// place). A failure is logged to `log`: a restart may then not resume sessions of channels
  /// a reload added.
  static void save(const std::filesystem::path& file, const std::vector<channel_config>& channels,
                   spdlog::logger& log);
  /// Reads the previous run's `file` (none: every index maps to itself) and maps each of its
  /// indexes to the index of the channel in `channels` with the same name and dest, or to
  /// nothing when none has both.
  static channel_table load(const std::filesystem::path& file,
                            const std::vector<channel_config>& channels);

  /// This run's index of the previous run's channel `old`: itself when the table does not
  /// name it, nullopt when that channel is no longer configured.
  std::optional<std::uint32_t> index_now(std::uint32_t old) const;
  /// A session checkpoint (checkpoint::session_state) with its channel index mapped; nullopt
  /// when its channel is no longer configured. A blob that does not parse is returned as it
  /// is (restoring it reports that).
  std::optional<std::string> remap_checkpoint(std::string blob) const;

 private:
  std::map<std::uint32_t, std::optional<std::uint32_t>> m_remap;
};

}  // namespace mcdist::receiver
