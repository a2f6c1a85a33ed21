#include "receiver/core/parity_repair.hpp"

#include "tests/receiver/core/core_testing.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;
using mcdist::receiver::testing::receiving_files;

namespace {

constexpr std::uint32_t block = 256;
const session_id sid{9};

}  // namespace

TEST_CASE("a FEC shape the codec cannot have means no parity", "[unit][receiver][parity_repair]") {
  CHECK(parity_repair(4, 4, 1, block).k() == 4);
  CHECK(parity_repair().k() == 0);
  CHECK(parity_repair(0, 4, 1, block).k() == 0);
  CHECK(parity_repair(4, 4, 0, block).k() == 0);  // depth below 1
  // GF(2^16) (k above 254) codes whole 16-bit words: an odd block size has no parity.
  CHECK(parity_repair(300, 30, 1, 1401).k() == 0);
  CHECK(parity_repair(300, 30, 1, 1400).k() == 300);
}

TEST_CASE("the tracker is built from the complete manifest with what is already in",
          "[unit][receiver][parity_repair]") {
  // Two files of 8 blocks, k = 4, depth 1: FEC blocks 0-1 of file 0, 2-3 of file 1.
  auto files = receiving_files({8, 8}, {{0, 1}, {0, 2}}, block);
  files[1].state = file_rx::state_t::held;
  files[1].received = block_map();  // held: whole, without a map
  memory_budget budget(1 << 20, 1 << 20);
  parity_repair p(4, 4, 1, block);
  REQUIRE(p.build(files, block, true, budget, sid));
  REQUIRE(p.tracker());
  CHECK(p.tracker()->layout().fec_blocks() == 4);
  CHECK(p.tracker()->sources_held(0) == 2);
  CHECK(p.tracker()->sources_held(1) == 4);
  CHECK(p.tracker()->sources_held(3) == 4);
  CHECK(budget.used() > 0);
  CHECK(p.build(files, block, true, budget, sid));  // built already

  // Storage that cannot decode, or a budget without room: no parity for the session.
  parity_repair no_decode(4, 4, 1, block);
  CHECK_FALSE(no_decode.build(files, block, false, budget, sid));
  CHECK(no_decode.k() == 0);
  memory_budget tiny(4, 4);
  parity_repair no_room(4, 4, 1, block);
  CHECK_FALSE(no_room.build(files, block, true, tiny, sid));
  CHECK(no_room.k() == 0);
  CHECK_FALSE(no_room.tracker());
}

TEST_CASE("a decodable FEC block's request says what storage can read and what it writes",
          "[unit][receiver][parity_repair]") {
  // One file of 8 blocks, k = 4: FEC block 0 lacks blocks 1 and 2, FEC block 1 blocks 5, 6.
  auto files = receiving_files({8}, {{0, 1}, {0, 2}, {0, 5}, {0, 6}}, block);
  memory_budget budget(1 << 20, 1 << 20);
  parity_repair p(4, 4, 1, block);
  REQUIRE(p.build(files, block, true, budget, sid));
  auto& t = *p.tracker();
  // FEC block 1: one parity block, then block 5 arrives: decodable.
  REQUIRE(t.add_parity(1, 0));
  files[0].received.set(5);
  std::uint32_t fb = 99;
  CHECK(p.source_added(0, 5, fb));
  CHECK(fb == 1);
  REQUIRE(t.add_parity(0, 0));
  CHECK_FALSE(t.decodable(0));
  REQUIRE(t.add_parity(0, 3));
  REQUIRE(t.decodable(0));
  CHECK_FALSE(p.decoding(0));

  const auto req = p.request(0, files, 7, block);
  CHECK(p.decoding(0));
  CHECK(req.fec_block == 0);
  CHECK(req.channel == 7);
  CHECK(req.k == 4);
  CHECK(req.max_parity == 4);
  CHECK(req.block_size == block);
  CHECK(req.parity == std::vector<std::uint32_t>{0, 3});
  REQUIRE(req.sources.size() == 4);
  CHECK(req.sources[0].available);
  CHECK(req.sources[0].path == "f0");
  CHECK_FALSE(req.sources[1].available);
  CHECK(req.sources[1].wanted);
  CHECK(req.sources[1].offset == block);
  CHECK(req.sources[1].length == block);
  CHECK(req.sources[2].wanted);
  CHECK(req.sources[3].available);

  const auto got = p.decoded(0, files);
  REQUIRE(got.size() == 2);
  CHECK(got[0].file == 0);
  CHECK(got[0].block == 1);
  CHECK(got[1].block == 2);
  CHECK_FALSE(p.decoding(0));
  CHECK(t.sources_held(0) == 4);
  CHECK(p.stats().fec_blocks == 1);
  CHECK(p.stats().blocks == 2);
}

TEST_CASE("a failed decode or refused parity leaves the FEC block to explicit NAKs",
          "[unit][receiver][parity_repair]") {
  auto files = receiving_files({8}, {{0, 1}, {0, 6}}, block);
  memory_budget budget(1 << 20, 1 << 20);
  parity_repair p(4, 4, 1, block);
  REQUIRE(p.build(files, block, true, budget, sid));
  auto& t = *p.tracker();
  REQUIRE(t.add_parity(0, 1));
  (void)p.request(0, files, 0, block);
  p.decode_failed(0);
  CHECK(t.explicit_only(0));
  CHECK_FALSE(p.decoding(0));
  CHECK(p.stats().failures == 1);
  REQUIRE(t.add_parity(1, 2));
  p.parity_refused(1);
  CHECK(t.explicit_only(1));
  p.parity_kept();
  CHECK(p.stats().refused == 1);
  CHECK(p.stats().kept == 1);
}
