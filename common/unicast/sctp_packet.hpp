#pragma once
/// @file
/// Reading the parts of an SCTP packet (RFC 9260 section 3) that the loss-recovery assistant
/// of usrsctp associations (sctp_loss_probe.hpp) needs: the TSNs of DATA and I-DATA chunks
/// (RFC 9260 section 3.3.1, RFC 8260 section 2.1) and the cumulative TSN ack and gap blocks of
/// SACK and NR-SACK chunks (RFC 9260 section 3.3.4; NR-SACK: draft-natarajan-tsvwg-sctp-nrsack,
/// as usrsctp sends it). Pure, no I/O.
///
/// The packets read here are the ones usrsctp emits and the ones it is handed; a received
/// packet is hostile, so every length is checked against the buffer, and a chunk that does not
/// fit ends the walk (what was read before it stands, as usrsctp would itself drop the rest).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace mcdist::unicast::sctp_wire {

/// Serial number arithmetic on 32-bit TSNs (RFC 9260 section 1.6, RFC 1982): a before b.
constexpr bool tsn_before(std::uint32_t a, std::uint32_t b) noexcept {
  return static_cast<std::int32_t>(a - b) < 0;
}

/// One gap ack block of a SACK, as absolute TSNs (both ends included).
struct gap_block {
  std::uint32_t first = 0;
  std::uint32_t last = 0;
};

/// What one SCTP packet says about data and its acknowledgement.
struct packet_summary {
  /// The common header's verification tag (RFC 9260 section 3.1).
  std::uint32_t verification_tag = 0;
  /// The packet carries an INIT or INIT ACK chunk (RFC 9260 sections 3.3.2-3.3.3) ...
  bool init = false;
  /// ... whose Initiate Tag, the verification tag the other side must put on every packet it
  /// sends to this one (section 8.5), is this.
  std::uint32_t initiate_tag = 0;
  /// The packet carries at least one DATA or I-DATA chunk.
  bool data = false;
  /// Lowest and highest TSN of those chunks (serial arithmetic), valid when `data`.
  std::uint32_t first_tsn = 0;
  std::uint32_t last_tsn = 0;
  /// The packet carries a SACK or NR-SACK chunk (the first one is read).
  bool sack = false;
  /// Its cumulative TSN ack, valid when `sack`.
  std::uint32_t cum_tsn = 0;
  /// Its gap ack blocks, at most max_gaps of them (more are not read: usrsctp reports at most
  /// a few dozen, and the blocks read are the lowest TSNs). Reading stops at a block that does
  /// not begin above the previous one's end (RFC 9260 sends them ascending and disjoint), so
  /// the blocks read are ascending and disjoint.
  static constexpr std::size_t max_gaps = 32;
  std::array<gap_block, max_gaps> gaps{};
  std::size_t gap_count = 0;
};

/// Reads `packet` (the SCTP common header and its chunks, as carried in a UDP payload by RFC
/// 6951). @return false, and `out` describing only what was read, when the packet is shorter
/// than its common header or a chunk's length is below its header or beyond the packet.
bool summarize(std::span<const std::byte> packet, packet_summary& out) noexcept;

}  // namespace mcdist::unicast::sctp_wire
