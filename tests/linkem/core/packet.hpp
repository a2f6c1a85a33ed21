// Parsing and rewriting of the frames exchanged with a TUN device opened with
// IFF_TUN | IFF_NO_PI | IFF_VNET_HDR: a 10-byte virtio_net_hdr followed by an IPv4
// datagram, which may be a GSO super-packet (TSO or UDP segmentation offload) carrying
// many wire datagrams that share one header.
//
// References: virtio 1.1 specification §5.1.6 "Device Operation" (struct
// virtio_net_hdr, checksum and segmentation offload); Linux include/linux/virtio_net.h
// (virtio_net_hdr_to_skb), net/ipv4/udp_offload.c (__udp_gso_segment) and
// net/ipv4/tcp_offload.c (tcp_gso_segment) for how the kernel cuts a super-packet:
// every segment gets the template headers with IP total length and id, UDP length or TCP
// sequence number adjusted, FIN/PSH only on the last TCP segment and CWR only on the
// first; the L4 checksum field of a CHECKSUM_PARTIAL packet holds the folded pseudo-header
// sum (RFC 768, RFC 793) for the packet's own L4 length.
//
// All functions are pure: no I/O, no allocation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace mcdist::linkem {

/// Size of struct virtio_net_hdr (without num_buffers), the TUN default for IFF_VNET_HDR.
inline constexpr std::size_t k_vnet_header_size = 10;

/// virtio_net_hdr flags and gso types (virtio 1.1 §5.1.6; UDP_L4 is VIRTIO_NET_F_HOST_USO,
/// Linux 6.2 uapi/linux/virtio_net.h).
inline constexpr std::uint8_t k_vnet_flag_needs_csum = 1;
inline constexpr std::uint8_t k_vnet_flag_data_valid = 2;
inline constexpr std::uint8_t k_gso_none = 0;
inline constexpr std::uint8_t k_gso_tcpv4 = 1;
inline constexpr std::uint8_t k_gso_udp = 3;  ///< legacy UFO: IP fragmentation, not supported
inline constexpr std::uint8_t k_gso_tcpv6 = 4;
inline constexpr std::uint8_t k_gso_udp_l4 = 5;
inline constexpr std::uint8_t k_gso_ecn = 0x80;

inline constexpr std::uint8_t k_proto_icmp = 1;
inline constexpr std::uint8_t k_proto_igmp = 2;
inline constexpr std::uint8_t k_proto_tcp = 6;
inline constexpr std::uint8_t k_proto_udp = 17;

/// Most segments accepted in one GSO super-packet. The kernel's own limits are 64 or
/// 128 for UDP (UDP_MAX_SEGMENTS, depending on the version) and 64 KiB / MSS for TCP;
/// 1024 covers an MSS down to 64 bytes and bounds the work one bad frame can cause.
inline constexpr std::uint16_t k_max_gso_segments = 1024;

/// Largest IPv4 + TCP header (60 + 60 bytes).
inline constexpr std::size_t k_max_l3l4_header = 120;

/// Room needed for the headers of one rewritten segment run: vnet header + IP + L4.
inline constexpr std::size_t k_max_run_header = k_vnet_header_size + k_max_l3l4_header;

/// Decoded virtio_net_hdr. Fields in host byte order (the TUN device uses the host's
/// endianness unless TUNSETVNETBE is set, which we never do).
struct vnet_header {
  std::uint8_t flags = 0;
  std::uint8_t gso_type = k_gso_none;
  std::uint16_t hdr_len = 0;      ///< bytes of L3+L4 headers (a hint)
  std::uint16_t gso_size = 0;     ///< payload bytes per segment
  std::uint16_t csum_start = 0;   ///< offset of the L4 header from the IP header
  std::uint16_t csum_offset = 0;  ///< offset of the checksum field from csum_start
};

vnet_header decode_vnet_header(std::span<const std::byte, k_vnet_header_size> in) noexcept;
void encode_vnet_header(const vnet_header& h,
                        std::span<std::byte, k_vnet_header_size> out) noexcept;

/// What parse_frame learnt about a frame. Offsets are from the start of the IP header.
struct packet_info {
  std::uint32_t src = 0;               ///< IPv4 source address, host byte order
  std::uint32_t dst = 0;               ///< IPv4 destination address, host byte order
  std::uint32_t ip_length = 0;         ///< bytes of the IP datagram (or super-packet)
  std::uint16_t ip_header_len = 0;     ///< bytes
  std::uint16_t l4_header_len = 0;     ///< bytes; set for GSO frames only
  std::uint8_t protocol = 0;           ///< IP protocol number
  std::uint8_t gso_type = k_gso_none;  ///< k_gso_tcpv4 or k_gso_udp_l4, ECN bit cleared
  bool gso_ecn = false;
  std::uint16_t gso_size = 0;     ///< payload bytes per segment; 0 if not GSO
  std::uint16_t segments = 1;     ///< wire datagrams in this frame, >= 1
  std::uint32_t payload_len = 0;  ///< L4 payload bytes (GSO frames only)

  [[nodiscard]] bool is_gso() const noexcept { return gso_size != 0; }
  /// Bytes of IP + L4 headers repeated in every segment (GSO frames).
  [[nodiscard]] std::uint32_t headers_len() const noexcept {
    return static_cast<std::uint32_t>(ip_header_len) + l4_header_len;
  }
  /// L4 payload bytes of segment i (GSO frames).
  [[nodiscard]] std::uint32_t segment_payload(std::uint16_t i) const noexcept {
    return i + 1U < segments ? gso_size : payload_len - static_cast<std::uint32_t>(gso_size) * i;
  }
  /// IP total length of segment i as it would be on the wire, bytes.
  [[nodiscard]] std::uint32_t segment_wire_bytes(std::uint16_t i) const noexcept {
    return is_gso() ? headers_len() + segment_payload(i) : ip_length;
  }
};

enum class parse_result : std::uint8_t {
  ok,
  not_ipv4,         ///< IPv6 or anything else: the emulator forwards IPv4 only
  malformed,        ///< too short, bad header length, inconsistent total length
  unsupported_gso,  ///< GSO type we do not segment (UFO, TCPv6) or absurd gso_size
};

/// Parses a frame (virtio_net_hdr + IPv4) read from a TUN device and validates it in the
/// house order: minimum length, version, header length, total length, then GSO fields.
/// A GSO frame whose payload fits in one segment is normalised in place to a plain frame
/// (gso_type cleared), as the kernel itself would treat it.
/// @param frame the frame; modified only by that normalisation
/// @param out filled on ok
parse_result parse_frame(std::span<std::byte> frame, packet_info& out) noexcept;

/// True for 224.0.0.0/4.
constexpr bool is_multicast(std::uint32_t addr) noexcept { return (addr >> 28U) == 0xEU; }
/// True for 224.0.0.0/24, the link-local groups that routers never forward and hosts do
/// not (necessarily) report via IGMP; the emulator floods them.
constexpr bool is_link_local_multicast(std::uint32_t addr) noexcept {
  return (addr >> 8U) == 0xE00000U;
}

/// Writes the vnet header and the IP + L4 headers of the run of segments
/// [first, first + count) of GSO frame `frame` into `out`: the frame the kernel would
/// produce by segmenting the original and gluing those segments back together. count > 1
/// gives a GSO frame with the original gso_size; count == 1 a plain datagram. The L4
/// checksum is left CHECKSUM_PARTIAL (pseudo-header sum, NEEDS_CSUM), the IP header
/// checksum is recomputed.
/// @param info parse_frame result for frame, is_gso() must be true
/// @param frame the original frame (vnet header + IP)
/// @param first index of the first segment, < info.segments
/// @param count number of segments, first + count <= info.segments
/// @param out at least k_max_run_header bytes
/// @return number of bytes written to out; the payload to append is
///         frame[run_payload_offset(info, first)] for run_payload_len(info, first, count)
std::size_t build_run_headers(const packet_info& info, std::span<const std::byte> frame,
                              std::uint16_t first, std::uint16_t count,
                              std::span<std::byte> out) noexcept;

/// Offset in the frame (including the vnet header) of segment `first`'s payload.
std::size_t run_payload_offset(const packet_info& info, std::uint16_t first) noexcept;
/// Payload bytes of the segments [first, first + count).
std::size_t run_payload_len(const packet_info& info, std::uint16_t first,
                            std::uint16_t count) noexcept;

// --- Internet checksum (RFC 1071) -----------------------------------------------------

/// Adds bytes to a 32-bit one's-complement accumulator as big-endian 16-bit words; an
/// odd trailing byte is padded with zero. Call on even-length pieces except the last.
std::uint32_t checksum_add(std::uint32_t sum, std::span<const std::byte> bytes) noexcept;
/// Folds the accumulator to 16 bits (not complemented).
std::uint16_t checksum_fold(std::uint32_t sum) noexcept;
/// Pseudo-header sum (RFC 768 / RFC 793) of an IPv4 TCP or UDP packet, not folded.
/// @param l4_length bytes of L4 header + payload
std::uint32_t pseudo_header_sum(std::uint32_t src, std::uint32_t dst, std::uint8_t protocol,
                                std::uint32_t l4_length) noexcept;
/// Recomputes the IPv4 header checksum in place.
void set_ipv4_header_checksum(std::span<std::byte> ip_header) noexcept;

/// Completes a CHECKSUM_PARTIAL frame the way a device (or the kernel) does for
/// NEEDS_CSUM: sums from csum_start to the end and stores the complement at
/// csum_start + csum_offset, then clears NEEDS_CSUM. For tests and for tools that need
/// on-the-wire bytes. Returns false if the offsets are out of range.
bool finish_partial_checksum(std::span<std::byte> frame) noexcept;

/// Verifies the IPv4 header checksum and, for TCP/UDP, the L4 checksum of a complete
/// (non-GSO, checksummed) frame. For tests.
bool verify_checksums(std::span<const std::byte> frame) noexcept;

}  // namespace mcdist::linkem
