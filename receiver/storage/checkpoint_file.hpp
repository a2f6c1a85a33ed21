#pragma once
/// @file
/// The receiver's resume state on disk (docs/architecture.md "Data flow in one session": a
/// receiver's partial state is enough to resume after a restart): the core's checkpoint blob
/// (proto/checkpoint.proto, written by receiver/core/session_checkpoint.hpp; only its header
/// is read here), kept as `temp_dir/<session id as 8 lower-case hex digits>/state` beside the
/// session's .part files. Saved by write-to-temp and rename (state.tmp, fsync, rename, fsync the
/// directory); read back at start-up; session directories left without usable state are swept.

#include "common/ids.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

struct store_context;

/// Largest state load_checkpoints accepts: a bitmap of every 1400-byte block of 2 TiB is
/// 196 MB; anything bigger is damage, not state.
inline constexpr std::uintmax_t max_checkpoint_bytes = 256u << 20;

/// Saves `blob` as temp_dir/<session hex>/state (finalizer thread). Unless sync_mode::none,
/// first makes every write pwritten so far durable (syncfs), so the state never claims blocks
/// a crash lost, and fsyncs the state and its directory. Failures are logged; the previous
/// state stays. A symlink at temp_dir/<session hex> is refused, not followed.
void save_checkpoint(const store_context& ctx, session_id session, std::string_view blob);

/// Every saved session state under `temp_dir` (start-up, before constructing the store).
/// Symlinked session directories are skipped; so, with a log line on spdlog's default logger,
/// are states that are unreadable, oversized, not a proto/checkpoint.proto session_state,
/// written in a format version newer than this build reads (checkpoint::CURRENT), or of
/// another session than their directory's.
/// @return (session, blob) pairs in no particular order
std::vector<std::pair<session_id, std::string>> load_checkpoints(
    const std::filesystem::path& temp_dir);

/// Removes every session temp directory (`temp_dir/<8 hex digits>`) whose session is not in
/// `keep` (start-up, after restoring checkpoints). Symlinks of that name are removed, not
/// followed; other names are left alone. Errors are logged.
/// @return how many directories were removed
std::size_t sweep_temp(const std::filesystem::path& temp_dir, const std::vector<session_id>& keep,
                       spdlog::logger& log);

}  // namespace mcdist::receiver
