#pragma once
/// @file
/// Parity blocks kept by the receiver's storage path until their FEC block is decoded
/// (docs/design-notes.md "Parity repairs"; storage_port::write_parity and recover), and the
/// decode itself.
///
/// parity_store holds the bytes in memory per (session, FEC block, parity index), charged to
/// storage_config::parity_memory_bytes before anything is allocated: a parity block that does
/// not fit is refused, so the engine NAKs that FEC block's missing blocks one by one instead.
/// Parity is never persisted: after a restart the receiver NAKs again. A parity datagram was
/// authenticated by the engine but its content is still bounded here (an index below
/// fec::max_blocks, at most max_block_bytes per block).
///
/// decode_fec_block reads a FEC block's available sources through a callback (the writer
/// thread's pread of temp or destination files), zero-pads them to the block size and recovers
/// the missing ones with fec::codec.

#include "common/ids.hpp"
#include "common/wire.hpp"
#include "receiver/core/storage_port.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

namespace mcdist::receiver {

/// The parity blocks of one FEC block, by parity index, ascending.
using parity_blocks = std::map<std::uint32_t, std::vector<std::byte>>;

/// Parity blocks kept in memory under a byte budget. Thread-safe: the network thread keeps and
/// drops, the writer thread takes.
class parity_store {
 public:
  /// Largest parity block accepted, bytes: the wire's largest block (wire::max_block_size).
  static constexpr std::size_t max_block_bytes = wire::max_block_size;
  /// Bytes charged per parity block besides its data: the map node and vector header
  /// (measured sizes rounded up), so a budget of tiny blocks still bounds the heap.
  static constexpr std::uint64_t overhead_bytes = 96;

  /// @param budget_bytes  most bytes (data plus overhead_bytes per block) held at once
  explicit parity_store(std::uint64_t budget_bytes) noexcept : m_budget(budget_bytes) {}

  /// Keeps a copy of `data` as parity block `index` of FEC block `fec_block` of `session`.
  /// @return false (nothing kept) when the budget has no room, `index` >= fec::max_blocks,
  ///         `data` is empty or longer than max_block_bytes, that block is kept already, or
  ///         the copy could not be allocated (then nothing is changed)
  bool keep(session_id session, std::uint32_t fec_block, std::uint32_t index,
            std::span<const std::byte> data) noexcept;
  /// Removes and returns the parity kept for a FEC block (empty if none), freeing its budget.
  parity_blocks take(session_id session, std::uint32_t fec_block);
  /// Forgets the parity kept for a FEC block.
  void drop(session_id session, std::uint32_t fec_block) { (void)take(session, fec_block); }
  /// Forgets every parity block of a session.
  void drop_session(session_id session);

  /// Bytes charged now (data plus overhead).
  std::uint64_t bytes() const;

 private:
  using key = std::pair<std::uint32_t, std::uint32_t>;  ///< (session id, FEC block)

  static std::uint64_t charge_of(const parity_blocks& p) noexcept;

  const std::uint64_t m_budget;
  mutable std::mutex m_mutex;
  std::map<key, parity_blocks> m_blocks;
  std::uint64_t m_used = 0;
};

/// Reads available source `i` of a FEC block (request.sources[i], `length` bytes at `offset`)
/// into `out` (exactly the source's length). @return 0 or an errno value
using source_reader = std::function<int(std::size_t i, std::span<std::byte> out)>;

/// A recovered source block: its index in request.sources and block_size bytes (the real
/// data is the first sources[index].length).
struct recovered_source {
  std::uint32_t index = 0;
  std::vector<std::byte> data;
};

/// Decodes a FEC block: reads its available sources with `read`, zero-pads each to
/// request.block_size, takes `parity`, and recovers every source not available
/// (fec::codec(request.k, request.max_parity).decode; common/fec/fec.hpp).
/// @param out  the recovered sources, in index order (wanted or not)
/// @return empty; errc::invalid_field when the request is inconsistent (no sources, more than
///         k, block_size 0 or above parity_store::max_block_bytes, a parity block of another
///         length, too few blocks to decode); errno_code of a failed read (ENODATA for a
///         short one)
std::error_code decode_fec_block(const recovery_request& request, const parity_blocks& parity,
                                 const source_reader& read, std::vector<recovered_source>& out);

}  // namespace mcdist::receiver
