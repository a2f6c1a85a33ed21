#pragma once
/// @file
/// What the components of file_store share: the configuration, the posix_io seam, the logger,
/// the temp directory's descriptor, the counters and the way results reach the network thread.
/// Internal to receiver/storage; built by file_store and outliving every component thread.

#include "receiver/storage/parity_store.hpp"
#include "receiver/storage/posix_io.hpp"
#include "receiver/storage/storage_config.hpp"

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// A store_result tagged with the begin_file it answers (file_store's handle).
struct internal_result {
  std::uint64_t handle = 0;
  store_result r;
};

/// Counters of the whole store; readable from any thread.
struct store_counters {
  std::atomic<std::uint64_t> bytes_written{0};  ///< file data bytes pwritten
  std::atomic<std::uint64_t> files_stored{0};   ///< files delivered
  std::atomic<std::uint64_t> files_failed{0};   ///< failed store_results reported
  std::atomic<std::uint64_t> queue_depth{0};    ///< jobs waiting for the writer thread
  std::atomic<std::uint64_t> bytes_reread{0};   ///< bytes read back from temp files for hashing
  // Parity repairs (docs/design-notes.md "Parity repairs"; parity_store.hpp).
  std::atomic<std::uint64_t> parity_kept{0};     ///< parity blocks kept (write_parity true)
  std::atomic<std::uint64_t> parity_refused{0};  ///< refused: over the budget, or out of bounds
  std::atomic<std::uint64_t> fec_blocks_recovered{0};  ///< FEC blocks decoded
  std::atomic<std::uint64_t> blocks_recovered{0};      ///< source blocks decoded and written
  std::atomic<std::uint64_t> decode_failures{0};       ///< recover requests that failed
  // Group commit (group_commit.hpp): batches made durable, and those by one syncfs.
  std::atomic<std::uint64_t> commit_batches{0};
  std::atomic<std::uint64_t> commit_batches_syncfs{0};
};

/// Read-back size when hashing written data (prefix catch-up, finalize tail, query_held):
/// 1 MiB amortises the syscall to nothing and is small next to the chunk pool.
inline constexpr std::size_t reread_buffer_bytes = 1u << 20;

/// The session's temp directory name: its id's text form, 8 lower-case hex digits (the
/// session_id formatter of common/ids.hpp).
std::string session_hex(session_id s);

/// The temp file of a file: temp_dir/<session hex>/<file index>.part.
std::filesystem::path temp_file_path(const std::filesystem::path& temp_dir, file_key key);

/// Shared state of one file_store. Constant after construction except the counters.
struct store_context {
  storage_config cfg;
  posix_io io;
  std::shared_ptr<spdlog::logger> logger;
  unique_fd temp_fd;  ///< temp_dir, for syncfs, statvfs and session directories
  dev_t temp_dev = 0;
  /// The process's umask as /proc/self/status gives it at start-up, or nullopt when it does
  /// not: what a mode given to open(O_CREAT) loses, so the writer knows whether a temp file it
  /// created already has its final mode (finalizer::verify then skips the fchmod).
  std::optional<mode_t> umask;
  store_counters counters;
  /// Hands results to the network thread (file_store::on_results through `post`). Any thread.
  std::function<void(std::vector<internal_result>)> post_results;
  /// Parity blocks kept until their FEC block is decoded (storage_config::parity_memory_bytes).
  std::unique_ptr<parity_store> parity;
  /// Hands the outcome of a recover (session, FEC block, error) to the network thread (the
  /// on_recovered callback of file_store through `post`). Any thread.
  std::function<void(session_id, std::uint32_t, std::error_code)> post_recovered;

  spdlog::logger& log() const { return *logger; }

  /// Creates (mkdirat) and opens temp_dir/<session hex> relative to temp_fd without following
  /// a symlink.
  /// @return the descriptor, or -1 with `e` set (ELOOP or ENOTDIR when something other than a
  ///         directory sits there)
  int open_session_dir(session_id s, int& e) const;
};

/// The umask field of /proc/self/status (Linux 4.7 and later), or nullopt. Reading it, unlike
/// umask(2), leaves the mask alone for the other threads.
std::optional<mode_t> read_process_umask();

}  // namespace mcdist::receiver
