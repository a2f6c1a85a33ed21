#include "common/unicast/sctp_packet.hpp"

#include "common/byte_order.hpp"

namespace mcdist::unicast::sctp_wire {

namespace {

constexpr std::size_t common_header_bytes = 12;  // RFC 9260 section 3.1
constexpr std::size_t chunk_header_bytes = 4;    // type, flags, length
constexpr std::uint8_t chunk_data = 0;           // RFC 9260 section 3.3.1
constexpr std::uint8_t chunk_init = 1;           // RFC 9260 section 3.3.2
constexpr std::uint8_t chunk_init_ack = 2;       // RFC 9260 section 3.3.3
constexpr std::uint8_t chunk_sack = 3;           // RFC 9260 section 3.3.4
constexpr std::uint8_t chunk_nr_sack = 16;       // usrsctp's SCTP_NR_SELECTIVE_ACK
constexpr std::uint8_t chunk_idata = 64;         // RFC 8260 section 2.1

void add_tsn(packet_summary& out, std::uint32_t tsn) noexcept {
  if (!out.data) {
    out.data = true;
    out.first_tsn = out.last_tsn = tsn;
    return;
  }
  if (tsn_before(tsn, out.first_tsn)) out.first_tsn = tsn;
  if (tsn_before(out.last_tsn, tsn)) out.last_tsn = tsn;
}

/// Reads a SACK (nr = false) or NR-SACK body `c` (the chunk without its 4-byte header).
void read_sack(std::span<const std::byte> c, bool nr, packet_summary& out) noexcept {
  // SACK: cum TSN (4), a_rwnd (4), gap blocks (2), dup TSNs (2), then the blocks.
  // NR-SACK: the same, then NR gap blocks (2) and a reserved field (2) before the blocks.
  const std::size_t fixed = nr ? 16 : 12;
  if (c.size() < fixed) return;
  out.sack = true;
  out.cum_tsn = load_be32(c.data());
  const std::size_t blocks = load_be16(c.data() + 8);
  out.gap_count = 0;
  std::uint32_t previous_end = 0;  // offsets from the cum TSN; the first block starts at >= 1
  for (std::size_t i = 0; i < blocks && out.gap_count < packet_summary::max_gaps; ++i) {
    const std::size_t at = fixed + 4 * i;
    if (at + 4 > c.size()) break;
    const std::uint16_t start = load_be16(c.data() + at);
    const std::uint16_t end = load_be16(c.data() + at + 2);
    if (start <= previous_end || end < start) break;  // not ascending and disjoint
    previous_end = end;
    out.gaps[out.gap_count++] = {out.cum_tsn + start, out.cum_tsn + end};
  }
}

}  // namespace

bool summarize(std::span<const std::byte> packet, packet_summary& out) noexcept {
  out = packet_summary{};
  if (packet.size() < common_header_bytes) return false;
  out.verification_tag = load_be32(packet.data() + 4);
  std::size_t at = common_header_bytes;
  while (at + chunk_header_bytes <= packet.size()) {
    const auto type = static_cast<std::uint8_t>(packet[at]);
    const std::size_t length = load_be16(packet.data() + at + 2);
    if (length < chunk_header_bytes || length > packet.size() - at) return false;
    const auto body = packet.subspan(at + chunk_header_bytes, length - chunk_header_bytes);
    if ((type == chunk_data || type == chunk_idata) && body.size() >= 4) {
      add_tsn(out, load_be32(body.data()));
    } else if ((type == chunk_init || type == chunk_init_ack) && body.size() >= 4) {
      out.init = true;
      out.initiate_tag = load_be32(body.data());
    } else if ((type == chunk_sack || type == chunk_nr_sack) && !out.sack) {
      read_sack(body, type == chunk_nr_sack, out);
    }
    at += (length + 3) & ~std::size_t{3};  // chunks are padded to 4 bytes
  }
  return true;
}

}  // namespace mcdist::unicast::sctp_wire
