// Actions on receipt: templates and placeholders, their configuration errors, the delivery
// journal on a real SQLite file, and the runner's timeout on real child processes.

#include "receiver/io/action_runner.hpp"
#include "receiver/io/daemon_config.hpp"
#include "receiver/io/delivery_journal.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

placeholder_values sample_values() {
  placeholder_values v;
  v.path = "/srv/in/obs/2026/a.bufr";
  v.relpath = "obs/2026/a.bufr";
  v.channel = "synop";
  v.session = "0000abcd";
  v.sha256 = std::string(64, 'f');
  v.groups = {"obs/2026/a.bufr", "2026", "a"};
  // 2026-11-23 04:05:06 UTC, day 327 of the year.
  v.delivered = std::chrono::system_clock::time_point(std::chrono::seconds(1795406706));
  return v;
}

/// A fresh directory under TMPDIR, removed at the end of the scope.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::string t = (std::filesystem::temp_directory_path() / "mcdist-actions-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string config_error_of(const std::string& actions) {
  const std::string text =
      "id = \"a\"\ninterface = \"127.0.0.1\"\ndest = \"/tmp\"\ntemp = \"/tmp\"\n"
      "[[channel]]\nname = \"synop\"\ngroup = \"239.192.0.1:4711\"\n" +
      actions;
  try {
    validate(load_config_string(text, "t.toml"));
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("placeholders expand to the product's values and capture groups",
          "[unit][receiver][actions]") {
  const auto v = sample_values();
  CHECK(expand_template("{path}", v, false) == "/srv/in/obs/2026/a.bufr");
  CHECK(expand_template("{relpath}|{channel}|{session}", v, false) ==
        "obs/2026/a.bufr|synop|0000abcd");
  CHECK(expand_template("{sha256}", v, false) == std::string(64, 'f'));
  CHECK(expand_template("{0}:{1}:{2}:{3}:{9}", v, false) == "obs/2026/a.bufr:2026:a::");
  CHECK(expand_template("{{literal}} }}", v, false) == "{literal} }");
  // Without dates a '%' is plain text (an exec argument may hold one).
  CHECK(expand_template("100%Y", v, false) == "100%Y");
  CHECK(expand_template("/x/%Y/%m/%d/%H%M%S-%j-%%", v, true) == "/x/2026/11/23/040506-327-%");
}

TEST_CASE("bad templates are refused with the offending text", "[unit][receiver][actions]") {
  auto msg = [](std::string_view t, bool dates) -> std::string {
    try {
      check_template(t, dates);
    } catch (const template_error& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(msg("{pth}", false), Catch::Contains("unknown placeholder {pth}"));
  CHECK_THAT(msg("{10}", false), Catch::Contains("unknown placeholder {10}"));
  CHECK_THAT(msg("{path", false), Catch::Contains("'{' without '}'"));
  CHECK_THAT(msg("a}b", false), Catch::Contains("'}' without '{'"));
  CHECK_THAT(msg("/x/%Q", true), Catch::Contains("%Q"));
  CHECK_THAT(msg("/x/%", true), Catch::Contains("'%' at the end"));
  CHECK(msg("/x/%Q", false).empty());
}

TEST_CASE("link and copy targets must stay absolute and cannot climb with '..'",
          "[unit][receiver][actions]") {
  auto v = sample_values();
  CHECK(expand_target("/archive/%Y/{1}/{2}.bufr", v) == "/archive/2026/2026/a.bufr");
  v.groups = {"", "..", "etc"};
  CHECK_THROWS_AS(expand_target("/archive/{1}/{2}", v), template_error);
  v.groups = {"", "", "x"};
  CHECK_THROWS_AS(expand_target("/archive/{1}/{2}", v), template_error);  // empty component
  CHECK_THROWS_AS(expand_target("{relpath}", v), template_error);          // relative
  v.groups = {"", ".", "x"};
  CHECK_THROWS_AS(expand_target("/archive/{1}/{2}", v), template_error);
}

TEST_CASE("match_action searches the path and returns the groups", "[unit][receiver][actions]") {
  action_config a;
  a.match = R"(obs/(\d+)/(\w+)\.bufr$)";
  a.re = std::regex(a.match, std::regex::ECMAScript);
  const auto g = match_action(a, "p1/obs/2026/a.bufr");
  REQUIRE(g);
  CHECK((*g)[0] == "obs/2026/a.bufr");
  CHECK((*g)[1] == "2026");
  CHECK((*g)[2] == "a");
  CHECK((*g)[3].empty());
  CHECK_FALSE(match_action(a, "p1/obs/2026/a.grib2"));
}

TEST_CASE("[[action]] and [retention] are read from TOML", "[unit][receiver][config]") {
  const auto cfg = load_config_string(R"(id = "a"
interface = "127.0.0.1"
dest = "/tmp"
temp = "/tmp"
journal = "/var/lib/mcdist/journal.db"
[retention]
max_age = "7d"
interval = "30s"
[[channel]]
name = "synop"
group = "239.192.0.1:4711"
[[channel]]
name = "grib"
group = "239.192.0.2:4711"
[channel.retention]
max_age = "6h"
[[action]]
name = "ingest"
channel = "synop"
match = '\.bufr$'
exec = ["/bin/true", "{path}", "{1}"]
timeout = "5s"
concurrency = 2
retries = 3
retry_delay = "1s"
[[action]]
name = "archive"
match = '^(\w+)/'
link = "/archive/%Y%m%d/{1}"
)",
                                      "t.toml");
  REQUIRE_NOTHROW(validate(cfg));
  CHECK(cfg.journal == "/var/lib/mcdist/journal.db");
  CHECK(cfg.retention_interval == 30s);
  CHECK(cfg.channels[0].retention_max_age == std::chrono::hours(24 * 7));
  CHECK(cfg.channels[1].retention_max_age == 6h);
  REQUIRE(cfg.actions.size() == 2);
  const auto& a = cfg.actions[0];
  CHECK(a.name == "ingest");
  CHECK(a.channel == "synop");
  CHECK(a.kind == action_kind::exec);
  CHECK(a.argv == std::vector<std::string>{"/bin/true", "{path}", "{1}"});
  CHECK(a.timeout == 5s);
  CHECK(a.concurrency == 2);
  CHECK(a.retries == 3);
  CHECK(a.retry_delay == 1s);
  CHECK(cfg.actions[1].channel == "*");
  CHECK(cfg.actions[1].kind == action_kind::link);
  CHECK(cfg.actions[1].target == "/archive/%Y%m%d/{1}");
  CHECK(parse_age("90s") == 90s);
  CHECK(parse_age("1.5d") == 36h);
  CHECK_FALSE(parse_age("d"));
  CHECK_FALSE(parse_age("7x"));
}

TEST_CASE("bad actions are refused naming the action and the problem",
          "[unit][receiver][config]") {
  const std::string head = "[[action]]\nname = \"x\"\n";
  CHECK_THAT(config_error_of(head + "match = \"a((\"\nexec = [\"/bin/true\"]\n"),
             Catch::Contains("action 'x'.match") && Catch::Contains("regular expression"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\nexec = [\"true\"]\n"),
             Catch::Contains("absolute path"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\nexec = [\"/nonexistent/prog\"]\n"),
             Catch::Contains("not an executable file"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\nexec = [\"/etc\"]\n"),
             Catch::Contains("not a regular file"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\nexec = [\"/bin/true\", \"{x}\"]\n"),
             Catch::Contains("unknown placeholder {x}"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\nlink = \"/a/%q\"\n"),
             Catch::Contains("%q"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\ncopy = \"rel/{0}\"\n"),
             Catch::Contains("absolute path template"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\ncopy = \"/a\"\nlink = \"/b\"\n"),
             Catch::Contains("exactly one of"));
  CHECK_THAT(config_error_of(head + "exec = [\"/bin/true\"]\n"), Catch::Contains("needs match"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\nexec = [\"/bin/true\"]\nchannel = \"no\"\n"),
             Catch::Contains("names no configured channel"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\nexec = [\"/bin/true\"]\n" + head +
                             "match = \"b\"\nexec = [\"/bin/true\"]\n"),
             Catch::Contains("two actions are named 'x'"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\nexec = [\"/bin/true\"]\nconcurrency = 0\n"),
             Catch::Contains("concurrency"));
  CHECK_THAT(config_error_of(head + "match = \"a\"\nexec = [\"/bin/true\"]\nbogus = 1\n"),
             Catch::Contains("unknown setting 'bogus'"));
  CHECK_THAT(config_error_of("[retention]\nmax_age = \"60d\"\n"),
             Catch::Contains("journal_max_age"));
  CHECK_THAT(config_error_of("[retention]\nmax_age = \"soon\"\n"),
             Catch::Contains("retention.max_age"));
}

TEST_CASE("the journal turns intents into deliveries and tracks runs",
          "[unit][receiver][journal]") {
  temp_dir dir;
  const auto file = dir.path / "journal.db";
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

TEST_CASE("a timed-out exec action has its whole process group killed and is retried",
          "[unit][receiver][actions]") {
  temp_dir dir;
  delivery_journal journal(dir.path / "journal.db");
  const auto pidfile = dir.path / "grandchild.pid";
  action_config a;
  a.name = "slow";
  a.channel = "*";
  a.match = ".";
  a.re = std::regex(a.match);
  // The shell starts a grandchild that would outlive it, then waits.
  a.argv = {"/bin/sh", "-c", "sleep 30 & echo $! > " + pidfile.string() + "; echo started; wait"};
  a.timeout = 300ms;
  a.retries = 1;
  a.retry_delay = 10ms;
  std::ostringstream logged;
  auto log = std::make_shared<spdlog::logger>(
      "t", std::make_shared<spdlog::sinks::ostream_sink_mt>(logged));
  boost::asio::io_context io;
  action_runner runner(io, {a}, journal, log);
  delivery_row d;
  d.channel = "c";
  d.relpath = "x";
  d.path = "/nonexistent/x";
  d.sha256 = std::string(64, '0');
  d.session = "00000001";
  d.delivered_at = std::chrono::system_clock::now();
  std::vector<std::int64_t> ids;
  journal.deliver(d, std::vector<std::string>{"slow"}, ids);
  runner.submit(ids[0], "slow", d);
  const auto t0 = std::chrono::steady_clock::now();
  while (runner.stats()[0].second.failed == 0 && std::chrono::steady_clock::now() - t0 < 10s) {
    io.run_for(50ms);
  }
  const auto st = runner.stats()[0].second;
  CHECK(st.retried == 1);
  CHECK(st.failed == 1);
  CHECK(st.done == 0);
  const auto text = logged.str();
  CHECK_THAT(text, Catch::Contains("timed out"));
  CHECK_THAT(text, Catch::Contains("started"));  // the child's output went to the log
  // The grandchild of the last attempt died with its group (kill(pid, 0) fails once reaped
  // by init; a zombie still answers, so look at /proc).
  std::ifstream pf(pidfile);
  pid_t gc = 0;
  pf >> gc;
  REQUIRE(gc > 0);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(gc) + "/stat");
    std::string s;
    std::getline(stat, s);
    gone = !stat || s.find(") Z") != std::string::npos;
    if (!gone) ::usleep(10000);
  }
  CHECK(gone);
  const auto runs = journal.unfinished_runs();
  CHECK(runs.empty());
}
