#pragma once
/// @file
/// Sealed frames of the unicast fallback in encrypted sessions (docs/security.md "Unicast
/// fallback of an encrypted session"). After the hello, every frame on a connection (TCP) or
/// the association (SCTP) of an encrypted session travels inside a `sealed` frame:
///
///     0      2      3      4                8                          8 + n      8 + n + 16
///     +------+------+------+----------------+--------------------------+----------+
///     | 'MU' | ver  |  9   | n + 16         | AES-256-GCM(inner frame) | GCM tag  |
///     +------+------+------+----------------+--------------------------+----------+
///
/// where the inner frame is the plain frame (header and body: data, welcome, request, ack,
/// bye) of n bytes. AES-256-GCM (NIST SP 800-38D) with the outer 8-byte header as associated
/// data and the 96-bit nonce
///
///     nonce = stream u32 (big-endian) || sequence u64 (big-endian)
///
/// where stream is the SCTP stream the frame travels on (0 on TCP) and sequence counts the
/// frames sealed on that stream under that key, from 0. Neither is sent: the receiver keeps
/// the same counters, and TCP and every SCTP stream (ordered delivery) hand frames over in
/// the order they were sealed, so a replayed, reordered, dropped or moved frame is opened
/// under the wrong nonce and refused. A (stream, sequence) pair is used once per key; each
/// connection and association has its own keys, one per direction:
///
///     key(direction) = HKDF-SHA-256(IKM  = the site's fallback key (hello_proof.hpp),
///                                   salt = challenge || client nonce || connection index,
///                                   info = "mcdist v2 fallback records server to client" or
///                                          "mcdist v2 fallback records client to server")
///
/// The challenge is 128 fresh random bits per connection (the server's), so keys never repeat
/// across connections, sessions or restarts, and the two directions never share a key. The
/// fallback key is the pairwise key of one site and the sender: no other site of the session
/// (which all hold the session key) can read another site's fallback. Pure: no I/O.

#include "common/crypto.hpp"
#include "common/unicast/frame.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <vector>

namespace mcdist::unicast {

/// Bytes a sealed frame adds to the inner frame: the outer header and the GCM tag.
inline constexpr std::size_t seal_overhead = frame_header_size + crypto::gcm_tag_bytes;
/// Most streams a sealer/opener keeps sequence numbers for (the SCTP limit,
/// max_sctp_streams); a frame on a higher stream is refused.
inline constexpr std::uint32_t max_seal_streams = 256;

/// The two record keys of one connection (or association).
struct seal_keys {
  crypto::key32 to_client{};  ///< server -> client frames
  crypto::key32 to_server{};  ///< client -> server frames
};

/// Derives the keys of the connection whose challenge is `c` and whose hello is `h` (token,
/// client nonce and connection index are taken from it) from the site's fallback key.
/// @throws crypto::key_error only if OpenSSL fails (out of memory)
seal_keys derive_seal_keys(const crypto::key32& fallback_key, const challenge& c, const hello& h);

/// Seals frames in one direction under one key. Not thread-safe.
class frame_sealer {
 public:
  /// @throws crypto::key_error if OpenSSL cannot set AES-256-GCM up
  explicit frame_sealer(const crypto::key32& key);

  /// Seals the frame in `buf`, which holds seal_front free bytes, then the inner frame (header
  /// and body): encrypts it in place, writes the outer header in front and appends the tag.
  /// @param stream the SCTP stream it will be sent on (0 on TCP), < max_seal_streams
  /// @return empty, or errc::invalid_field for a bad stream / a frame too short or too long,
  ///         errc::oversized once 2^64 frames were sealed on the stream (never in practice)
  std::error_code seal(std::uint32_t stream, std::vector<std::byte>& buf) noexcept;

  /// A sealed copy of the inner frame `frame` (for small control frames).
  std::vector<std::byte> seal_copy(std::uint32_t stream, std::span<const std::byte> frame);

  /// Frames sealed so far, all streams.
  std::uint64_t sealed() const noexcept { return m_sealed; }

 private:
  crypto::gcm m_gcm;
  std::vector<std::uint64_t> m_next;  ///< next sequence per stream, grown on demand
  std::uint64_t m_sealed = 0;
};

/// Bytes a sealed frame's buffer needs in front of the inner frame (frame_sealer::seal).
inline constexpr std::size_t seal_front = frame_header_size;

/// Opens sealed frames in one direction under one key. Not thread-safe.
class frame_opener {
 public:
  /// @throws crypto::key_error if OpenSSL cannot set AES-256-GCM up
  explicit frame_opener(const crypto::key32& key);

  /// Opens the sealed frame with outer header `header` and body `body` (ciphertext || tag),
  /// which arrived on `stream`, in place: on success `inner` is the inner frame (header and
  /// body, inside `body`), checked to be one whole frame of a type that may be sealed (not
  /// hello, challenge, refuse or sealed) within its limits.
  /// @return empty; errc::unauthenticated when the tag does not verify under the next
  ///         sequence of the stream (tampered, replayed, reordered or lost frame, wrong key:
  ///         the sequence does not advance, the connection must end); errc::truncated,
  ///         invalid_field or the inner header's error for a frame that opened but is malformed
  std::error_code open(std::uint32_t stream, std::span<const std::byte> header,
                       std::span<std::byte> body, std::span<const std::byte>& inner) noexcept;

  /// Frames opened so far, all streams.
  std::uint64_t opened() const noexcept { return m_opened; }

 private:
  crypto::gcm m_gcm;
  std::vector<std::uint64_t> m_next;
  std::uint64_t m_opened = 0;
};

}  // namespace mcdist::unicast
