#include "sender/core/feedback_plan.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::sender;
using namespace std::chrono_literals;

TEST_CASE("small groups keep the short uniform NAK spread", "[unit][sender]") {
  // Two receivers (the EUMETSAT study's setting) at 700 ms: 40 us, as before suppression.
  REQUIRE(nak_window(2, 700ms) == 40us);
  REQUIRE(nak_window(suppression_threshold, 20ms) == nak_spread(suppression_threshold, 20ms));
  REQUIRE(nak_window(0, 20ms) == duration::zero());
}

TEST_CASE("above the threshold the NAK window grows with ln(group size) x GRTT", "[unit][sender]") {
  // lambda / 2 x GRTT: 3.95 GRTT at 1,000 (NORM's backoff factor 4), 5.1 at 10,000.
  REQUIRE(to_seconds(nak_window(1000, 100ms)) == Approx(0.395).epsilon(0.01));
  REQUIRE(to_seconds(nak_window(10000, 100ms)) == Approx(0.5105).epsilon(0.01));
  REQUIRE(nak_window(5, 100ms) > nak_spread(5, 100ms));
  // Never below the spread, never above the cap.
  REQUIRE(nak_window(1000, 1ms) >= nak_spread(1000, 1ms));
  REQUIRE(nak_window(1000000, 5s) == max_nak_window);
}

TEST_CASE("a status request asks a slice of a large group, but everyone often enough",
          "[unit][sender]") {
  REQUIRE(status_slices(10, 50ms, 10s) == 1);
  REQUIRE(status_slices(status_answers_per_request, 50ms, 10s) == 1);
  REQUIRE(status_slices(10000, 50ms, 10s) == 40);  // 250 answers a request
  // A long status interval: every receiver still asked 4 times per timeout.
  REQUIRE(status_slices(10000, 1s, 10s) == 2);
  REQUIRE(status_slices(10000, 5s, 10s) == 1);
  REQUIRE(status_slices(0, 50ms, 10s) == 1);
}

TEST_CASE(
    "the window shrinks while NAKs show losses are not shared, and is full again as soon "
    "as they are",
    "[unit][sender]") {
  window_control w;
  REQUIRE(w.scale() == 1.0);
  w.on_nak(10, 10);
  w.update();  // too few blocks to judge
  REQUIRE(w.scale() == 1.0);
  w.on_nak(30, 20);  // 40 named for 30 new: 1.33 per block, below 2
  w.update();
  REQUIRE(w.scale() == 0.5);
  for (int i = 0; i < 20; ++i) {
    w.on_nak(20, 20);
    w.update();
  }
  REQUIRE(w.scale() == window_control::min_scale);
  // 3.95 GRTT / 64 is below the 20 ms spread of 1,000 receivers: the spread takes over.
  REQUIRE(nak_window(1000, 100ms, w.scale()) == nak_spread(1000, 100ms));
  REQUIRE(to_seconds(nak_window(1000, 1s, 0.5)) == Approx(3.95 / 2).epsilon(0.01));
  w.on_nak(1000, 20);  // a fade: every receiver names the same blocks
  w.update();
  REQUIRE(w.scale() == 1.0);
}
