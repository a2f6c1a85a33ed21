#pragma once
/// @file
/// Packs one NAK round into datagrams: the missing blocks of each file as (gap, count) runs
/// (common/ranges.hpp), split so that no NAK passes the control datagram budget, at most
/// `max_datagrams` of them per round (the rest waits for the next marker). The engine decides
/// which files and blocks are due (behind the sender's marker, from where the last round
/// stopped); this unit decides how they fit on the wire. Same job as the NAK list packing of
/// NORM (RFC 5740 section 4.2.3.3, NACK content) with our run encoding.

#include "common/block_map.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace mcdist::receiver {

/// The NAK datagrams of one round, built file by file.
class nak_builder {
 public:
  /// Bytes of file ranges one NAK carries: control_budget less the header and 60 bytes for
  /// the fields every NAK repeats (digests_wanted rides in the last datagram's slack).
  static constexpr std::size_t range_budget = wire::control_budget - wire::header_size - 60;
  /// Bytes a file_nak costs before its ranges (tag, length, file index), an upper bound.
  static constexpr std::size_t file_overhead = 12;

  /// @param header        the fields every NAK of the round repeats (receiver id, pass, seen
  ///                      sequence, echo and hold times, counters): copied into each datagram
  /// @param max_datagrams most datagrams this round (receiver_config::max_nak_datagrams)
  nak_builder(const wire::nak& header, std::uint32_t max_datagrams);

  /// Adds the blocks of `file` in [from, end) that `received` does not have.
  /// @param from  first block to look at; when the cap is reached, set to where the next
  ///              round goes on (every missing block before it was asked for, none after)
  /// @return false when the datagram cap was reached (nothing more fits this round)
  bool add_missing(std::uint32_t file, const block_map& received, std::uint32_t& from,
                   std::uint32_t end);
  /// Adds the given blocks of `file` (ascending, distinct): consecutive indexes go as one
  /// run, all of them in one file_nak per datagram (a FEC block named one by one, whose
  /// sources of a file are every depth-th block, costs 2 bytes a block, not a file_nak each).
  /// @param done  blocks[0, done) are already in; advanced past each block added, so on a
  ///              false return blocks[done, ...) are the ones left out
  /// @return false when the datagram cap was reached
  bool add_blocks(std::uint32_t file, std::span<const std::uint32_t> blocks, std::size_t& done);
  /// Reports that FEC block `fec_block` lacks `lack` blocks (nak.fec_lacks; FEC blocks in
  /// ascending order within one round).
  /// @return false when the datagram cap was reached (it was not added)
  bool add_fec_lack(std::uint32_t fec_block, std::uint32_t lack);
  /// Asks for `file`'s digest in the open datagram.
  void want_digest(std::uint32_t file) { m_msg.add_digests_wanted(file); }
  /// Digests asked for in the open datagram.
  std::size_t digests_wanted() const noexcept {
    return static_cast<std::size_t>(m_msg.digests_wanted_size());
  }
  /// The round's datagram cap is reached.
  bool full() const noexcept { return m_done.size() >= m_max; }
  /// Closes the open datagram if it asks for anything, or if `always` (the answer to a status
  /// request), unless the cap is reached.
  void finish(bool always);
  /// The closed datagrams, in order.
  std::vector<wire::nak>& datagrams() noexcept { return m_done; }

 private:
  void close();
  /// The runs `next` yields for `file` (next(first, count) sets the next run and returns
  /// true, or returns false at the end; taken() consumes it), packed like add_missing.
  template <class Next, class Taken>
  bool add_runs(std::uint32_t file, Next&& next, Taken&& taken);

  wire::nak m_header;
  wire::nak m_msg;
  std::size_t m_used = 0;        ///< range bytes in m_msg
  std::uint32_t m_last_fec = 0;  ///< FEC block of m_msg's last fec_lacks pair (gap base)
  std::uint32_t m_max;
  std::vector<wire::nak> m_done;
};

}  // namespace mcdist::receiver
