#include "sender/core/parity_planner.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace mcdist::sender;

namespace {

/// Sends everything scheduled, sequence numbers from `seq` on; returns (fec block, index) in
/// send order.
std::vector<parity_pick> drain(parity_planner& p, std::uint32_t& seq) {
  std::vector<parity_pick> out;
  while (const auto pick = p.peek()) {
    p.take(*pick, ++seq);
    out.push_back(*pick);
  }
  return out;
}

}  // namespace

TEST_CASE("parity planner sends the largest lack, not the sum", "[unit][parity_planner]") {
  parity_planner p(10, 50);
  REQUIRE(p.nak(5, 2, 0) == 2);
  REQUIRE(p.nak(5, 3, 0) == 1);  // raised to 3
  REQUIRE(p.nak(5, 1, 0) == 0);  // covered
  REQUIRE(p.scheduled() == 3);
  std::uint32_t seq = 100;
  const auto sent = drain(p, seq);
  REQUIRE(sent.size() == 3);
  for (std::uint32_t i = 0; i < 3; ++i) {
    REQUIRE(sent[i].fec_block == 5);
    REQUIRE(sent[i].index == i);
  }
  REQUIRE(p.sent() == 3);
  REQUIRE(p.scheduled() == 0);
}

TEST_CASE("parity planner counts parity still on its way to the receiver",
          "[unit][parity_planner]") {
  parity_planner p(4, 50);
  p.nak(1, 3, 0);
  std::uint32_t seq = 10;
  drain(p, seq);  // sent with 11, 12, 13
  // A receiver that had seen up to 10 has all three on their way: nothing new.
  REQUIRE(p.nak(1, 3, 10) == 0);
  // One that had seen up to 12 still has 13 coming: lacks 3, one in flight, two new.
  REQUIRE(p.nak(1, 3, 12) == 2);
  const auto sent = drain(p, seq);
  REQUIRE(sent.size() == 2);
  // New parity indexes, never sent before: they repair different losses at different sites.
  REQUIRE(sent[0].index == 3);
  REQUIRE(sent[1].index == 4);
  REQUIRE(p.sent_of(1) == 5);
}

TEST_CASE("parity planner serves FEC blocks round robin", "[unit][parity_planner]") {
  parity_planner p(4, 50);
  p.nak(1, 3, 0);
  p.add(2, 2);
  std::uint32_t seq = 0;
  const auto sent = drain(p, seq);
  REQUIRE(sent.size() == 5);
  const std::vector<std::uint32_t> order{1, 2, 1, 2, 1};
  for (std::size_t i = 0; i < order.size(); ++i) REQUIRE(sent[i].fec_block == order[i]);
}

TEST_CASE("parity planner starts the indexes over past max_parity", "[unit][parity_planner]") {
  parity_planner p(1, 3);
  p.add(0, 5);
  std::uint32_t seq = 0;
  const auto sent = drain(p, seq);
  const std::vector<std::uint32_t> indexes{0, 1, 2, 0, 1};
  REQUIRE(sent.size() == indexes.size());
  for (std::size_t i = 0; i < indexes.size(); ++i) REQUIRE(sent[i].index == indexes[i]);
}

TEST_CASE("parity planner ignores FEC blocks out of range and empty lacks",
          "[unit][parity_planner]") {
  parity_planner p(2, 10);
  REQUIRE(p.nak(2, 5, 0) == 0);
  REQUIRE(p.nak(0, 0, 0) == 0);
  p.add(7, 3);
  REQUIRE(p.scheduled() == 0);
  REQUIRE_FALSE(p.peek().has_value());
}

TEST_CASE("parity planner defers a FEC block behind the others, its parity still scheduled",
          "[unit][parity_planner]") {
  parity_planner p(4, 50);
  p.add(0, 1);
  p.add(3, 2);
  REQUIRE(p.queued() == 2);
  REQUIRE(p.peek()->fec_block == 0);
  p.defer();
  REQUIRE(p.peek()->fec_block == 3);
  REQUIRE(p.scheduled() == 3);
  std::uint32_t seq = 0;
  const auto sent = drain(p, seq);
  const std::vector<std::uint32_t> order{3, 0, 3};
  REQUIRE(sent.size() == order.size());
  for (std::size_t i = 0; i < order.size(); ++i) REQUIRE(sent[i].fec_block == order[i]);
  p.add(1, 1);
  p.defer();  // alone in the queue: nothing to go behind
  REQUIRE(p.peek()->fec_block == 1);
}
