#pragma once
/// @file
/// Which block goes out next (docs/architecture.md "Data flow in one session"): pass 1 sweeps every
/// block of every file in order, later passes sweep only the blocks receivers NAKed since. A block
/// NAKed behind the sweep's cursor while a pass runs is repaired ahead of new data, so a receiver's
/// holes close within a round trip instead of waiting for the next pass. A NAK for a block that was
/// sent again after the receiver's view of the stream (its `seen_seq`) is ignored: that copy is
/// still on its way (repair_log.hpp). Pure; no rate: the session asks for the next block when
/// its pacer allows one.

#include "common/block_map.hpp"
#include "sender/core/repair_log.hpp"

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

namespace mcdist::sender {

/// A block chosen to go out next.
struct block_pick {
  std::uint32_t file = 0;
  std::uint32_t block = 0;
  bool prompt = false;  ///< a repair of a block NAKed behind the cursor during this pass
};

/// The wanted blocks of a session's files, the sweep over them and the sequence numbers.
class pass_scheduler {
 public:
  /// Most runs of blocks queued for prompt repair during a pass (12 bytes each; a fade is one
  /// run); beyond it they wait for the next pass, which sends every wanted block anyway.
  static constexpr std::size_t max_prompt_runs = 1 << 16;

  /// @param blocks blocks of each file (block_count of its size); none wanted yet
  explicit pass_scheduler(const std::vector<std::uint32_t>& blocks);

  std::uint32_t file_count() const noexcept { return static_cast<std::uint32_t>(m_files.size()); }
  /// Blocks of `file` (< file_count()).
  std::uint32_t blocks(std::uint32_t file) const noexcept { return m_files[file].blocks; }

  /// Every block of every file is wanted: the transfer begins (then start_pass()).
  void want_all();
  /// Starts the next pass: the cursor goes back to file 0, block 0; queued prompt repairs are
  /// dropped, the new sweep covers them.
  void start_pass();
  /// Current pass, 0 before the first.
  std::uint32_t pass() const noexcept { return m_pass; }

  /// One more registered receiver holds `file` identically.
  void mark_held(std::uint32_t file) { ++m_files[file].held_by; }
  /// Registered receivers that hold `file`.
  std::uint32_t held_by(std::uint32_t file) const noexcept { return m_files[file].held_by; }
  /// Registration closed with `registered` receivers: pass 1 skips (unwants) a file that many
  /// hold, when its cursor reaches it.
  void group_known(std::uint32_t registered) noexcept { m_group = registered; }

  /// The next block of this pass without taking it: a prompt repair first, else the cursor's
  /// next wanted block. Calling it again before take() gives the same block.
  /// @return nullopt when the sweep has passed the last file (the pass is over)
  std::optional<block_pick> peek();
  /// Takes `p`, the block peek() returned, for sending.
  /// @return its sequence number: one more than the previous, never 0 ("never sent")
  std::uint32_t take(const block_pick& p);

  /// Passes over `p`, the block peek() returned, without sending it: it stays wanted (a relay's
  /// block lost upstream, relay_gate.hpp). In pass 1 the sequence numbers of the file's later
  /// blocks are then one lower than block 0's plus their index, and the in-flight estimate is
  /// lowered with them, so it stays an underestimate (repair_log.hpp).
  void skip(const block_pick& p);
  /// A NAK from a receiver that had seen sequence numbers up to `seen_seq`: blocks
  /// [first, first + count) of `file` (within the file) are wanted again, except those sent
  /// after `seen_seq`. With `prompt`, new ones behind the cursor are queued for prompt repair.
  /// Work per range, not per block: blocks already wanted are skipped a 64-bit word at a time
  /// and the pass-1 copies still in flight by one comparison; only blocks newly wanted (each a
  /// repair to send) cost a repair-log look-up.
  /// @param added  if not null, the runs [first, end) newly wanted are appended to it
  /// @return the blocks newly wanted (not wanted before)
  std::uint64_t nak(std::uint32_t file, std::uint32_t first, std::uint32_t count,
                    std::uint32_t seen_seq, bool prompt,
                    std::vector<std::pair<std::uint32_t, std::uint32_t>>* added = nullptr);
  /// The wanted blocks of `file` (< file_count()).
  const block_map& wanted_blocks(std::uint32_t file) const noexcept { return m_files[file].wanted; }

  /// Blocks wanted and not sent yet in this pass or queued for the next.
  std::uint64_t wanted() const noexcept { return m_wanted; }
  /// The sweep's position: the file and block it sends next (file_count() at the end).
  std::uint32_t cursor_file() const noexcept { return m_cursor_file; }
  std::uint32_t cursor_block() const noexcept { return m_cursor_block; }
  /// Takes a sequence number for a datagram that is not a block of this sweep (a parity block).
  std::uint32_t take_seq() noexcept {
    if (++m_seq == 0) ++m_seq;  // 0 means "never sent"
    return m_seq;
  }
  /// The last sequence number taken (0 before the first).
  std::uint32_t seq() const noexcept { return m_seq; }
  /// Numbers sequence numbers from `last` + 1 on (before anything is taken).
  void start_seq_after(std::uint32_t last) noexcept { m_seq = last; }
  /// Blocks sent again: prompt repairs and every block of passes after the first.
  std::uint64_t repairs() const noexcept { return m_repairs_sent; }

 private:
  struct file_state {
    std::uint32_t blocks = 0;
    block_map wanted;
    /// Sequence number of block 0 in pass 1 (0 = not sent in pass 1); block b went out with
    /// first_seq + b, since pass 1 sends a file's blocks back to back (see repair_log.hpp).
    std::uint32_t first_seq = 0;
    std::uint32_t held_by = 0;
  };

  bool advance_cursor();

  std::vector<file_state> m_files;
  repair_log m_repair_log;
  /// Runs queued for prompt repair: blocks [next, end) of `file` (those still wanted go out).
  struct prompt_run {
    std::uint32_t file = 0;
    std::uint32_t next = 0;
    std::uint32_t end = 0;
  };
  std::deque<prompt_run> m_prompt;
  std::uint32_t m_pass = 0;
  std::uint32_t m_cursor_file = 0;
  std::uint32_t m_cursor_block = 0;
  std::uint32_t m_group = 0;  ///< registered receivers once registration closed, else 0
  std::uint64_t m_wanted = 0;
  std::uint32_t m_seq = 0;
  std::uint64_t m_repairs_sent = 0;
};

}  // namespace mcdist::sender
