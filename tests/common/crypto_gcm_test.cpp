// AES-256-GCM (common/crypto.hpp): the libsodium AES-NI backend and the OpenSSL EVP backend give
// the same tags and ciphertexts bit for bit, match the published test vectors, and refuse a
// tampered tag, so a sender on one backend and a site on the other interoperate.
#include "common/crypto.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace mcdist;
using crypto::gcm;
using crypto::gcm_backend;
using crypto::gmac;

namespace {

std::vector<std::byte> random_bytes_of(std::mt19937& rng, std::size_t n) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  return out;
}

std::string hex(const std::uint8_t* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

std::vector<gcm_backend> backends() {
  // The automatic backend is libsodium's only where the CPU has AES-NI and PCLMULQDQ; on other
  // CPUs both entries run OpenSSL and the comparison is trivially equal.
  return {gcm_backend::automatic, gcm_backend::openssl};
}

}  // namespace

TEST_CASE("AES-256-GCM matches the published test vectors on both backends", "[unit][crypto]") {
  // McGrew and Viega, "The Galois/Counter Mode of Operation (GCM)", test cases 13 and 14:
  // 256-bit zero key, 96-bit zero IV; empty plaintext, then one zero block.
  const crypto::key32 key{};
  const std::array<std::uint8_t, crypto::gcm_nonce_bytes> iv{};
  INFO("libsodium AES-NI backend in use: " << crypto::gcm_hardware());
  for (const auto backend : backends()) {
    gmac mac(key, backend);
    const auto t13 = mac.tag(iv, {});
    CHECK(hex(t13.data(), t13.size()) == "530f8afbc74536b9a963b4f1c4cb738b");

    gcm enc(key, gcm::direction::encrypt, backend);
    std::array<std::byte, 16> block{};
    const auto t14 = enc.seal(iv, {}, block);
    CHECK(hex(reinterpret_cast<const std::uint8_t*>(block.data()), block.size()) ==
          "cea7403d4d606b6e074ec5d3baf39d18");
    CHECK(hex(t14.data(), t14.size()) == "d0d1c8a799996bf0265b98b5d48ab919");
  }
}

TEST_CASE("GMAC tags and GCM seals are identical on both backends and open across them",
          "[unit][crypto]") {
  std::mt19937 rng(20261125);
  crypto::key32 key{};
  for (auto& b : key) b = static_cast<std::uint8_t>(rng() & 0xff);
  gmac fast(key, gcm_backend::automatic), portable(key, gcm_backend::openssl);
  gcm seal_fast(key, gcm::direction::encrypt, gcm_backend::automatic);
  gcm seal_portable(key, gcm::direction::encrypt, gcm_backend::openssl);
  gcm open_fast(key, gcm::direction::decrypt, gcm_backend::automatic);
  gcm open_portable(key, gcm::direction::decrypt, gcm_backend::openssl);
  // Sizes around the 16-byte block and the 8-block AES-NI stride, and a data block's size.
  for (const std::size_t n : {0u, 1u, 15u, 16u, 17u, 127u, 128u, 129u, 1300u, 1400u, 65536u}) {
    INFO("length " << n);
    std::array<std::uint8_t, crypto::gcm_nonce_bytes> nonce{};
    for (auto& b : nonce) b = static_cast<std::uint8_t>(rng() & 0xff);
    const auto data = random_bytes_of(rng, n);
    const auto ad = random_bytes_of(rng, n % 40);

    const auto t = fast.tag(nonce, data);
    CHECK(t == portable.tag(nonce, data));
    CHECK(fast.verify(nonce, data, t));
    CHECK(portable.verify(nonce, data, t));

    auto c1 = data, c2 = data;
    const auto s1 = seal_fast.seal(nonce, ad, c1);
    const auto s2 = seal_portable.seal(nonce, ad, c2);
    CHECK(s1 == s2);
    CHECK(c1 == c2);
    if (n > 0) CHECK(c1 != data);

    // Open across backends, one of them in place.
    std::vector<std::byte> out(n);
    CHECK(open_portable.open(nonce, ad, c1, s1, out));
    CHECK(out == data);
    CHECK(open_fast.open(nonce, ad, c2, s2, c2));
    CHECK(c2 == data);

    // A flipped tag bit, or a flipped ciphertext bit, is refused by both.
    auto bad_tag = s1;
    bad_tag[n % bad_tag.size()] ^= 1;
    CHECK_FALSE(fast.verify(nonce, data, bad_tag));
    CHECK_FALSE(portable.verify(nonce, data, bad_tag));
    CHECK_FALSE(open_fast.open(nonce, ad, c1, bad_tag, out));
    CHECK_FALSE(open_portable.open(nonce, ad, c1, bad_tag, out));
    if (n > 0) {
      auto bad = c1;
      bad[n / 2] ^= std::byte{0x80};
      CHECK_FALSE(open_fast.open(nonce, ad, bad, s1, out));
      CHECK_FALSE(open_portable.open(nonce, ad, bad, s1, out));
    }
  }
}

TEST_CASE("a copied GMAC or GCM object keeps its key and runs independently", "[unit][crypto]") {
  crypto::key32 key{};
  key[0] = 7;
  const std::array<std::uint8_t, crypto::gcm_nonce_bytes> nonce{1, 2, 3};
  const std::vector<std::byte> data(300, std::byte{0x5a});
  for (const auto backend : backends()) {
    gmac a(key, backend);
    gmac b = a;
    CHECK(a.tag(nonce, data) == b.tag(nonce, data));
    gmac other(crypto::key32{}, backend);
    CHECK(other.tag(nonce, data) != a.tag(nonce, data));
    other = a;
    CHECK(other.tag(nonce, data) == a.tag(nonce, data));
  }
}
