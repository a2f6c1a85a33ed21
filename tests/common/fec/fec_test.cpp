#include "common/fec/fec.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

using namespace mcdist;

namespace {

using bytes = std::vector<std::byte>;

std::vector<bytes> random_blocks(std::mt19937_64& rng, std::uint32_t count, std::size_t len) {
  std::vector<bytes> out(count, bytes(len));
  for (auto& b : out) {
    for (auto& x : b) x = static_cast<std::byte>(rng());
  }
  return out;
}

std::vector<bytes> encode_all(const fec::codec& c, const std::vector<bytes>& sources,
                              std::uint32_t parity, std::size_t len) {
  std::vector<const std::byte*> in;
  for (const auto& s : sources) in.push_back(s.data());
  std::vector<bytes> out(parity, bytes(len));
  std::vector<std::uint32_t> idx(parity);
  std::vector<std::byte*> dst;
  for (std::uint32_t p = 0; p < parity; ++p) {
    idx[p] = p;
    dst.push_back(out[p].data());
  }
  c.encode(in, idx, dst, len);
  return out;
}

/// Erases the blocks whose bit is set in `erased` (bit i < n: source i; bit n + p: parity p),
/// decodes from the rest and checks the recovered sources.
void check_pattern(const fec::codec& c, const std::vector<bytes>& sources,
                   const std::vector<bytes>& parity, const std::vector<bool>& erased,
                   std::size_t len) {
  const auto n = static_cast<std::uint32_t>(sources.size());
  std::vector<fec::symbol> received;
  std::vector<std::uint32_t> missing;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (erased[i]) {
      missing.push_back(i);
    } else {
      received.push_back({false, i, sources[i].data()});
    }
  }
  for (std::uint32_t p = 0; p < parity.size(); ++p) {
    if (!erased[n + p]) received.push_back({true, p, parity[p].data()});
  }
  std::vector<bytes> out(missing.size(), bytes(len));
  std::vector<std::byte*> dst;
  for (auto& o : out) dst.push_back(o.data());
  REQUIRE_FALSE(c.decode(n, received, missing, dst, len));
  for (std::size_t i = 0; i < missing.size(); ++i) REQUIRE(out[i] == sources[missing[i]]);
}

}  // namespace

TEST_CASE("fec codec recovers every erasure pattern of up to m blocks for small k", "[unit][fec]") {
  std::mt19937_64 rng(1);
  constexpr std::size_t len = 300;
  constexpr std::uint32_t m = 4;
  const fec::codec c(6, m);
  for (std::uint32_t n = 1; n <= 6; ++n) {  // n < k: the short FEC block at the end of a set
    const auto sources = random_blocks(rng, n, len);
    const auto parity = encode_all(c, sources, m, len);
    const std::uint32_t total = n + m;
    std::uint32_t patterns = 0;
    for (std::uint32_t mask = 0; mask < (1u << total); ++mask) {
      if (static_cast<std::uint32_t>(__builtin_popcount(mask)) > m) continue;
      std::vector<bool> erased(total);
      for (std::uint32_t i = 0; i < total; ++i) erased[i] = (mask >> i) & 1;
      INFO("n " << n << " erased mask " << mask);
      check_pattern(c, sources, parity, erased, len);
      ++patterns;
    }
    REQUIRE(patterns > 0);
  }
}

TEST_CASE("fec codec recovers random erasures for large k", "[unit][fec]") {
  std::mt19937_64 rng(2);
  for (const auto& [k, m] : {std::pair{128u, 127u}, std::pair{200u, 55u}, std::pair{32u, 8u}}) {
    const fec::codec c(k, m);
    for (int round = 0; round < 6; ++round) {
      const std::uint32_t n = round == 0 ? k : 1 + static_cast<std::uint32_t>(rng() % k);
      const std::size_t len = round % 2 ? 1400 : 256 + rng() % 100;
      const auto sources = random_blocks(rng, n, len);
      const auto parity = encode_all(c, sources, m, len);
      // Erase up to m of the n + m blocks, at random.
      std::vector<std::uint32_t> order(n + m);
      for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      const std::uint32_t e =
          std::min<std::uint32_t>(m, static_cast<std::uint32_t>(rng() % (m + 1)));
      std::vector<bool> erased(n + m);
      for (std::uint32_t i = 0; i < e; ++i) erased[order[i]] = true;
      INFO("k " << k << " n " << n << " erased " << e);
      check_pattern(c, sources, parity, erased, len);
    }
  }
}

TEST_CASE("fec parity blocks are the same computed alone or together", "[unit][fec]") {
  std::mt19937_64 rng(3);
  const fec::codec c(16, 16);
  const auto sources = random_blocks(rng, 10, 512);
  const auto all = encode_all(c, sources, 16, 512);
  std::vector<const std::byte*> in;
  for (const auto& s : sources) in.push_back(s.data());
  for (std::uint32_t p : {0u, 7u, 15u}) {
    bytes one(512);
    std::byte* dst = one.data();
    c.encode(in, std::span(&p, 1), std::span(&dst, 1), 512);
    REQUIRE(one == all[p]);
  }
  // Parity is not a copy of a source: it depends on all of them.
  auto changed = sources;
  changed[9][0] ^= std::byte{1};
  REQUIRE(encode_all(c, changed, 16, 512)[0] != all[0]);
}

TEST_CASE("fec parity built source by source equals the parity encoded at once", "[unit][fec]") {
  std::mt19937_64 rng(5);
  const std::size_t len = 1400;
  const fec::codec c(200, 4);
  const std::uint32_t n = GENERATE(1u, 37u, 200u);
  auto sources = random_blocks(rng, n, len);
  // The last source short, as a file's last block is: zero-padded in the FEC block.
  const std::size_t last = GENERATE(std::size_t{1}, std::size_t{63}, std::size_t{64},
                                    std::size_t{700}, std::size_t{1400});
  std::fill(sources.back().begin() + static_cast<std::ptrdiff_t>(last), sources.back().end(),
            std::byte{0});
  const auto all = encode_all(c, sources, 4, len);
  std::vector<std::uint32_t> order(n);
  for (std::uint32_t i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (std::uint32_t p : {0u, 3u}) {
    bytes row(len, std::byte{0});
    for (const auto i : order) {
      const std::size_t size = i + 1 == n ? last : len;
      REQUIRE(c.accumulate(p, i, std::span(sources[i]).first(size), row));
    }
    REQUIRE(row == all[p]);
  }
}

TEST_CASE("fec accumulate refuses what it cannot do and changes nothing", "[unit][fec]") {
  bytes row(128, std::byte{7});
  const bytes data(100, std::byte{1});
  const fec::codec small(8, 2);
  CHECK_FALSE(small.accumulate(2, 0, data, row));  // parity index out of range
  CHECK_FALSE(small.accumulate(0, 8, data, row));  // source out of range
  bytes short_row(32, std::byte{7});
  CHECK_FALSE(small.accumulate(0, 0, bytes(16), short_row));  // below gf_vect_mad's 64 bytes
  CHECK_FALSE(small.accumulate(0, 0, bytes(200), row));       // data longer than the row
  const fec::codec wide(300, 2);                              // GF(2^16)
  CHECK_FALSE(wide.accumulate(0, 0, data, row));
  CHECK(row == bytes(128, std::byte{7}));
  CHECK(short_row == bytes(32, std::byte{7}));
}

TEST_CASE("fec decode refuses symbols that cannot recover the sources", "[unit][fec]") {
  std::mt19937_64 rng(4);
  const fec::codec c(8, 4);
  const auto sources = random_blocks(rng, 8, 256);
  const auto parity = encode_all(c, sources, 4, 256);
  bytes out0(256), out1(256);
  std::vector<std::byte*> dst{out0.data(), out1.data()};
  std::vector<fec::symbol> rx;
  for (std::uint32_t i = 2; i < 8; ++i) rx.push_back({false, i, sources[i].data()});
  const std::vector<std::uint32_t> missing{0, 1};
  // Only one parity block for two missing sources.
  rx.push_back({true, 3, parity[3].data()});
  REQUIRE(c.decode(8, rx, missing, dst, 256) == errc::invalid_field);
  // The same parity block twice does not count twice.
  rx.push_back({true, 3, parity[3].data()});
  REQUIRE(c.decode(8, rx, missing, dst, 256) == errc::invalid_field);
  rx.back() = {true, 1, parity[1].data()};
  REQUIRE_FALSE(c.decode(8, rx, missing, dst, 256));
  REQUIRE(out0 == sources[0]);
  REQUIRE(out1 == sources[1]);
  // Out of range indexes, a missing list that names a present source, n above k.
  auto bad = rx;
  bad.push_back({true, 4, parity[0].data()});
  REQUIRE(c.decode(8, bad, missing, dst, 256) == errc::invalid_field);
  const std::vector<std::uint32_t> wrong{0, 2};
  REQUIRE(c.decode(8, rx, wrong, dst, 256) == errc::invalid_field);
  REQUIRE(c.decode(9, rx, missing, dst, 256) == errc::invalid_field);
  REQUIRE(c.decode(0, rx, missing, dst, 256) == errc::invalid_field);
}

TEST_CASE("fec codec refuses shapes neither field can have", "[unit][fec]") {
  REQUIRE_THROWS_AS(fec::codec(0, 4), std::invalid_argument);
  REQUIRE_THROWS_AS(fec::codec(4, 0), std::invalid_argument);
  REQUIRE_THROWS_AS(fec::codec(fec::max_k + 1, 4), std::invalid_argument);
  REQUIRE_THROWS_AS(fec::codec(4096, fec::max_blocks_gf16 - 4095), std::invalid_argument);
  REQUIRE_NOTHROW(fec::codec(4096, fec::max_blocks_gf16 - 4096));
  REQUIRE(fec::codec(200, 55).field() == fec::field::gf8);
  REQUIRE(fec::codec(200, 56).field() == fec::field::gf16);
  REQUIRE(fec::codec(255, 1).field() == fec::field::gf16);
  // The default parity count keeps every k <= 254 in GF(2^8), as before GF(2^16) existed.
  for (std::uint32_t k = 1; k < fec::max_blocks_gf8; ++k) {
    REQUIRE(fec::field_for(k, fec::default_max_parity(k)) == fec::field::gf8);
  }
  REQUIRE(fec::default_max_parity(255) == 255);
  REQUIRE(fec::valid_shape(fec::max_k, fec::default_max_parity(fec::max_k)));
}

namespace {

/// GF(2^16) by the book, independent of GF-Complete: carry-less multiplication reduced by
/// x^16 + x^12 + x^3 + x + 1 (RFC 5510 section 8.1), inverse as a^(2^16 - 2).
std::uint32_t ref_mul(std::uint32_t a, std::uint32_t b) {
  std::uint32_t p = 0;
  for (int i = 0; i < 16; ++i) {
    if ((b >> i) & 1U) p ^= a << i;
  }
  for (int i = 31; i >= 16; --i) {
    if ((p >> i) & 1U) p ^= 0x1100BU << (i - 16);
  }
  return p;
}

std::uint32_t ref_inv(std::uint32_t a) {
  std::uint32_t r = 1;
  std::uint32_t base = a;
  for (std::uint32_t e = 65534; e > 0; e >>= 1) {
    if (e & 1U) r = ref_mul(r, base);
    base = ref_mul(base, base);
  }
  return r;
}

}  // namespace

TEST_CASE("fec parity over GF(2^16) is the Cauchy code of RFC 5510's field, word by word",
          "[unit][fec]") {
  // Pins the code on the wire: parity p = sum over c of source c / ((k + p) XOR c), symbols as
  // 16-bit little-endian words, computed here without GF-Complete.
  std::mt19937_64 rng(5);
  constexpr std::uint32_t k = 300;
  const fec::codec c(k, 40);
  REQUIRE(c.field() == fec::field::gf16);
  constexpr std::size_t len = 64;
  const auto sources = random_blocks(rng, 17, len);
  std::vector<const std::byte*> in;
  for (const auto& s : sources) in.push_back(s.data());
  for (std::uint32_t p : {0u, 1u, 39u}) {
    bytes got(len);
    std::byte* dst = got.data();
    c.encode(in, std::span(&p, 1), std::span(&dst, 1), len);
    for (std::size_t w = 0; w < len / 2; ++w) {
      std::uint32_t want = 0;
      for (std::uint32_t i = 0; i < sources.size(); ++i) {
        const auto word = static_cast<std::uint32_t>(sources[i][2 * w]) |
                          static_cast<std::uint32_t>(sources[i][2 * w + 1]) << 8;
        want ^= ref_mul(word, ref_inv((k + p) ^ i));
      }
      const auto have =
          static_cast<std::uint32_t>(got[2 * w]) | static_cast<std::uint32_t>(got[2 * w + 1]) << 8;
      INFO("parity " << p << " word " << w);
      REQUIRE(have == want);
    }
  }
}

TEST_CASE("fec codec over GF(2^16) recovers random erasures of large FEC blocks", "[unit][fec]") {
  std::mt19937_64 rng(6);
  for (const auto& [k, m] : {std::pair{300u, 300u}, std::pair{1000u, 60u}, std::pair{200u, 56u}}) {
    const fec::codec c(k, m);
    REQUIRE(c.field() == fec::field::gf16);
    for (int round = 0; round < 3; ++round) {
      const std::uint32_t n = round == 0 ? k : 1 + static_cast<std::uint32_t>(rng() % k);
      // 1400 (the default block), one that is not a multiple of 16, and a short one.
      const std::size_t len = round == 0 ? 1400 : round == 1 ? 334 : 20;
      const auto sources = random_blocks(rng, n, len);
      const std::uint32_t used_parity = std::min<std::uint32_t>(m, 48);
      const auto parity = encode_all(c, sources, used_parity, len);
      std::vector<std::uint32_t> order(n + used_parity);
      for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      const std::uint32_t e = std::min<std::uint32_t>(used_parity, 1 + rng() % used_parity);
      std::vector<bool> erased(n + used_parity);
      for (std::uint32_t i = 0; i < e; ++i) erased[order[i]] = true;
      INFO("k " << k << " n " << n << " len " << len << " erased " << e);
      check_pattern(c, sources, parity, erased, len);
    }
  }
}

TEST_CASE("fec codec over GF(2^16) takes unaligned blocks and high parity indexes", "[unit][fec]") {
  std::mt19937_64 rng(7);
  constexpr std::uint32_t k = 400;
  constexpr std::uint32_t m = 2000;
  const fec::codec c(k, m);
  constexpr std::size_t len = 1398;
  // Sources at odd addresses, as payloads inside received datagrams are.
  constexpr std::uint32_t n = 50;
  std::vector<bytes> storage(n, bytes(len + 1));
  std::vector<const std::byte*> in;
  for (auto& b : storage) {
    for (auto& x : b) x = static_cast<std::byte>(rng());
    in.push_back(b.data() + 1);
  }
  const std::vector<std::uint32_t> idx{1999, 7, 1234};
  std::vector<bytes> par(idx.size(), bytes(len + 1));
  std::vector<std::byte*> dst;
  for (auto& p : par) dst.push_back(p.data() + 1);
  c.encode(in, idx, dst, len);
  // Lose sources 0, 10 and 49; recover from the three parity blocks (also unaligned).
  std::vector<fec::symbol> rx;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (i != 0 && i != 10 && i != 49) rx.push_back({false, i, in[i]});
  }
  for (std::size_t j = 0; j < idx.size(); ++j) rx.push_back({true, idx[j], dst[j]});
  const std::vector<std::uint32_t> missing{0, 10, 49};
  std::vector<bytes> out(3, bytes(len + 1));
  std::vector<std::byte*> odst;
  for (auto& o : out) odst.push_back(o.data() + 1);
  REQUIRE_FALSE(c.decode(n, rx, missing, odst, len));
  for (std::size_t j = 0; j < missing.size(); ++j) {
    REQUIRE(std::memcmp(odst[j], in[missing[j]], len) == 0);
  }
  // An odd length is refused (a parity word would need the pad byte), and so is a parity index
  // past max_parity.
  REQUIRE(c.decode(n, rx, missing, odst, len - 1) == errc::invalid_field);
  rx.back().index = m;
  REQUIRE(c.decode(n, rx, missing, odst, len) == errc::invalid_field);
}
