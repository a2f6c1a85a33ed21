#include "receiver/core/memory_budget.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::receiver;

TEST_CASE("a charge over the session's budget or the total is refused whole",
          "[unit][receiver][budget]") {
  memory_budget b(100, 150);
  REQUIRE(b.charge(session_id{1}, 60));
  REQUIRE_FALSE(b.charge(session_id{1}, 41));  // session: 60 + 41 > 100
  REQUIRE(b.used(session_id{1}) == 60);
  REQUIRE(b.charge(session_id{1}, 40));
  REQUIRE(b.charge(session_id{2}, 50));
  REQUIRE_FALSE(b.charge(session_id{3}, 1));  // total: 150 used
  REQUIRE(b.used(session_id{3}) == 0);
  REQUIRE(b.used() == 150);
}

TEST_CASE("released bytes can be charged again; a closed session gives back everything",
          "[unit][receiver][budget]") {
  memory_budget b(100, 150);
  REQUIRE(b.charge(session_id{1}, 100));
  b.release(session_id{1}, 30);
  REQUIRE(b.used(session_id{1}) == 70);
  b.release(session_id{1}, 1000);  // at most what it holds
  REQUIRE(b.used() == 0);
  REQUIRE(b.charge(session_id{1}, 90));
  REQUIRE(b.charge(session_id{2}, 60));
  b.release_session(session_id{1});
  REQUIRE(b.used() == 60);
  REQUIRE(b.charge(session_id{3}, 90));
  b.release_session(session_id{9});  // unknown: nothing happens
  REQUIRE(b.used() == 150);
}
