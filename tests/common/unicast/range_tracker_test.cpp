#include "common/unicast/range_tracker.hpp"

#include "common/error.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::unicast;

TEST_CASE("bytes are accepted once, inside what was requested", "[unit][unicast][tracker]") {
  range_tracker t;
  REQUIRE_FALSE(t.add({file_index{1}, 100, 50}));
  REQUIRE(t.outstanding_bytes() == 50);
  bool done = false;
  REQUIRE(t.take(file_index{1}, 90, 20, done) == errc::invalid_field);   // starts before
  REQUIRE(t.take(file_index{1}, 140, 20, done) == errc::invalid_field);  // ends after
  REQUIRE(t.take(file_index{2}, 100, 1, done) == errc::invalid_field);   // other file
  REQUIRE_FALSE(t.take(file_index{1}, 110, 10, done));
  REQUIRE_FALSE(done);
  REQUIRE(t.take(file_index{1}, 115, 1, done) == errc::invalid_field);  // twice
  REQUIRE(t.outstanding() ==
          std::vector<byte_range>{{file_index{1}, 100, 10}, {file_index{1}, 120, 30}});
  REQUIRE_FALSE(t.take(file_index{1}, 100, 10, done));
  REQUIRE_FALSE(done);
  REQUIRE_FALSE(t.take(file_index{1}, 120, 30, done));
  REQUIRE(done);
  REQUIRE(t.complete());
  REQUIRE(t.outstanding_bytes() == 0);
}

TEST_CASE("overlapping requests are refused, adjacent ones merge", "[unit][unicast][tracker]") {
  range_tracker t;
  REQUIRE_FALSE(t.add({file_index{0}, 0, 10}));
  REQUIRE(t.add({file_index{0}, 5, 10}) == errc::invalid_field);
  REQUIRE(t.add({file_index{0}, 0, 0}) == errc::invalid_field);
  REQUIRE(t.add({file_index{0}, UINT64_MAX, 1}) == errc::invalid_field);
  REQUIRE(t.overlaps({file_index{0}, 9, 1}));
  REQUIRE_FALSE(t.overlaps({file_index{0}, 10, 1}));
  REQUIRE_FALSE(t.add({file_index{0}, 10, 10}));
  REQUIRE_FALSE(t.add({file_index{0}, 30, 10}));
  REQUIRE_FALSE(t.add({file_index{0}, 20, 10}));
  REQUIRE(t.outstanding() == std::vector<byte_range>{{file_index{0}, 0, 40}});
  // One piece spanning what were three requests is fine: they are one range now.
  bool done = false;
  REQUIRE_FALSE(t.take(file_index{0}, 5, 30, done));
  REQUIRE(t.outstanding() ==
          std::vector<byte_range>{{file_index{0}, 0, 5}, {file_index{0}, 35, 5}});
}

TEST_CASE("received bytes may be requested again", "[unit][unicast][tracker]") {
  range_tracker t;
  bool done = false;
  REQUIRE_FALSE(t.add({file_index{4}, 0, 8}));
  REQUIRE_FALSE(t.take(file_index{4}, 0, 8, done));
  REQUIRE(done);
  REQUIRE_FALSE(t.add({file_index{4}, 0, 8}));
  REQUIRE(t.outstanding_files() == 1);
}
