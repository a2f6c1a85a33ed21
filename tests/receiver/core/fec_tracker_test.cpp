#include "receiver/core/fec_tracker.hpp"

#include "common/fec/fec.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::receiver;

TEST_CASE("fec tracker counts what a receiver lacks and when it can decode", "[unit][fec]") {
  // One file of 10 blocks, k = 4, depth 1: FEC blocks of 4, 4 and 2 sources.
  fec_tracker t(fec::layout({10}, 4, 1), 8);
  REQUIRE(t.layout().fec_blocks() == 3);
  for (int i = 0; i < 2; ++i) t.add_source(0);
  // Two of four received; the sender had sent three: one lacking (the fourth may still come).
  REQUIRE(t.lack(0, 3) == 1);
  REQUIRE(t.lack(0, 4) == 2);
  REQUIRE_FALSE(t.decodable(0));
  REQUIRE(t.add_parity(0, 5));
  REQUIRE_FALSE(t.add_parity(0, 5));  // duplicate
  REQUIRE_FALSE(t.add_parity(0, 8));  // out of range
  REQUIRE(t.lack(0, 4) == 1);
  REQUIRE_FALSE(t.decodable(0));
  REQUIRE(t.add_parity(0, 1));
  REQUIRE(t.lack(0, 4) == 0);
  REQUIRE(t.decodable(0));
  REQUIRE(t.parity_indexes(0) == std::vector<std::uint32_t>{1, 5});
  t.start_decode(0);
  REQUIRE_FALSE(t.decodable(0));
  REQUIRE_FALSE(t.add_parity(0, 2));  // no use any more
  t.decoded(0);
  REQUIRE(t.sources_held(0) == 4);
  REQUIRE(t.parity_held(0) == 0);
  REQUIRE_FALSE(t.add_parity(0, 3));  // complete
}

TEST_CASE("fec tracker keeps parity indexes of GF(2^16) FEC blocks past 255", "[unit][fec]") {
  // One FEC block of 1,000 sources with 1,000 parity indexes (GF(2^16)).
  fec_tracker t(fec::layout({1000}, 1000, 1), 1000);
  for (std::uint32_t i = 0; i < 990; ++i) t.add_source(0);
  REQUIRE(t.lack(0, 1000) == 10);
  REQUIRE(t.by_count(0, 10));
  for (std::uint32_t p : {999u, 300u, 256u, 0u, 700u, 512u, 4u, 800u, 901u}) {
    REQUIRE(t.add_parity(0, p));
  }
  REQUIRE_FALSE(t.add_parity(0, 300));   // duplicate
  REQUIRE_FALSE(t.add_parity(0, 1000));  // out of range
  REQUIRE(t.lack(0, 1000) == 1);
  REQUIRE_FALSE(t.decodable(0));
  REQUIRE(t.add_parity(0, 257));
  REQUIRE(t.decodable(0));
  REQUIRE(t.parity_indexes(0) ==
          std::vector<std::uint32_t>{0, 4, 256, 257, 300, 512, 700, 800, 901, 999});
}

TEST_CASE("fec tracker NAKs block by block a FEC block too costly to decode", "[unit][fec]") {
  // 4,096 sources: more than fec::max_decode_work / 4096 = 256 missing is NAKed by name.
  constexpr std::uint32_t bound = fec::max_decode_work / 4096;
  fec_tracker t(fec::layout({4096}, 4096, 1), 4096);
  for (std::uint32_t i = 0; i < 4096 - bound - 1; ++i) t.add_source(0);
  REQUIRE_FALSE(t.by_count(0, bound + 1));
  for (std::uint32_t p = 0; p <= bound; ++p) REQUIRE(t.add_parity(0, p));
  REQUIRE_FALSE(t.decodable(0));  // enough parity, but the decode would cost too much
  t.add_source(0);                // `bound` missing: within it
  REQUIRE(t.by_count(0, 1));
  REQUIRE(t.decodable(0));
}

TEST_CASE("fec tracker reports by count only while parity can make the FEC block whole",
          "[unit][fec]") {
  fec_tracker t(fec::layout({40}, 20, 1), 4);
  REQUIRE(t.by_count(0, 4));
  REQUIRE_FALSE(t.by_count(0, 5));  // more than the parity indexes there are
  REQUIRE(t.add_parity(0, 0));
  REQUIRE_FALSE(t.by_count(0, 4));  // three indexes left
  REQUIRE(t.by_count(0, 3));
  t.set_explicit_only(0);
  REQUIRE_FALSE(t.by_count(0, 1));
  REQUIRE_FALSE(t.add_parity(0, 1));
  REQUIRE(t.by_count(1, 1));
}

TEST_CASE("fec tracker keeps parity state for a bounded number of FEC blocks", "[unit][fec]") {
  const std::uint32_t n = fec_tracker::max_parity_states + 10;
  fec_tracker t(fec::layout(std::vector<std::uint32_t>(1, n * 2), 2, 1), 2);
  for (std::uint32_t fb = 0; fb < fec_tracker::max_parity_states; ++fb)
    REQUIRE(t.add_parity(fb, 0));
  REQUIRE_FALSE(t.add_parity(fec_tracker::max_parity_states, 0));  // full: dropped
  REQUIRE(t.add_parity(0, 1));  // a FEC block already tracked still takes parity
  t.decoded(0);
  REQUIRE(t.add_parity(fec_tracker::max_parity_states, 0));  // room again
}
