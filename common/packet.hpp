#pragma once
/// @file
/// Sizes of the network headers around what mcdist sends, bytes, and the packet sizes they
/// make: the one place for the arithmetic of rates (a rate counts whole IP packets), block and
/// budget sizes, TCP pacing and the SCTP packet size. Header sizes are the fixed headers
/// without options, as the protocols' RFCs give them.

#include <cstddef>

namespace mcdist::packet {

/// The Ethernet MTU (IEEE 802.3): the IP packet size paths are built for.
inline constexpr std::size_t ethernet_mtu = 1500;
/// A jumbo frame's MTU, the largest mcdist sizes anything for.
inline constexpr std::size_t jumbo_mtu = 9000;

/// IPv4 header without options (RFC 791).
inline constexpr std::size_t ipv4_header = 20;
/// IPv6 fixed header (RFC 8200).
inline constexpr std::size_t ipv6_header = 40;
/// UDP header (RFC 768).
inline constexpr std::size_t udp_header = 8;
/// TCP header without options (RFC 9293).
inline constexpr std::size_t tcp_header = 20;
/// The TCP timestamps option as Linux sends it on every segment (RFC 7323: 10 bytes, padded
/// to 12).
inline constexpr std::size_t tcp_timestamps_option = 12;

/// What IPv4 and UDP add to a datagram: 28. mcdist's rates count it (a rate is what the link
/// carries).
inline constexpr std::size_t ipv4_udp_overhead = ipv4_header + udp_header;
/// The largest UDP payload over IPv6 that fits an Ethernet MTU: 1452 (usrsctp's packets, which
/// cannot probe the path MTU, are this size).
inline constexpr std::size_t udp_payload_ethernet_ipv6 = ethernet_mtu - ipv6_header - udp_header;
/// TCP payload of a full segment on an Ethernet MTU with IPv4 and timestamps: 1448, the MSS
/// Linux uses there (RFC 6928's initial window is 10 of them).
inline constexpr std::size_t tcp_mss_ethernet =
    ethernet_mtu - ipv4_header - tcp_header - tcp_timestamps_option;
/// The largest UDP payload of an IPv4 datagram: 65535 - 20 - 8 = 65507.
inline constexpr std::size_t max_udp_payload_ipv4 = 65535 - ipv4_header - udp_header;

}  // namespace mcdist::packet
