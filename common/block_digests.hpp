#pragma once
/// @file
/// Block digests of silent signed sessions (docs/security.md "Block digests"): how a site that
/// holds no session key (it never transmits, so it never gets one) still checks every data and
/// parity block on arrival. The sender plans its datagrams a window ahead, hashes each as it
/// will be sent, and multicasts the truncated SHA-256 of the window's datagrams in block digest
/// chunks signed together (one Ed25519 signature per window, over an announce tree's Merkle
/// tree: common/announce_tree.hpp, common/auth.hpp) ahead of the window's first datagram;
/// a site keeps the digests of the last few windows and checks each block against the digest
/// for its sequence number: one SHA-256 of the datagram per block, one signature check per
/// window. Digests are keyed by the datagram's sequence number, which the sender gives every
/// data and parity datagram once (common/wire.hpp), so a chunk names its datagrams by a range
/// and needs no per-block index: the digest covers the whole datagram as sent (header with
/// sequence number, file and block or FEC block and parity index, then the payload), so a copy
/// with another header or another payload does not match.
///
/// A block digest chunk is a wire version 3 datagram of type block_digests:
///
///     0      2      3      4              8              12       14       16
///     +------+------+------+--------------+--------------+--------+--------+----------------+
///     | 'MD' |  3   |  15  | session id   | first seq    | count  | offset | digests ...    |
///     +------+------+------+--------------+--------------+--------+--------+----------------+
///
/// - first seq: the sequence number of the window's first datagram; the window is the
///   datagrams [first seq, first seq + count) in serial arithmetic (RFC 1982);
/// - count: datagrams in the window, 1..max_window;
/// - offset: the window index of this chunk's first digest, a multiple of digests_per_chunk;
///   the chunk carries min(digests_per_chunk, count - offset) digests of digest_bytes each, in
///   sequence order, and is leaf offset / digests_per_chunk of the window's tree of
///   chunks_in(count) leaves;
/// - then the trailer (common/auth.hpp): authentication path, signature, leaf index, leaf
///   count.
///
/// Pure: SHA-256 through common/sha256.hpp, no I/O, no clocks.

#include "common/announce_tree.hpp"
#include "common/block_map.hpp"
#include "common/error.hpp"
#include "common/ids.hpp"
#include "common/wire.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <vector>

namespace mcdist::block_digests {

/// Bytes of one block digest: SHA-256 truncated to 128 bits. A forger needs a second preimage
/// of 128 bits for the one datagram it wants to replace (2^128 work; truncation keeps the
/// second-preimage strength of its length, NIST SP 800-107 section 5.1), not a collision: the
/// sender hashes its own datagrams.
inline constexpr std::size_t digest_bytes = 16;
/// A truncated SHA-256 of one datagram.
using digest = std::array<std::uint8_t, digest_bytes>;

/// Digests in one chunk: 1024 bytes, so a chunk with its fields and its trailer (at most 196
/// bytes for a window's tree of 16 leaves) is 1236 bytes and fits wire::control_budget.
inline constexpr std::size_t digests_per_chunk = 64;
/// Most datagrams in one window (1.4 MB of 1400-byte blocks, 11 ms at 1 Gbit/s): a window is
/// signed once, so at 1 Gbit/s the sender makes and a site checks about 90 signatures a
/// second; the sender reads, hashes and keeps two windows ahead of its socket.
inline constexpr std::size_t max_window = 1024;
/// Most chunks in one window: the leaves of its tree (path of at most 4 hashes).
inline constexpr std::size_t max_chunks = max_window / digests_per_chunk;
static_assert(max_chunks <= announce_tree::max_leaves);
/// Bytes of a chunk before its digests: the common header and first seq, count, offset.
inline constexpr std::size_t chunk_header_bytes = wire::header_size + 8;
/// Bytes of the trailer of a chunk without its authentication path: signature (64), leaf index
/// (2), leaf count (2).
inline constexpr std::size_t trailer_fixed_bytes = 64 + 4;
/// Windows a site holds per session: the sender sends the digests of window w + 1, then those
/// of window w again, before window w's first datagram, so a site needs w and w + 1, and w - 1
/// for its last datagrams still in the socket buffer; one more for margin.
inline constexpr std::size_t windows_held = 4;

/// The digest of one datagram as sent: the first digest_bytes of SHA-256 (FIPS 180-4) over
/// all its bytes, header included.
digest digest_of(std::span<const std::byte> datagram) noexcept;

/// Chunks of a window of `count` datagrams: ceil(count / digests_per_chunk).
constexpr std::size_t chunks_in(std::size_t count) noexcept {
  return (count + digests_per_chunk - 1) / digests_per_chunk;
}
/// Digests in the chunk at window index `offset` of a window of `count` datagrams.
constexpr std::size_t digests_at(std::size_t count, std::size_t offset) noexcept {
  return offset >= count
             ? 0
             : (count - offset < digests_per_chunk ? count - offset : digests_per_chunk);
}
/// Bytes of the signed part of a chunk (its tree leaf): header, fields and digests.
constexpr std::size_t chunk_body_bytes(std::size_t count, std::size_t offset) noexcept {
  return chunk_header_bytes + digests_at(count, offset) * digest_bytes;
}
/// Bytes of a chunk as sent, trailer included (leaf offset / digests_per_chunk of the window's
/// tree): what the sender's pacer counts. 0 for an offset outside the window.
std::size_t chunk_wire_bytes(std::size_t count, std::size_t offset) noexcept;

/// One chunk as parsed (its trailer already checked and cut by common/auth.hpp).
struct chunk {
  session_id session{};
  std::uint32_t first_seq = 0;
  std::uint16_t count = 0;
  std::uint16_t offset = 0;
  std::span<const std::byte> digests;  ///< digests_at(count, offset) x digest_bytes
  /// Its leaf index in the window's tree.
  std::size_t leaf() const noexcept { return offset / digests_per_chunk; }
};

/// Writes a chunk's signed part (version 3 header, fields, digests) into `out`.
/// @param digests  the digests of datagrams [first_seq + offset, ...): digests_at(count,
///                 offset) of them
/// @return its length (chunk_body_bytes), or 0 when `out` is too small or the fields are out
///         of range (count 0 or above max_window, offset not a multiple of digests_per_chunk
///         or not below count, a wrong number of digests)
std::size_t write_chunk(std::span<std::byte> out, session_id session, std::uint32_t first_seq,
                        std::uint16_t count, std::uint16_t offset, std::span<const digest> digests);

/// Parses the signed part of a chunk (the datagram without its trailer), in the order of
/// docs/architecture.md "House style": length, version and type, fields, declared length.
/// @return empty, or errc::truncated (shorter than its header), bad_version / unknown_type
///         (not a version-3 block_digests datagram), invalid_field (count 0 or above
///         max_window, offset not a multiple of digests_per_chunk or not below count), oversized
///         or truncated (not exactly its digests long)
std::error_code parse_chunk(std::span<const std::byte> body, chunk& out) noexcept;

/// What a site knows of a block's digest.
enum class verdict : std::uint8_t {
  match,     ///< the signed digest for its sequence number equals the datagram's
  absent,    ///< no signed digest for its sequence number is held
  mismatch,  ///< the signed digest for its sequence number differs: forged or altered
};

/// The digests a site holds for one session: at most windows_held windows of at most
/// max_window digests, so at most about 66 KiB whatever the chunks say. Filled only from
/// chunks whose signature (or path to a verified root) the caller checked.
class table {
 public:
  /// Stores the digests of a verified chunk. A chunk of a window held already fills it in (a
  /// window is known by its first seq and count); a new window takes a free slot or the slot of
  /// the oldest window held (serial order of first seq), unless it is older than every window
  /// held (a replay of a past window: ignored). A held window that overlaps the new one without
  /// being it is dropped.
  /// @return false when the chunk was ignored
  bool add(const chunk& c);
  /// The verdict for a datagram of sequence number `seq` whose digest_of is `d`.
  verdict check(std::uint32_t seq, const digest& d) const noexcept;
  /// Windows held.
  std::size_t windows() const noexcept { return m_windows.size(); }
  /// Bytes held for digests and their presence bits.
  std::size_t memory_bytes() const noexcept;

 private:
  struct window {
    std::uint32_t first_seq = 0;
    std::uint16_t count = 0;
    std::vector<std::uint8_t> digests;  ///< count x digest_bytes
    block_map present;                  ///< count bits
  };
  std::vector<window> m_windows;  ///< at most windows_held
};

}  // namespace mcdist::block_digests
