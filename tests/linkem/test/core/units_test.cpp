#include "tests/linkem/core/units.hpp"

#include <catch2/catch.hpp>

using namespace mcdist::linkem;
using namespace std::chrono_literals;

TEST_CASE("durations parse with their unit", "[units]") {
  CHECK(parse_duration("350ms") == 350ms);
  CHECK(parse_duration("1.5s") == 1500ms);
  CHECK(parse_duration("200us") == 200us);
  CHECK(parse_duration("5\xC2\xB5s") == 5us);
  CHECK(parse_duration("7ns") == 7ns);
  CHECK(parse_duration(" 35ms ") == 35ms);
  CHECK(parse_duration("0") == 0ns);
}

TEST_CASE("durations without unit, negative or unknown are rejected", "[units]") {
  CHECK_THROWS_AS(parse_duration("350"), config_error);
  CHECK_THROWS_AS(parse_duration("-1ms"), config_error);
  CHECK_THROWS_AS(parse_duration("5 parsecs"), config_error);
  CHECK_THROWS_AS(parse_duration("ms"), config_error);
  CHECK_THROWS_AS(parse_duration("2d"), config_error);
  CHECK_THROWS_AS(parse_duration("100000s"), config_error);  // > 1 day
}

TEST_CASE("bit rates use decimal prefixes and bits unless bytes are named", "[units]") {
  CHECK(parse_bit_rate("100Mbit") == Approx(100e6));
  CHECK(parse_bit_rate("1.5Gbit/s") == Approx(1.5e9));
  CHECK(parse_bit_rate("64kbit") == Approx(64e3));
  CHECK(parse_bit_rate("1e9") == Approx(1e9));
  CHECK(parse_bit_rate("100mbps") == Approx(100e6));
  CHECK(parse_bit_rate("10MB/s") == Approx(80e6));
  CHECK(parse_bit_rate("10MBps") == Approx(80e6));
  CHECK_THROWS_AS(parse_bit_rate("0"), config_error);
  CHECK_THROWS_AS(parse_bit_rate("fast"), config_error);
  CHECK_THROWS_AS(parse_bit_rate("10Mfurlong"), config_error);
}

TEST_CASE("probabilities accept fractions and percentages in [0, 1]", "[units]") {
  CHECK(parse_probability("1e-3") == Approx(1e-3));
  CHECK(parse_probability("0.1%") == Approx(1e-3));
  CHECK(parse_probability("1e-6") == Approx(1e-6));
  CHECK(parse_probability("1") == 1.0);
  CHECK_THROWS_AS(parse_probability("2"), config_error);
  CHECK_THROWS_AS(parse_probability("-0.1"), config_error);
  CHECK_THROWS_AS(parse_probability("abc"), config_error);
  CHECK_THROWS_AS(parse_probability("5ms"), config_error);
}

TEST_CASE("byte sizes distinguish SI and IEC prefixes", "[units]") {
  CHECK(parse_byte_size("1500") == 1500);
  CHECK(parse_byte_size("64KB") == 64000);
  CHECK(parse_byte_size("64KiB") == 65536);
  CHECK(parse_byte_size("1MiB") == 1048576);
  CHECK(parse_byte_size("2GiB") == 2147483648ULL);
  CHECK_THROWS_AS(parse_byte_size("12 bananas"), config_error);
}

TEST_CASE("counts and numbers are bounded", "[units]") {
  CHECK(parse_count("42", 100) == 42);
  CHECK_THROWS_AS(parse_count("101", 100), config_error);
  CHECK_THROWS_AS(parse_count("4x", 100), config_error);
  CHECK(parse_number("2.5", 1, 10) == Approx(2.5));
  CHECK_THROWS_AS(parse_number("0.5", 1, 10), config_error);
}

TEST_CASE("formatting is readable", "[units]") {
  CHECK(format_duration(350ms) == "350ms");
  CHECK(format_duration(1500ms) == "1.5s");
  CHECK(format_bit_rate(1.2e9) == "1.2Gbit/s");
  CHECK(format_bit_rate(64e3) == "64kbit/s");
}
