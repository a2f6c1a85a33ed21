#include "tests/linkem/core/packet.hpp"

#include "common/byte_order.hpp"

#include <algorithm>
#include <cstring>

namespace mcdist::linkem {
namespace {

constexpr std::size_t k_min_ipv4_header = 20;
constexpr std::size_t k_udp_header = 8;
constexpr std::size_t k_min_tcp_header = 20;
constexpr std::uint8_t k_tcp_flag_fin = 0x01;
constexpr std::uint8_t k_tcp_flag_psh = 0x08;
constexpr std::uint8_t k_tcp_flag_cwr = 0x80;

// The vnet header is in the host's byte order, which on every platform we build for is
// little-endian; load/store it explicitly so the code says so.
std::uint16_t load_le16(const std::byte* p) noexcept {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) |
                                    (std::to_integer<unsigned>(p[1]) << 8U));
}
void store_le16(std::byte* p, std::uint16_t v) noexcept {
  p[0] = static_cast<std::byte>(v & 0xFFU);
  p[1] = static_cast<std::byte>(v >> 8U);
}

}  // namespace

vnet_header decode_vnet_header(std::span<const std::byte, k_vnet_header_size> in) noexcept {
  vnet_header h;
  h.flags = std::to_integer<std::uint8_t>(in[0]);
  h.gso_type = std::to_integer<std::uint8_t>(in[1]);
  h.hdr_len = load_le16(&in[2]);
  h.gso_size = load_le16(&in[4]);
  h.csum_start = load_le16(&in[6]);
  h.csum_offset = load_le16(&in[8]);
  return h;
}

void encode_vnet_header(const vnet_header& h,
                        std::span<std::byte, k_vnet_header_size> out) noexcept {
  out[0] = static_cast<std::byte>(h.flags);
  out[1] = static_cast<std::byte>(h.gso_type);
  store_le16(&out[2], h.hdr_len);
  store_le16(&out[4], h.gso_size);
  store_le16(&out[6], h.csum_start);
  store_le16(&out[8], h.csum_offset);
}

parse_result parse_frame(std::span<std::byte> frame, packet_info& out) noexcept {
  if (frame.size() < k_vnet_header_size + 1) {
    return parse_result::malformed;
  }
  const vnet_header vh = decode_vnet_header(frame.first<k_vnet_header_size>());
  const std::span<std::byte> ip = frame.subspan(k_vnet_header_size);
  const unsigned version = std::to_integer<unsigned>(ip[0]) >> 4U;
  if (version != 4) {
    return parse_result::not_ipv4;
  }
  if (ip.size() < k_min_ipv4_header) {
    return parse_result::malformed;
  }
  const std::size_t ihl = (std::to_integer<unsigned>(ip[0]) & 0x0FU) * 4U;
  if (ihl < k_min_ipv4_header || ihl > ip.size()) {
    return parse_result::malformed;
  }
  const std::size_t total = load_be16(&ip[2]);
  const std::uint8_t gso = vh.gso_type & static_cast<std::uint8_t>(~k_gso_ecn);
  // A GSO super-packet may carry total length 0 (BIG TCP, > 64 KiB); otherwise the IP
  // length must match what the device handed us.
  if (total != ip.size() && !(gso != k_gso_none && total == 0)) {
    return parse_result::malformed;
  }

  packet_info info;
  info.src = load_be32(&ip[12]);
  info.dst = load_be32(&ip[16]);
  info.ip_length = static_cast<std::uint32_t>(ip.size());
  info.ip_header_len = static_cast<std::uint16_t>(ihl);
  info.protocol = std::to_integer<std::uint8_t>(ip[9]);

  if (gso != k_gso_none) {
    std::size_t l4 = 0;
    if (gso == k_gso_tcpv4 && info.protocol == k_proto_tcp) {
      if (ip.size() < ihl + k_min_tcp_header) {
        return parse_result::malformed;
      }
      l4 = (std::to_integer<unsigned>(ip[ihl + 12]) >> 4U) * 4U;
      if (l4 < k_min_tcp_header || ihl + l4 > ip.size()) {
        return parse_result::malformed;
      }
    } else if (gso == k_gso_udp_l4 && info.protocol == k_proto_udp) {
      l4 = k_udp_header;
      if (ihl + l4 > ip.size()) {
        return parse_result::malformed;
      }
    } else {
      return parse_result::unsupported_gso;
    }
    // Fragmented super-packets make no sense.
    if ((load_be16(&ip[6]) & 0x3FFFU) != 0) {
      return parse_result::malformed;
    }
    const std::size_t payload = ip.size() - ihl - l4;
    if (vh.gso_size == 0) {
      return parse_result::unsupported_gso;
    }
    const std::size_t segments = (payload + vh.gso_size - 1) / vh.gso_size;
    if (segments > k_max_gso_segments) {
      return parse_result::unsupported_gso;
    }
    if (segments <= 1) {
      // Not really GSO. Normalise to a plain frame so it is forwarded verbatim.
      if (total == 0) {
        return parse_result::malformed;
      }
      vnet_header plain = vh;
      plain.gso_type = k_gso_none;
      plain.gso_size = 0;
      encode_vnet_header(plain, frame.first<k_vnet_header_size>());
    } else {
      info.l4_header_len = static_cast<std::uint16_t>(l4);
      info.gso_type = gso;
      info.gso_ecn = (vh.gso_type & k_gso_ecn) != 0;
      info.gso_size = vh.gso_size;
      info.segments = static_cast<std::uint16_t>(segments);
      info.payload_len = static_cast<std::uint32_t>(payload);
    }
  }
  out = info;
  return parse_result::ok;
}

std::size_t run_payload_offset(const packet_info& info, std::uint16_t first) noexcept {
  return k_vnet_header_size + info.headers_len() + static_cast<std::size_t>(first) * info.gso_size;
}

std::size_t run_payload_len(const packet_info& info, std::uint16_t first,
                            std::uint16_t count) noexcept {
  const std::size_t start = static_cast<std::size_t>(first) * info.gso_size;
  const std::size_t end = std::min<std::size_t>(
      info.payload_len, static_cast<std::size_t>(first + count) * info.gso_size);
  return end - start;
}

std::size_t build_run_headers(const packet_info& info, std::span<const std::byte> frame,
                              std::uint16_t first, std::uint16_t count,
                              std::span<std::byte> out) noexcept {
  const std::size_t hlen = info.headers_len();
  std::byte* vnet = out.data();
  std::byte* ip = out.data() + k_vnet_header_size;
  std::byte* l4 = ip + info.ip_header_len;
  std::memcpy(ip, frame.data() + k_vnet_header_size, hlen);

  const std::size_t payload = run_payload_len(info, first, count);
  const auto l4_len = static_cast<std::uint32_t>(info.l4_header_len + payload);
  const bool last_included = first + count == info.segments;

  // IP: total length, id (incremented per segment as inet_gso_segment does), checksum.
  store_be16(ip + 2, static_cast<std::uint16_t>(hlen + payload));
  store_be16(ip + 4, static_cast<std::uint16_t>(load_be16(ip + 4) + first));
  set_ipv4_header_checksum(std::span<std::byte>(ip, info.ip_header_len));

  std::uint16_t csum_offset = 0;
  if (info.gso_type == k_gso_udp_l4) {
    csum_offset = 6;
    store_be16(l4 + 4, static_cast<std::uint16_t>(l4_len));
  } else {
    csum_offset = 16;
    store_be32(l4 + 4, load_be32(l4 + 4) + static_cast<std::uint32_t>(first) * info.gso_size);
    auto flags = std::to_integer<std::uint8_t>(l4[13]);
    if (first != 0) {
      flags &= static_cast<std::uint8_t>(~k_tcp_flag_cwr);
    }
    if (!last_included) {
      flags &= static_cast<std::uint8_t>(~(k_tcp_flag_fin | k_tcp_flag_psh));
    }
    l4[13] = static_cast<std::byte>(flags);
  }
  // CHECKSUM_PARTIAL: the field holds the folded pseudo-header sum for this length.
  const std::uint16_t partial =
      checksum_fold(pseudo_header_sum(info.src, info.dst, info.protocol, l4_len));
  store_be16(l4 + csum_offset, partial);

  vnet_header vh;
  vh.flags = k_vnet_flag_needs_csum;
  vh.csum_start = info.ip_header_len;
  vh.csum_offset = csum_offset;
  vh.hdr_len = static_cast<std::uint16_t>(hlen);
  if (count > 1) {
    vh.gso_type = static_cast<std::uint8_t>(info.gso_type | (info.gso_ecn ? k_gso_ecn : 0));
    vh.gso_size = info.gso_size;
  }
  encode_vnet_header(vh, std::span<std::byte, k_vnet_header_size>(vnet, k_vnet_header_size));
  return k_vnet_header_size + hlen;
}

std::uint32_t checksum_add(std::uint32_t sum, std::span<const std::byte> bytes) noexcept {
  std::uint64_t acc = sum;
  std::size_t i = 0;
  for (; i + 1 < bytes.size(); i += 2) {
    acc += load_be16(&bytes[i]);
  }
  if (i < bytes.size()) {
    acc += static_cast<std::uint32_t>(std::to_integer<unsigned>(bytes[i]) << 8U);
  }
  while ((acc >> 32U) != 0) {
    acc = (acc & 0xFFFFFFFFU) + (acc >> 32U);
  }
  return static_cast<std::uint32_t>(acc);
}

std::uint16_t checksum_fold(std::uint32_t sum) noexcept {
  while ((sum >> 16U) != 0) {
    sum = (sum & 0xFFFFU) + (sum >> 16U);
  }
  return static_cast<std::uint16_t>(sum);
}

std::uint32_t pseudo_header_sum(std::uint32_t src, std::uint32_t dst, std::uint8_t protocol,
                                std::uint32_t l4_length) noexcept {
  std::uint64_t acc = (src >> 16U) + (src & 0xFFFFU) + (dst >> 16U) + (dst & 0xFFFFU) + protocol +
                      (l4_length >> 16U) + (l4_length & 0xFFFFU);
  while ((acc >> 32U) != 0) {
    acc = (acc & 0xFFFFFFFFU) + (acc >> 32U);
  }
  return static_cast<std::uint32_t>(acc);
}

void set_ipv4_header_checksum(std::span<std::byte> ip_header) noexcept {
  store_be16(&ip_header[10], 0);
  store_be16(&ip_header[10],
             static_cast<std::uint16_t>(~checksum_fold(checksum_add(0, ip_header))));
}

bool finish_partial_checksum(std::span<std::byte> frame) noexcept {
  if (frame.size() < k_vnet_header_size) {
    return false;
  }
  vnet_header vh = decode_vnet_header(frame.first<k_vnet_header_size>());
  if ((vh.flags & k_vnet_flag_needs_csum) == 0) {
    return true;
  }
  const std::span<std::byte> ip = frame.subspan(k_vnet_header_size);
  if (static_cast<std::size_t>(vh.csum_start) + vh.csum_offset + 2 > ip.size()) {
    return false;
  }
  // The field already holds the pseudo-header sum; summing it with the data gives the
  // full checksum.
  const std::uint16_t sum = checksum_fold(checksum_add(0, ip.subspan(vh.csum_start)));
  std::uint16_t result = static_cast<std::uint16_t>(~sum);
  if (result == 0 && std::to_integer<unsigned>(ip[9]) == k_proto_udp) {
    result = 0xFFFF;  // RFC 768: a computed zero is sent as all ones
  }
  store_be16(&ip[vh.csum_start + vh.csum_offset], result);
  vh.flags &= static_cast<std::uint8_t>(~k_vnet_flag_needs_csum);
  encode_vnet_header(vh, frame.first<k_vnet_header_size>());
  return true;
}

bool verify_checksums(std::span<const std::byte> frame) noexcept {
  if (frame.size() < k_vnet_header_size + k_min_ipv4_header) {
    return false;
  }
  const std::span<const std::byte> ip = frame.subspan(k_vnet_header_size);
  const std::size_t ihl = (std::to_integer<unsigned>(ip[0]) & 0x0FU) * 4U;
  if (ihl < k_min_ipv4_header || ihl > ip.size()) {
    return false;
  }
  if (checksum_fold(checksum_add(0, ip.first(ihl))) != 0xFFFF) {
    return false;
  }
  const auto proto = std::to_integer<std::uint8_t>(ip[9]);
  if (proto != k_proto_tcp && proto != k_proto_udp) {
    return true;
  }
  const std::span<const std::byte> l4 = ip.subspan(ihl);
  if (proto == k_proto_udp && l4.size() >= k_udp_header && load_be16(&l4[6]) == 0) {
    return true;  // RFC 768: zero means "no checksum"
  }
  const std::uint32_t sum = pseudo_header_sum(load_be32(&ip[12]), load_be32(&ip[16]), proto,
                                              static_cast<std::uint32_t>(l4.size()));
  return checksum_fold(checksum_add(sum, l4)) == 0xFFFF;
}

}  // namespace mcdist::linkem
