// The hub journal's WIS2 table (feed/wis2_seen.hpp) against a real SQLite file: the duplicate
// rules (an id seen is a duplicate whatever became of it; a data_id taken with a pubtime at or
// after is a duplicate unless its download failed), pending rows surviving a reopen with what
// their download needs, and expire() forgetting old finished rows but never pending ones.
#include "feed/wis2_seen.hpp"

#include "feed/sqlite_journal.hpp"

#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::feed;
using namespace std::chrono_literals;

namespace {

const wall_time t0 = wall_time{} + std::chrono::seconds(1'767'225'600);  // 2026-01-01

wis2_taken taken(std::string id, std::string data_id, std::int64_t pubtime_ns) {
  wis2_taken t;
  t.notification_id = std::move(id);
  t.data_id = std::move(data_id);
  t.pubtime_ns = pubtime_ns;
  t.input = "gb-a";
  t.channel = "obs";
  t.name = "wis2/" + t.data_id;
  t.href = "https://data.example.org/" + t.data_id;
  t.length = 1234;
  t.integrity_method = "sha512";
  t.integrity_value = "AAAA";
  return t;
}

}  // namespace

TEST_CASE("wis2_seen: the id and data_id duplicate rules") {
  test::scratch_dir dir("mcdist-wis2seen");
  sqlite_journal j(dir / "journal.db");
  wis2_seen seen(j.db());
  CHECK(seen.check("n1", "d/a", 100) == wis2_verdict::fresh);
  const auto row = seen.accept(taken("n1", "d/a", 100), t0);
  CHECK(seen.state_of("n1") == "pending");
  // The same id again (a second Global Broker): a duplicate, even with another data_id.
  CHECK(seen.check("n1", "d/other", 500) == wis2_verdict::duplicate_id);
  // Another id for the same data_id (a second Global Cache) with the same or an older pubtime.
  CHECK(seen.check("n2", "d/a", 100) == wis2_verdict::duplicate_data_id);
  CHECK(seen.check("n2", "d/a", 99) == wis2_verdict::duplicate_data_id);
  // An update: a later pubtime.
  CHECK(seen.check("n2", "d/a", 101) == wis2_verdict::fresh);
  seen.mark_done(row, t0 + 1s);
  CHECK(seen.state_of("n1") == "done");
  CHECK(seen.check("n3", "d/a", 100) == wis2_verdict::duplicate_data_id);

  // A download that failed for good does not block the data_id, but its id stays seen.
  const auto bad = seen.accept(taken("n4", "d/b", 100), t0);
  seen.mark_failed(bad, "integrity: ...", t0 + 1s);
  CHECK(seen.state_of("n4") == "failed");
  CHECK(seen.check("n5", "d/b", 100) == wis2_verdict::fresh);
  CHECK(seen.check("n4", "d/b", 100) == wis2_verdict::duplicate_id);
  CHECK_THROWS(seen.accept(taken("n1", "d/c", 1), t0));  // the id is unique in the table
  CHECK(to_string(wis2_verdict::duplicate_data_id) == "data_id");
}

TEST_CASE("wis2_seen: pending rows survive a reopen with what their download needs") {
  test::scratch_dir dir("mcdist-wis2seen");
  std::int64_t row = 0;
  {
    sqlite_journal j(dir / "journal.db");
    wis2_seen seen(j.db());
    row = seen.accept(taken("n1", "d/a", 100), t0);
    seen.set_attempts(row, 2);
    seen.mark_done(seen.accept(taken("n2", "d/b", 100), t0), t0);
  }
  sqlite_journal j(dir / "journal.db");
  CHECK(j.db().user_version() == hub_journal::schema_version);
  wis2_seen seen(j.db());
  const auto p = seen.pending();
  REQUIRE(p.size() == 1);
  CHECK(p[0].row == row);
  CHECK(p[0].notification_id == "n1");
  CHECK(p[0].data_id == "d/a");
  CHECK(p[0].pubtime_ns == 100);
  CHECK(p[0].input == "gb-a");
  CHECK(p[0].channel == "obs");
  CHECK(p[0].name == "wis2/d/a");
  CHECK(p[0].href == "https://data.example.org/d/a");
  CHECK(p[0].length == 1234u);
  CHECK(p[0].integrity_method == "sha512");
  CHECK(p[0].integrity_value == "AAAA");
  CHECK(p[0].attempts == 2);
}

TEST_CASE("wis2_seen: expire forgets old finished rows, never pending ones, and bounds rows") {
  test::scratch_dir dir("mcdist-wis2seen");
  sqlite_journal j(dir / "journal.db");
  wis2_seen seen(j.db());
  seen.mark_done(seen.accept(taken("old-done", "d/1", 1), t0), t0);
  seen.mark_failed(seen.accept(taken("old-failed", "d/2", 1), t0), "x", t0);
  seen.accept(taken("old-pending", "d/3", 1), t0);
  seen.mark_done(seen.accept(taken("new-done", "d/4", 1), t0 + 10s), t0 + 10s);
  CHECK(seen.expire(t0 + 5s) == 2);
  CHECK_FALSE(seen.state_of("old-done"));
  CHECK_FALSE(seen.state_of("old-failed"));
  CHECK(seen.state_of("old-pending") == "pending");
  CHECK(seen.state_of("new-done") == "done");
  // Above max_rows the oldest finished rows go first; the pending one stays.
  seen.mark_done(seen.accept(taken("newer-done", "d/5", 1), t0 + 20s), t0 + 20s);
  CHECK(seen.expire(t0, 2) == 1);
  CHECK_FALSE(seen.state_of("new-done"));
  CHECK(seen.state_of("newer-done") == "done");
  CHECK(seen.state_of("old-pending") == "pending");
}
