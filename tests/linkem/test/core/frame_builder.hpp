// Test helpers: build TUN frames (virtio_net_hdr + IPv4 + UDP/TCP/IGMP) and segment GSO
// frames with an independent reference implementation of the kernel's segmentation, so
// the forwarder's header rewriting is checked against something it does not share code
// with. Header-only, tests only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/linkem/core/packet.hpp"

namespace mcdist::linkem::test {

using bytes = std::vector<std::byte>;

inline void put16(bytes& b, std::size_t at, std::uint16_t v) {
  b[at] = static_cast<std::byte>(v >> 8U);
  b[at + 1] = static_cast<std::byte>(v & 0xFFU);
}
inline void put32(bytes& b, std::size_t at, std::uint32_t v) {
  put16(b, at, static_cast<std::uint16_t>(v >> 16U));
  put16(b, at + 2, static_cast<std::uint16_t>(v & 0xFFFFU));
}
inline std::uint16_t get16(const bytes& b, std::size_t at) {
  return static_cast<std::uint16_t>((std::to_integer<unsigned>(b[at]) << 8U) |
                                    std::to_integer<unsigned>(b[at + 1]));
}
inline std::uint32_t get32(const bytes& b, std::size_t at) {
  return (static_cast<std::uint32_t>(get16(b, at)) << 16U) | get16(b, at + 2);
}

/// Plain RFC 1071 checksum over a byte range with an initial 32-bit sum, written out
/// independently of packet.cpp.
inline std::uint16_t ref_checksum(const bytes& b, std::size_t from, std::size_t to,
                                  std::uint64_t sum = 0) {
  for (std::size_t i = from; i < to; i += 2) {
    const unsigned hi = std::to_integer<unsigned>(b[i]);
    const unsigned lo = i + 1 < to ? std::to_integer<unsigned>(b[i + 1]) : 0U;
    sum += (hi << 8U) | lo;
  }
  while ((sum >> 16U) != 0) {
    sum = (sum & 0xFFFFU) + (sum >> 16U);
  }
  return static_cast<std::uint16_t>(~sum & 0xFFFFU);
}

inline bytes payload_pattern(std::size_t n, unsigned seed = 1) {
  bytes p(n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = static_cast<std::byte>((i * 131U + seed * 17U + (i >> 8U)) & 0xFFU);
  }
  return p;
}

struct ip_spec {
  std::uint32_t src = 0x0A4D0001;  // 10.77.0.1
  std::uint32_t dst = 0x0A4D0002;  // 10.77.0.2
  std::uint16_t id = 0x1234;
  std::uint8_t ttl = 64;
  std::uint8_t protocol = k_proto_udp;
  std::size_t options = 0;  ///< bytes of IP options (multiple of 4)
};

/// vnet header + IPv4 header (checksummed) + `l4` bytes.
inline bytes make_ip_frame(const ip_spec& ip, const bytes& l4, const vnet_header& vh = {}) {
  const std::size_t ihl = 20 + ip.options;
  bytes f(k_vnet_header_size + ihl + l4.size());
  encode_vnet_header(vh, std::span<std::byte, k_vnet_header_size>(f.data(), k_vnet_header_size));
  const std::size_t o = k_vnet_header_size;
  f[o] = static_cast<std::byte>(0x40U | (ihl / 4));
  put16(f, o + 2, static_cast<std::uint16_t>(ihl + l4.size()));
  put16(f, o + 4, ip.id);
  put16(f, o + 6, 0x4000);  // DF
  f[o + 8] = static_cast<std::byte>(ip.ttl);
  f[o + 9] = static_cast<std::byte>(ip.protocol);
  put32(f, o + 12, ip.src);
  put32(f, o + 16, ip.dst);
  if (ip.options >= 4) {
    // Router Alert (RFC 2113), as IGMP reports carry.
    f[o + 20] = std::byte{0x94};
    f[o + 21] = std::byte{0x04};
  }
  put16(f, o + 10, ref_checksum(f, o, o + ihl));
  std::memcpy(f.data() + o + ihl, l4.data(), l4.size());
  return f;
}

inline std::uint64_t ref_pseudo(std::uint32_t src, std::uint32_t dst, std::uint8_t proto,
                                std::size_t len) {
  return (src >> 16U) + (src & 0xFFFFU) + (dst >> 16U) + (dst & 0xFFFFU) + proto + len;
}

/// A UDP frame. With gso_size > 0 and a payload longer than it: a UDP GSO super-packet as
/// the kernel hands it over (UDP length = whole length, CHECKSUM_PARTIAL).
/// partial = false gives a complete checksum and no offload flags.
inline bytes make_udp_frame(const bytes& payload, std::uint16_t gso_size = 0, bool partial = true,
                            ip_spec ip = {}) {
  ip.protocol = k_proto_udp;
  bytes l4(8 + payload.size());
  put16(l4, 0, 40000);
  put16(l4, 2, 5000);
  put16(l4, 4, static_cast<std::uint16_t>(l4.size()));
  std::memcpy(l4.data() + 8, payload.data(), payload.size());
  vnet_header vh;
  if (partial) {
    vh.flags = k_vnet_flag_needs_csum;
    vh.csum_start = 20;
    vh.csum_offset = 6;
    std::uint64_t s = ref_pseudo(ip.src, ip.dst, k_proto_udp, l4.size());
    while ((s >> 16U) != 0) {
      s = (s & 0xFFFFU) + (s >> 16U);
    }
    put16(l4, 6, static_cast<std::uint16_t>(s));
  }
  if (gso_size > 0) {
    vh.gso_type = k_gso_udp_l4;
    vh.gso_size = gso_size;
    vh.hdr_len = 28;
  }
  bytes f = make_ip_frame(ip, l4, vh);
  if (!partial) {
    const std::size_t o = k_vnet_header_size + 20;
    put16(f, o + 6, 0);
    put16(f, o + 6,
          ref_checksum(f, o, f.size(), ref_pseudo(ip.src, ip.dst, k_proto_udp, l4.size())));
  }
  return f;
}

/// A TCP frame (header with 12 bytes of options, doff = 8), TSO if gso_size > 0.
inline bytes make_tcp_frame(const bytes& payload, std::uint32_t seq, std::uint8_t flags,
                            std::uint16_t gso_size = 0, ip_spec ip = {}) {
  ip.protocol = k_proto_tcp;
  bytes l4(32 + payload.size());
  put16(l4, 0, 40000);
  put16(l4, 2, 5001);
  put32(l4, 4, seq);
  put32(l4, 8, 0xABCDEF01);
  l4[12] = std::byte{0x80};  // doff 8
  l4[13] = static_cast<std::byte>(flags);
  put16(l4, 14, 65535);
  l4[20] = std::byte{1};
  l4[21] = std::byte{1};
  l4[22] = std::byte{8};
  l4[23] = std::byte{10};  // NOP NOP timestamp
  std::memcpy(l4.data() + 32, payload.data(), payload.size());
  std::uint64_t s = ref_pseudo(ip.src, ip.dst, k_proto_tcp, l4.size());
  while ((s >> 16U) != 0) {
    s = (s & 0xFFFFU) + (s >> 16U);
  }
  put16(l4, 16, static_cast<std::uint16_t>(s));
  vnet_header vh;
  vh.flags = k_vnet_flag_needs_csum;
  vh.csum_start = 20;
  vh.csum_offset = 16;
  if (gso_size > 0) {
    vh.gso_type = k_gso_tcpv4;
    vh.gso_size = gso_size;
    vh.hdr_len = 52;
  }
  return make_ip_frame(ip, l4, vh);
}

/// Reference segmentation (after net/ipv4/udp_offload.c and tcp_offload.c): turns a
/// frame (GSO or not) into complete wire datagrams: vnet header zeroed, IP id
/// incremented per segment, lengths and TCP sequence numbers adjusted, FIN/PSH kept on
/// the last and CWR on the first segment only, full checksums.
inline std::vector<bytes> reference_segments(const bytes& frame) {
  const vnet_header vh = decode_vnet_header(
      std::span<const std::byte, k_vnet_header_size>(frame.data(), k_vnet_header_size));
  const std::size_t o = k_vnet_header_size;
  const std::size_t ihl = (std::to_integer<unsigned>(frame[o]) & 0xFU) * 4U;
  const auto proto = std::to_integer<std::uint8_t>(frame[o + 9]);
  const std::uint32_t src = get32(frame, o + 12);
  const std::uint32_t dst = get32(frame, o + 16);
  std::size_t l4h = 0;
  if (proto == k_proto_udp) {
    l4h = 8;
  } else if (proto == k_proto_tcp) {
    l4h = (std::to_integer<unsigned>(frame[o + ihl + 12]) >> 4U) * 4U;
  }
  const std::size_t hdr = ihl + l4h;
  const std::size_t payload = frame.size() - o - hdr;
  const std::uint8_t gso = vh.gso_type & 0x7FU;
  const std::size_t mss = gso != k_gso_none ? vh.gso_size : payload;
  const std::size_t n = gso != k_gso_none && mss > 0 ? (payload + mss - 1) / mss : 1;
  std::vector<bytes> out;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t plen = std::min(mss, payload - i * mss);
    bytes s(k_vnet_header_size + hdr + plen, std::byte{0});
    std::memcpy(s.data() + o, frame.data() + o, hdr);
    std::memcpy(s.data() + o + hdr, frame.data() + o + hdr + i * mss, plen);
    put16(s, o + 2, static_cast<std::uint16_t>(hdr + plen));
    put16(s, o + 4, static_cast<std::uint16_t>(get16(frame, o + 4) + i));
    put16(s, o + 10, 0);
    put16(s, o + 10, ref_checksum(s, o, o + ihl));
    const std::size_t l4 = o + ihl;
    const std::size_t l4len = l4h + plen;
    if (proto == k_proto_udp) {
      put16(s, l4 + 4, static_cast<std::uint16_t>(l4len));
      put16(s, l4 + 6, 0);
      std::uint16_t c = ref_checksum(s, l4, s.size(), ref_pseudo(src, dst, proto, l4len));
      put16(s, l4 + 6, c == 0 ? 0xFFFF : c);
    } else if (proto == k_proto_tcp) {
      put32(s, l4 + 4, get32(frame, o + ihl + 4) + static_cast<std::uint32_t>(i * mss));
      auto flags = std::to_integer<std::uint8_t>(frame[o + ihl + 13]);
      if (i != 0) {
        flags &= static_cast<std::uint8_t>(~0x80U);
      }
      if (i + 1 != n) {
        flags &= static_cast<std::uint8_t>(~0x09U);
      }
      s[l4 + 13] = static_cast<std::byte>(flags);
      put16(s, l4 + 16, 0);
      put16(s, l4 + 16, ref_checksum(s, l4, s.size(), ref_pseudo(src, dst, proto, l4len)));
    }
    out.push_back(std::move(s));
  }
  return out;
}

/// True if a frame's L4 checksum field is consistent with its vnet header: for
/// NEEDS_CSUM, the folded pseudo-header sum for the frame's own L4 length (what the
/// kernel's segmentation and checksum completion expect); otherwise a complete checksum.
inline bool checksum_field_ok(const bytes& frame) {
  const vnet_header vh = decode_vnet_header(
      std::span<const std::byte, k_vnet_header_size>(frame.data(), k_vnet_header_size));
  const std::size_t o = k_vnet_header_size;
  const std::size_t ihl = (std::to_integer<unsigned>(frame[o]) & 0xFU) * 4U;
  const auto proto = std::to_integer<std::uint8_t>(frame[o + 9]);
  if (proto != k_proto_udp && proto != k_proto_tcp) {
    return true;
  }
  const std::size_t l4len = frame.size() - o - ihl;
  const std::uint64_t pseudo = ref_pseudo(get32(frame, o + 12), get32(frame, o + 16), proto, l4len);
  if ((vh.flags & k_vnet_flag_needs_csum) != 0) {
    std::uint64_t s = pseudo;
    while ((s >> 16U) != 0) {
      s = (s & 0xFFFFU) + (s >> 16U);
    }
    const std::size_t field = o + vh.csum_start + vh.csum_offset;
    return vh.csum_start == ihl && get16(frame, field) == s;
  }
  return ref_checksum(frame, o + ihl, frame.size(), pseudo) == 0;
}

/// An IGMP message (type + payload) in an IPv4 frame with Router Alert, as Linux sends.
inline bytes make_igmp_frame(const bytes& igmp_message, std::uint32_t src, std::uint32_t dst) {
  bytes msg = igmp_message;
  put16(msg, 2, 0);
  put16(msg, 2, ref_checksum(msg, 0, msg.size()));
  ip_spec ip;
  ip.src = src;
  ip.dst = dst;
  ip.ttl = 1;
  ip.protocol = k_proto_igmp;
  ip.options = 4;
  return make_ip_frame(ip, msg);
}

/// IGMPv2 report or leave for a group.
inline bytes igmp_v2(std::uint8_t type, std::uint32_t group) {
  bytes m(8, std::byte{0});
  m[0] = static_cast<std::byte>(type);
  put32(m, 4, group);
  return m;
}

struct igmp_record {
  std::uint8_t type;
  std::uint32_t group;
  std::vector<std::uint32_t> sources;
  std::uint8_t aux_words = 0;
};

/// IGMPv3 membership report (RFC 3376 §4.2).
inline bytes igmp_v3(const std::vector<igmp_record>& records) {
  bytes m(8, std::byte{0});
  m[0] = std::byte{0x22};
  put16(m, 6, static_cast<std::uint16_t>(records.size()));
  for (const auto& r : records) {
    const std::size_t at = m.size();
    m.resize(at + 8 + r.sources.size() * 4 + r.aux_words * 4U, std::byte{0});
    m[at] = static_cast<std::byte>(r.type);
    m[at + 1] = static_cast<std::byte>(r.aux_words);
    put16(m, at + 2, static_cast<std::uint16_t>(r.sources.size()));
    put32(m, at + 4, r.group);
    for (std::size_t i = 0; i < r.sources.size(); ++i) {
      put32(m, at + 8 + i * 4, r.sources[i]);
    }
  }
  return m;
}

}  // namespace mcdist::linkem::test
