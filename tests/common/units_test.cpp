#include "common/units.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;

TEST_CASE("rates parse with SI suffixes in bit/s", "[unit][units]") {
  REQUIRE(parse_rate("500M") == 500'000'000u);
  REQUIRE(parse_rate("1.5G") == 1'500'000'000u);
  REQUIRE(parse_rate("100k") == 100'000u);
  REQUIRE(parse_rate("350Mbit/s") == 350'000'000u);
  REQUIRE(parse_rate("12345") == 12345u);
  REQUIRE(parse_rate("max") == 0u);
  REQUIRE_FALSE(parse_rate("fast"));
  REQUIRE_FALSE(parse_rate("-5M"));
  REQUIRE_FALSE(parse_rate("5X"));
  REQUIRE_FALSE(parse_rate("2000G"));
}

TEST_CASE("sizes parse with binary suffixes in bytes", "[unit][units]") {
  REQUIRE(parse_size("1400") == 1400u);
  REQUIRE(parse_size("64K") == 65536u);
  REQUIRE(parse_size("32M") == 32u << 20);
  REQUIRE(parse_size("2GiB") == 2ull << 30);
  REQUIRE_FALSE(parse_size("1.5M"));
  REQUIRE_FALSE(parse_size("12Q"));
  REQUIRE_FALSE(parse_size(""));
}

TEST_CASE("durations need a unit or mean seconds", "[unit][units]") {
  using namespace std::chrono_literals;
  REQUIRE(parse_duration("250ms") == 250ms);
  REQUIRE(parse_duration("2") == 2s);
  REQUIRE(parse_duration("1.5s") == 1500ms);
  REQUIRE(parse_duration("7d") == std::chrono::hours(168));
  REQUIRE(parse_duration("0.5d") == std::chrono::hours(12));
  REQUIRE_FALSE(parse_duration("20000d"));  // beyond 10^18 ns
  REQUIRE(parse_duration("1m") == 60s);
  REQUIRE(parse_duration("10us") == 10us);
  REQUIRE_FALSE(parse_duration("soon"));
  REQUIRE_FALSE(parse_duration("5w"));
}

TEST_CASE("rates and sizes format for people", "[unit][units]") {
  REQUIRE(format_rate(953e6) == "953 Mbit/s");
  REQUIRE(format_rate(1.5e9) == "1.50 Gbit/s");
  REQUIRE(format_bytes(512) == "512 B");
  REQUIRE(format_bytes(1024.0 * 1024 * 1024) == "1.00 GiB");
}
