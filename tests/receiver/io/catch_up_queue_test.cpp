#include "receiver/io/catch_up_queue.hpp"

#include <catch2/catch.hpp>

#include <limits>
#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

using ranges = std::vector<wire::seq_span>;
using offer = catch_up_queue::offer;
const catch_up_queue::clock_time t0{std::chrono::hours(1)};
const auto every_channel = [](std::size_t) { return true; };

/// The picks one offer_due makes when the client takes what `answer` says.
struct client {
  std::vector<std::pair<std::size_t, std::uint64_t>> got;
  std::function<offer(std::size_t)> answer = [](std::size_t) { return offer::taken; };
  bool waiting = false;
  void run(catch_up_queue& q, catch_up_queue::clock_time now,
           const std::function<bool(std::size_t)>& eligible = every_channel) {
    got.clear();
    waiting = q.offer_due(now, eligible, [&](const catch_up_queue::pick& p) {
      got.emplace_back(p.index, p.seq);
      return answer(got.size());
    });
  }
};

}  // namespace

TEST_CASE("missed numbers are offered oldest first, once, and forgotten when caught up",
          "[unit][receiver][catch_up]") {
  catch_up_queue q;
  crypto::key32 hub{};
  hub[0] = 7;
  q.note_missing(2, "obs", "key:hub", hub, ranges{{4, 5}, {8, 8}}, t0);
  CHECK(q.knows(2));
  CHECK(q.pending() == 3);
  client c;
  std::vector<catch_up_queue::pick> picks;
  CHECK(q.offer_due(t0, every_channel, [&](const catch_up_queue::pick& p) {
    picks.push_back(p);
    return offer::taken;
  }));
  REQUIRE(picks.size() == 3);
  CHECK(picks[0].seq == 4);
  CHECK(picks[1].seq == 5);
  CHECK(picks[2].seq == 8);
  CHECK(picks[0].index == 2);
  CHECK(picks[0].channel == "obs");
  CHECK(picks[0].signer == hub);
  // In flight: not offered again, and nothing waits.
  c.run(q, t0 + 1h);
  CHECK(c.got.empty());
  CHECK_FALSE(c.waiting);
  const auto s = q.succeeded(2, 5);
  REQUIRE(s);
  CHECK(s->channel == "obs");
  CHECK(s->source == "key:hub");
  CHECK(q.pending() == 2);
  CHECK(q.numbers_done() == 1);
  // A channel beyond those noted: nothing to mark.
  CHECK_FALSE(q.knows(3));
  CHECK_FALSE(q.succeeded(3, 5));
  CHECK_FALSE(q.failed(3, 5, t0));
  CHECK(q.attempts_failed() == 0);
}

TEST_CASE("a failed number backs off from 2 s, doubling to 5 minutes",
          "[unit][receiver][catch_up]") {
  catch_up_queue q;
  q.note_missing(0, "obs", "name:hub", std::nullopt, ranges{{10, 10}}, t0);
  client c;
  c.run(q, t0);
  REQUIRE(c.got.size() == 1);
  auto now = t0;
  std::vector<std::int64_t> waits;
  for (int i = 0; i < 10; ++i) {
    const auto b = q.failed(0, 10, now);
    REQUIRE(b);
    waits.push_back(b->count());
    CHECK_FALSE(q.in_flight(0, 10));
    // Not due a moment before its back-off ends, but still waiting.
    c.run(q, now + *b - 1ms);
    CHECK(c.got.empty());
    CHECK(c.waiting);
    now += *b;
    c.run(q, now);
    REQUIRE(c.got.size() == 1);
    CHECK(q.in_flight(0, 10));
  }
  CHECK(waits == std::vector<std::int64_t>{2, 4, 8, 16, 32, 64, 128, 256, 300, 300});
  CHECK(q.attempts_failed() == 10);
  // A heartbeat naming it again keeps its back-off; one no longer naming it forgets it
  // (unless in flight).
  q.failed(0, 10, now);
  q.note_missing(0, "obs", "name:hub", std::nullopt, ranges{{10, 10}}, now);
  c.run(q, now);
  CHECK(c.got.empty());
  q.note_missing(0, "obs", "name:hub", std::nullopt, ranges{}, now);
  CHECK(q.pending() == 0);
  // The outcome of a number forgotten meanwhile is counted but backs nothing off.
  CHECK_FALSE(q.failed(0, 10, now));
  CHECK(q.attempts_failed() == 12);
}

TEST_CASE("a busy client leaves numbers due; a full one ends the channel's turn",
          "[unit][receiver][catch_up]") {
  catch_up_queue q;
  q.note_missing(0, "a", "name:hub", std::nullopt, ranges{{1, 3}}, t0);
  q.note_missing(1, "b", "name:hub", std::nullopt, ranges{{7, 8}}, t0);
  client c;
  // Busy: every number is offered and stays due.
  c.answer = [](std::size_t) { return offer::busy; };
  c.run(q, t0);
  CHECK(c.got.size() == 5);
  CHECK(c.waiting);
  // Full at the second offer: channel 0's third number is not offered, channel 1's are.
  c.answer = [](std::size_t n) { return n == 2 ? offer::full : offer::taken; };
  c.run(q, t0);
  CHECK(c.got ==
        std::vector<std::pair<std::size_t, std::uint64_t>>{{0, 1}, {0, 2}, {1, 7}, {1, 8}});
  CHECK(q.in_flight(0, 1));
  CHECK_FALSE(q.in_flight(0, 2));
  CHECK(q.in_flight(1, 8));
  // A channel not eligible (retired, no catch_up_url) is skipped and does not count as waiting.
  c.answer = [](std::size_t) { return offer::taken; };
  c.run(q, t0, [](std::size_t i) { return i == 1; });
  CHECK(c.got.empty());
  CHECK_FALSE(c.waiting);
  c.run(q, t0);
  CHECK(c.got == std::vector<std::pair<std::size_t, std::uint64_t>>{{0, 2}, {0, 3}});
}

TEST_CASE("another stream replaces the numbers not in flight; the table is bounded",
          "[unit][receiver][catch_up]") {
  catch_up_queue q;
  q.note_missing(0, "obs", "key:old", std::nullopt, ranges{{1, 2}}, t0);
  client c;
  c.answer = [](std::size_t n) { return n == 1 ? offer::taken : offer::full; };
  c.run(q, t0);
  REQUIRE(q.in_flight(0, 1));
  // The hub's new key: number 2 of the old stream goes, the one in flight stays.
  q.note_missing(0, "obs", "key:new", std::nullopt, ranges{{5, 5}}, t0);
  CHECK(q.pending(0) == 2);
  CHECK(q.in_flight(0, 1));
  const auto s = q.succeeded(0, 1);
  REQUIRE(s);
  CHECK(s->source == "key:new");
  // A hostile heartbeat naming every number: at most the window's worth is kept.
  constexpr auto top = std::numeric_limits<std::uint64_t>::max();
  q.note_missing(0, "obs", "key:new", std::nullopt, ranges{{0, top}}, t0);
  CHECK(q.pending(0) == catch_up_queue::max_numbers_per_channel);
  q.note_missing(0, "obs", "key:new", std::nullopt, ranges{{top - 1, top}}, t0);
  CHECK(q.pending(0) == 2);
}
