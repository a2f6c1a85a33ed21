#include "common/block_map.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <set>

using namespace mcdist;

TEST_CASE("block_map counts, finds and restores bits", "[unit][block_map]") {
  for (std::uint32_t n : {0u, 1u, 63u, 64u, 65u, 1000u}) {
    INFO("size " << n);
    block_map m(n);
    REQUIRE(m.count() == 0);
    REQUIRE(m.find_set(0) == n);
    REQUIRE(m.find_clear(0) == (n ? 0 : n));
    m.set_all();
    REQUIRE(m.count() == n);
    REQUIRE(m.all());
    REQUIRE(m.find_clear(0) == n);
    m.clear_all();
    REQUIRE(m.none());
  }
  std::mt19937 rng(3);
  block_map m(777);
  std::set<std::uint32_t> ref;
  for (int i = 0; i < 500; ++i) {
    const auto b = rng() % 777;
    REQUIRE(m.set(b) == ref.insert(b).second);
  }
  REQUIRE(m.count() == ref.size());
  // find_set walks exactly the reference set.
  std::uint32_t i = m.find_set(0);
  for (auto b : ref) {
    REQUIRE(i == b);
    i = m.find_set(i + 1);
  }
  REQUIRE(i == 777);
  // find_clear walks the complement.
  std::uint32_t c = m.find_clear(0);
  for (std::uint32_t b = 0; b < 777; ++b) {
    if (ref.count(b)) continue;
    REQUIRE(c == b);
    c = m.find_clear(c + 1);
  }
  block_map copy(777);
  REQUIRE(copy.assign_words(m.words()));
  REQUIRE(copy.count() == m.count());
  block_map wrong(778 + 64);
  REQUIRE_FALSE(wrong.assign_words(m.words()));
  m.set_range(100, 300);
  for (std::uint32_t b = 100; b < 400; ++b) REQUIRE(m.test(b));
  REQUIRE(m.reset(150));
  REQUIRE_FALSE(m.reset(150));
}
