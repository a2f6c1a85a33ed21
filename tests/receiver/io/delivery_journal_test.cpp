// The delivery journal of actions on receipt, on a real SQLite file.

#include "receiver/io/delivery_journal.hpp"
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

TEST_CASE("the journal turns intents into deliveries and tracks runs",
          "[unit][receiver][journal]") {
  const mcdist::test::scratch_dir dir("mcdist-djournal");
  const auto file = dir.path() / "journal.db";
  const auto t0 = std::chrono::system_clock::now();
  std::int64_t run_a = 0;
  {
    delivery_journal j(file);
    delivery_intent i{0, "synop", "/srv/in", "obs/a.bufr", 10, 5, std::string(64, 'a'), "0000abcd"};
    delivery_intent other = i;
    other.relpath = "obs/b.bufr";
    j.record_intents(std::vector{i, other});
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
