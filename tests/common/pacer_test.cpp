#include "common/pacer.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace std::chrono_literals;

TEST_CASE("the pacer holds a long run to the configured rate", "[unit][pacer]") {
  pacer p(1'000'000'000, 64 * 1024);  // 1 Gbit/s
  time_point now{1s};
  std::uint64_t sent = 0;
  const time_point end = now + 1s;
  while (now < end) {
    std::uint64_t allow = p.allowance(now);
    while (allow >= 1448) {
      p.consume(now, 1448);
      sent += 1448;
      allow -= 1448;
    }
    now = std::max(p.ready_at(now, 1448), now + 1us);
  }
  // One second at 1 Gbit/s is 125 MB, plus at most the initial burst.
  REQUIRE(sent >= 124'900'000);
  REQUIRE(sent <= 125'000'000 + 64 * 1024 + 1448);
}

TEST_CASE("after idle time the pacer allows one burst, not the whole idle time", "[unit][pacer]") {
  pacer p(8'000'000, 10'000);  // 1 MB/s, 10 kB bucket
  const time_point t0{10s};
  REQUIRE(p.allowance(t0) == 10'000);  // a fresh pacer starts with a full bucket
  p.consume(t0, 10'000);
  REQUIRE(p.allowance(t0) == 0);
  REQUIRE(p.allowance(t0 + 5ms) == 5'000);
  REQUIRE(p.allowance(t0 + 1h) == 10'000);
}

TEST_CASE("ready_at names the time enough bytes are allowed", "[unit][pacer]") {
  pacer p(8'000'000, 1000);  // 1 byte per microsecond
  const time_point t0{5s};
  p.consume(t0, 1000);  // uses the bucket
  p.consume(t0, 500);   // 500 us in debt
  const auto t = p.ready_at(t0, 100);
  REQUIRE(t - t0 == 600us);
  REQUIRE(p.allowance(t) >= 100);
  REQUIRE(p.allowance(t - 2us) < 100);
}

TEST_CASE("rate 0 is unpaced", "[unit][pacer]") {
  pacer p(0, 1000);
  REQUIRE(p.allowance(time_point{}) > 1'000'000'000'000ull);
}
