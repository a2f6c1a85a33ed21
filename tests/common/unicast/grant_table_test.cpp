#include "common/unicast/grant_table.hpp"

#include "common/error.hpp"
#include "tests/common/unicast/token.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::unicast;
using mcdist::unicast::test::tok;

TEST_CASE("a grant is found only with all three credentials", "[unit][unicast][grant]") {
  grant_table g;
  REQUIRE_FALSE(
      g.add({tok(0x1111), "site-a", session_id{7}, {file_index{3}, file_index{1}}, false}));
  REQUIRE_FALSE(g.add({tok(0x2222), "site-b", session_id{7}, {}, true}));
  REQUIRE(g.find(tok(0x1111), session_id{7}, "site-a") != nullptr);
  REQUIRE(g.find(tok(0x1111), session_id{7}, "site-b") == nullptr);
  REQUIRE(g.find(tok(0x1111), session_id{8}, "site-a") == nullptr);
  REQUIRE(g.find(tok(0x1112), session_id{7}, "site-a") == nullptr);
  REQUIRE(g.find(tok(0), session_id{7}, "site-a") == nullptr);
  const auto* a = g.find(tok(0x1111), session_id{7}, "site-a");
  REQUIRE(grant_table::allows(*a, file_index{1}));
  REQUIRE(grant_table::allows(*a, file_index{3}));
  REQUIRE_FALSE(grant_table::allows(*a, file_index{2}));
  REQUIRE(grant_table::allows(*g.find(tok(0x2222), session_id{7}, "site-b"), file_index{12345}));
}

TEST_CASE("bad grants are refused", "[unit][unicast][grant]") {
  grant_table g;
  REQUIRE(g.add({tok(0), "site-a", session_id{1}, {}, true}) == errc::invalid_field);
  REQUIRE(g.add({tok(1), "bad id", session_id{1}, {}, true}) == errc::invalid_field);
  REQUIRE_FALSE(g.add({tok(1), "site-a", session_id{1}, {}, true}));
  REQUIRE(g.add({tok(1), "site-b", session_id{1}, {}, true}) == errc::invalid_field);
  REQUIRE(g.remove(tok(1)));
  REQUIRE_FALSE(g.remove(tok(1)));
  REQUIRE(g.find(tok(1), session_id{1}, "site-a") == nullptr);
}
