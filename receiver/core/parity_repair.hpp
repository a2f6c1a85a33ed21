#pragma once
/// @file
/// One session's parity repairs on the receiver side (docs/design-notes.md "Parity repairs"):
/// the FEC shape its announce declared, the FEC tracker (fec_tracker.hpp) built once the
/// manifest is complete, the decode request of a FEC block whose parity covers its loss, and
/// the source blocks a decode recovered. The engine routes parity datagrams and source blocks
/// in, makes the storage calls (write_parity, recover, begin_file) and marks what was
/// recovered. Pure: no storage, no clock.

#include "common/ids.hpp"
#include "receiver/core/fec_tracker.hpp"
#include "receiver/core/file_table.hpp"
#include "receiver/core/memory_budget.hpp"
#include "receiver/core/storage_port.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace mcdist::receiver {

/// The parity repairs of one session.
class parity_repair {
 public:
  /// Counts for the session's summary line.
  struct counts {
    std::uint32_t kept = 0;        ///< parity blocks kept by storage
    std::uint32_t refused = 0;     ///< parity blocks storage refused
    std::uint32_t fec_blocks = 0;  ///< FEC blocks decoded
    std::uint32_t blocks = 0;      ///< source blocks recovered
    std::uint32_t failures = 0;    ///< decodes that failed
  };

  /// No parity (a restored session, or one without FEC).
  parity_repair() = default;
  /// The shape of session_params.fec_k, fec_max_parity, fec_depth for blocks of `block_size`
  /// bytes. A shape the codec cannot have means no parity here (explicit NAKs still work):
  /// fec::valid_shape, a depth of 1 to fec::max_depth, and under GF(2^16), which codes whole
  /// 16-bit words, an even block size.
  parity_repair(std::uint32_t k, std::uint32_t max_parity, std::uint32_t depth,
                std::uint32_t block_size) noexcept;

  /// Source blocks per FEC block (0: no parity).
  std::uint32_t k() const noexcept { return m_k; }
  std::uint32_t max_parity() const noexcept { return m_max_parity; }
  std::uint32_t depth() const noexcept { return m_depth; }

  /// The tracker, once built (build), else nullptr.
  fec_tracker* tracker() noexcept { return m_tracker.get(); }
  const fec_tracker* tracker() const noexcept { return m_tracker.get(); }

  /// Builds the tracker for the session's complete manifest (`files`, every entry, refused
  /// ones included: the layout is the sender's), with what this receiver can read back
  /// already: received blocks, and held or stored files whole. Charges its memory to
  /// `budget` first (2 bytes per FEC block). Without parity, when storage cannot decode
  /// (`decodes` false), when a file has too many blocks, the layout is invalid or the budget
  /// refuses, parity is off for the session from then on.
  /// @return true when the tracker exists (built now or before)
  bool build(std::span<const file_rx> files, std::uint32_t block_size, bool decodes,
             memory_budget& budget, session_id id);

  /// Source block `b` of file `f` arrived (the tracker exists). @return true when its FEC
  /// block became decodable (`fb` set): the caller starts its recovery
  bool source_added(std::uint32_t f, std::uint32_t b, std::uint32_t& fb) noexcept;

  /// The decode request for FEC block `fb` (decodable; the tracker exists), marked decoding:
  /// which of its sources storage can read (held, stored, or received) and which are wanted
  /// (receiving files with a block map). The caller begins the files of the wanted sources.
  recovery_request request(std::uint32_t fb, std::span<const file_rx> files, std::uint32_t channel,
                           std::uint32_t block_size);

  /// True when a decode of FEC block `fb` is under way (a storage answer is expected).
  bool decoding(std::uint32_t fb) const noexcept {
    return m_tracker && fb < m_tracker->layout().fec_blocks() && m_tracker->decoding(fb);
  }
  /// The decode of `fb` failed: its missing blocks are NAKed one by one from now on.
  void decode_failed(std::uint32_t fb);
  /// A source block the decode recovered for a receiving file.
  struct recovered {
    std::uint32_t file = 0;
    std::uint32_t block = 0;
  };
  /// The decode of `fb` succeeded: the sources it wrote (receiving files with a block map,
  /// blocks not received), in source order; the FEC block is complete from now on. The caller
  /// marks them received.
  std::vector<recovered> decoded(std::uint32_t fb, std::span<const file_rx> files);

  /// A parity block storage kept, or refused (its FEC block is then NAKed block by block).
  void parity_kept() noexcept { ++m_counts.kept; }
  void parity_refused(std::uint32_t fb);

  const counts& stats() const noexcept { return m_counts; }

 private:
  std::uint32_t m_k = 0;
  std::uint32_t m_max_parity = 0;
  std::uint32_t m_depth = 1;
  std::unique_ptr<fec_tracker> m_tracker;
  counts m_counts;
};

}  // namespace mcdist::receiver
