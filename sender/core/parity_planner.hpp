#pragma once
/// @file
/// Which parity blocks go out (docs/design-notes.md "Parity repairs"). A
/// receiver's NAK says how many blocks of a FEC block it still lacks; the sender answers with
/// that many parity blocks it has not sent before, so one parity block repairs a different loss
/// at every site, and the repair volume of a FEC block is the largest lack among the receivers,
/// not the union of their losses (NORM's parity repair, RFC 5740 section 2; Nonnenmacher,
/// Biersack and Towsley, "Parity-based loss recovery for reliable multicast transmission",
/// SIGCOMM 1997).
///
/// Lacks are merged as NAKs for blocks are (sender_session.hpp "Stale NAKs"): parity of the FEC
/// block sent after the receiver's `seen_seq` is still on its way to it and counts against its
/// lack; what is scheduled and not yet sent is raised to the lack, never added to it, so N
/// receivers lacking 2 blocks each get 2 parity blocks, not 2N. Parity indexes run 0, 1, ...
/// max_parity - 1 and then start over (a receiver that lost parity block i earlier can use it;
/// one that has it drops the copy): with max_parity >= the worst lack that is never reached.
///
/// Scheduled FEC blocks are served round robin, one parity block each in turn, so the parity of
/// one FEC block is spread in time like its sources (a burst takes one or two of them, not all).
/// Pure; memory: a map entry per FEC block that got parity (its log of sequence numbers is
/// bounded by seq_log_max).

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

namespace mcdist::sender {

/// A parity block chosen to go out next.
struct parity_pick {
  std::uint32_t fec_block = 0;
  std::uint32_t index = 0;  ///< parity index, < max_parity
};

/// The parity blocks scheduled for a session's FEC blocks.
class parity_planner {
 public:
  /// Sequence numbers of parity sent kept per FEC block for the in-flight test: 64 covers a
  /// lack of 64 blocks in one round trip; beyond it older parity is taken as arrived, which can
  /// only send more parity, never less.
  static constexpr std::size_t seq_log_max = 64;

  /// @param fec_blocks  FEC blocks of the session (fec::layout::fec_blocks)
  /// @param max_parity  distinct parity indexes per FEC block (fec::codec::max_parity), >= 1
  parity_planner(std::uint32_t fec_blocks, std::uint32_t max_parity);

  std::uint32_t fec_blocks() const noexcept { return m_fec_blocks; }
  std::uint32_t max_parity() const noexcept { return m_max_parity; }

  /// A receiver that had seen sequence numbers up to `seen_seq` lacks `lack` blocks of FEC block
  /// `fb` (< fec_blocks()): the parity scheduled for it rises so that parity still on its way
  /// to that receiver plus parity scheduled reaches `lack`.
  /// @return parity blocks newly scheduled
  std::uint32_t nak(std::uint32_t fb, std::uint32_t lack, std::uint32_t seen_seq);
  /// Proactive parity (pass 1, --fec-overhead): `count` more parity blocks of `fb`.
  void add(std::uint32_t fb, std::uint32_t count);
  /// Schedules parity of `fb` until the parity sent of it (sent_of, counting all passes) plus
  /// the parity scheduled reaches `total` (group_lack's estimate for the group).
  /// @return parity blocks newly scheduled
  std::uint32_t raise_sent_to(std::uint32_t fb, std::uint64_t total);

  /// The next parity block to send without taking it; nullopt when none is scheduled.
  std::optional<parity_pick> peek() const;
  /// Takes `p` (what peek() returned), sent with sequence number `seq`.
  void take(const parity_pick& p, std::uint32_t seq);

  /// Moves the FEC block peek() names behind the others, its parity still scheduled (a relay
  /// that cannot encode it yet, relay_gate.hpp).
  void defer() {
    if (m_queue.size() < 2) return;
    m_queue.push_back(m_queue.front());
    m_queue.pop_front();
  }
  /// FEC blocks with parity scheduled: how many defer() calls go round the queue once.
  std::size_t queued() const noexcept { return m_queue.size(); }
  /// Parity blocks scheduled and not sent yet.
  std::uint64_t scheduled() const noexcept { return m_scheduled; }
  /// Parity blocks of FEC block `fb` scheduled and not sent yet.
  std::uint32_t pending_of(std::uint32_t fb) const {
    const auto it = m_state.find(fb);
    return it == m_state.end() ? 0 : it->second.pending;
  }
  /// Parity blocks sent so far.
  std::uint64_t sent() const noexcept { return m_sent; }
  /// Parity blocks sent of FEC block `fb` so far (indexes used, counting repeats).
  std::uint32_t sent_of(std::uint32_t fb) const;

 private:
  struct fec_state {
    std::uint32_t next = 0;           ///< parity blocks sent so far; the next index is next % max
    std::uint32_t pending = 0;        ///< scheduled, not sent
    std::vector<std::uint32_t> seqs;  ///< sequence numbers of the latest sends, oldest first
  };
  void schedule(std::uint32_t fb, fec_state& st, std::uint32_t count);

  std::uint32_t m_fec_blocks;
  std::uint32_t m_max_parity;
  std::unordered_map<std::uint32_t, fec_state> m_state;
  /// FEC blocks with pending parity, in the order they are served (round robin).
  std::deque<std::uint32_t> m_queue;
  std::uint64_t m_scheduled = 0;
  std::uint64_t m_sent = 0;
};

}  // namespace mcdist::sender
