#include "common/path_check.hpp"

#include "common/error.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace mcdist;
using namespace std::string_literals;

TEST_CASE("relative paths of ordinary products pass", "[unit][path]") {
  REQUIRE_FALSE(check_relative_path("a"));
  REQUIRE_FALSE(check_relative_path("obs/2026/11/22/T_ISMD01_C_EDZW_20261122.bufr"));
  REQUIRE_FALSE(check_relative_path("..hidden"));
  REQUIRE_FALSE(check_relative_path("a/b..c/d"));
  REQUIRE_FALSE(check_relative_path("Ünïcödé/名前"));
  REQUIRE_FALSE(check_relative_path(std::string(255, 'x')));
}

TEST_CASE("paths that could escape or mislead are refused with the reason", "[unit][path]") {
  REQUIRE(check_relative_path("") == errc::path_empty);
  REQUIRE(check_relative_path("/etc/passwd") == errc::path_absolute);
  REQUIRE(check_relative_path("..") == errc::path_dot_dot);
  REQUIRE(check_relative_path("../x") == errc::path_dot_dot);
  REQUIRE(check_relative_path("a/../../x") == errc::path_dot_dot);
  REQUIRE(check_relative_path("a/..") == errc::path_dot_dot);
  REQUIRE(check_relative_path("./a") == errc::path_dot_dot);
  REQUIRE(check_relative_path("a//b") == errc::path_empty_component);
  REQUIRE(check_relative_path("a/") == errc::path_empty_component);
  REQUIRE(check_relative_path("a\x01"
                              "b") == errc::path_control_char);
  REQUIRE(check_relative_path("a\nb") == errc::path_control_char);
  REQUIRE(check_relative_path("a\x7f") == errc::path_control_char);
  REQUIRE(check_relative_path("a\0b"s) == errc::path_control_char);
  REQUIRE(check_relative_path(std::string(256, 'x')) == errc::path_component_too_long);
  REQUIRE(check_relative_path(std::string(max_path_bytes + 1, 'x')) == errc::path_too_long);
  std::string deep;
  for (std::size_t i = 0; i <= max_path_depth; ++i) deep += i ? "/d" : "d";
  REQUIRE(check_relative_path(deep) == errc::path_too_deep);
}

TEST_CASE("valid_utf8 follows RFC 3629's table: no overlong, surrogate or out-of-range form",
          "[unit][path]") {
  REQUIRE(valid_utf8(""));
  REQUIRE(valid_utf8("ascii"));
  REQUIRE(valid_utf8("\xc2\x80"));                // U+0080, the first 2-byte form
  REQUIRE(valid_utf8("\xe0\xa0\x80"));            // U+0800
  REQUIRE(valid_utf8("\xed\x9f\xbf"));            // U+D7FF, below the surrogates
  REQUIRE(valid_utf8("\xee\x80\x80"));            // U+E000, above them
  REQUIRE(valid_utf8("\xf0\x90\x80\x80"));        // U+10000
  REQUIRE(valid_utf8("\xf4\x8f\xbf\xbf"));        // U+10FFFF, the last code point
  REQUIRE_FALSE(valid_utf8("\x80"));              // a lone continuation byte
  REQUIRE_FALSE(valid_utf8("\xc0\xaf"));          // overlong '/'
  REQUIRE_FALSE(valid_utf8("\xc1\xbf"));          // overlong
  REQUIRE_FALSE(valid_utf8("\xe0\x9f\xbf"));      // overlong 3-byte
  REQUIRE_FALSE(valid_utf8("\xed\xa0\x80"));      // U+D800, a surrogate
  REQUIRE_FALSE(valid_utf8("\xf0\x8f\xbf\xbf"));  // overlong 4-byte
  REQUIRE_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  REQUIRE_FALSE(valid_utf8("\xf5\x80\x80\x80"));
  REQUIRE_FALSE(valid_utf8("\xff"));
  REQUIRE_FALSE(valid_utf8("\xe2\x82"));      // truncated at the end
  REQUIRE_FALSE(valid_utf8("\xe2\x28\xa1"));  // a bad continuation byte
  REQUIRE(check_relative_path("bad\xff.bufr") == errc::path_not_utf8);
  REQUIRE(check_relative_path("obs/\xc0\xaf/x") == errc::path_not_utf8);
}
