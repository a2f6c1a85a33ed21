#include "common/ids.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <type_traits>
#include <unordered_set>

using namespace mcdist;

TEST_CASE("a session id's text form is 8 lower-case hex digits", "[unit][ids]") {
  REQUIRE(fmt::format("{}", session_id{0xabcd}) == "0000abcd");
  REQUIRE(fmt::format("{}", session_id{0}) == "00000000");
  REQUIRE(fmt::format("{}", session_id{0xdeadbeef}) == "deadbeef");
  REQUIRE(fmt::format("session {}:", session_id{1}) == "session 00000001:");
  REQUIRE(fmt::format("[{:>10}]", session_id{0x12}) == "[  00000012]");  // specs apply to the text
}

TEST_CASE("sequence numbers compare across the wrap", "[unit][ids]") {
  REQUIRE(seq_after(1, 0));
  REQUIRE_FALSE(seq_after(0, 0));
  REQUIRE(seq_after(0, 0xffffffffu));
  REQUIRE_FALSE(seq_after(0xffffffffu, 0));
  REQUIRE(seq_after(0x7fffffffu, 0));
  REQUIRE_FALSE(seq_after(0x80000000u, 0));
}

TEST_CASE("strong ids hash like their value and do not mix", "[unit][ids]") {
  std::unordered_set<file_index> files{file_index{1}, file_index{2}, file_index{1}};
  REQUIRE(files.size() == 2);
  static_assert(!std::is_convertible_v<file_index, block_index>);
  static_assert(!std::is_convertible_v<std::uint32_t, session_id>);
}
