#pragma once
/// @file
/// The sender's NAK intake: the block ranges and FEC lacks of a NAK, checked once against the
/// session's shape and returned as the requests the session acts on, in its own indexes.
/// Pure (docs/architecture.md "Layers"), in the manner of Aeron's loss detector: the session
/// never walks a NAK's fields itself.

#include "common/fec/fec_layout.hpp"

#include <cstdint>
#include <span>
#include <system_error>
#include <vector>

namespace mcdist::wire {
class nak;
}

namespace mcdist::sender {

/// What one NAK asks for. Reused from NAK to NAK (read_nak clears it), so a busy session does
/// not allocate per NAK once the vectors have grown.
struct nak_request {
  /// `count` blocks of `file` from block `first`, ascending within a file.
  struct block_run {
    std::uint32_t file = 0;
    std::uint32_t first = 0;
    std::uint32_t count = 0;
  };
  /// `lack` more blocks of FEC block `fec_block` (of its `sources` source blocks), ascending.
  struct fec_lack {
    std::uint32_t fec_block = 0;
    std::uint32_t lack = 0;
    std::uint32_t sources = 0;
  };
  std::vector<block_run> runs;
  std::vector<fec_lack> lacks;
  std::uint64_t named_blocks = 0;    ///< sum of the runs' counts
  std::uint64_t lacked_blocks = 0;   ///< sum of the lacks
  std::uint64_t lacked_sources = 0;  ///< sum of the lacked FEC blocks' sources

  /// Blocks asked for in all (named and lacked).
  std::uint64_t asked() const noexcept { return named_blocks + lacked_blocks; }
  void clear() noexcept {
    runs.clear();
    lacks.clear();
    named_blocks = lacked_blocks = lacked_sources = 0;
  }
};

/// Reads `m`'s file NAKs (wire: (gap, count) pairs per file, proto file_nak) and FEC lacks
/// ((gap, lack) pairs over ascending FEC blocks, proto nak.fec_lacks) into `out`.
/// @param file_blocks  blocks of each file of the session, by file index
/// @param fec          the session's FEC layout, or nullptr when it sends no parity
/// @return empty; or errc::invalid_field (nothing of `m` to act on, `out` unspecified) for a
///         file index or block range outside the session, a count or lack of 0, a lack above
///         its FEC block's sources, FEC blocks not ascending or past the last, an odd number
///         of pair fields, or FEC lacks in a session without parity
std::error_code read_nak(const wire::nak& m, std::span<const std::uint32_t> file_blocks,
                         const fec::layout* fec, nak_request& out);

}  // namespace mcdist::sender
