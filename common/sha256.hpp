#pragma once
/// @file
/// SHA-256 (FIPS 180-4) through OpenSSL's EVP interface, incremental.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace mcdist {

/// A SHA-256 digest: 32 bytes.
using sha256_digest = std::array<std::uint8_t, 32>;

/// Incremental SHA-256. Movable, not copyable. Throws std::bad_alloc only if OpenSSL cannot
/// allocate its context (start-up class failure).
class sha256_hasher {
 public:
  sha256_hasher();
  ~sha256_hasher();
  sha256_hasher(sha256_hasher&& other) noexcept;
  sha256_hasher& operator=(sha256_hasher&& other) noexcept;
  sha256_hasher(const sha256_hasher&) = delete;
  sha256_hasher& operator=(const sha256_hasher&) = delete;

  /// Feeds `data` (any length, including 0).
  void update(std::span<const std::byte> data) noexcept;
  /// Returns the digest of everything fed since construction or the last reset(), and resets.
  sha256_digest finish() noexcept;
  /// Starts over.
  void reset() noexcept;
  /// Bytes fed since the last reset.
  std::uint64_t bytes() const noexcept { return m_bytes; }

 private:
  evp_md_ctx_st* m_ctx = nullptr;
  std::uint64_t m_bytes = 0;
};

/// One-shot SHA-256 of a buffer.
sha256_digest sha256(std::span<const std::byte> data) noexcept;

/// Lower-case hex, 64 characters.
std::string to_hex(const sha256_digest& d);

/// Parses 64 hex characters; std::nullopt on any other input.
std::optional<sha256_digest> digest_from_hex(std::string_view hex) noexcept;

/// Digest from raw bytes off the wire; std::nullopt unless exactly 32 bytes.
std::optional<sha256_digest> digest_from_bytes(std::string_view raw) noexcept;

}  // namespace mcdist
