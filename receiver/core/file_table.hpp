#pragma once
/// @file
/// One file of a receiving session as the receiver core tracks it: its manifest entry, where
/// it stands (pending, receiving, ... stored), and which of its blocks are in. The engine's
/// session holds one per manifest entry; the NAK planner (nak_planner.hpp) reads them to know
/// what is missing. Pure data: the transitions are the engine's (they go with storage calls).

#include "common/block_map.hpp"
#include "common/manifest.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace mcdist::receiver {

/// A file of a session, by manifest index.
struct file_rx {
  enum class state_t : std::uint8_t {
    pending = 0,  ///< entry not yet received
    refused,      ///< entry failed validation (terminal)
    held,         ///< already held identically (terminal)
    receiving,
    awaiting_digest,  ///< all data in, digest not yet known
    finalizing,       ///< storage is verifying and delivering
    stored,           ///< delivered (terminal)
    failed,           ///< could not be stored (terminal)
  };
  manifest_entry entry;
  state_t state = state_t::pending;
  bool begun = false;        ///< storage_port::begin_file was called (a temp file exists)
  bool resume = false;       ///< restored from a checkpoint: storage reopens its temp file
  std::uint32_t blocks = 0;  ///< ceil(entry.size / block size)
  std::uint32_t digest_retries = 0;
  /// Allocated lazily (ensure_block_map): on the file's first block, or when the session
  /// starts receiving; until then size() == 0 and it must not be read.
  block_map received;
  std::optional<sha256_digest> held_digest;  ///< our copy's digest, for pending-digest files
  std::string failure;

  /// Every block is in (false while the block map is not allocated, unless there are none).
  bool all_received() const noexcept {
    return blocks == 0 || (received.size() == blocks && received.all());
  }
  /// The block map is allocated (and the file has blocks): received may be read.
  bool has_map() const noexcept { return blocks > 0 && received.size() == blocks; }
  bool terminal() const noexcept {
    return state == state_t::refused || state == state_t::held || state == state_t::stored ||
           state == state_t::failed;
  }
};

}  // namespace mcdist::receiver
