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
