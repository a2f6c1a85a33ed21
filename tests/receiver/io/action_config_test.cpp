// Actions on receipt: templates and placeholders, and their configuration ([[action]],
// [retention]) with its errors.

#include "receiver/io/action_config.hpp"

#include "receiver/io/daemon_config.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

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

std::string config_error_of(const std::string& actions) {
  const std::string text =
      "id = \"a\"\ninterface = \"127.0.0.1\"\ndest = \"/tmp\"\ntemp = \"/tmp\"\n"
      "allow_unsigned = true\n[[channel]]\nname = \"synop\"\ngroup = \"239.192.0.1:4711\"\n" +
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
  CHECK_THROWS_AS(expand_target("{relpath}", v), template_error);         // relative
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
allow_unsigned = true
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

TEST_CASE("bad actions are refused naming the action and the problem", "[unit][receiver][config]") {
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
  CHECK_THAT(config_error_of(head + "match = \"a\"\nlink = \"/a/%q\"\n"), Catch::Contains("%q"));
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
