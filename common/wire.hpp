#pragma once
/// @file
/// The mcdist wire format (docs/architecture.md "Data flow in one session"; README "Wire format").
///
/// Every datagram starts with an 8-byte header in network byte order:
///
///     0      2      3      4              8
///     +------+------+------+--------------+
///     | 'MD' | ver  | type | session id   |
///     +------+------+------+--------------+
///
/// A data datagram (type data) continues with a 12-byte data header and the block payload:
///
///     8              12             16             20
///     +--------------+--------------+--------------+------------------+
///     | sequence     | file index   | block index  | payload ...      |
///     +--------------+--------------+--------------+------------------+
///
/// A parity datagram (type parity) has the same shape, naming a FEC block and a parity
/// index instead of a file and a block; its payload is one block_size-byte parity block of the
/// FEC block's sources, each zero-padded to block_size (common/fec/fec.hpp,
/// common/fec/fec_layout.hpp):
///
///     8              12             16             20
///     +--------------+--------------+--------------+------------------+
///     | sequence     | FEC block    | parity index | parity ...       |
///     +--------------+--------------+--------------+------------------+
///
/// A block digest chunk (type block_digests, wire version 3 only; silent signed sessions) is
/// binary too: a window of the sender's data and parity datagrams, given by its first sequence
/// number and its length, and the truncated SHA-256 of some of them (common/block_digests.hpp
/// has the layout and owns the format); its trailer is an announce tree's without the session
/// key (common/auth.hpp).
///
/// Every other type continues with one protobuf message of proto/mcdist.proto.

#include "common/byte_order.hpp"
#include "common/error.hpp"
#include "common/ids.hpp"
#include "common/packet.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>

namespace google::protobuf {
class MessageLite;
}

namespace mcdist::wire {

/// "MD" in ASCII, big-endian.
inline constexpr std::uint16_t magic = 0x4d44;
/// The protocol version this build speaks. Datagrams of any other version are dropped.
inline constexpr std::uint8_t version = 1;
/// The version byte of an authenticated datagram (common/auth.hpp): a version-1 datagram
/// followed by an authentication trailer. The shells check and cut the trailer off before the
/// cores see the datagram; parse_header accepts both versions.
inline constexpr std::uint8_t authenticated_version = 2;
/// The version byte of a datagram authenticated by a signed block digest (silent signed
/// sessions; common/block_digests.hpp, docs/security.md "Block digests"): a data or parity
/// datagram without any trailer, whose truncated SHA-256 a block digest chunk (type
/// block_digests, also version 3) carried ahead of it. A peer that does not know these drops
/// them as bad_version; parse_header accepts them, and the shells check them before the cores
/// see them.
inline constexpr std::uint8_t digest_version = 3;
/// Size of the common header, bytes.
inline constexpr std::size_t header_size = 8;
/// Size of the common header plus the data header, bytes: what precedes a block's payload.
inline constexpr std::size_t data_header_size = 20;
/// Smallest block size a sender may choose, bytes.
inline constexpr std::uint32_t min_block_size = 256;
/// Largest block size, bytes: a 9000-byte jumbo frame minus IPv4 (20), UDP (8) and our
/// data header (20): 8952.
inline constexpr std::uint32_t max_block_size =
    packet::jumbo_mtu - packet::ipv4_udp_overhead - data_header_size;
/// Default block size, bytes: 1400 + 20 + 28 = 1448, inside a 1500-byte MTU with room for
/// tunnel overheads (docs/architecture.md "Vocabulary").
inline constexpr std::uint32_t default_block_size = 1400;
static_assert(default_block_size + data_header_size + packet::ipv4_udp_overhead <
              packet::ethernet_mtu);
/// Largest datagram a receiver accepts, bytes: a UDP datagram over IPv4 can carry 65507, but
/// nothing mcdist sends is larger than a jumbo frame; anything bigger is hostile.
inline constexpr std::size_t max_datagram_size = packet::jumbo_mtu;
/// Budget for control datagrams the programs build, bytes: fits a 1500-byte MTU with IPv6
/// (40) and UDP (8) headers.
inline constexpr std::size_t control_budget = 1400;
static_assert(control_budget + packet::ipv6_header + packet::udp_header <= packet::ethernet_mtu);
/// --rate auto: the share of a receiver's overrun_bps (NAK field 44: the rate it takes
/// datagrams in) that the sender caps its rate at, so the receiver's queue drains (0.85 leaves
/// it 15 % to catch up with). The receiver assumes the same cap until the next marker tells the
/// sender's rate (docs/design-notes.md "Receiver overrun"). A choice, not from a paper.
inline constexpr double overrun_cap_share = 0.85;

/// Message types (the header's type byte).
enum class msg_type : std::uint8_t {
  data = 1,
  announce = 2,
  register_request = 3,
  register_reply = 4,
  marker = 5,
  nak = 6,
  digest_list = 7,
  complete = 8,
  complete_ack = 9,
  session_end = 10,
  fallback = 11,
  parity = 12,  ///< a parity block of a FEC block (parity repairs)
  // 13 is unassigned.
  /// Blocks scheduled for repair (proto repair_advert), multicast (NAK feedback).
  repair_advert = 14,
  /// Truncated SHA-256 of a window of data and parity datagrams, signed (wire version 3 only:
  /// common/block_digests.hpp), multicast ahead of them in silent signed sessions.
  block_digests = 15,
  /// A hub channel's newest session number, multicast at an interval (proto heartbeat).
  heartbeat = 16,
  /// A site's missing session numbers, unicast to the hub (proto gap_report).
  gap_report = 17,
  /// A relay's hub-delegated key for a signed session, multicast to the sites behind it
  /// (proto relay_hello; common/auth.hpp).
  relay_hello = 18,
};

/// Longest receiver id, bytes. Ids are site names ("dwd-offenbach"), not documents.
inline constexpr std::size_t max_receiver_id_bytes = 64;

/// True for a usable receiver id: 1..max_receiver_id_bytes of letters, digits and - _ . : @
bool valid_receiver_id(std::string_view id) noexcept;

/// Longest channel name in session_params.channel, bytes: a product stream's name ("obs",
/// "warnings", "nwp/icon-eu"), not a document.
inline constexpr std::size_t max_channel_name_bytes = 64;

/// True for a usable channel name: 1..max_channel_name_bytes of letters, digits and
/// - _ . : @ / (no spaces or control characters: it is a key in receivers' state files).
bool valid_channel_name(std::string_view name) noexcept;

/// An inclusive range [first, last] of session sequence numbers: the C++ form of the proto
/// message seq_range.
using seq_span = std::pair<std::uint64_t, std::uint64_t>;

/// Most seq_range messages in register_request.missing_seqs and session_params.catch_up_seqs:
/// 32 ranges of two 10-byte varints are 768 bytes at worst, which still fits a REGISTER in
/// control_budget beside the held files; a site with more gaps reports the oldest 32 and the
/// rest at its next registration.
inline constexpr std::size_t max_seq_ranges = 32;

/// True for a well-formed list of sequence ranges: at most max_seq_ranges, each with
/// 1 <= first <= last < below, ascending and disjoint (first > previous last).
/// @param below  the exclusive upper bound (the session's own sequence number; UINT64_MAX
///               when none applies)
bool valid_seq_ranges(std::span<const seq_span> ranges, std::uint64_t below) noexcept;

/// The numbers of `from` that are in no range of `minus`, as inclusive ranges in `from`'s order.
/// @param from   inclusive ranges, ascending and disjoint
/// @param minus  inclusive ranges ordered by their first number (they may overlap)
std::vector<seq_span> subtract_seq_ranges(std::span<const seq_span> from,
                                          std::span<const seq_span> minus);

/// Short name of a message type for logs ("announce", ...), "unknown" otherwise.
const char* to_string(msg_type t) noexcept;

/// The common header.
struct header {
  msg_type type{};
  session_id session{};
  /// version, authenticated_version or digest_version: whether a trailer (common/auth.hpp) or
  /// a block digest (common/block_digests.hpp) authenticates the datagram
  std::uint8_t version = wire::version;
};

/// The data header fields after the common header.
struct data_header {
  session_id session{};
  std::uint32_t seq = 0;  ///< per-session datagram sequence number, serial arithmetic
  file_index file{};
  block_index block{};
};

/// The fields of a parity datagram after the common header (same offsets as data_header).
struct parity_header {
  session_id session{};
  std::uint32_t seq = 0;        ///< shares the data datagrams' sequence
  std::uint32_t fec_block = 0;  ///< FEC block index (fec::layout)
  std::uint32_t index = 0;      ///< parity index within the FEC block (< fec::codec::max_parity)
};

/// Checks the common header: length, magic, version, known type, size limit. The one parse
/// of a datagram's header on the receive paths: the shells hand the result on to the channel
/// filter, authentication and the engine, and read no header bytes themselves.
/// @param datagram  the whole datagram as received
/// @param out       filled on success (type, session, version)
/// Versions 1 (wire::version), 2 (authenticated_version) and 3 (digest_version) are accepted.
/// @return empty, or errc::truncated / bad_magic / bad_version / unknown_type / oversized
std::error_code parse_header(std::span<const std::byte> datagram, header& out) noexcept;

/// Writes the common header into the first header_size bytes of `out` (which must be that
/// long).
void write_header(std::span<std::byte> out, msg_type type, session_id session,
                  std::uint8_t version = wire::version) noexcept;

/// Sets the version byte of a datagram whose common header is written (`datagram` at least
/// header_size bytes): how an authentication layer marks the trailer it appends.
void set_version(std::span<std::byte> datagram, std::uint8_t version) noexcept;

/// Parses a data datagram whose common header parse_header already accepted as type data.
/// @param payload  set to the block payload (may be empty only if the file is empty, which
///                 the caller checks against the manifest)
/// @return empty, or errc::truncated
std::error_code parse_data(std::span<const std::byte> datagram, data_header& out,
                           std::span<const std::byte>& payload) noexcept;

/// Writes the 20-byte header of a data datagram into `out` (at least data_header_size bytes).
void write_data_header(std::span<std::byte> out, const data_header& h) noexcept;

/// Parses a parity datagram whose common header parse_header accepted as type parity.
/// @return empty, or errc::truncated
std::error_code parse_parity(std::span<const std::byte> datagram, parity_header& out,
                             std::span<const std::byte>& payload) noexcept;

/// Writes the 20-byte header of a parity datagram into `out` (at least data_header_size bytes).
void write_parity_header(std::span<std::byte> out, const parity_header& h) noexcept;

/// Encodes header + message into `out`.
/// @return bytes written, or 0 if `out` is too small.
std::size_t encode_control(std::span<std::byte> out, msg_type type, session_id session,
                           const google::protobuf::MessageLite& msg);

/// Parses the protobuf body of a control datagram whose header parse_header accepted.
/// @return empty, or errc::bad_protobuf
std::error_code parse_control(std::span<const std::byte> datagram,
                              google::protobuf::MessageLite& msg) noexcept;

}  // namespace mcdist::wire
