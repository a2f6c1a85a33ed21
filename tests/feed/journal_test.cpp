// The hub journal against a real SQLite file: schema and its version, the outbox's idempotence,
// sequence numbers across reopen, an interrupted write (an injected failure, and a process
// SIGKILLed inside a transaction) leaving the previous state, missing() and history() on a
// known set of sessions and outcomes, and expire() bounding every table.
#include "feed/journal.hpp"

#include <catch2/catch.hpp>
#include <sqlite3.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace mcdist;
using namespace mcdist::feed;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

fs::path temp_db(const char* name) {
  const auto dir = fs::temp_directory_path() / ("mcdist-hubjournal-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto p = dir / name;
  fs::remove(p);
  fs::remove(p.string() + "-wal");
  fs::remove(p.string() + "-shm");
  return p;
}

// A fixed origin so that every time in these tests is exact.
const wall_time t0 = wall_time{} + std::chrono::seconds(1'767'225'600);  // 2026-01-01

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

std::int64_t count(hub_journal& j, const std::string& table) {
  auto st = j.db().prepare("SELECT count(*) FROM " + table);
  st.step();
  return st.column_int64(0);
}

// Sends a batch: next seq, session, products sent and retained, session ended at `at + 1s`.
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

TEST_CASE("hub_journal: creates its schema with a version, in WAL mode, and reopens it") {
  const auto path = temp_db("schema.db");
  {
    hub_journal j(path);
    CHECK(j.db().user_version() == hub_journal::schema_version);
    auto mode = j.db().prepare("PRAGMA journal_mode");
    REQUIRE(mode.step());
    CHECK(mode.column_text(0) == "wal");
    mode.reset();
    j.enqueue(make("obs", "a"));
  }
  hub_journal again(path);
  CHECK(again.queued("obs").size() == 1);
  hub_journal ro(path, true);
  CHECK(ro.queued("obs").size() == 1);
  CHECK_THROWS_AS(ro.enqueue(make("obs", "b")), sqlite::error);
}

TEST_CASE("hub_journal: refuses a newer schema and a database that is not a journal") {
  const auto newer = temp_db("newer.db");
  {
    hub_journal j(newer);
    j.db().set_user_version(hub_journal::schema_version + 1);
  }
  CHECK_THROWS_AS(hub_journal(newer), std::runtime_error);
  CHECK_THROWS_AS(hub_journal(newer, true), std::runtime_error);

  const auto other = temp_db("other.db");
  {
    sqlite::database db(other.string());
    db.exec("CREATE TABLE t(x)");
  }
  CHECK_THROWS_AS(hub_journal(other), std::runtime_error);
  CHECK_THROWS_AS(hub_journal(other, true), std::runtime_error);
  CHECK_THROWS_AS(hub_journal(temp_db("absent.db"), true), sqlite::error);
}

TEST_CASE("hub_journal: enqueue is idempotent on (channel, spool path, size, mtime)") {
  hub_journal j(temp_db("enqueue.db"));
  const auto a = j.enqueue(make("obs", "a", 1, t0));
  CHECK(j.enqueue(make("obs", "a", 1, t0 + 5s)) == a);      // seen again by the start-up scan
  const auto a2 = j.enqueue(make("obs", "a", 2, t0 + 1s));  // rewritten: a new product
  const auto other = j.enqueue(make("warn", "a", 1, t0));   // same file on another channel
  CHECK(a2 != a);
  CHECK(other != a);
  CHECK(count(j, "products") == 3);
  const auto q = j.queued("obs");
  REQUIRE(q.size() == 2);
  CHECK(q[0].id == a);
  CHECK(q[0].queued_at == t0);  // the first enqueue's time is kept
  CHECK(q[1].id == a2);
  CHECK(q[0].state == product_state::queued);
  CHECK(q[0].seq == 0);
  CHECK_FALSE(q[0].sent_at);

  // Enqueueing a product already sent returns it unchanged: nothing is sent twice.
  send_batch(j, "obs", {a}, t0 + 10s);
  CHECK(j.enqueue(make("obs", "a", 1, t0 + 20s)) == a);
  CHECK(j.get(a)->state == product_state::sent);
  CHECK(j.queued("obs").size() == 1);
}

TEST_CASE("hub_journal: sequence numbers are per channel and persist across reopen") {
  const auto path = temp_db("seq.db");
  {
    hub_journal j(path);
    CHECK(j.next_seq("obs") == 1);
    CHECK(j.next_seq("obs") == 2);
    CHECK(j.next_seq("warn") == 1);
  }
  hub_journal j(path);
  CHECK(j.next_seq("obs") == 3);
  CHECK(j.next_seq("warn") == 2);
  const auto ch = j.channels();
  REQUIRE(ch.size() == 2);
  CHECK(ch[0].channel == "obs");
  CHECK(ch[0].last_seq == 3);
}

TEST_CASE("hub_journal: a batch goes queued -> sending -> sent; a crash leaves it unfinished") {
  const auto path = temp_db("batch.db");
  std::int64_t a = 0, b = 0, c = 0;
  {
    hub_journal j(path);
    a = j.enqueue(make("obs", "a"));
    b = j.enqueue(make("obs", "b"));
    c = j.enqueue(make("obs", "c"));
    const auto seq = j.next_seq("obs");
    j.begin_session({"obs", seq, "0000abcd", session_kind::batch, t0}, std::vector{a, b});
    CHECK(j.get(a)->state == product_state::sending);
    CHECK(j.get(a)->seq == seq);
    CHECK(j.get(c)->state == product_state::queued);
    j.mark_sent(a, "/keep/a", t0 + 1s);
    // the process dies here: b is sending, the session has no end
  }
  hub_journal j(path);
  const auto u = j.unfinished();
  REQUIRE(u.size() == 1);
  CHECK(u[0].id == b);
  CHECK(j.close_interrupted_sessions(t0 + 60s) == 1);
  const auto s = j.sessions(t0);
  REQUIRE(s.size() == 1);
  CHECK(s[0].result == session_outcome::aborted);
  CHECK(s[0].products == 2);
  j.requeue(b);
  CHECK(j.queued("obs").size() == 2);
  j.requeue(a);  // only a 'sending' product goes back to the queue
  CHECK(j.get(a)->state == product_state::sent);
  CHECK(j.get(a)->retained_path == "/keep/a");
  CHECK(j.get(a)->sent_at == t0 + 1s);

  j.mark_failed(c, "vanished from the spool");
  CHECK(j.get(c)->state == product_state::failed);
  const auto ch = j.channels();
  REQUIRE(ch.size() == 1);
  CHECK(ch[0].queued == 1);
  CHECK(ch[0].sent == 1);
  CHECK(ch[0].failed == 1);
  CHECK(ch[0].last_session == t0);
}

TEST_CASE("hub_journal: a failure inside a write leaves the previous state") {
  hub_journal j(temp_db("inject.db"));
  const auto a = j.enqueue(make("obs", "a"));
  const auto b = j.enqueue(make("obs", "b"));
  const auto c = j.enqueue(make("obs", "c"));
  // The third product update of begin_session fails (after the session row and two updates).
  j.db().exec("CREATE TEMP TRIGGER fail_c BEFORE UPDATE ON products WHEN NEW.id = " +
              std::to_string(c) + " BEGIN SELECT RAISE(ABORT, 'injected'); END");
  CHECK_THROWS_AS(j.begin_session({"obs", 1, "s1", session_kind::batch, t0}, std::vector{a, b, c}),
                  sqlite::error);
  CHECK(count(j, "sessions") == 0);
  CHECK(count(j, "session_products") == 0);
  CHECK(j.queued("obs").size() == 3);
  CHECK(j.unfinished().empty());
  j.db().exec("DROP TRIGGER fail_c");
  j.begin_session({"obs", 1, "s1", session_kind::batch, t0}, std::vector{a, b, c});
  CHECK(j.unfinished().size() == 3);
}

namespace {
int g_signal_fd = -1;
// An SQL function that tells the parent it runs, then waits to be killed.
void hang(sqlite3_context* ctx, int, sqlite3_value**) {
  const char byte = 'x';
  (void)!::write(g_signal_fd, &byte, 1);
  for (;;) ::pause();
  sqlite3_result_null(ctx);
}
}  // namespace

TEST_CASE("hub_journal: a process killed inside a transaction leaves the previous state") {
  const auto path = temp_db("kill.db");
  std::vector<std::int64_t> ids;
  {
    hub_journal j(path);
    for (int i = 0; i < 50; ++i) ids.push_back(j.enqueue(make("obs", "p" + std::to_string(i))));
  }
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(fds[0]);
    g_signal_fd = fds[1];
    try {
      hub_journal j(path);
      sqlite3_create_function(j.db().handle(), "hang", 0, SQLITE_UTF8, nullptr, hang, nullptr,
                              nullptr);
      // Hang at the 40th product, with the session and 39 updates written (spilled to the WAL
      // or not) but not committed.
      j.db().exec("CREATE TEMP TRIGGER hang_40 BEFORE UPDATE ON products WHEN NEW.id = " +
                  std::to_string(ids[39]) + " BEGIN SELECT hang(); END");
      j.begin_session({"obs", j.next_seq("obs"), "s1", session_kind::batch, t0}, ids);
    } catch (...) {
    }
    ::_exit(3);
  }
  ::close(fds[1]);
  char byte = 0;
  REQUIRE(::read(fds[0], &byte, 1) == 1);  // the child is inside begin_session's transaction
  ::kill(child, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  ::close(fds[0]);

  hub_journal j(path);
  CHECK(count(j, "sessions") == 0);
  CHECK(j.queued("obs").size() == 50);
  CHECK(j.unfinished().empty());
  CHECK(j.next_seq("obs") == 2);  // next_seq(1) committed before begin_session started
}

TEST_CASE("hub_journal: missing lists exactly the products a site did not store or hold") {
  hub_journal j(temp_db("missing.db"));
  const auto s0 = t0 - 1h;
  j.site_seen({"dwd", "obs", s0, 0.07, 0.01, 0});
  j.site_seen({"knmi", "obs", s0, 0.7, 0.02, 0});
  j.site_seen({"knmi", "warn", s0, 0.7, 0.0, 0});

  // Session 1 (t0): a, b. dwd stores both, knmi stores a, fails b.
  const auto a = j.enqueue(make("obs", "a.bufr"));
  const auto b = j.enqueue(make("obs", "b.bufr"));
  const auto seq1 = send_batch(j, "obs", {a, b}, t0);
  j.record_outcome(a, "dwd", outcome::stored, "", seq1, t0 + 1s);
  j.record_outcome(b, "dwd", outcome::held, "", seq1, t0 + 1s);
  j.record_outcome(a, "knmi", outcome::stored, "", seq1, t0 + 1s);
  j.record_outcome(b, "knmi", outcome::failed, "disk full", seq1, t0 + 1s);
  // Session 2 (t0 + 10 min): c, d. dwd was down: no outcome at all. knmi stores both.
  const auto c = j.enqueue(make("obs", "c.grib2"));
  const auto d = j.enqueue(make("obs", "d.grib2"));
  const auto seq2 = send_batch(j, "obs", {c, d}, t0 + 10min);
  j.record_outcome(c, "knmi", outcome::stored, "", seq2, t0 + 11min);
  j.record_outcome(d, "knmi", outcome::stored, "", seq2, t0 + 11min);
  // Session 3 (t0 + 20 min) on warn: w. dwd is not on warn; knmi missed it (seq gap).
  const auto w = j.enqueue(make("warn", "w.txt"));
  const auto seqw = send_batch(j, "warn", {w}, t0 + 20min);
  j.record_outcome(w, "knmi", outcome::missed, "seq gap 1-1", seqw, t0 + 21min);
  // An open session (in flight) on obs: e. Not missing until it ends.
  const auto e = j.enqueue(make("obs", "e.grib2"));
  j.begin_session({"obs", j.next_seq("obs"), "s-open", session_kind::batch, t0 + 30min},
                  std::vector{e});

  CHECK(names(j.missing("dwd", t0)) == std::vector<std::string>{"c.grib2", "d.grib2"});
  const auto k = j.missing("knmi", t0);
  REQUIRE(names(k) == std::vector<std::string>{"b.bufr", "w.txt"});
  CHECK(k[0].last == outcome::failed);
  CHECK(k[0].reason == "disk full");
  CHECK(k[0].seq == seq1);
  CHECK(k[0].retained);
  CHECK(k[0].sent_at == t0);
  CHECK(k[1].last == outcome::missed);
  CHECK(k[1].channel == "warn");
  // The window: sessions that started at or after `since` only.
  CHECK(names(j.missing("knmi", t0 + 5min)) == std::vector<std::string>{"w.txt"});
  CHECK(j.missing("dwd", t0 + 25min).empty());
  // A site the journal does not know has nothing missing.
  CHECK(j.missing("meteofrance", t0).empty());

  // A resend to dwd of c and d: c stored, d fails again. Only d is still missing.
  const auto rs =
      j.begin_session({"obs", 0, "r1", session_kind::resend, t0 + 40min}, std::vector{c, d});
  CHECK(j.get(c)->state == product_state::sent);  // a resend leaves the outbox state alone
  CHECK(j.get(c)->seq == seq2);
  j.record_outcome(c, "dwd", outcome::stored, "", 0, t0 + 41min);
  j.record_outcome(d, "dwd", outcome::failed, "checksum mismatch", 0, t0 + 41min);
  j.end_session(rs, session_outcome::partial, t0 + 42min);
  const auto m = j.missing("dwd", t0);
  REQUIRE(names(m) == std::vector<std::string>{"d.grib2"});
  CHECK(m[0].reason == "checksum mismatch");
  CHECK(m[0].sent_at == t0 + 40min);  // the latest session that carried it
}

TEST_CASE("hub_journal: history filters by site, time, glob and channel, newest first") {
  hub_journal j(temp_db("history.db"));
  const auto a = j.enqueue(make("obs", "obs/a.bufr"));
  const auto g = j.enqueue(make("nwp", "nwp/t2m.grib2"));
  const auto seq = send_batch(j, "obs", {a}, t0);
  send_batch(j, "nwp", {g}, t0);
  j.record_outcome(a, "dwd", outcome::stored, "", seq, t0 + 1s);
  j.record_outcome(g, "dwd", outcome::failed, "timeout", 1, t0 + 2s);
  j.record_outcome(g, "dwd", outcome::stored, "", 0, t0 + 3s);
  j.record_outcome(a, "knmi", outcome::stored, "", seq, t0 + 1s);

  auto h = j.history("dwd", t0);
  REQUIRE(h.size() == 3);
  CHECK(h[0].name == "nwp/t2m.grib2");
  CHECK(h[0].result == outcome::stored);
  CHECK(h[0].at == t0 + 3s);
  CHECK(h[1].result == outcome::failed);
  CHECK(h[1].reason == "timeout");
  CHECK(h[2].name == "obs/a.bufr");
  CHECK(h[2].seq == seq);
  CHECK(h[2].size == 1000);
  CHECK(j.history("dwd", t0 + 2s).size() == 2);
  CHECK(j.history("dwd", t0, "*.bufr").size() == 1);
  CHECK(j.history("dwd", t0, "nwp/*").size() == 2);
  CHECK(j.history("dwd", t0, std::nullopt, "obs").size() == 1);
  CHECK(j.history("dwd", t0, "*.bufr", "nwp").empty());
  CHECK(j.history("dwd", t0, std::nullopt, std::nullopt, 1).size() == 1);
  CHECK(j.history("knmi", t0).size() == 1);
  CHECK(j.history("nobody", t0).empty());
}

TEST_CASE("hub_journal: products_of_seqs and find_products serve only retained products") {
  hub_journal j(temp_db("catchup.db"));
  const auto a = j.enqueue(make("obs", "a.bufr"));
  const auto b = j.enqueue(make("obs", "b.grib2"));
  const auto c = j.enqueue(make("obs", "c.bufr"));
  const auto seq1 = send_batch(j, "obs", {a, b}, t0);
  const auto seq2 = j.next_seq("obs");
  j.begin_session({"obs", seq2, "s2", session_kind::batch, t0 + 1h}, std::vector{c});
  j.mark_sent(c, std::nullopt, t0 + 1h);  // `delete` disposition: not kept
  j.end_session("obs", seq2, session_outcome::complete, t0 + 1h);
  CHECK(j.products_of_seqs("obs", seq1, seq2).size() == 2);
  CHECK(j.products_of_seqs("obs", seq2, seq2).empty());
  CHECK(j.products_of_seqs("warn", 1, 100).empty());
  product_filter f;
  f.glob = "*.bufr";
  const auto r = j.find_products(f);
  REQUIRE(r.size() == 1);
  CHECK(r[0].id == a);
  CHECK(r[0].retained_path == "/retained/" + std::to_string(a));
  f = {};
  f.since = t0 + 1s;
  CHECK(j.find_products(f).empty());
  f.since = t0;
  f.seqs = std::pair<std::uint64_t, std::uint64_t>{seq1, seq1};
  CHECK(j.find_products(f).size() == 2);
  CHECK_THROWS_AS(j.end_session("obs", 99, session_outcome::complete), std::invalid_argument);
}

TEST_CASE("hub_journal: expire bounds every table and returns the retained files") {
  hub_journal j(temp_db("expire.db"));
  j.site_seen({"old", "obs", t0 - 48h, 0, 0, 0});
  j.site_seen({"dwd", "obs", t0, 0, 0, 0});
  std::vector<std::int64_t> old_ids;
  for (int i = 0; i < 20; ++i)
    old_ids.push_back(j.enqueue(make("obs", "old" + std::to_string(i), 1, t0 - 48h)));
  send_batch(j, "obs", old_ids, t0 - 48h);
  for (const auto id : old_ids) j.record_outcome(id, "dwd", outcome::stored, "", 1, t0 - 48h);
  const auto fresh = j.enqueue(make("obs", "fresh", 1, t0));
  send_batch(j, "obs", {fresh}, t0);
  j.record_outcome(fresh, "dwd", outcome::stored, "", 2, t0);
  const auto waiting = j.enqueue(make("obs", "waiting", 1, t0 - 72h));  // queued: kept
  const auto failed = j.enqueue(make("obs", "broken", 1, t0 - 72h));
  j.mark_failed(failed, "unreadable");

  const auto r = j.expire(t0 - 24h);
  CHECK(r.products == 21);
  CHECK(r.sessions == 1);
  CHECK(r.outcomes == 20);
  CHECK(r.sites == 1);
  CHECK(r.retained_paths.size() == 20);
  CHECK(r.retained_paths[0].starts_with("/retained/"));
  CHECK(count(j, "products") == 2);
  CHECK(count(j, "session_products") == 1);
  CHECK(count(j, "outcomes") == 1);
  CHECK(j.get(waiting));
  CHECK(j.get(fresh));
  CHECK(j.sites().size() == 1);
  CHECK(j.history("dwd", t0 - 72h).size() == 1);
  // Idempotent: nothing left to remove.
  const auto again = j.expire(t0 - 24h);
  CHECK(again.products == 0);
  CHECK(again.outcomes == 0);
  // Sequence numbers survive expiry (they must never be reused).
  CHECK(j.next_seq("obs") == 3);
}
