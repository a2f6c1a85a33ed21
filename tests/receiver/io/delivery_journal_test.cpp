// The delivery journal of actions on receipt, on a real SQLite file.

#include "receiver/io/delivery_journal.hpp"
#include "common/sqlite/sqlite.hpp"
#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

/// What a schema-1 daemon wrote before each rename.
void insert_intent(const std::filesystem::path& file, const std::string& relpath) {
  sqlite::database db(file.string(), sqlite::durability::normal);
  db.prepare(
        "INSERT INTO intents(channel, dest, relpath, size, mtime_ns, sha256, session, "
        "created_at) VALUES('synop', '/srv/in', ?1, 10, 5, ?2, '0000abcd', 0)")
      .bind(1, relpath)
      .bind(2, std::string(64, 'a'))
      .run();
}

delivery_journal::batch_entry entry(const std::string& relpath,
                                    std::vector<std::string> actions = {}) {
  delivery_journal::batch_entry e;
  e.row.channel = "synop";
  e.row.dest = "/srv/in";
  e.row.relpath = relpath;
  e.row.path = "/srv/in/" + relpath;
  e.row.size = 10;
  e.row.mtime_ns = 5;
  e.row.sha256 = std::string(64, 'b');
  e.row.session = "0000abcd";
  e.row.delivered_at = std::chrono::system_clock::now();
  e.actions = std::move(actions);
  return e;
}

}  // namespace

TEST_CASE("the journal turns a schema-1 journal's intents into deliveries and tracks runs",
          "[unit][receiver][journal]") {
  const mcdist::test::scratch_dir dir("mcdist-djournal");
  const auto file = dir.path() / "journal.db";
  const auto t0 = std::chrono::system_clock::now();
  std::int64_t run_a = 0;
  {
    delivery_journal j(file);
    insert_intent(file, "obs/a.bufr");
    insert_intent(file, "obs/b.bufr");
    REQUIRE(j.intents().size() == 2);

    delivery_row d;
    d.channel = "synop";
    d.dest = "/srv/in";
    d.relpath = "obs/a.bufr";
    d.path = "/srv/in/obs/a.bufr";
    d.size = 10;
    d.mtime_ns = 5;
    d.sha256 = std::string(64, 'a');
    d.session = "0000abcd";
    d.delivered_at = t0 - 10s;
    std::vector<std::int64_t> ids;
    const std::vector<std::string> names{"ingest", "archive"};
    j.deliver(d, names, ids);
    REQUIRE(ids.size() == 2);
    run_a = ids[0];
    // The delivered file's intent is gone; the other stays until start-up looks at it.
    REQUIRE(j.intents().size() == 1);
    CHECK(j.intents()[0].relpath == "obs/b.bufr");
    CHECK(j.run_started(ids[0], t0) == 1);
    j.run_ended(ids[0], "pending", 2, "exit status 2", t0);
    CHECK(j.run_started(ids[0], t0) == 2);
    j.run_ended(ids[1], "done", 0, "", t0);
  }
  // Reopened (a restart): the run that was running is unfinished, with its product.
  delivery_journal j(file);
  const auto runs = j.unfinished_runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].id == run_a);
  CHECK(runs[0].state == "running");
  CHECK(runs[0].attempt == 2);
  CHECK(runs[0].action == "ingest");
  CHECK(runs[0].product.path == "/srv/in/obs/a.bufr");
  CHECK(runs[0].product.session == "0000abcd");

  // Retention sees it once it is older than the cut, and not after mark_removed.
  CHECK(j.expired("synop", t0 - 20s, 10).empty());
  auto old = j.expired("synop", t0, 10);
  REQUIRE(old.size() == 1);
  CHECK(old[0].size == 10);
  CHECK(j.expired("grib", t0, 10).empty());
  j.mark_removed(old[0].id, "deleted", t0);
  CHECK(j.expired("synop", t0, 10).empty());

  // Pruning keeps a delivery while one of its runs is unfinished.
  CHECK(j.prune(t0) == 0);
  j.run_ended(run_a, "failed", 2, "exit status 2", t0);
  CHECK(j.prune(t0) == 1);
  CHECK(j.unfinished_runs().empty());
}

TEST_CASE("deliveries journaled before their renames are confirmed by the next batch",
          "[unit][receiver][journal]") {
  const mcdist::test::scratch_dir dir("mcdist-djournal");
  const auto file = dir.path() / "journal.db";
  delivery_journal j(file);
  CHECK(j.confirmed_through() == 0);
  CHECK(j.unconfirmed().empty());

  // Batch A: two files, the second with two actions and a sender key.
  std::vector<delivery_journal::batch_entry> a{entry("a1"), entry("a2", {"ingest", "copy"})};
  a[1].row.sender_key = "mcdist-ed25519:KEY";
  j.record_deliveries(a, 0);
  REQUIRE(a[0].row.id > 0);
  REQUIRE(a[1].row.id > a[0].row.id);
  CHECK(a[0].run_ids.empty());
  REQUIRE(a[1].run_ids.size() == 2);
  CHECK(j.confirmed_through() == 0);
  auto open = j.unconfirmed();
  REQUIRE(open.size() == 2);
  CHECK(open[0].relpath == "a1");
  CHECK(open[0].sender_key.empty());
  CHECK(open[1].sender_key == "mcdist-ed25519:KEY");
  CHECK(j.unfinished_runs().size() == 2);

  // Batch B confirms A; one of B's files does not end in place: its delivery and runs go.
  std::vector<delivery_journal::batch_entry> b{entry("b1", {"ingest"}), entry("b2")};
  j.record_deliveries(b, a[1].row.id);
  CHECK(j.confirmed_through() == a[1].row.id);
  open = j.unconfirmed();
  REQUIRE(open.size() == 2);
  CHECK(open[0].relpath == "b1");
  const std::vector<std::int64_t> failed{b[0].row.id};
  j.drop_deliveries(failed);
  open = j.unconfirmed();
  REQUIRE(open.size() == 1);
  CHECK(open[0].relpath == "b2");
  const auto runs = j.unfinished_runs();
  REQUIRE(runs.size() == 2);  // a2's two; b1's went with it
  CHECK(runs[0].product.relpath == "a2");
  CHECK(runs[1].product.relpath == "a2");

  // The mark never goes back.
  std::vector<delivery_journal::batch_entry> c{entry("c1")};
  j.record_deliveries(c, a[0].row.id);
  CHECK(j.confirmed_through() == a[1].row.id);
  j.confirm_through(a[0].row.id);
  CHECK(j.confirmed_through() == a[1].row.id);
  j.confirm_through(b[1].row.id);
  CHECK(j.confirmed_through() == b[1].row.id);
  j.confirm_all();
  CHECK(j.confirmed_through() == c[0].row.id);
  CHECK(j.unconfirmed().empty());
}

TEST_CASE("a journal from before the confirmed mark takes its deliveries as confirmed",
          "[unit][receiver][journal]") {
  const mcdist::test::scratch_dir dir("mcdist-djournal");
  const auto file = dir.path() / "journal.db";
  std::int64_t last = 0;
  {
    delivery_journal j(file);
    std::vector<delivery_journal::batch_entry> a{entry("a1"), entry("a2")};
    j.record_deliveries(a, 0);
    last = a[1].row.id;
  }
  {
    // As schema 1 left it: no journal_state.
    sqlite::database db(file.string(), sqlite::durability::normal);
    db.exec("DROP TABLE journal_state; PRAGMA user_version = 1;");
  }
  delivery_journal j(file);
  CHECK(j.confirmed_through() == last);
  CHECK(j.unconfirmed().empty());
}
