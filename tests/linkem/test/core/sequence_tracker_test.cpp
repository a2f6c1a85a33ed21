#include "tests/linkem/core/sequence_tracker.hpp"

#include <catch2/catch.hpp>

using namespace mcdist::linkem;

TEST_CASE("complete in-order stream", "[sequence]") {
  sequence_tracker t;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    t.record(i);
  }
  const auto s = t.summarize(1000);
  CHECK(s.unique == 1000);
  CHECK(s.lost == 0);
  CHECK(s.loss_bursts == 0);
  CHECK(s.reordered == 0);
  CHECK(s.duplicates == 0);
}

TEST_CASE("losses group into bursts, including at the tail", "[sequence]") {
  sequence_tracker t;
  // Missing: 3; 10,11,12; 98,99 (tail).
  for (std::uint64_t i = 0; i < 98; ++i) {
    if (i != 3 && !(i >= 10 && i <= 12)) {
      t.record(i);
    }
  }
  const auto s = t.summarize(100);
  CHECK(s.lost == 6);
  CHECK(s.loss_bursts == 3);
  CHECK(s.max_burst == 3);
  CHECK(s.mean_burst == Approx(2.0));
}

TEST_CASE("duplicates and reordering are counted separately", "[sequence]") {
  sequence_tracker t;
  for (const std::uint64_t seq : {0, 1, 3, 2, 3, 4, 4, 200}) {
    t.record(seq);
  }
  const auto s = t.summarize(5);
  CHECK(s.received == 8);
  CHECK(s.duplicates == 2);
  CHECK(s.reordered == 1);
  CHECK(s.unique == 5);
  CHECK(s.out_of_range == 1);  // 200 >= total
}

TEST_CASE("absurd sequence numbers are not tracked", "[sequence]") {
  sequence_tracker t;
  t.record(k_max_tracked_sequence + 5);
  CHECK(t.summarize(0).out_of_range == 1);
}
