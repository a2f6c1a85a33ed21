#pragma once
/// @file
/// A receiver's view of one session's FEC blocks (docs/design-notes.md
/// "Parity repairs"): how many blocks of each FEC block it can use (its source blocks received
/// or held, parity blocks kept by storage), how many it lacks for the sender's NAK, and when a
/// FEC block can be decoded (any k' of its k' + parity blocks recover the sources,
/// common/fec/fec.hpp). The engine feeds it; storage keeps the parity bytes and decodes.
///
/// Lack, for a NAK: the FEC block's sources the sender has sent (behind its marker) less those
/// this receiver can use and less the parity blocks it holds. A receiver reports a FEC block by
/// count only while parity can still make it whole (the lack is at most the parity indexes it
/// does not hold yet); otherwise, or once a decode failed, its missing blocks are NAKed one by
/// one as without FEC (`explicit_only`).
///
/// A FEC block is also NAKed one by one when decoding it would cost more than
/// fec::max_decode_work (missing sources x sources): a site that missed most of a large GF(2^16)
/// FEC block asks for the blocks rather than burn seconds of CPU on one decode.
///
/// Pure. Memory: 2 bytes per FEC block plus about 100 bytes (entry and map node) per FEC block
/// holding parity or marked explicit_only, at most max_parity_states of those, plus 4 bytes per
/// parity index held: an index is recorded only for a parity block storage keeps, so the
/// storage's parity budget bounds those (64 MiB of parity is ~45,000 indexes). A sender that
/// sends one parity block for every FEC block of a huge declared set and never completes one
/// cannot make the site spend more than ~6.5 MB in entries here.

#include "common/fec/fec_layout.hpp"

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace mcdist::receiver {

/// Source and parity counts of a session's FEC blocks.
class fec_tracker {
 public:
  /// Most FEC blocks with parity state at once: 65,536 FEC blocks of 128 blocks are 11 GB of a
  /// session's data awaiting repair, far beyond any real loss; beyond it parity is dropped.
  static constexpr std::size_t max_parity_states = 1 << 16;

  /// @param layout      the session's FEC blocks
  /// @param max_parity  parity indexes per FEC block (session_params.fec_max_parity;
  ///                    fec::valid_shape with the layout's k)
  fec_tracker(fec::layout layout, std::uint32_t max_parity);

  const fec::layout& layout() const noexcept { return m_layout; }
  std::uint32_t max_parity() const noexcept { return m_max_parity; }

  /// One more source block of `fb` is usable (received, or of a held file).
  void add_source(std::uint32_t fb) noexcept;
  /// Parity block `index` of `fb` is kept by storage.
  /// @return false when it is out of range, held already, or `fb` needs no parity any more
  ///         (complete, being decoded, or explicit_only): the datagram is a duplicate
  bool add_parity(std::uint32_t fb, std::uint32_t index);
  /// Source blocks of `fb` usable, at most its sources.
  std::uint32_t sources_held(std::uint32_t fb) const noexcept { return m_sources[fb]; }
  /// Parity blocks of `fb` held.
  std::uint32_t parity_held(std::uint32_t fb) const noexcept;
  /// Parity indexes of `fb` held, ascending.
  std::vector<std::uint32_t> parity_indexes(std::uint32_t fb) const;

  /// Blocks of `fb` still lacking given that the sender has sent `sent` of its sources.
  std::uint32_t lack(std::uint32_t fb, std::uint32_t sent) const noexcept;
  /// True when `fb` can be reported by count: not explicit_only, the lack fits in the parity
  /// indexes not held yet, and decoding it stays within fec::max_decode_work.
  bool by_count(std::uint32_t fb, std::uint32_t lack) const noexcept;
  /// True when `fb` misses sources and holds enough parity to decode them, and no decode runs.
  bool decodable(std::uint32_t fb) const noexcept;

  /// A decode of `fb` was handed to storage: its parity is taken; nothing more is added.
  void start_decode(std::uint32_t fb);
  bool decoding(std::uint32_t fb) const noexcept;
  /// The decode succeeded: every source of `fb` is usable; its parity state is dropped.
  void decoded(std::uint32_t fb);
  /// Parity cannot repair `fb` here (storage refused parity or a decode failed): its missing
  /// blocks are NAKed one by one from now on; its parity state is dropped.
  void set_explicit_only(std::uint32_t fb);
  bool explicit_only(std::uint32_t fb) const noexcept;

 private:
  struct parity_state {
    std::vector<std::uint32_t> held;  ///< parity indexes held, ascending
    bool decoding = false;
    bool explicit_only = false;
  };
  /// Decoding `fb` now would take more than fec::max_decode_work.
  bool too_costly(std::uint32_t fb) const noexcept;

  fec::layout m_layout;
  std::uint32_t m_max_parity;
  std::vector<std::uint16_t> m_sources;  ///< per FEC block
  std::unordered_map<std::uint32_t, parity_state> m_parity;
};

}  // namespace mcdist::receiver
