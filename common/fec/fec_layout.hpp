#pragma once
/// @file
/// Which FEC block each source block of a session belongs to (docs/design-notes.md "Parity
/// repairs"). The session's blocks are numbered in manifest order as one sequence (file 0's
/// blocks, then file 1's, ...), so a FEC block may span small files: a 10 kB product does not
/// pay a parity block of its own. The sequence is cut into groups of k x depth consecutive
/// blocks; inside a group, block o goes to FEC block o mod depth as its source o / depth. Pass 1
/// sends blocks in sequence order, so a burst of up to `depth` lost datagrams hits each FEC
/// block of the group at most once (block interleaving, as in UDPcast's interleaved FEC and
/// RFC 5510's recommendation to spread a source block's symbols over time). The last group,
/// shorter, is interleaved as deep as keeps at least min_last_sources sources per FEC block
/// (and at most k): a 5-block tail is one FEC block, not five of one block each.
///
/// Both ends compute it from the manifest (block counts) and the session's (k, depth): nothing
/// of it travels on the wire beyond those two numbers. Pure.

#include <cstdint>
#include <optional>
#include <vector>

namespace mcdist::fec {

/// Largest interleaving depth: a group of k x 64 blocks (11 MB at k = 128 and 1400-byte blocks)
/// is as long a stretch as a receiver's decode should wait for.
inline constexpr std::uint32_t max_depth = 64;

/// Fewest sources per FEC block the last group's interleaving aims for: parity for FEC blocks of
/// a handful of sources costs nearly a copy of them.
inline constexpr std::uint32_t min_last_sources = 16;

/// A source block's place: its FEC block and its index among that FEC block's sources.
struct position {
  std::uint32_t fec_block = 0;
  std::uint32_t index = 0;
};

/// A source block by file and block index.
struct source_ref {
  std::uint32_t file = 0;
  std::uint32_t block = 0;
};

/// The FEC blocks of one session.
class layout {
 public:
  /// @param blocks  block count of every file, manifest order
  /// @param k       most source blocks per FEC block, >= 1
  /// @param depth   interleaving depth, 1..max_depth
  /// @throws std::invalid_argument for k == 0, a depth out of range, or more than 2^32 FEC
  ///         blocks
  layout(const std::vector<std::uint32_t>& blocks, std::uint32_t k, std::uint32_t depth);

  std::uint32_t k() const noexcept { return m_k; }
  std::uint32_t depth() const noexcept { return m_depth; }
  /// FEC blocks in the session.
  std::uint32_t fec_blocks() const noexcept { return m_fec_blocks; }
  /// Source blocks in the session (all files).
  std::uint64_t total_blocks() const noexcept { return m_total; }

  /// Where block `block` of `file` goes (file < file count, block < its block count).
  position locate(std::uint32_t file, std::uint32_t block) const noexcept;
  /// Source blocks of FEC block `fb` (< fec_blocks()): 1..k.
  std::uint32_t sources(std::uint32_t fb) const noexcept;
  /// Source `index` (< sources(fb)) of FEC block `fb`.
  source_ref source(std::uint32_t fb, std::uint32_t index) const noexcept;
  /// Sequence number of block `block` of `file` in the session (file may be the file count,
  /// block 0: the end of the session, total_blocks()).
  std::uint64_t sequence_number(std::uint32_t file, std::uint32_t block) const noexcept {
    return m_prefix[file] + block;
  }
  /// Sources of FEC block `fb` whose sequence number is below `g`: what pass 1 has sent of it
  /// when its cursor is at `g`.
  std::uint32_t sources_before(std::uint32_t fb, std::uint64_t g) const noexcept;
  /// The FEC blocks whose last source has a sequence number in [g0, g1), ascending: those pass 1
  /// completes between two markers. Each FEC block's last source lies in the last `depth`
  /// blocks of its group, so this costs at most the overlap of [g0, g1) with those tails.
  std::vector<std::uint32_t> completed_in(std::uint64_t g0, std::uint64_t g1) const;
  /// The FEC blocks that hold blocks of `file`: [first, last] (inclusive) holds all of them,
  /// though with depth > 1 not every FEC block in between does. nullopt for an empty file.
  std::optional<std::pair<std::uint32_t, std::uint32_t>> fec_blocks_of(
      std::uint32_t file) const noexcept;
  /// The FEC blocks of `fb`'s interleaving group: (first, count). They share the group's
  /// stretch of blocks, so one sequential read of it yields the sources of all of them.
  std::pair<std::uint32_t, std::uint32_t> group_fec_blocks(std::uint32_t fb) const noexcept {
    const auto shape = group_of_fec(fb);
    return {shape.first_fec, shape.depth};
  }

 private:
  /// Interleaving depth and first FEC block of the group holding sequence number g.
  struct group_shape {
    std::uint64_t first_block = 0;  ///< sequence number of the group's first block
    std::uint32_t first_fec = 0;
    std::uint32_t depth = 0;
    std::uint64_t size = 0;  ///< blocks in the group
  };
  group_shape group_of_block(std::uint64_t g) const noexcept;
  /// Interleaving depth of the last, shorter group of `size` blocks.
  std::uint32_t last_depth(std::uint64_t size) const noexcept;
  group_shape group_of_fec(std::uint32_t fb) const noexcept;
  std::uint64_t global(std::uint32_t file, std::uint32_t block) const noexcept {
    return m_prefix[file] + block;
  }

  std::uint32_t m_k;
  std::uint32_t m_depth;
  std::uint64_t m_total = 0;
  std::uint64_t m_full_groups = 0;  ///< groups of exactly k x depth blocks
  std::uint32_t m_fec_blocks = 0;
  /// Sequence number of each file's block 0; one more entry: the total.
  std::vector<std::uint64_t> m_prefix;
};

}  // namespace mcdist::fec
