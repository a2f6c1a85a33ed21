#include "common/packet.hpp"

#include "common/wire.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;

TEST_CASE("packet sizes are the ones the protocols give", "[unit][packet]") {
  STATIC_REQUIRE(packet::ipv4_udp_overhead == 28);
  STATIC_REQUIRE(packet::tcp_mss_ethernet == 1448);
  STATIC_REQUIRE(packet::udp_payload_ethernet_ipv6 == 1452);
  STATIC_REQUIRE(packet::max_udp_payload_ipv4 == 65507);
}

TEST_CASE("a default data datagram and a control datagram fit an Ethernet MTU", "[unit][packet]") {
  // What the rates count per default block: 1400 + 20 + 28 = 1448 bytes of IP packet.
  STATIC_REQUIRE(wire::default_block_size + wire::data_header_size + packet::ipv4_udp_overhead ==
                 1448);
  STATIC_REQUIRE(wire::max_block_size == 8952);
  STATIC_REQUIRE(wire::max_datagram_size == packet::jumbo_mtu);
  STATIC_REQUIRE(wire::control_budget + packet::ipv6_header + packet::udp_header <=
                 packet::ethernet_mtu);
}
