#include "common/sha256.hpp"

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

namespace mcdist {

namespace {

/// SHA-256 fetched from the default provider once. EVP_sha256() makes every EVP_DigestInit_ex
/// fetch it again (a lock and a lookup each time): OpenSSL 3's migration guide, "Fetching
/// algorithms", advises an explicit fetch for repeated use. A daemon starts a hasher per file
/// and resets it per digest; tens of thousands of small files a minute paid that fetch each.
/// Never freed: it lives as long as the process's default library context.
const EVP_MD* sha256_md() noexcept {
  static const EVP_MD* const md = [] {
    const EVP_MD* m = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return m != nullptr ? m : EVP_sha256();
  }();
  return md;
}

}  // namespace

sha256_hasher::sha256_hasher() : m_ctx(EVP_MD_CTX_new()) {
  if (m_ctx == nullptr || EVP_DigestInit_ex(m_ctx, sha256_md(), nullptr) != 1) {
    EVP_MD_CTX_free(m_ctx);
    throw std::bad_alloc();
  }
}

sha256_hasher::~sha256_hasher() { EVP_MD_CTX_free(m_ctx); }

sha256_hasher::sha256_hasher(sha256_hasher&& other) noexcept
    : m_ctx(std::exchange(other.m_ctx, nullptr)), m_bytes(std::exchange(other.m_bytes, 0)) {}

sha256_hasher& sha256_hasher::operator=(sha256_hasher&& other) noexcept {
  if (this != &other) {
    EVP_MD_CTX_free(m_ctx);
    m_ctx = std::exchange(other.m_ctx, nullptr);
    m_bytes = std::exchange(other.m_bytes, 0);
  }
  return *this;
}

void sha256_hasher::update(std::span<const std::byte> data) noexcept {
  if (!data.empty()) EVP_DigestUpdate(m_ctx, data.data(), data.size());
  m_bytes += data.size();
}

sha256_digest sha256_hasher::finish() noexcept {
  sha256_digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(m_ctx, d.data(), &len);
  reset();
  return d;
}

void sha256_hasher::reset() noexcept {
  EVP_DigestInit_ex(m_ctx, sha256_md(), nullptr);
  m_bytes = 0;
}

sha256_digest sha256(std::span<const std::byte> data) noexcept {
  sha256_digest d{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), d.data(), &len, sha256_md(), nullptr);
  return d;
}

std::string to_hex(const sha256_digest& d) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(64, '0');
  for (std::size_t i = 0; i < d.size(); ++i) {
    s[2 * i] = digits[d[i] >> 4];
    s[2 * i + 1] = digits[d[i] & 0xf];
  }
  return s;
}

namespace {
/// Marks a byte that is not a hex digit in hex_values (no digit's value has this bit).
constexpr std::uint8_t not_hex = 0x10;
/// Value of each byte as a hex digit, not_hex for any other byte. A table, not comparisons: a
/// digest's digits are random, so a branch per range is mispredicted about every other
/// character (a sender's start-up parses one digest per file: 20,000 took 5.8-7.7 ms that way,
/// 1.0-1.3 ms with the table).
constexpr std::array<std::uint8_t, 256> hex_values = [] {
  std::array<std::uint8_t, 256> t{};
  t.fill(not_hex);
  for (unsigned c = '0'; c <= '9'; ++c) t[c] = static_cast<std::uint8_t>(c - '0');
  for (unsigned c = 'a'; c <= 'f'; ++c) t[c] = static_cast<std::uint8_t>(c - 'a' + 10);
  for (unsigned c = 'A'; c <= 'F'; ++c) t[c] = static_cast<std::uint8_t>(c - 'A' + 10);
  return t;
}();
}  // namespace

std::optional<sha256_digest> digest_from_hex(std::string_view hex) noexcept {
  if (hex.size() != 64) return std::nullopt;
  sha256_digest d{};
  unsigned bad = 0;
  for (std::size_t i = 0; i < 32; ++i) {
    const unsigned hi = hex_values[static_cast<unsigned char>(hex[2 * i])];
    const unsigned lo = hex_values[static_cast<unsigned char>(hex[2 * i + 1])];
    bad |= hi | lo;
    d[i] = static_cast<std::uint8_t>((hi & 0xfu) << 4 | (lo & 0xfu));
  }
  if ((bad & not_hex) != 0) return std::nullopt;
  return d;
}

std::optional<sha256_digest> digest_from_bytes(std::string_view raw) noexcept {
  if (raw.size() != 32) return std::nullopt;
  sha256_digest d{};
  std::memcpy(d.data(), raw.data(), 32);
  return d;
}

}  // namespace mcdist
