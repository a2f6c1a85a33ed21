#include "common/fec.hpp"

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

TEST_CASE("fec codec refuses shapes ISA-L's Cauchy matrix cannot have", "[unit][fec]") {
  REQUIRE_THROWS_AS(fec::codec(0, 4), std::invalid_argument);
  REQUIRE_THROWS_AS(fec::codec(4, 0), std::invalid_argument);
  REQUIRE_THROWS_AS(fec::codec(200, 56), std::invalid_argument);
  REQUIRE_NOTHROW(fec::codec(200, 55));
}
