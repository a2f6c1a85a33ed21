#include "tests/linkem/core/packet.hpp"

#include <catch2/catch.hpp>

#include "tests/linkem/test/core/frame_builder.hpp"

using namespace mcdist::linkem;
using namespace mcdist::linkem::test;

namespace {

/// Frame produced by build_run_headers + payload for segments [first, first+count).
bytes rewrite_run(const bytes& frame, const packet_info& info, std::uint16_t first,
                  std::uint16_t count) {
  std::array<std::byte, k_max_run_header> hdr{};
  const std::size_t hlen = build_run_headers(info, frame, first, count, hdr);
  bytes out(hdr.begin(), hdr.begin() + static_cast<std::ptrdiff_t>(hlen));
  const std::size_t off = run_payload_offset(info, first);
  out.insert(
      out.end(), frame.begin() + static_cast<std::ptrdiff_t>(off),
      frame.begin() + static_cast<std::ptrdiff_t>(off + run_payload_len(info, first, count)));
  return out;
}

}  // namespace

TEST_CASE("a plain UDP frame parses", "[packet]") {
  bytes f = make_udp_frame(payload_pattern(1400), 0, false);
  packet_info info;
  REQUIRE(parse_frame(f, info) == parse_result::ok);
  CHECK(info.src == 0x0A4D0001);
  CHECK(info.dst == 0x0A4D0002);
  CHECK(info.protocol == k_proto_udp);
  CHECK_FALSE(info.is_gso());
  CHECK(info.segments == 1);
  CHECK(info.ip_length == 1428);
  CHECK(info.segment_wire_bytes(0) == 1428);
  CHECK(verify_checksums(f));
}

TEST_CASE("non-IPv4 frames are recognised", "[packet]") {
  bytes f = make_udp_frame(payload_pattern(10), 0, false);
  f[k_vnet_header_size] = std::byte{0x60};  // IPv6
  packet_info info;
  CHECK(parse_frame(f, info) == parse_result::not_ipv4);
}

TEST_CASE("every truncation of a frame is rejected, never read past", "[packet]") {
  for (const bytes& f : {make_udp_frame(payload_pattern(100), 0, false),
                         make_udp_frame(payload_pattern(4000), 1000, true),
                         make_tcp_frame(payload_pattern(3000), 1, 0x18, 1448)}) {
    for (std::size_t len = 0; len < f.size(); ++len) {
      bytes cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(len));
      packet_info info;
      INFO("length " << len);
      CHECK(parse_frame(cut, info) != parse_result::ok);
    }
    bytes whole = f;
    packet_info info;
    CHECK(parse_frame(whole, info) == parse_result::ok);
  }
}

TEST_CASE("inconsistent headers are malformed", "[packet]") {
  packet_info info;
  bytes f = make_udp_frame(payload_pattern(100), 0, false);
  SECTION("header length below 20") {
    f[k_vnet_header_size] = std::byte{0x44};
    CHECK(parse_frame(f, info) == parse_result::malformed);
  }
  SECTION("total length larger than the frame") {
    put16(f, k_vnet_header_size + 2, 2000);
    CHECK(parse_frame(f, info) == parse_result::malformed);
  }
  SECTION("GSO type that does not match the protocol") {
    bytes g = make_udp_frame(payload_pattern(3000), 1000, true);
    g[1] = static_cast<std::byte>(k_gso_tcpv4);
    CHECK(parse_frame(g, info) == parse_result::unsupported_gso);
  }
  SECTION("legacy UFO") {
    bytes g = make_udp_frame(payload_pattern(3000), 1000, true);
    g[1] = static_cast<std::byte>(k_gso_udp);
    CHECK(parse_frame(g, info) == parse_result::unsupported_gso);
  }
}

TEST_CASE("a UDP GSO super-packet is described segment by segment", "[packet][gso]") {
  bytes f = make_udp_frame(payload_pattern(45 * 1400 - 300), 1400, true);
  packet_info info;
  REQUIRE(parse_frame(f, info) == parse_result::ok);
  CHECK(info.is_gso());
  CHECK(info.gso_type == k_gso_udp_l4);
  CHECK(info.segments == 45);
  CHECK(info.headers_len() == 28);
  CHECK(info.segment_payload(0) == 1400);
  CHECK(info.segment_payload(44) == 1100);
  CHECK(info.segment_wire_bytes(44) == 1128);
}

TEST_CASE("a GSO frame that fits one segment is normalised to a plain frame", "[packet][gso]") {
  bytes f = make_udp_frame(payload_pattern(1000), 1400, true);
  packet_info info;
  REQUIRE(parse_frame(f, info) == parse_result::ok);
  CHECK_FALSE(info.is_gso());
  CHECK(std::to_integer<int>(f[1]) == k_gso_none);
}

TEST_CASE("rewritten UDP runs segment exactly like the original", "[packet][gso]") {
  const bytes f = make_udp_frame(payload_pattern(7 * 1400 - 77), 1400, true);
  packet_info info;
  bytes copy = f;
  REQUIRE(parse_frame(copy, info) == parse_result::ok);
  const auto expected = reference_segments(f);
  REQUIRE(expected.size() == 7);
  // Every split point: all runs [first, first + count).
  for (std::uint16_t first = 0; first < info.segments; ++first) {
    for (std::uint16_t count = 1; first + count <= info.segments; ++count) {
      const bytes run = rewrite_run(f, info, first, count);
      const auto got = reference_segments(run);
      INFO("first " << first << " count " << count);
      CHECK(checksum_field_ok(run));
      REQUIRE(got.size() == count);
      for (std::uint16_t i = 0; i < count; ++i) {
        REQUIRE(got[i] == expected[first + i]);
      }
      // A single-segment run is a plain CHECKSUM_PARTIAL frame; completing its checksum
      // gives a valid datagram.
      if (count == 1) {
        bytes single = run;
        const auto vh = decode_vnet_header(
            std::span<const std::byte, k_vnet_header_size>(single.data(), k_vnet_header_size));
        CHECK(vh.gso_type == k_gso_none);
        REQUIRE(finish_partial_checksum(single));
        CHECK(verify_checksums(single));
      }
    }
  }
}

TEST_CASE("rewritten TCP runs keep sequence numbers and flags right", "[packet][gso]") {
  // PSH|ACK|FIN|CWR on the super-packet: FIN and PSH belong to the last segment only,
  // CWR to the first only.
  const bytes f =
      make_tcp_frame(payload_pattern(5 * 1448 - 10), 1'000'000, 0x80 | 0x10 | 0x08 | 0x01, 1448);
  packet_info info;
  bytes copy = f;
  REQUIRE(parse_frame(copy, info) == parse_result::ok);
  CHECK(info.segments == 5);
  CHECK(info.l4_header_len == 32);
  const auto expected = reference_segments(f);
  CHECK(get32(expected[3], k_vnet_header_size + 20 + 4) == 1'000'000 + 3 * 1448);
  CHECK(std::to_integer<int>(expected[0][k_vnet_header_size + 33]) == 0x90);
  CHECK(std::to_integer<int>(expected[4][k_vnet_header_size + 33]) == 0x19);
  for (std::uint16_t first = 0; first < info.segments; ++first) {
    for (std::uint16_t count = 1; first + count <= info.segments; ++count) {
      const bytes run = rewrite_run(f, info, first, count);
      const auto got = reference_segments(run);
      INFO("first " << first << " count " << count);
      CHECK(checksum_field_ok(run));
      REQUIRE(got.size() == count);
      for (std::uint16_t i = 0; i < count; ++i) {
        REQUIRE(got[i] == expected[first + i]);
      }
    }
  }
}

TEST_CASE("partial checksums complete to valid ones", "[packet]") {
  bytes udp = make_udp_frame(payload_pattern(333), 0, true);
  REQUIRE(finish_partial_checksum(udp));
  CHECK(verify_checksums(udp));
  bytes tcp = make_tcp_frame(payload_pattern(1000), 5, 0x18);
  REQUIRE(finish_partial_checksum(tcp));
  CHECK(verify_checksums(tcp));
  tcp[tcp.size() - 1] ^= std::byte{1};
  CHECK_FALSE(verify_checksums(tcp));
}

TEST_CASE("vnet headers round-trip in little-endian order", "[packet]") {
  vnet_header h;
  h.flags = 1;
  h.gso_type = k_gso_udp_l4 | k_gso_ecn;
  h.hdr_len = 0x1234;
  h.gso_size = 1400;
  h.csum_start = 20;
  h.csum_offset = 6;
  std::array<std::byte, k_vnet_header_size> b{};
  encode_vnet_header(h, b);
  CHECK(std::to_integer<int>(b[4]) == (1400 & 0xFF));
  const auto d = decode_vnet_header(b);
  CHECK(d.gso_type == h.gso_type);
  CHECK(d.hdr_len == 0x1234);
  CHECK(d.gso_size == 1400);
  CHECK(d.csum_offset == 6);
}

TEST_CASE("address classes", "[packet]") {
  CHECK(is_multicast(0xEF010203));
  CHECK_FALSE(is_multicast(0x0A4D0001));
  CHECK(is_link_local_multicast(0xE00000FB));
  CHECK_FALSE(is_link_local_multicast(0xEF0000FB));
}
