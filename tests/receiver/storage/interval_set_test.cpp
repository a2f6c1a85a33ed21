#include "receiver/storage/interval_set.hpp"

#include <catch2/catch.hpp>

using mcdist::receiver::interval_set;

TEST_CASE("interval_set merges, trims and finds", "[interval_set]") {
  interval_set s;
  s.insert(10, 20);
  s.insert(30, 40);
  s.insert(20, 30);  // touches both: one range
  CHECK(s.size() == 1);
  CHECK(s.first() == interval_set::range{10, 40});
  s.insert(50, 60);
  s.insert(45, 55);
  CHECK(s.size() == 2);
  CHECK(s.contains(46, 60));
  CHECK_FALSE(s.contains(39, 46));
  s.erase_below(15);
  CHECK(s.first() == interval_set::range{15, 40});
  s.erase_below(42);
  CHECK(s.first() == interval_set::range{45, 60});
  s.insert(0, 100);
  CHECK(s.size() == 1);
  s.insert(5, 5);
  CHECK(s.size() == 1);
  s.erase_below(100);
  CHECK(s.empty());
}

TEST_CASE("interval_set keeps one entry per gap-separated run", "[interval_set]") {
  interval_set s;
  // Blocks of 1400 arriving shuffled with every 10th missing: one range per gap.
  for (int round = 0; round < 2; ++round)
    for (std::uint64_t b = 0; b < 1000; ++b)
      if (b % 10 != 0) s.insert(b * 1400, (b + 1) * 1400);
  CHECK(s.size() == 100);
  for (std::uint64_t b = 0; b < 1000; b += 10) s.insert(b * 1400, (b + 1) * 1400);
  CHECK(s.size() == 1);
  CHECK(s.first() == interval_set::range{0, 1'400'000});
}
