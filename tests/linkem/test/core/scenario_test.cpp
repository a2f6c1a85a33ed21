#include "tests/linkem/core/scenario.hpp"

#include <catch2/catch.hpp>

#include "tests/linkem/core/units.hpp"

using namespace mcdist::linkem;
using namespace std::chrono_literals;

TEST_CASE("selectors name hosts, ranges and directions", "[scenario]") {
  auto s = parse_selector("h2", 4);
  CHECK(s.hosts == std::vector<std::size_t>{2});
  CHECK(s.up);
  CHECK(s.down);
  s = parse_selector("h1-h3.up", 4);
  CHECK(s.hosts == std::vector<std::size_t>{1, 2, 3});
  CHECK(s.up);
  CHECK_FALSE(s.down);
  s = parse_selector("all.down", 3);
  CHECK(s.hosts == std::vector<std::size_t>{0, 1, 2});
  CHECK_FALSE(s.up);
  s = parse_selector("h3,h1,h3", 4);
  CHECK(s.hosts == std::vector<std::size_t>{1, 3});
  CHECK_THROWS_AS(parse_selector("h4", 4), config_error);
  CHECK_THROWS_AS(parse_selector("x1", 4), config_error);
  CHECK_THROWS_AS(parse_selector("h3-h1", 4), config_error);
  CHECK_THROWS_AS(parse_selector("h1.up,h2.down", 4), config_error);
}

TEST_CASE("link specs set both directions unless one is selected", "[scenario]") {
  std::vector<link_params> up(3);
  std::vector<link_params> down(3);
  apply_link_spec("h2:delay=350ms,loss=1e-3", up, down);
  apply_link_spec("h2.down:rate=10Mbit,queue=100", up, down);
  apply_link_spec("all:reorder=0.01,reorder_delay=2ms", up, down);
  CHECK(up[2].delay == 350ms);
  CHECK(down[2].delay == 350ms);
  CHECK(up[2].loss_rate == Approx(1e-3));
  CHECK(up[2].rate_bps == 0);
  CHECK(down[2].rate_bps == Approx(10e6));
  CHECK(down[2].queue.packets == 100);
  CHECK(up[0].reorder_rate == Approx(0.01));
  CHECK(down[1].reorder_delay == 2ms);
  CHECK(up[1].delay == 0ms);
}

TEST_CASE("later specs override earlier ones key by key", "[scenario]") {
  std::vector<link_params> up(2);
  std::vector<link_params> down(2);
  apply_link_spec("all:delay=10ms,loss=0.01", up, down);
  apply_link_spec("h1:delay=20ms", up, down);
  CHECK(up[1].delay == 20ms);
  CHECK(up[1].loss_rate == Approx(0.01));
  CHECK(up[0].delay == 10ms);
}

TEST_CASE("queue takes packets or bytes, burst needs a number", "[scenario]") {
  link_params p;
  apply_link_setting(p, "queue", "64KB");
  CHECK(p.queue.bytes == 64000);
  apply_link_setting(p, "queue", "20");
  CHECK(p.queue.packets == 20);
  CHECK(p.queue.bytes == 0);
  apply_link_setting(p, "burst", "4");
  CHECK(*p.mean_burst == 4.0);
  CHECK_THROWS_AS(apply_link_setting(p, "burst", "0.5"), config_error);
}

TEST_CASE("bad link specs say what is wrong", "[scenario]") {
  std::vector<link_params> up(2);
  std::vector<link_params> down(2);
  CHECK_THROWS_WITH(apply_link_spec("h1 delay=1ms", up, down),
                    Catch::Contains("SELECTOR:KEY=VALUE"));
  CHECK_THROWS_WITH(apply_link_spec("h1:jitter=1ms", up, down),
                    Catch::Contains("unknown link key 'jitter'"));
  CHECK_THROWS_WITH(apply_link_spec("h1:delay=1", up, down), Catch::Contains("needs a unit"));
  CHECK_THROWS_WITH(apply_link_spec("h7:delay=1ms", up, down), Catch::Contains("does not exist"));
  CHECK_THROWS_WITH(apply_link_spec("h1:loss", up, down), Catch::Contains("not KEY=VALUE"));
  CHECK_THROWS_WITH(apply_link_spec("h1:loss=0.9,burst=1", up, down),
                    Catch::Contains("infeasible"));
}

TEST_CASE("run specs name a host and a command", "[scenario]") {
  const auto r = parse_run_spec("h1:uftpd -I mle0 -D /tmp/x", 3);
  CHECK(r.host == 1);
  CHECK(r.command == "uftpd -I mle0 -D /tmp/x");
  CHECK(parse_run_spec("h0:a:b", 3).command == "a:b");
  CHECK_THROWS_AS(parse_run_spec("h1", 3), config_error);
  CHECK_THROWS_AS(parse_run_spec("h1:  ", 3), config_error);
  CHECK_THROWS_AS(parse_run_spec("h3:ls", 3), config_error);
}

TEST_CASE("prefixes and addresses", "[scenario]") {
  const auto p = parse_ipv4_prefix("10.77.0.9/24");
  CHECK(p.network == 0x0A4D0000);
  CHECK(p.netmask() == 0xFFFFFF00);
  CHECK(p.capacity() == 254);
  CHECK(format_ipv4(p.host_address(0)) == "10.77.0.1");
  CHECK(format_ipv4(p.host_address(2)) == "10.77.0.3");
  CHECK_THROWS_AS(parse_ipv4_prefix("10.77.0.0"), config_error);
  CHECK_THROWS_AS(parse_ipv4_prefix("10.77.0.0/31"), config_error);
  CHECK_THROWS_AS(parse_ipv4_prefix("239.1.0.0/16"), config_error);
  CHECK_THROWS_AS(parse_ipv4("10.0.0.256"), config_error);
}

TEST_CASE("a TOML scenario file gives hosts, links and runs", "[scenario][toml]") {
  const auto f = parse_scenario_toml(R"(
hosts = 3
seed = 42
prefix = "10.88.0.0/24"
duration = "30s"
links = ["all:delay=1ms"]

[link.h2]
delay = "350ms"
loss = 1e-3

[link.h2.down]
rate = "20Mbit"
queue = 100

[link.all]
dup = "0.5%"

[[run]]
host = "h0"
command = "echo sender"
main = true

[[run]]
host = "h1"
command = "echo receiver"
)",
                                     "test.toml");
  CHECK(*f.hosts == 3);
  CHECK(*f.seed == 42);
  CHECK(*f.prefix == "10.88.0.0/24");
  CHECK(*f.duration == 30s);
  REQUIRE(f.runs.size() == 2);
  CHECK(f.runs[0] == "h0:echo sender");
  CHECK(f.mains == std::vector<std::string>{"h0"});

  std::vector<link_params> up(3);
  std::vector<link_params> down(3);
  for (const auto& spec : f.links) {
    apply_link_spec(spec, up, down);
  }
  CHECK(up[0].delay == 1ms);
  CHECK(up[2].delay == 350ms);  // [link.h2] applied after "links" and after [link.all]
  CHECK(down[2].loss_rate == Approx(1e-3));
  CHECK(down[2].rate_bps == Approx(20e6));
  CHECK(up[2].rate_bps == 0);
  CHECK(down[2].queue.packets == 100);
  CHECK(up[1].duplicate_rate == Approx(0.005));
}

TEST_CASE("TOML mistakes are reported with the file name", "[scenario][toml]") {
  CHECK_THROWS_WITH(parse_scenario_toml("hosts = 'three'", "s.toml"),
                    Catch::Contains("s.toml: hosts"));
  CHECK_THROWS_WITH(parse_scenario_toml("hostz = 3", "s.toml"), Catch::Contains("unknown key"));
  CHECK_THROWS_WITH(parse_scenario_toml("hosts = [", "s.toml"), Catch::Contains("s.toml:1"));
  CHECK_THROWS_WITH(parse_scenario_toml("[[run]]\nhost = \"h0\"\n", "s.toml"),
                    Catch::Contains("needs host and command"));
  CHECK_THROWS_WITH(parse_scenario_toml("[link.h1]\ndelay = true\n", "s.toml"),
                    Catch::Contains("string or a number"));
}
