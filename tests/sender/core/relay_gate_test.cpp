#include "sender/core/relay_gate.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <utility>

using mcdist::sender::gate_answer;
using mcdist::sender::relay_gate;

TEST_CASE(
    "the relay gate follows the upstream sweep: held goes, passed over is skipped, ahead waits",
    "[unit][sender]") {
  std::set<std::pair<std::uint32_t, std::uint32_t>> held;
  relay_gate g([&held](std::uint32_t f, std::uint32_t b) { return held.count({f, b}) > 0; });
  REQUIRE(g.answer(0, 0) == gate_answer::wait);
  held = {{0, 0}, {0, 2}};
  g.on_upstream_block(0, 2);
  REQUIRE(g.answer(0, 0) == gate_answer::send);
  REQUIRE(g.answer(0, 1) == gate_answer::skip);  // the upstream sweep passed it: lost
  REQUIRE(g.answer(0, 2) == gate_answer::send);
  REQUIRE(g.answer(0, 3) == gate_answer::wait);
  REQUIRE(g.answer(1, 0) == gate_answer::wait);
  // A repair of an earlier block does not move the sweep back.
  g.on_upstream_block(0, 0);
  REQUIRE(g.answer(0, 1) == gate_answer::skip);
  // A pass-1 marker names the block the upstream sends next: those before it were sent.
  g.on_upstream_marker(1, 1, 4, false);
  REQUIRE(g.answer(0, 9) == gate_answer::skip);
  REQUIRE(g.answer(1, 3) == gate_answer::skip);
  REQUIRE(g.answer(1, 4) == gate_answer::wait);
  // Markers before pass 1 (pass 0) say nothing of the sweep.
  g.on_upstream_marker(0, 5, 0, false);
  REQUIRE(g.answer(1, 4) == gate_answer::wait);
  REQUIRE_FALSE(g.upstream_pass_over_seen());
  SECTION("a pass-end marker ends the sweep") { g.on_upstream_marker(1, 2, 0, true); }
  SECTION("a marker of a later pass ends it") { g.on_upstream_marker(2, 0, 0, false); }
  SECTION("so does the upstream session's end") { g.upstream_pass_over(); }
  REQUIRE(g.upstream_pass_over_seen());
  REQUIRE(g.answer(1, 4) == gate_answer::skip);
  REQUIRE(g.answer(7, 0) == gate_answer::skip);
  REQUIRE(g.answer(0, 2) == gate_answer::send);
}

TEST_CASE("the relay gate lets parity of a FEC block be made only from all its sources",
          "[unit][sender]") {
  // Two files of 3 and 2 blocks in FEC blocks of 2 sources, depth 1.
  const mcdist::fec::layout l({3, 2}, 2, 1);
  std::set<std::pair<std::uint32_t, std::uint32_t>> held;
  relay_gate g([&held](std::uint32_t f, std::uint32_t b) { return held.count({f, b}) > 0; });
  for (std::uint32_t fb = 0; fb < l.fec_blocks(); ++fb) REQUIRE_FALSE(g.parity_ready(l, fb));
  for (std::uint32_t fb = 0; fb < l.fec_blocks(); ++fb) {
    for (std::uint32_t i = 0; i < l.sources(fb); ++i) {
      const auto s = l.source(fb, i);
      held.insert({s.file, s.block});
    }
    REQUIRE(g.parity_ready(l, fb));
    if (fb + 1 < l.fec_blocks()) REQUIRE_FALSE(g.parity_ready(l, fb + 1));
  }
}
