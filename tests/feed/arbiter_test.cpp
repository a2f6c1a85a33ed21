#include "feed/arbiter.hpp"

#include <catch2/catch.hpp>

using mcdist::feed::rate_claim;
using mcdist::feed::share_rate;

TEST_CASE("one session alone gets its share or cap", "[unit][feed]") {
  REQUIRE(share_rate(1'000'000'000, std::vector<rate_claim>{{0, 1.0, 0}}) ==
          std::vector<std::uint64_t>{1'000'000'000});
  REQUIRE(share_rate(1'000'000'000, std::vector<rate_claim>{{0, 0.25, 0}}) ==
          std::vector<std::uint64_t>{250'000'000});
  REQUIRE(share_rate(1'000'000'000, std::vector<rate_claim>{{0, 1.0, 100'000'000}}) ==
          std::vector<std::uint64_t>{100'000'000});
}

TEST_CASE("the most urgent session takes its share first, lower ones what is left",
          "[unit][feed]") {
  // Given in the wrong order on purpose: the order of the result is the order of the claims.
  const std::vector<rate_claim> claims{{1, 1.0, 0}, {10, 0.3, 0}, {5, 1.0, 500'000'000}};
  const auto r = share_rate(1'000'000'000, claims);
  REQUIRE(r[1] == 300'000'000);  // priority 10: its share
  REQUIRE(r[2] == 500'000'000);  // priority 5: its cap, from the 700 M left
  REQUIRE(r[0] == 200'000'000);  // priority 1: the rest
}

TEST_CASE("a starved session keeps the floor so its control traffic lives", "[unit][feed]") {
  // A warning channel at full share while a model field is being sent.
  const std::vector<rate_claim> claims{{1, 1.0, 0}, {10, 1.0, 0}};
  const auto r = share_rate(100'000'000, claims);
  REQUIRE(r[1] == 100'000'000);
  REQUIRE(r[0] == 1'000'000);  // 1 %
  const auto r2 = share_rate(100'000'000, claims, 0.05);
  REQUIRE(r2[0] == 5'000'000);
}

TEST_CASE("equal priorities are served in the order given", "[unit][feed]") {
  const std::vector<rate_claim> claims{{3, 0.6, 0}, {3, 0.6, 0}};
  const auto r = share_rate(1000, claims);
  REQUIRE(r[0] == 600);
  REQUIRE(r[1] == 400);
}

TEST_CASE("no running session: nothing to share", "[unit][feed]") {
  REQUIRE(share_rate(1000, std::vector<rate_claim>{}).empty());
}

TEST_CASE("a channel's rate is split equally among its sessions, each above the floor",
          "[unit][feed]") {
  using mcdist::feed::split_rate;
  const std::vector<std::uint64_t> channels{600, 300};
  const std::vector<std::size_t> sessions{3, 1};
  REQUIRE(split_rate(channels, sessions, 1000) == std::vector<std::uint64_t>{200, 200, 200, 300});
  // 1 % of 1000 is the floor: 20 / 3 would starve each.
  const std::vector<std::uint64_t> starved{20};
  const std::vector<std::size_t> three{3};
  REQUIRE(split_rate(starved, three, 1000) == std::vector<std::uint64_t>{10, 10, 10});
}
