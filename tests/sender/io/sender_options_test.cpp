#include "sender/io/sender_options.hpp"

#include <catch2/catch.hpp>

#include <CLI/CLI.hpp>

#include <vector>

using namespace std::chrono_literals;
using mcdist::sender::fallback_mode;
using mcdist::sender::sender_cli;
using mcdist::sender::sender_options;
using mcdist::sender::usage_error;

namespace {

/// Parses `args` (after the program name) through the real option table.
sender_options parse(std::vector<const char*> args) {
  CLI::App app{"test", "mcdist-send"};
  sender_cli cli;
  mcdist::sender::add_sender_options(app, cli);
  args.insert(args.begin(), "mcdist-send");
  app.parse(static_cast<int>(args.size()), args.data());
  return mcdist::sender::make_sender_options(cli);
}

}  // namespace

TEST_CASE("mcdist-send's defaults and typed options become the session's settings",
          "[unit][sender]") {
  const auto d = parse({"products/"});
  REQUIRE(d.paths == std::vector<std::string>{"products/"});
  REQUIRE(d.app.group.to_string() == "239.192.0.1:4711");
  REQUIRE(d.session.rate_bps == 100'000'000);
  REQUIRE(d.session.block_size == 1400);
  REQUIRE(d.session.fallback == fallback_mode::automatic);
  REQUIRE(d.session.register_window == 2s);
  REQUIRE(d.session.fec_k == 200);  // "auto": no loss measured before a one-shot session
  REQUIRE(d.prehash_max == 16u << 20);
  REQUIRE(d.app.digest_cache);
  REQUIRE_FALSE(d.app.summary_json);
  REQUIRE(d.session.session.value != 0);
  REQUIRE_FALSE(d.session.sender_name.empty());  // the host name

  const auto o = parse({"-g",
                        "239.192.0.9:5000",
                        "-i",
                        "127.0.0.1",
                        "--rate",
                        "350M",
                        "--receivers",
                        "a,b",
                        "--register-timeout",
                        "5s",
                        "--fallback",
                        "tcp",
                        "--tcp-connections",
                        "3",
                        "--unicast-max-rate",
                        "20M",
                        "--session-id",
                        "5f0e21c4",
                        "--channel",
                        "fields",
                        "--catch-up",
                        "3-4,7",
                        "--name",
                        "hub",
                        "--summary-json",
                        "out.json",
                        "--no-digest-cache",
                        "--fec-k",
                        "600",
                        "-q",
                        "a",
                        "b"});
  REQUIRE(o.paths == std::vector<std::string>{"a", "b"});
  REQUIRE(o.app.group.to_string() == "239.192.0.9:5000");
  REQUIRE(o.app.interface.to_string() == "127.0.0.1:0");
  REQUIRE(o.session.rate_bps == 350'000'000);
  REQUIRE(o.session.receivers == std::vector<std::string>{"a", "b"});
  REQUIRE(o.session.register_timeout == 5s);
  REQUIRE(o.session.fallback == fallback_mode::tcp);
  REQUIRE(o.session.tcp_connections == 3);
  REQUIRE(o.session.unicast_max_rate_bps == 20'000'000);
  REQUIRE(o.session.session.value == 0x5f0e21c4);
  REQUIRE(o.session.channel == "fields");
  REQUIRE(o.session.catch_up_seqs ==
          std::vector<std::pair<std::uint64_t, std::uint64_t>>{{3, 4}, {7, 7}});
  REQUIRE(o.session.sender_name == "hub");
  REQUIRE(o.app.summary_json == "out.json");
  REQUIRE_FALSE(o.app.digest_cache);
  REQUIRE(o.session.fec_k == 600);
  REQUIRE(o.quiet);
  REQUIRE(o.log_level == spdlog::level::warn);
}

TEST_CASE("mcdist-send refuses command lines an operator must correct", "[unit][sender]") {
  auto refused = [](std::vector<const char*> args, const std::string& says) {
    INFO(says);
    try {
      parse(std::move(args));
      FAIL("accepted");
    } catch (const usage_error& e) {
      REQUIRE(std::string(e.what()).find(says) != std::string::npos);
    }
  };
  refused({"-g", "10.0.0.1:4711", "x"}, "--group 10.0.0.1:4711 is not a multicast ADDR:PORT");
  refused({"--rate", "fast", "x"}, "--rate fast is not a rate");
  refused({"--rate", "auto", "--rate-max", "0", "x"}, "--rate-max 0 is not a rate");
  refused({"--block-size", "20", "x"}, "--block-size must be");
  refused({"--register-window", "soon", "x"}, "--register-window soon is not a duration");
  refused({"--unicast", "--fallback", "off", "x"}, "--unicast needs a fallback transport");
  refused({"--channel-seq", "3", "x"}, "--channel-seq needs --channel");
  refused({"--channel", "c", "--catch-up", "3-x", "x"}, "'3-x' is not N or N-M");
  refused({"--channel", "c", "--catch-up", "4,3", "x"}, "ascending, disjoint");
  refused({"--catch-up", "3", "x"}, "--catch-up needs --channel");
  refused({"--session-id", "0", "x"}, "--session-id must be 1 to 8 hex digits");
  refused({"--site-keys", "sites.txt", "x"}, "--site-keys needs --key");
  refused({"--log-level", "loud", "x"}, "loud");
  refused({"--fec-k", "5000", "x"}, "--fec-k 5000 is not auto or 0 to 4096");
  refused({"--fec-k", "big", "x"}, "--fec-k big is not auto or 0 to 4096");
  refused({"-i", "eth 1", "x"}, "--interface eth 1 is neither an IP address nor an interface name");
  refused({"-i", "mcdist-none0", "x"}, "--interface: no interface named 'mcdist-none0'");
  refused({"-i", "::1", "x"}, "--interface: interface ::1 is an IPv6 address; the group is IPv4");
  // CLI11 checks the option table's ranges and choices itself.
  REQUIRE_THROWS_AS(parse({"--fallback", "udp", "x"}), CLI::ValidationError);
  REQUIRE_THROWS_AS(parse({"--max-passes", "0", "x"}), CLI::ValidationError);
  REQUIRE_THROWS_AS(parse({}), CLI::RequiredError);
}

TEST_CASE("-i takes an interface name or address and resolves it for the group's family",
          "[unit][sender]") {
  // Unset: the wildcard of the group's family, the route deciding.
  const auto any4 = parse({"x"});
  REQUIRE(any4.app.interface.to_string() == "0.0.0.0:0");
  REQUIRE(any4.app.interface_index == 0);
  const auto any6 = parse({"-g", "[ff3e::1]:4711", "x"});
  REQUIRE(any6.app.interface.to_string() == "[::]:0");
  // Loopback, by name and by address: its address and its index.
  const auto lo = parse({"-i", "lo", "--port", "7000", "x"});
  REQUIRE(lo.app.interface.to_string() == "127.0.0.1:7000");
  REQUIRE(lo.app.interface_index > 0);
  REQUIRE(lo.app.interface_name == "lo");
  REQUIRE(parse({"-i", "127.0.0.1", "x"}).app.interface_index == lo.app.interface_index);
}

TEST_CASE("--rate auto takes its ceiling from --rate-max", "[unit][sender]") {
  const auto d = parse({"--rate", "auto", "products/"});
  REQUIRE(d.session.rate_auto);
  REQUIRE(d.session.rate_max_bps == 1'000'000'000);
  const auto m = parse({"--rate", "auto", "--rate-max", "200M", "products/"});
  REQUIRE(m.session.rate_auto);
  REQUIRE(m.session.rate_max_bps == 200'000'000);
  REQUIRE_FALSE(parse({"--rate", "300M", "products/"}).session.rate_auto);
}
