#pragma once
/// @file
/// What a relay's downstream session may send now (docs/relays-design.md "The downstream
/// session"). A relay is an ordinary site of its upstream session and, for the sites below it,
/// the sender of the same session: a sender_session whose blocks come from what the relay holds.
/// Its pass 1 follows the upstream pass 1 as it arrives (cut-through), so a block it does not
/// hold yet is one of two things: still on its way (the upstream cursor has not reached it:
/// wait for it) or lost on the upstream link (the cursor passed it: skip it, it stays wanted,
/// and the relay's own NAK brings the upstream repair, once for every site below). Parity is
/// encoded from the sources, so a FEC block's parity waits until the relay holds all of them.
/// Pure; no clock.

#include "common/fec/fec_layout.hpp"

#include <cstdint>
#include <functional>
#include <utility>

namespace mcdist::sender {

/// The gate's answer for one source block (sender_config::block_gate).
enum class gate_answer : std::uint8_t {
  send,  ///< held: send it now
  skip,  ///< not held and not coming in this sweep: leave it wanted, take the next one
  wait,  ///< not held yet, still on its way: stop the sweep here until more is held
};

/// The upstream session's pass-1 progress as a relay sees it, and the gate built on it.
class relay_gate {
 public:
  /// Whether the relay holds source block `block` of `file` (written to its temp file or
  /// delivered), so the shell can read it now.
  using held_fn = std::function<bool(std::uint32_t file, std::uint32_t block)>;

  /// @param held  the relay storage's answer; called once per answer() and per source of a FEC
  ///              block in parity_ready()
  explicit relay_gate(held_fn held) : m_held(std::move(held)) {}

  /// An upstream data datagram of block (file, block) arrived: the upstream sweep passed
  /// every block before it in pass-1 order (files in index order, blocks in order).
  void on_upstream_block(std::uint32_t file, std::uint32_t block) noexcept {
    advance(file, block + 1);
  }
  /// An upstream marker (wire::marker): in pass 1 its (file, block) is the block the upstream
  /// sends next; a pass-end marker or one of a later pass ends pass 1.
  void on_upstream_marker(std::uint32_t pass, std::uint32_t file, std::uint32_t block,
                          bool pass_end) noexcept;
  /// Nothing more comes in pass-1 order: the upstream pass 1 ended, the upstream session
  /// ended, or the relay holds every file. Every block not held is skipped from now on.
  void upstream_pass_over() noexcept { m_over = true; }
  bool upstream_pass_over_seen() const noexcept { return m_over; }

  /// The answer for source block (file, block) of the downstream sweep.
  gate_answer answer(std::uint32_t file, std::uint32_t block) const;
  /// Whether the relay holds every source of FEC block `fec_block` of `layout`, so its parity
  /// can be encoded (sender_config::parity_gate). O(sources of the FEC block).
  bool parity_ready(const fec::layout& layout, std::uint32_t fec_block) const;

 private:
  void advance(std::uint32_t file, std::uint32_t block) noexcept {
    if (file > m_file || (file == m_file && block > m_block)) {
      m_file = file;
      m_block = block;
    }
  }

  held_fn m_held;
  /// The upstream sweep's position: every block before (m_file, m_block) was sent upstream.
  std::uint32_t m_file = 0;
  std::uint32_t m_block = 0;
  bool m_over = false;
};

}  // namespace mcdist::sender
