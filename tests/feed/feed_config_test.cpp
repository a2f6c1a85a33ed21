#include "feed/feed_config.hpp"

#include <catch2/catch.hpp>

#include <string>

using mcdist::feed::after_send;
using mcdist::feed::config_error;
using mcdist::feed::parse_feed_config;

namespace {

const std::string top = R"(
interface = "10.0.0.5"
rate = "500M"
journal = "/var/lib/mcdist-feed/journal.db"
retention = "24h"
retained = "/var/lib/mcdist-feed/retained"
control_socket = "/run/mcdist-feed/control.sock"
control_group = "mcdist-operators"
)";

const std::string warnings = R"(
[[channel]]
name = "warnings"
group = "239.192.0.10:4711"
spool = ["/spool/warnings"]
priority = 10
batch_window = "200ms"
after = "delete"
)";

/// The error message of parsing `text`, or "" when it parses.
std::string error_of(const std::string& text) {
  try {
    parse_feed_config(text, "feed.toml");
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a full configuration parses with every setting", "[unit][feed]") {
  const auto c = parse_feed_config(top + warnings + R"(
[[channel]]
name = "fields"
group = "239.192.0.11:4711"
spool = ["/spool/fields/a", "/spool/fields/b"]
priority = 1
cap = "200M"
batch_window = "5s"
batch_max_files = 50
batch_max_bytes = "2G"
after = "move:/archive/fields"
ignore = ["*.tmp", "partial/*"]
ttl = 16
receivers = ["site-a", "site-b"]
register_window = "2s"
register_timeout = "30s"
fec_k = 300
)",
                                   "feed.toml");
  REQUIRE(c.interface.to_string() == "10.0.0.5");
  REQUIRE(c.rate_bps == 500'000'000);
  REQUIRE(c.retention == std::chrono::hours(24));
  REQUIRE(c.retained_dir == "/var/lib/mcdist-feed/retained");
  REQUIRE(c.control_group == "mcdist-operators");
  REQUIRE(c.channels.size() == 2);
  const auto& w = c.channels[0];
  REQUIRE(w.name == "warnings");
  REQUIRE(w.priority == 10);
  REQUIRE(w.share == 1.0);
  REQUIRE(w.cap_bps == 0);
  REQUIRE(w.batch_window == std::chrono::milliseconds(200));
  REQUIRE(w.after == after_send::remove);
  const auto& f = c.channels[1];
  REQUIRE(f.spools.size() == 2);
  REQUIRE(f.cap_bps == 200'000'000);
  REQUIRE(f.batch_max_files == 50);
  REQUIRE(f.batch_max_bytes == std::uint64_t{2} << 30);
  REQUIRE(f.after == after_send::move);
  REQUIRE(f.move_dir == "/archive/fields");
  REQUIRE(f.ignore == std::vector<std::string>{"*.tmp", "partial/*"});
  REQUIRE(f.ttl == 16);
  REQUIRE(f.receivers == std::vector<std::string>{"site-a", "site-b"});
  REQUIRE(f.register_timeout == std::chrono::seconds(30));
  // fec_k: "auto" when not given (a session's k from its sites' loss), a number kept as given.
  REQUIRE(w.profile.fec_k_auto);
  REQUIRE_FALSE(f.profile.fec_k_auto);
  REQUIRE(f.profile.fec_k == 300);
  const auto a = parse_feed_config(top + warnings + "fec_k = \"auto\"\n", "feed.toml");
  REQUIRE(a.channels[0].profile.fec_k_auto);
}

TEST_CASE("errors name the key that is wrong", "[unit][feed]") {
  CHECK_THAT(error_of(warnings), Catch::Contains("'interface' is required"));
  CHECK_THAT(error_of(top), Catch::Contains("no [[channel]]"));
  CHECK_THAT(error_of(top + warnings + "\nspeed = 1\n"), Catch::Contains("'channel[0].speed'"));
  CHECK_THAT(error_of("bogus = 1\n" + top + warnings), Catch::Contains("unknown setting 'bogus'"));
  CHECK_THAT(error_of(top + R"([[channel]]
name = "x"
group = "10.0.0.1:4711"
spool = ["/s"]
)"),
             Catch::Contains("'channel[0].group'"));
  CHECK_THAT(error_of(top + R"([[channel]]
name = "x"
group = "239.1.1.1:4711"
spool = ["relative/dir"]
)"),
             Catch::Contains("absolute"));
  CHECK_THAT(error_of(top + R"([[channel]]
name = "x"
group = "239.1.1.1:4711"
spool = ["/s"]
after = "shred"
)"),
             Catch::Contains("'channel[0].after'"));
  CHECK_THAT(error_of(top + R"([[channel]]
name = "x"
group = "239.1.1.1:4711"
spool = ["/s"]
share = 0.5
cap = "10M"
)"),
             Catch::Contains("exclude each other"));
  CHECK_THAT(error_of(top + R"([[channel]]
name = "x"
group = "239.1.1.1:4711"
spool = ["/s"]
share = 1.5
)"),
             Catch::Contains("'channel[0].share'"));
  CHECK_THAT(error_of(top + R"([[channel]]
name = "x"
group = "239.1.1.1:4711"
spool = ["/s"]
batch_max_files = 1e9
)"),
             Catch::Contains("whole number"));
  CHECK_THAT(error_of(top + R"([[channel]]
name = "x"
group = "239.1.1.1:4711"
spool = ["/s"]
batch_window = "soon"
)"),
             Catch::Contains("'channel[0].batch_window'"));
  CHECK_THAT(error_of(top + R"([[channel]]
name = "has space"
group = "239.1.1.1:4711"
spool = ["/s"]
)"),
             Catch::Contains("'channel[0].name'"));
  CHECK_THAT(
      error_of("interface = \"10.0.0.5\"\nrate = \"fast\"\njournal = \"/j\"\nretention = \"0s\"\n" +
               warnings),
      Catch::Contains("'rate'"));
  CHECK_THAT(error_of("interface = \"10.0.0.5\"\nrate = \"1G\"\njournal = \"/j\"\n" + warnings),
             Catch::Contains("'retained' is required"));
  CHECK_THAT(error_of(top + "rate = [\n"), Catch::Contains("feed.toml"));  // syntax error
  CHECK_THAT(error_of(top + warnings + "fec_k = \"large\"\n"),
             Catch::Contains("'channel[0].fec_k' must be \"auto\" or 0 to 4096"));
  CHECK_THAT(error_of(top + warnings + "fec_k = 5000\n"), Catch::Contains("'channel[0].fec_k'"));
}

TEST_CASE("channels must not share names, groups or spools", "[unit][feed]") {
  CHECK_THAT(error_of(top + warnings + warnings), Catch::Contains("two channels are named"));
  CHECK_THAT(error_of(top + warnings + R"(
[[channel]]
name = "other"
group = "239.192.0.10:4711"
spool = ["/spool/other"]
)"),
             Catch::Contains("uses the group"));
  CHECK_THAT(error_of(top + warnings + R"(
[[channel]]
name = "other"
group = "239.192.0.12:4711"
spool = ["/spool/warnings/sub"]
)"),
             Catch::Contains("overlaps"));
  CHECK_THAT(error_of(top + R"([[channel]]
name = "x"
group = "239.1.1.1:4711"
spool = ["/s"]
after = "move:/s/done"
)"),
             Catch::Contains("inside its spool"));
  // A name that merely shares a prefix is another directory.
  CHECK(error_of(top + warnings + R"(
[[channel]]
name = "other"
group = "239.192.0.12:4711"
spool = ["/spool/warnings2"]
)")
            .empty());
}

TEST_CASE("the status port defaults to 127.0.0.1:9612, can be moved or turned off",
          "[unit][feed]") {
  auto c = parse_feed_config(top + warnings, "feed.toml");
  REQUIRE(c.http);
  REQUIRE(c.http->to_string() == "127.0.0.1:9612");
  REQUIRE_FALSE(c.http_explicit);
  c = parse_feed_config("http = \"0.0.0.0:8080\"\n" + top + warnings, "feed.toml");
  REQUIRE(c.http->to_string() == "0.0.0.0:8080");
  REQUIRE(c.http_explicit);
  c = parse_feed_config("http = \"127.0.0.1:0\"\n" + top + warnings, "feed.toml");
  REQUIRE(c.http->port == 0);  // any free port (tests)
  c = parse_feed_config("http = \"off\"\n" + top + warnings, "feed.toml");
  REQUIRE_FALSE(c.http);
  REQUIRE(error_of("http = \"nowhere:80\"\n" + top + warnings).find("'http'") != std::string::npos);
  REQUIRE(error_of("http = \"239.1.1.1:80\"\n" + top + warnings).find("'http'") !=
          std::string::npos);
}

TEST_CASE("an encrypted channel needs the feed's key and site keys", "[unit][feed]") {
  const std::string encrypted = warnings + "encrypt = true\n";
  CHECK_THAT(error_of(top + encrypted),
             Catch::Contains("encrypt = true needs 'key' and 'site_keys'"));
  CHECK_THAT(error_of("key = \"/etc/mcdist/feed.key\"\n" + top + encrypted),
             Catch::Contains("encrypt = true needs"));
  CHECK_THAT(error_of(top + warnings + "encrypt = \"yes\"\n"),
             Catch::Contains("'channel[0].encrypt'"));
  const auto c = parse_feed_config(
      "key = \"/etc/mcdist/feed.key\"\nsite_keys = \"/etc/mcdist/sites\"\n" + top + encrypted,
      "feed.toml");
  REQUIRE(c.channels.size() == 1);
  CHECK(c.channels[0].encrypt);
  CHECK_FALSE(parse_feed_config(top + warnings, "feed.toml").channels[0].encrypt);
}

TEST_CASE("the interface is a name or an address; the channels share one family", "[unit][feed]") {
  const std::string rest = R"(rate = "500M"
journal = "/j"
retention = "0s"
)";
  const auto named = parse_feed_config("interface = \"eth1\"\n" + rest + warnings, "feed.toml");
  REQUIRE(named.interface.name == "eth1");
  REQUIRE_FALSE(named.interface.address);
  REQUIRE(error_of("interface = \"fd00::5\"\n" + rest + R"([[channel]]
name = "v6"
group = "[ff3e::1]:4711"
spool = ["/s"]
)")
              .empty());
  CHECK_THAT(error_of("interface = \"eth 1\"\n" + rest + warnings),
             Catch::Contains("neither a local IP address nor an interface name"));
  CHECK_THAT(error_of("interface = \"fd00::5\"\n" + rest + warnings),
             Catch::Contains("not of the interface's address family"));
  CHECK_THAT(error_of("interface = \"eth1\"\n" + rest + warnings + R"([[channel]]
name = "v6"
group = "[ff3e::1]:4711"
spool = ["/s6"]
)"),
             Catch::Contains("not of the first channel's address family"));
}

TEST_CASE("WIS2 input runs on a single hub: refused beside a PostgreSQL journal", "[unit][feed]") {
  const std::string input = R"(
[[wis2_input]]
name = "gb"
broker = "mqtts://globalbroker.example.org:8883"
topics = ["origin/a/wis2/+/data/core/weather/#"]
channel = "warnings"
)";
  CHECK(error_of(top + warnings + input).empty());
  std::string pg_top = top;
  pg_top.replace(pg_top.find("/var/lib/mcdist-feed/journal.db"),
                 std::string("/var/lib/mcdist-feed/journal.db").size(),
                 "postgresql://mcdist@db.example.org/mcdist");
  CHECK(error_of(pg_top + warnings).empty());
  CHECK_THAT(error_of(pg_top + warnings + input),
             Catch::Contains("'wis2_input'") && Catch::Contains("SQLite journal"));
}

TEST_CASE("relays are waited for relay_timeout; 60 s unless set", "[unit][feed]") {
  auto c = parse_feed_config(top + warnings, "feed.toml");
  CHECK(c.relays.empty());
  CHECK(c.relay_timeout == std::chrono::seconds(60));
  c = parse_feed_config(
      "relays = [\"nmc-relay\", \"r2\"]\nrelay_timeout = \"2m\"\n" + top + warnings, "feed.toml");
  CHECK(c.relays == std::vector<std::string>{"nmc-relay", "r2"});
  CHECK(c.relay_timeout == std::chrono::minutes(2));
  CHECK_THAT(error_of("relays = [\"bad id\"]\n" + top + warnings),
             Catch::Contains("'relays'") && Catch::Contains("not a valid site id"));
  CHECK_THAT(error_of("relay_timeout = \"2h\"\n" + top + warnings),
             Catch::Contains("'relay_timeout'"));
}
