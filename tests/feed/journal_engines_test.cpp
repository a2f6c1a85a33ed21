// The hub journal's interface (feed/journal.hpp) against both engines: the same calls on an
// SQLite file and on a real PostgreSQL server started by the test (initdb and pg_ctl in a
// temporary directory, a Unix socket, as the postgres user when run as root) give the same
// answers: the outbox's idempotence, sequence numbers across reopen, an interrupted batch sent
// again under its own number, missing and history (GLOB included), catch-up lookups, expiry, a
// group rolled back, the schema version. Then what only PostgreSQL does: the leases of redundant
// hubs (taken, renewed, refused to another hub, lapsed and taken over with the next epoch,
// released, fenced writes). Without postgresql-15 the PostgreSQL half prints SKIPPED with the
// reason and the SQLite half still runs.
#include "common/pg/pg.hpp"
#include "feed/journal.hpp"
#include "feed/pg_journal.hpp"
#include "feed/sqlite_journal.hpp"
#include "tests/feed/pg_test_server.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <iostream>
#include <thread>
#include <unistd.h>

using namespace mcdist;
using namespace mcdist::feed;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const wall_time t0 = wall_time{} + std::chrono::seconds(1'767'225'600);  // 2026-01-01

test::pg_test_server& server() {
  static test::pg_test_server s;
  static bool told = false;
  if (!s.running() && !told) {
    told = true;
    std::cout << "SKIPPED: the PostgreSQL half of journal_engines_test: " << s.skip_reason()
              << "\n";
  }
  return s;
}

/// A fresh journal spec per call: an SQLite file, or a new PostgreSQL database.
std::string fresh(const std::string& engine) {
  static int n = 0;
  const auto name = "j" + std::to_string(::getpid()) + "_" + std::to_string(++n);
  if (engine == "sqlite") {
    const auto dir = fs::temp_directory_path() / ("mcdist-engines-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return (dir / (name + ".db")).string();
  }
  pg::connection admin(server().uri(), false);
  admin.exec_script("CREATE DATABASE " + name);
  return server().uri(name);
}

std::vector<std::string> engines() {
  std::vector<std::string> out{"sqlite"};
  if (server().running()) out.push_back("postgresql");
  return out;
}

/// Runs `body` once per engine on a fresh journal.
void each_engine(
    const std::function<void(const std::string& spec, const std::string& engine)>& body) {
  for (const auto& e : engines()) {
    INFO("engine " << e);
    body(fresh(e), e);
  }
}

product make(std::string channel, std::string name, std::int64_t mtime = 1, wall_time at = t0) {
  product p;
  p.channel = std::move(channel);
  p.name = name;
  p.spool_path = "/spool/" + name;
  p.size = 1000;
  p.mtime_ns = mtime;
  p.queued_at = at;
  return p;
}

std::uint64_t send_batch(hub_journal& j, const std::string& channel,
                         const std::vector<std::int64_t>& ids, wall_time at) {
  const auto seq = j.next_seq(channel);
  j.begin_session({channel, seq, "s" + std::to_string(seq), session_kind::batch, at}, ids);
  for (const auto id : ids) j.mark_sent(id, "/retained/" + std::to_string(id), at);
  j.end_session(channel, seq, session_outcome::complete, at + 1s);
  return seq;
}

std::vector<std::string> names(const std::vector<missing_row>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(r.name);
  return out;
}

}  // namespace

TEST_CASE("journal engines: the outbox is idempotent and numbers persist across reopen") {
  each_engine([](const std::string& spec, const std::string& engine) {
    std::int64_t a = 0;
    {
      auto j = open_hub_journal(spec);
      CHECK(j->engine() == engine);
      a = j->enqueue(make("obs", "a", 1, t0));
      CHECK(j->enqueue(make("obs", "a", 1, t0 + 5s)) == a);
      const auto a2 = j->enqueue(make("obs", "a", 2, t0 + 1s));
      CHECK(a2 != a);
      CHECK(j->enqueue(make("warn", "a", 1, t0)) != a);
      const auto q = j->queued("obs");
      REQUIRE(q.size() == 2);
      CHECK(q[0].id == a);
      CHECK(q[0].queued_at == t0);
      CHECK(q[0].state == product_state::queued);
      CHECK(j->next_seq("obs") == 1);
      CHECK(j->next_seq("obs") == 2);
      CHECK(j->next_seq("warn") == 1);
    }
    auto j = open_hub_journal(spec);
    CHECK(j->next_seq("obs") == 3);
    CHECK(j->last_seq("obs") == 3);
    CHECK(j->last_seq("none") == 0);
    CHECK(j->get(a)->name == "a");
    CHECK_FALSE(j->get(a + 1000));
    const auto ro = open_hub_journal(spec, true);
    CHECK(ro->queued("obs").size() == 2);
    CHECK_THROWS(ro->enqueue(make("obs", "b")));
  });
}

TEST_CASE("journal engines: an interrupted batch is sent again under its own number") {
  each_engine([](const std::string& spec, const std::string&) {
    auto j = open_hub_journal(spec);
    const auto a = j->enqueue(make("obs", "a"));
    const auto b = j->enqueue(make("obs", "b"));
    const auto c = j->enqueue(make("obs", "c"));
    const auto seq = j->next_seq("obs");
    const auto row =
        j->begin_session({"obs", seq, "0000abcd", session_kind::batch, t0}, std::vector{a, b});
    CHECK(j->get(a)->state == product_state::sending);
    CHECK(j->get(a)->seq == seq);
    CHECK(j->get(c)->state == product_state::queued);
    // The hub dies here. The next holder finds the batch open, with both products.
    const auto open = j->open_batches("obs");
    REQUIRE(open.size() == 1);
    CHECK(open[0].row == row);
    CHECK(open[0].seq == seq);
    REQUIRE(open[0].products.size() == 2);
    CHECK(open[0].products[1].id == b);
    CHECK(j->open_batches("warn").empty());
    CHECK(j->close_interrupted_sessions(t0 + 1s, "warn") == 0);
    CHECK(j->close_interrupted_sessions(t0 + 1s, "obs") == 1);
    CHECK(j->open_batches("obs").empty());
    // The same number again, for the same products: allowed beside the aborted row.
    const auto again =
        j->begin_session({"obs", seq, "0000beef", session_kind::batch, t0 + 2s}, std::vector{a, b});
    CHECK(again != row);
    j->mark_sent(a, "/r/a", t0 + 3s);
    j->mark_sent(b, "/r/b", t0 + 3s);
    j->end_session("obs", seq, session_outcome::complete, t0 + 3s);
    const auto s = j->sessions(t0);
    REQUIRE(s.size() == 2);
    CHECK(s[0].row.session_id == "0000beef");
    CHECK(s[0].result == session_outcome::complete);
    CHECK(s[1].result == session_outcome::aborted);
    CHECK(j->next_seq("obs") == seq + 1);  // the number was not spent twice
    // A second batch of the same number that is not aborted is refused.
    CHECK_THROWS(
        j->begin_session({"obs", seq, "0000dead", session_kind::batch, t0}, std::vector{c}));
    const auto ch = j->channels();
    REQUIRE(ch.size() == 1);
    CHECK(ch[0].sent == 2);
    CHECK(ch[0].queued == 1);
  });
}

TEST_CASE("journal engines: a group rolled back leaves nothing; committed, everything") {
  each_engine([](const std::string& spec, const std::string&) {
    auto j = open_hub_journal(spec);
    {
      auto g = j->begin_tx();
      j->enqueue(make("obs", "x"));
      j->next_seq("obs");
    }  // destroyed uncommitted
    CHECK(j->queued("obs").empty());
    CHECK(j->last_seq("obs") == 0);
    {
      auto g = j->begin_tx();
      j->enqueue(make("obs", "x"));
      j->next_seq("obs");
      g->commit();
    }
    CHECK(j->queued("obs").size() == 1);
    CHECK(j->last_seq("obs") == 1);
  });
}

TEST_CASE("journal engines: missing, history and catch-up lookups answer alike") {
  each_engine([](const std::string& spec, const std::string&) {
    auto j = open_hub_journal(spec);
    const auto s0 = t0 - 1h;
    j->site_seen({"dwd", "obs", s0, 0.07, 0.01, 0});
    j->site_seen({"knmi", "obs", s0, 0.7, 0.02, 0});
    const auto a = j->enqueue(make("obs", "obs/a.bufr"));
    const auto b = j->enqueue(make("obs", "obs/b.grib2"));
    const auto seq1 = send_batch(*j, "obs", {a, b}, t0);
    j->record_outcome(a, "dwd", outcome::stored, "", seq1, t0 + 1s);
    j->record_outcome(b, "dwd", outcome::held, "", seq1, t0 + 1s);
    j->record_outcome(a, "knmi", outcome::stored, "", seq1, t0 + 1s);
    j->record_outcome(b, "knmi", outcome::failed, "disk full", seq1, t0 + 2s);
    const auto c = j->enqueue(make("obs", "obs/c[1].bufr"));
    const auto seq2 = send_batch(*j, "obs", {c}, t0 + 10min);
    j->record_outcome(c, "knmi", outcome::stored, "", seq2, t0 + 11min);

    CHECK(names(j->missing("dwd", t0)) == std::vector<std::string>{"obs/c[1].bufr"});
    const auto k = j->missing("knmi", t0);
    REQUIRE(names(k) == std::vector<std::string>{"obs/b.grib2"});
    CHECK(k[0].last == outcome::failed);
    CHECK(k[0].reason == "disk full");
    CHECK(k[0].retained);
    CHECK(k[0].sent_at == t0);
    CHECK(j->missing("nobody", t0).empty());

    const auto h = j->history("knmi", t0);
    REQUIRE(h.size() == 3);
    CHECK(h[0].name == "obs/c[1].bufr");
    CHECK(h[1].result == outcome::failed);
    CHECK(h[1].at == t0 + 2s);
    CHECK(j->history("knmi", t0, "*.bufr").size() == 2);
    CHECK(j->history("knmi", t0, "obs/?.bufr").size() == 1);
    CHECK(j->history("knmi", t0, "obs/[ab].*").size() == 2);
    CHECK(j->history("knmi", t0, "obs/[^a]*").size() == 2);
    CHECK(j->history("knmi", t0, "obs/c[[]1].bufr").size() == 1);
    CHECK(j->history("knmi", t0, "obs/a.bufr").size() == 1);
    CHECK(j->history("knmi", t0, "obs/a+bufr").empty());  // '+' and '.' are no regex here
    CHECK(j->history("knmi", t0, std::nullopt, "warn").empty());
    CHECK(j->history("knmi", t0, std::nullopt, std::nullopt, 1).size() == 1);

    CHECK(j->products_of_seqs("obs", seq1, seq1).size() == 2);
    CHECK(j->products_of_seqs("obs", seq2, seq2).size() == 1);
    product_filter f;
    f.glob = "obs/*.bufr";
    CHECK(j->find_products(f).size() == 2);
    f = {};
    f.since = t0 + 1min;
    CHECK(j->find_products(f).size() == 1);
    const auto newer = j->enqueue(make("obs", "obs/a.bufr", 2, t0 + 20min));
    CHECK_FALSE(j->superseded(*j->get(a)));
    send_batch(*j, "obs", {newer}, t0 + 20min);
    CHECK(j->superseded(*j->get(a)));

    const auto r = j->expire(t0 + 5min);
    CHECK(r.outcomes == 4);
    CHECK(r.sessions == 1);
    CHECK(r.products == 2);
    CHECK(r.retained_paths.size() == 2);
    CHECK(j->sites().empty());
    CHECK(j->next_seq("obs") == seq2 + 2);
  });
}

TEST_CASE("journal engines: a newer schema and a foreign database are refused") {
  if (!server().running()) return;
  const auto spec = fresh("postgresql");
  {
    pg_journal j(spec);
    CHECK(j.connection().exec("SELECT version FROM schema_version").int64(0, 0) ==
          hub_journal::schema_version);
    j.connection().exec_script("UPDATE schema_version SET version = 99");
  }
  CHECK_THROWS_AS(pg_journal(spec), std::runtime_error);
  CHECK_THROWS_AS(pg_journal(spec, true), std::runtime_error);
  const auto other = fresh("postgresql");
  {
    pg::connection c(other, false);
    c.exec_script("CREATE TABLE t(x int)");
  }
  CHECK_THROWS_AS(pg_journal(other), std::runtime_error);
  CHECK_THROWS_AS(pg_journal(fresh("postgresql"), true), std::runtime_error);
}

TEST_CASE("journal engines: leases name one holder per channel, fenced by epoch and deadline") {
  if (!server().running()) return;
  const auto spec = fresh("postgresql");
  pg_journal a(spec);
  pg_journal b(spec);
  const std::vector<std::string> chans{"obs", "warn"};
  // Long enough that the checks before the lapse run within it on a loaded machine.
  const auto lease = 3s;
  // Hub a takes both; hub b, asking at once, gets nothing.
  const auto ga = a.lease_round("hub-a", 1, "127.0.0.1:9612", t0, chans, lease);
  REQUIRE(ga.size() == 2);
  CHECK(ga[0].epoch == 1);
  CHECK(b.lease_round("hub-b", 2, "", t0, chans, lease).empty());
  // A renewal keeps the epoch.
  const auto again = a.lease_round("hub-a", 1, "127.0.0.1:9612", t0, chans, lease);
  REQUIRE(again.size() == 2);
  CHECK(again[0].epoch == 1);
  // Fenced writes: a's token holds, b's does not.
  {
    auto g = a.begin_tx();
    CHECK_NOTHROW(a.check_lease("obs", "hub-a", 1));
    g->commit();
  }
  CHECK_THROWS_AS(b.check_lease("obs", "hub-b", 1), pg::error);
  const auto view = b.cluster();
  REQUIRE(view.hubs.size() == 2);
  CHECK(view.hubs[0].hub == "hub-a");
  CHECK(view.hubs[0].active == std::vector<std::string>{"obs", "warn"});
  CHECK(view.hubs[1].active.empty());
  REQUIRE(view.leases.size() == 2);
  CHECK(view.leases[0].holder == "hub-a");
  CHECK(view.leases[0].expires_in_s > 0);
  // The same name from another process (a restarted hub) waits like anyone else.
  CHECK(a.lease_round("hub-a", 7, "", t0, chans, lease).empty());
  // Hub a stops renewing: after the lease (the wait is the lease's own time passing), b takes
  // over with the next epoch.
  std::this_thread::sleep_for(lease + 100ms);
  CHECK_THROWS_AS(a.check_lease("obs", "hub-a", 1), pg::error);
  const auto gb = b.lease_round("hub-b", 2, "", t0, {"obs"}, lease);
  REQUIRE(gb.size() == 1);
  CHECK(gb[0].epoch == 2);
  CHECK_NOTHROW(b.check_lease("obs", "hub-b", 2));
  // a comes back: "obs" is b's; "warn" lapsed, a takes it again under a new epoch.
  const auto back = a.lease_round("hub-a", 1, "", t0, chans, lease);
  REQUIRE(back.size() == 1);
  CHECK(back[0].channel == "warn");
  CHECK(back[0].epoch == 2);
  // A clean stop hands over at once.
  a.release_leases("hub-a", 1);
  const auto now_b = b.lease_round("hub-b", 2, "", t0, chans, 5s);
  CHECK(now_b.size() == 2);
}

TEST_CASE("journal engines: a call to a server that stopped answering fails within its timeout") {
  if (!server().running()) return;
  // A statement that outlives the bound (pg_sleep) stands for a server that went silent.
  const auto spec = fresh("postgresql");
  pg::connection c(spec, false, std::chrono::milliseconds(2000));
  c.exec("SELECT 1");
  const auto started = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(c.exec("SELECT pg_sleep(10)"), pg::error);
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(took < 5s);
  CHECK_FALSE(c.connected());
  CHECK(c.exec("SELECT 41 + 1").int64(0, 0) == 42);  // reconnected
}

TEST_CASE("glob_to_regex: SQLite's GLOB as an anchored regular expression") {
  CHECK(glob_to_regex("*.bufr") == "^.*\\.bufr$");
  CHECK(glob_to_regex("a?b") == "^a.b$");
  CHECK(glob_to_regex("[ab]x") == "^[ab]x$");
  CHECK(glob_to_regex("[^a]") == "^[^a]$");
  CHECK(glob_to_regex("a[") == "^a\\[$");
  CHECK(glob_to_regex("(x)+{1}|$^") == "^\\(x\\)\\+\\{1\\}\\|\\$\\^$");
}
