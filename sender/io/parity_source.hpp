#pragma once
/// @file
/// Parity blocks for the sender's shell (docs/design-notes.md "Parity repairs"): the
/// core says which parity block of which FEC block goes out (data_send::parity), this computes
/// its bytes from the FEC block's sources read through the block_reader, each zero-padded to
/// the block size (common/fec/fec.hpp). Parity index 0, the first repair of any FEC block, is built
/// as pass 1 sends the sources (observe) and costs no read; other indexes read the sources of
/// the FEC block's whole interleaving group at once, kept for the next FEC blocks used, so the
/// parity blocks of a group (sent round robin) cost one read of it. Encoding one parity block
/// is tens of microseconds of one core (docs/benchmarks.md "Parity codec" has the rates), cheap
/// enough for the network thread, where it lives.

#include "common/fec/fec.hpp"
#include "common/fec/fec_layout.hpp"
#include "sender/io/block_reader.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace mcdist::sender {

/// Computes parity blocks of a session's FEC blocks.
class parity_source {
 public:
  /// FEC blocks whose sources are kept: parity is sent round robin over the FEC blocks with
  /// parity pending, usually a handful at a time (the FEC blocks of one interleaving group).
  static constexpr std::size_t cached_fec_blocks = 8;
  /// Largest group (k x depth blocks, bytes) loaded whole; a larger one is loaded a FEC block
  /// at a time (k = 4096 at depth 8 would be 46 MB).
  static constexpr std::uint64_t group_load_max_bytes = 16 << 20;

  /// @param layout      the session's FEC blocks (sender_session::fec_layout); must outlive this
  /// @param files       the session's files, manifest order
  /// @param max_parity  parity indexes per FEC block (the session's fec_max_parity)
  /// @param block_size  bytes
  parity_source(const fec::layout& layout, const std::vector<source_file>& files,
                std::uint32_t max_parity, std::uint32_t block_size);

  /// Largest memory (bytes) for parity index 0 built during pass 1 (observe): a block per FEC
  /// block, about 0.5 % of the data at k = 200 (11 MB for a 2 GB field); FEC blocks past it
  /// are read back when repaired, as the others were before.
  static constexpr std::uint64_t first_rows_max_bytes = 16 << 20;

  /// Source block `block` of file `file`, as sent (`data`, its bytes, the short last block of a
  /// file included): added to parity index 0 of its FEC block, which is then served without a
  /// read once every source has been seen (the first repair of a FEC block is index 0). A
  /// block seen before is ignored. Does nothing over GF(2^16) (k > 254).
  void observe(std::uint32_t file, std::uint32_t block, std::span<const std::byte> data);

  /// Writes parity block `index` of FEC block `fec_block` into `out` (block_size bytes).
  /// @return an error with `why` naming the file when a source cannot be read
  std::error_code parity(std::uint32_t fec_block, std::uint32_t index, std::span<std::byte> out,
                         std::string& why);

 private:
  struct cached {
    std::uint32_t fec_block = UINT32_MAX;
    std::vector<std::byte> bytes;  ///< sources, block_size each, back to back
    std::uint64_t used = 0;        ///< LRU stamp
  };
  /// Reads the sources of `fec_block` into `c`.
  std::error_code load(cached& c, std::uint32_t fec_block, std::string& why);
  /// Reads the sources of the `count` FEC blocks of one interleaving group, from `first`, into
  /// the least recently used entries, in one pass over the group's blocks: the FEC blocks of a
  /// group share their files, so the next one repaired there costs no read (on 10 kB files
  /// each FEC block of k = 200 at depth 8 lies in 200 files).
  std::error_code load_group(std::uint32_t first, std::uint32_t count, std::string& why);
  /// Copies source `i` of `fec_block` to its place in `into` (block_size bytes per source).
  std::error_code read_source(std::uint32_t fec_block, std::uint32_t i,
                              std::vector<std::byte>& into, std::string& why);

  const fec::layout& m_layout;
  const std::vector<source_file>& m_files;
  fec::codec m_codec;
  std::uint32_t m_block_size;
  block_reader m_reader;  ///< its own, so parity reads do not disturb pass 1's in-band hashing
  std::vector<cached> m_cache;
  std::uint64_t m_clock = 0;
  /// Parity index 0 being built from the sources pass 1 sends (observe).
  struct first_row {
    std::vector<std::byte> row;  ///< block_size bytes
    std::vector<bool> seen;      ///< per source of the FEC block
    std::uint32_t count = 0;     ///< sources added
  };
  std::unordered_map<std::uint32_t, first_row> m_first_rows;  ///< by FEC block
  std::uint64_t m_first_rows_bytes = 0;
  bool m_build_first_rows = false;  ///< GF(2^8) and blocks of at least 64 bytes
};

}  // namespace mcdist::sender
