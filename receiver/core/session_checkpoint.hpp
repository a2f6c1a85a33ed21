#pragma once
/// @file
/// A receiving session's resume state as bytes (proto/checkpoint.proto, the one encoding):
/// what receiver_engine saves every checkpoint_interval and reads back after a restart, so a
/// restarted receiver NAKs only what it still misses.
///
/// Blobs come from disk, where a crash may have cut them, damage flipped bits or another
/// version written them: read_checkpoint checks everything before the engine allocates by it
/// (docs/architecture.md "House style"), and memory stays bounded by the blob's size (a bitmap
/// must be exactly as long as its file's blocks need). Versions: checkpoint.proto's header.

#include "common/endpoint.hpp"
#include "common/ids.hpp"
#include "common/manifest.hpp"
#include "common/wire.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mcdist::checkpoint {
class session_state;
}

namespace mcdist::receiver {

/// Where a saved file stands (checkpoint.proto file_state.phase_t, same numbers). The engine's
/// own "finalizing" is saved as receiving with every block in.
enum class saved_phase : std::uint8_t {
  refused = 1,
  held = 2,
  receiving = 3,
  awaiting_digest = 4,
  stored = 6,
  failed = 7,
};

/// One file of a saved session.
struct saved_file {
  /// Checked by from_wire, except for a refused file: only its path (as received) is kept.
  manifest_entry entry;
  saved_phase phase = saved_phase::receiving;
  bool begun = false;  ///< a temp file exists
  std::uint32_t digest_retries = 0;
  std::string failure;
  std::uint32_t blocks = 0;  ///< ceil(entry.size / block_size); 0 for a refused file
  /// receiving, awaiting_digest: the block bitmap, blocks bits in (blocks + 63) / 64 words
  /// (block_map::words); empty otherwise.
  std::vector<std::uint64_t> received;
};

/// Everything a checkpoint holds of one session. Names as in receiver_engine's session.
struct saved_session {
  session_id id{};
  endpoint sender;
  std::uint32_t channel = 0;
  std::uint32_t block_size = 0;
  std::uint32_t file_count = 0;
  std::uint32_t chunks = 0;  ///< manifest chunks
  std::uint64_t total_bytes = 0;
  std::string sender_name;  ///< as announced: not made printable here
  std::string seq_channel;  ///< empty: unsequenced
  std::uint64_t seq = 0;
  /// The announce's silent_passes (0: a normal session): a resumed silent session stays silent.
  std::uint32_t silent_passes = 0;
  std::vector<wire::seq_span> catch_up;
  std::string seq_source;
  std::uint32_t seen_seq = 0;
  std::uint64_t bytes_received = 0;
  std::vector<saved_file> files;  ///< file_count of them, on reading
};

/// Builds a blob file by file, so a session's block maps are copied once (into the message),
/// not gathered first.
class checkpoint_writer {
 public:
  /// @param s  the session-wide fields; its `files` are ignored (add_file)
  explicit checkpoint_writer(const saved_session& s);
  ~checkpoint_writer();
  checkpoint_writer(const checkpoint_writer&) = delete;
  checkpoint_writer& operator=(const checkpoint_writer&) = delete;

  /// Appends the next file (call once per file, in file index order).
  /// @param received  block bitmap words (receiving, awaiting_digest), else empty
  void add_file(const manifest_entry& entry, saved_phase phase, bool begun,
                std::uint32_t digest_retries, std::string_view failure,
                std::span<const std::uint64_t> received);
  /// The blob, in the current format version.
  std::string finish() const;

 private:
  std::unique_ptr<checkpoint::session_state> m_state;
};

/// Reads a blob written by checkpoint_writer, of this version or an older one.
/// @param channel_count  channels the daemon has now (a saved channel index at or above it is
///                       refused); 0: not checked
/// @return empty; errc::bad_protobuf (not a checkpoint); errc::bad_version (written by a newer
///         mcdist); errc::invalid_field (a value out of range: block size, file count, sender
///         address, channel, session numbering, an unknown or pending phase, a manifest entry
///         that fails from_wire, a file of 2^31 blocks or more, a bitmap of the wrong length)
std::error_code read_checkpoint(std::string_view blob, std::uint32_t channel_count,
                                saved_session& out);

}  // namespace mcdist::receiver
