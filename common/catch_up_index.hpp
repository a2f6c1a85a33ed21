#pragma once
/// @file
/// The signed index of a hub's catch-up over HTTP(S) (docs/design-notes.md "Catch-up over
/// HTTP", docs/security.md "Catch-up over HTTP"): the hub answers
/// `GET /catch-up/CHANNEL/SEQ?nonce=HEX` with the retained, not superseded products of its
/// batch session SEQ, and a one-way site downloads those it lacks. Pure: protobuf and the
/// signature primitives only, no I/O.
///
/// Encoding: a wire::signed_catch_up_index whose body is a serialized wire::catch_up_index and
/// whose signature, when the hub has a key, is Ed25519 (RFC 8032) over
/// catch_up_index_domain || body, so it can never pass for a signature over any other message
/// of the protocol (which sign other prefixes or framed datagrams).
///
/// What a site trusts of it (open_catch_up_index): integrity and origin by the signature of a
/// key the channel trusts; freshness by the nonce it chose for this one request (a recorded
/// index replayed later carries another nonce); what it asked for by channel and number; every
/// product's name, size, SHA-256 and download path bounded and well formed before use.

#include "common/crypto.hpp"
#include "common/sha256.hpp"
#include "mcdist.pb.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist::catch_up {

/// Signature domain: the bytes signed are this followed by the body.
inline constexpr std::string_view catch_up_index_domain = "mcdist v2 catch-up index";
/// Nonce a site sends, bytes (128 bits from the CSPRNG: never repeats in practice).
inline constexpr std::size_t nonce_bytes = 16;
/// Longest nonce the hub echoes, bytes (a site's own is nonce_bytes; more is refused).
inline constexpr std::size_t max_nonce_bytes = 64;
/// Largest index a site reads, bytes: max_products entries of ~1.2 KiB each (a 1 KiB name,
/// its percent-encoded download path is cut by max_path_bytes) with room; a bigger answer is
/// refused before it is parsed.
inline constexpr std::size_t max_index_bytes = 16 << 20;
/// Products of one index: a feed batch holds at most batch_max_files (1000 by default);
/// 10,000 leaves room for operators who raise it, and bounds the site's work per number.
inline constexpr std::size_t max_products = 10'000;
/// Longest download path, bytes: "products/" + 20 digits + "/" + a 1024-byte name
/// percent-encoded (3 bytes per byte at worst).
inline constexpr std::size_t max_path_bytes = 3200;
/// Longest channel name, bytes (as the heartbeat's).
inline constexpr std::size_t max_channel_bytes = 256;
/// Largest product size a site takes, bytes (1 TiB: a product beyond it is refused, so a
/// forged or corrupt size can never make a site preallocate or wait for more).
inline constexpr std::uint64_t max_product_bytes = std::uint64_t{1} << 40;

/// One product of an index, checked.
struct product {
  std::string name;  ///< manifest path rules (check_relative_path)
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint32_t mode = 0644;  ///< permission bits only
  sha256_digest sha256{};
  std::string path;  ///< download path relative to the catch-up URL, URL characters only
};

/// An index, checked.
struct index {
  std::string channel;
  std::uint64_t seq = 0;
  std::vector<std::uint8_t> nonce;
  std::uint64_t hub_unix_ms = 0;
  std::vector<product> products;
};

/// Why an index was refused (to_string for logs and counters).
enum class refusal : std::uint8_t {
  none,
  oversized,        ///< larger than max_index_bytes
  bad_protobuf,     ///< the envelope or the body does not parse
  unsigned_index,   ///< no signature, on a channel that takes only signed sessions
  untrusted_key,    ///< signed by a key the channel does not trust (or not the expected one)
  bad_signature,    ///< the signature does not verify
  wrong_channel,    ///< the channel is not the one asked for
  wrong_seq,        ///< the number is not the one asked for
  wrong_nonce,      ///< the nonce is not the one sent with this request: stale or replayed
  invalid_product,  ///< a product's name, size, mode, digest or path is out of bounds
  duplicate_name,   ///< two products of the same name
  too_many,         ///< more than max_products
};
std::string_view to_string(refusal r) noexcept;

/// What a site expects of the answer to one request.
struct expectation {
  std::string_view channel;
  std::uint64_t seq = 0;
  std::span<const std::uint8_t> nonce;
  /// Keys the channel trusts; empty: the channel takes unsigned sessions, and an unsigned
  /// index is taken (a signed one is then checked against nothing and refused, as heartbeats).
  std::span<const crypto::key32> trusted;
  /// When set, only this key's signature is taken (the key whose heartbeats numbered the
  /// stream: another trusted hub's index would be of other numbers).
  std::optional<crypto::key32> signer;
};

/// Encodes `ix` (unchecked: the hub builds it from its journal), signed by `hub` when given.
std::string encode_index(const index& ix, const crypto::identity* hub);

/// Checks and parses an index answered for `want`: size, envelope, signature (or its absence,
/// as the channel allows), body, channel, number, nonce, then every product (name by
/// check_relative_path, size <= max_product_bytes, mode <= 07777, SHA-256 of 32 bytes, path of
/// URL path characters that starts with "products/" and holds no "..", no duplicate name).
/// Never throws; allocates only within max_index_bytes.
/// @param signer  set to the signing key (nullopt for an unsigned index taken)
/// @return refusal::none with `out` filled, or the first reason found
refusal open_index(std::span<const std::byte> bytes, const expectation& want, index& out,
                   std::optional<crypto::key32>& signer);

/// True when `path` is a download path a site follows: non-empty, at most max_path_bytes, of
/// RFC 3986 path characters (unreserved, sub-delims, ':', '@', '/', '%' followed by two hex
/// digits), starting with "products/", without an empty, "." or ".." segment (encoded or not).
bool valid_download_path(std::string_view path) noexcept;

/// Lower-case hex of `bytes`.
std::string hex(std::span<const std::uint8_t> bytes);
/// Parses lower- or upper-case hex; nullopt when odd-length or not hex.
std::optional<std::vector<std::uint8_t>> parse_hex(std::string_view text);

}  // namespace mcdist::catch_up
