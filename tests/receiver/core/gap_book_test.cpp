#include "receiver/core/gap_book.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

using ranges = std::vector<wire::seq_span>;
const std::string obs = "obs";

}  // namespace

TEST_CASE("the relay's report joins its own gaps and every site's, merged and cut at the newest",
          "[unit][receiver][gap_book]") {
  gap_book b;
  REQUIRE(b.note("s1", obs, {{3, 4}, {9, 9}}));
  REQUIRE(b.note("s2", obs, {{5, 6}, {12, 20}}));
  REQUIRE(b.note("s3", "grib", {{1, 2}}));
  const ranges own{{8, 8}};
  const auto m = b.merged(obs, 15, own);
  REQUIRE(m == ranges{{3, 6}, {8, 9}, {12, 15}});
  REQUIRE(wire::valid_seq_ranges(m, 16));
  REQUIRE(b.merged("grib", 100, {}) == ranges{{1, 2}});
  REQUIRE(b.merged("warn", 100, own) == own);
}

TEST_CASE("a site's new report replaces its last; an empty one forgets it",
          "[unit][receiver][gap_book]") {
  gap_book b;
  b.note("s1", obs, {{3, 4}});
  b.note("s1", obs, {{7, 7}});
  REQUIRE(b.merged(obs, 100, {}) == ranges{{7, 7}});
  b.note("s1", obs, {});
  REQUIRE(b.size() == 0);
  REQUIRE(b.merged(obs, 100, {}).empty());
}

TEST_CASE("completing a session the relay ran takes its numbers out of the site's report",
          "[unit][receiver][gap_book]") {
  gap_book b;
  b.note("s1", obs, {{3, 6}, {9, 12}});
  b.note("s2", obs, {{4, 4}});
  const ranges catch_up{{4, 5}, {10, 10}};
  b.completed("s1", obs, catch_up);
  // s1 keeps 3, 6, 9, 11-12; s2 still lacks 4.
  REQUIRE(b.merged(obs, 100, {}) == ranges{{3, 4}, {6, 6}, {9, 9}, {11, 12}});
  b.completed("s2", obs, catch_up);
  REQUIRE(b.merged(obs, 100, {}) == ranges{{3, 3}, {6, 6}, {9, 9}, {11, 12}});
  REQUIRE(b.size() == 1);
  const ranges all{{1, 20}};
  b.completed("s1", obs, all);
  REQUIRE(b.size() == 0);
  b.completed("s9", obs, all);  // unknown: nothing to do
}

TEST_CASE("a report not repeated at the next heartbeat is forgotten at the one after",
          "[unit][receiver][gap_book]") {
  gap_book b;
  b.note("s1", obs, {{3, 3}});
  b.note("s2", obs, {{5, 5}});
  b.next_generation();
  REQUIRE(b.size() == 2);       // answered the heartbeat before this one: still kept
  b.note("s2", obs, {{5, 5}});  // s2 answers this heartbeat too; s1 caught up and is quiet
  b.next_generation();
  REQUIRE(b.merged(obs, 100, {}) == ranges{{5, 5}});
}

TEST_CASE("the sites named in a catch-up are those whose reports it covers",
          "[unit][receiver][gap_book]") {
  gap_book b;
  b.note("s1", obs, {{3, 4}});
  b.note("s2", obs, {{9, 9}});
  b.note("s3", "grib", {{3, 4}});
  const ranges catch_up{{4, 8}};
  REQUIRE(b.sites_missing(obs, catch_up) == std::vector<std::string>{"s1"});
  const ranges none{{5, 8}};
  REQUIRE(b.sites_missing(obs, none).empty());
}

TEST_CASE("the merged report keeps the oldest ranges the wire carries",
          "[unit][receiver][gap_book]") {
  gap_book b;
  ranges many;
  for (std::uint64_t i = 0; i < 40; ++i) many.emplace_back(10 * i + 1, 10 * i + 2);
  ranges first(many.begin(), many.begin() + 20);
  ranges second(many.begin() + 20, many.end());
  b.note("s1", obs, first);
  b.note("s2", obs, second);
  const auto m = b.merged(obs, 1000, {});
  REQUIRE(m.size() == wire::max_seq_ranges);
  REQUIRE(m.front() == many.front());
  REQUIRE(m.back() == many[wire::max_seq_ranges - 1]);
}

TEST_CASE("a full book drops a new site's report and keeps the known ones",
          "[unit][receiver][gap_book]") {
  gap_book b;
  for (std::size_t i = 0; i < gap_book::max_sites; ++i) {
    REQUIRE(b.note("s" + std::to_string(i), obs, {{1, 1}}));
  }
  REQUIRE_FALSE(b.note("intruder", obs, {{2, 2}}));
  REQUIRE(b.note("s0", obs, {{3, 3}}));  // a known site still replaces its report
  REQUIRE(b.size() == gap_book::max_sites);
  REQUIRE(b.merged(obs, 100, {}) == ranges{{1, 1}, {3, 3}});
}

TEST_CASE("numbers a session is delivering to the sites are not asked for them again",
          "[unit][receiver][gap_book]") {
  gap_book b;
  b.note("s1", obs, {{3, 6}});
  b.note("s2", obs, {{5, 5}, {9, 9}});
  const ranges busy{{4, 5}, {9, 9}};
  REQUIRE(b.merged(obs, 100, {}, busy) == ranges{{3, 3}, {6, 6}});
  // The relay's own gaps stay: no session of its own can deliver what it lacks.
  const ranges own{{5, 5}};
  REQUIRE(b.merged(obs, 100, own, busy) == ranges{{3, 3}, {5, 6}});
}
