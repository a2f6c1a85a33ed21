#pragma once
/// @file
/// Collects a session's announce chunks into its manifest (docs/architecture.md "Data flow in one
/// session", step 1). Chunks come in any order, repeated every announce cycle, and on an unsigned
/// channel from anyone, so each is checked before anything is allocated for it: its index below the
/// announced chunk count and not taken before, its entries within [0, file_count), at least
/// one unless the session is empty. Its new entries are then validated one by one (from_wire:
/// path, size, digest; a block count that fits; sizes adding up to no more than the announced
/// total) and taken, refused ones included, so the receiver takes blocks of a file as soon as
/// its entry is known. What the receiver's file table and the entries' paths cost is charged to
/// the session's memory budget first (memory_budget.hpp), so a forged announce declaring 10^6
/// files costs nothing until entries come. Pure: the engine owns the file table and sizes it as
/// admit() says. (session_params.manifest_sha256 is not checked: no sender fills it in; a
/// signed session's chunks are each authenticated by the shell, common/auth.hpp.)

#include "common/block_map.hpp"
#include "common/error.hpp"
#include "common/ids.hpp"
#include "common/manifest.hpp"
#include "receiver/core/memory_budget.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mcdist::wire {
class announce;
class session_params;
}  // namespace mcdist::wire

namespace mcdist::receiver {

/// An entry of the manifest, taken from a chunk.
struct taken_entry {
  std::uint32_t index = 0;  ///< file index
  /// The entry: as from_wire made it, with path and size as announced when it was refused.
  manifest_entry entry;
  std::uint32_t blocks = 0;  ///< blocks of the file (0 when refused)
  /// errc::ok: accepted; else why it was refused (a path_* code, file_too_large, invalid_field:
  /// past the announced total, over_budget: its path did not fit the budget).
  errc refused = errc::ok;
};

/// The chunk and entry bookkeeping of one session's manifest.
class manifest_assembler {
 public:
  /// What admit() says of a chunk.
  enum class fit {
    ignored,      ///< chunk index past the count, or a chunk already taken: a repeat, no error
    invalid,      ///< entries outside [0, file_count), or none in a non-empty session
    over_budget,  ///< the file table cannot grow within the budget; a later copy may fit
    admitted,     ///< the file table must now hold table_size() entries: call take()
  };
  /// Where the manifest stands after take().
  enum class progress {
    partial,    ///< chunks are still missing
    complete,   ///< every chunk and every entry is in
    malformed,  ///< every chunk is in, but they left entries out: the session is unusable
  };

  /// Paths up to this many bytes live inside the std::string (libstdc++'s short-string buffer)
  /// and cost nothing beyond the file table; longer ones are charged.
  static constexpr std::size_t inline_path_bytes = 15;
  /// Most blocks a file may have (2^31 - 1, below the 32-bit block indexes of the wire and of
  /// block_map); a larger entry is refused as file_too_large.
  static constexpr std::uint64_t max_file_blocks = 0x7fffffffu;

  /// Bytes of the bookkeeping itself (one bit per chunk and per entry, whole 64-bit words): the
  /// engine charges them with the session.
  static constexpr std::uint64_t state_bytes(std::uint32_t chunks,
                                             std::uint32_t file_count) noexcept {
    return (std::uint64_t{chunks} + 63) / 64 * 8 + (std::uint64_t{file_count} + 63) / 64 * 8;
  }

  /// Nothing to assemble (a session restored from its checkpoint).
  manifest_assembler() = default;
  /// @param p           the first announce's parameters, checked by the engine: block_size
  ///                    within the wire limits, 1 <= manifest_chunks <= max(1, file_count)
  /// @param slot_bytes  bytes the engine's file table spends per entry (charged as it grows)
  manifest_assembler(const wire::session_params& p, std::size_t slot_bytes);

  /// Checks chunk `m` and charges the file table's growth to session `s` in `budget`: the table
  /// grows geometrically (chunks usually come in order), up to file_count entries, the new
  /// capacity charged before the engine reserves it. Changes nothing unless `admitted`.
  fit admit(const wire::announce& m, memory_budget& budget, session_id s);
  /// Entries the engine's file table holds from now on (indexes below are valid).
  std::size_t table_size() const noexcept { return m_table_size; }
  /// Entries charged for; the engine reserves this many.
  std::size_t table_capacity() const noexcept { return m_table_capacity; }

  /// Takes the entries of chunk `m`, just admitted, that no earlier chunk gave: each validated,
  /// a path longer than inline_path_bytes charged to `s` in `budget`. Marks them and the chunk
  /// only once every one is in `out` (an allocation that fails leaves the chunk to a later
  /// copy).
  /// @param out  cleared, then the new entries in index order
  progress take(const wire::announce& m, memory_budget& budget, session_id s,
                std::vector<taken_entry>& out);

  /// The manifest is whole: every chunk and every entry is in.
  bool complete() const noexcept {
    return m_chunks.size() > 0 && m_chunks.all() && m_entries.all();
  }
  /// Chunks taken so far.
  std::uint32_t chunks_taken() const noexcept { return m_chunks.count(); }
  /// Entries taken so far, refused ones included.
  std::uint32_t entries_taken() const noexcept { return m_entries.count(); }
  /// Sum of the sizes of the accepted entries, bytes (at most the announced total).
  std::uint64_t entry_bytes() const noexcept { return m_entry_bytes; }

 private:
  std::uint32_t m_block_size = 0;
  std::uint32_t m_file_count = 0;
  std::uint64_t m_total_bytes = 0;
  std::size_t m_slot_bytes = 0;
  block_map m_chunks;
  block_map m_entries;
  std::uint64_t m_entry_bytes = 0;
  std::size_t m_table_size = 0;
  std::size_t m_table_capacity = 0;
};

}  // namespace mcdist::receiver
