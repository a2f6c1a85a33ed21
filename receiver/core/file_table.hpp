#pragma once
/// @file
/// The files of one receiving session (docs/architecture.md "Data flow in one session"): each
/// manifest entry's state (pending, receiving, ... stored), which of its blocks are in, and
/// the session's counts by outcome, kept in step with every transition. The engine makes the
/// storage calls that go with a transition (begin, discard, finalize: storage_port.hpp) where
/// a transition says so; the NAK planner and the unicast fetch read the files to know what is
/// missing. Also the manifest's last check (two entries naming one path, a file where another
/// needs a directory) and the files' part of a checkpoint. Pure bookkeeping: no storage, no
/// clock.

#include "common/block_map.hpp"
#include "common/manifest.hpp"
#include "receiver/core/manifest_assembler.hpp"
#include "receiver/core/memory_budget.hpp"
#include "receiver/core/session_checkpoint.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mcdist::wire {
class register_request;
}

namespace mcdist::receiver {

/// Bytes of a block map of `bits` blocks (block_map: whole 64-bit words).
constexpr std::uint64_t bitmap_bytes(std::uint64_t bits) { return (bits + 63) / 64 * 8; }

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

/// The files of one session, by manifest index, and their counts. Iterates as a contiguous
/// range of file_rx (a std::span<const file_rx> binds to it).
class file_table {
 public:
  // --- the files
  file_rx& operator[](std::uint32_t f) noexcept { return m_files[f]; }
  const file_rx& operator[](std::uint32_t f) const noexcept { return m_files[f]; }
  /// Entries known so far: every entry once the manifest is complete.
  std::size_t size() const noexcept { return m_files.size(); }
  file_rx* data() noexcept { return m_files.data(); }
  const file_rx* data() const noexcept { return m_files.data(); }
  auto begin() noexcept { return m_files.begin(); }
  auto end() noexcept { return m_files.end(); }
  auto begin() const noexcept { return m_files.cbegin(); }
  auto end() const noexcept { return m_files.cend(); }

  // --- counts (from the manifest's completion on; restored sessions from the start)
  /// Files not in a terminal state.
  std::uint32_t open() const noexcept { return m_open; }
  /// Files handed to storage to verify and deliver.
  std::uint32_t finalizing() const noexcept { return m_finalizing; }
  std::uint32_t stored() const noexcept { return m_stored; }
  std::uint32_t held() const noexcept { return m_held; }
  std::uint32_t failed() const noexcept { return m_failed; }
  /// Bytes of the files stored.
  std::uint64_t bytes_stored() const noexcept { return m_bytes_stored; }
  /// Files refused (by the manifest's checks; not counted in failed()).
  std::uint32_t refused() const noexcept;

  // --- the manifest
  /// The table grows as manifest entries arrive (manifest_assembler::table_capacity and
  /// table_size: what the memory budget admitted).
  void grow(std::size_t capacity, std::size_t size);
  /// An entry taken from a manifest chunk: receiving (its blocks are taken at once, even
  /// before the manifest is complete), or refused with the reason. @return true if refused
  bool take(taken_entry t);
  /// The manifest is complete: of two entries naming one path, or a file where another needs
  /// a directory, the second is refused ("path_conflict"); the files left to do are counted
  /// open from now on.
  /// @return the files refused now, in index order, with whether each had a temp file the
  ///         caller discards
  std::vector<std::pair<std::uint32_t, bool>> close_manifest();
  /// True once close_manifest (or restore) ran: open() counts.
  bool counting() const noexcept { return m_counting; }

  // --- transitions; each returns true when the file had a temp file the caller discards
  /// Our copy is identical (held, its digest matched): terminal.
  bool hold(std::uint32_t f) noexcept;
  /// Every block is in and the digest is not known yet.
  void await_digest(std::uint32_t f) noexcept {
    m_files[f].state = file_rx::state_t::awaiting_digest;
  }
  /// Every block is in and the digest known: handed to storage (storage_port::finalize; the
  /// caller has begun the file).
  void finalize(std::uint32_t f) noexcept;
  /// Could not be stored (a storage error, the budget): terminal, with `failure`. A file in a
  /// terminal state already is left as it is (returns false).
  bool fail(std::uint32_t f, std::string failure);
  /// Storage delivered a finalizing file.
  void on_stored(std::uint32_t f) noexcept;
  /// Storage could not deliver a finalizing file: terminal, with `failure`.
  void on_store_failed(std::uint32_t f, std::string failure);
  /// A finalizing file failed SHA-256 verification and is fetched again: receiving, its blocks
  /// forgotten, its retries counted.
  void refetch(std::uint32_t f) noexcept;

  // --- registration
  /// Adds to a REGISTER what this receiver holds already: the held files as runs
  /// (held_files), then the files whose digest is still unknown with our copy's digest
  /// (held_pending), as many as fit the control datagram budget after what `m` carries.
  void add_held(wire::register_request& m) const;

  // --- checkpoints
  /// Adds every file to `w` (a finalizing file as fully received: on resume it is finalized
  /// again).
  void save(checkpoint_writer& w) const;
  /// Takes the files of a checkpoint read by read_checkpoint (their entries and block maps are
  /// moved out of `saved`), every one counted. Each block map is charged to `budget` for
  /// session `id` before it is allocated.
  /// @return false when one does not fit the budget (the table is then unspecified)
  bool restore(std::vector<saved_file>& saved, memory_budget& budget, session_id id);

 private:
  /// The common part of on_stored, on_store_failed and refetch.
  file_rx& leave_finalizing(std::uint32_t f) noexcept;

  std::vector<file_rx> m_files;
  bool m_counting = false;
  std::uint32_t m_open = 0;
  std::uint32_t m_finalizing = 0;
  std::uint32_t m_stored = 0;
  std::uint32_t m_held = 0;
  std::uint32_t m_failed = 0;
  std::uint64_t m_bytes_stored = 0;
};

}  // namespace mcdist::receiver
