#include "sender/core/repair_log.hpp"

#include <catch2/catch.hpp>

using mcdist::sender::repair_log;

TEST_CASE("the repair log remembers the latest repair of each block within its window",
          "[unit][sender]") {
  repair_log log(4);
  REQUIRE(log.last(0, 0) == 0);
  log.record(0, 1, 10);
  log.record(0, 2, 11);
  log.record(0, 1, 12);  // repaired again
  REQUIRE(log.last(0, 1) == 12);
  REQUIRE(log.last(0, 2) == 11);
  REQUIRE(log.last(1, 1) == 0);
  log.record(1, 1, 13);
  log.record(1, 2, 14);  // evicts (0,1,10): (0,1) stays at 12
  REQUIRE(log.last(0, 1) == 12);
  log.record(1, 3, 15);  // evicts (0,2,11)
  REQUIRE(log.last(0, 2) == 0);
  log.record(1, 4, 16);  // evicts (0,1,12)
  REQUIRE(log.last(0, 1) == 0);
  REQUIRE(log.size() == 4);
  for (std::uint32_t i = 0; i < 1000; ++i) log.record(7, i, 100 + i);
  REQUIRE(log.size() == 4);  // bounded, whatever the file size
  REQUIRE(log.last(7, 999) == 1099);
}
