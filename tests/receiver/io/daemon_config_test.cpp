#include "receiver/io/daemon_config.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::receiver;

TEST_CASE("a configuration is read from a string as from a file", "[unit][receiver][config]") {
  const auto cfg = load_config_string(R"(id = "site-a"
interface = "10.0.0.7"
dest = "/srv/in"
temp = "/srv/tmp"
sync = "file"
buffer_pool = "8M"
parity_memory = "2M"
session_timeout = "90s"
allow_unsigned = true
[[channel]]
name = "products"
group = "239.192.0.1:4711"
[[channel]]
group = "239.192.0.2:4711"
dest = "/srv/other"
)",
                                      "test.toml");
  REQUIRE(cfg.id == "site-a");
  REQUIRE(cfg.sync == sync_mode::file);
  REQUIRE(cfg.buffer_pool_bytes == 8u << 20);
  REQUIRE(cfg.parity_memory_bytes == 2u << 20);
  REQUIRE(cfg.session_timeout == std::chrono::seconds(90));
  REQUIRE(cfg.channels.size() == 2);
  REQUIRE(cfg.channels[0].name == "products");
  REQUIRE(cfg.channels[0].dest == "/srv/in");
  REQUIRE(cfg.channels[1].dest == "/srv/other");
  REQUIRE_NOTHROW(validate(cfg));
}

TEST_CASE("a channel that trusts no sender is refused unless it allows unsigned sessions by name",
          "[unit][receiver][config]") {
  const std::string head = "id = \"site-a\"\ntemp = \"/srv/tmp\"\ndest = \"/srv/in\"\n";
  const std::string hub = "\"mcdist-ed25519:jZOmaoskCVjTgMTuBcl72lX8tUfj2WTS6rsIvEXUzAY=\"";
  const auto open = load_config_string(head +
                                           "[[channel]]\nname = \"obs\"\n"
                                           "group = \"239.192.0.1:4711\"\n",
                                       "test.toml");
  REQUIRE_FALSE(open.channels.at(0).allow_unsigned);
  try {
    validate(open);
    FAIL("a channel trusting no sender was accepted");
  } catch (const config_error& e) {
    const std::string what = e.what();
    REQUIRE(what.find("channel obs trusts no sender") != std::string::npos);
    REQUIRE(what.find("allow_unsigned = true") != std::string::npos);
  }
  // Top level for every channel, per channel, or a trusted sender.
  REQUIRE_NOTHROW(validate(load_config_string(
      head + "allow_unsigned = true\n[[channel]]\ngroup = \"239.192.0.1:4711\"\n", "t")));
  REQUIRE_NOTHROW(validate(load_config_string(
      head + "[[channel]]\ngroup = \"239.192.0.1:4711\"\nallow_unsigned = true\n", "t")));
  const auto trusted = load_config_string(
      head + "trusted_senders = [" + hub + "]\n[[channel]]\ngroup = \"239.192.0.1:4711\"\n", "t");
  REQUIRE_NOTHROW(validate(trusted));
  REQUIRE(trusted.max_session_age == std::chrono::hours(1));
  REQUIRE(trusted.max_clock_skew == std::chrono::minutes(5));
  // One channel allowing unsigned does not open the others.
  REQUIRE_THROWS_AS(validate(load_config_string(head + "[[channel]]\ngroup = \"239.192.0.1:4711\"\n"
                                                       "allow_unsigned = true\n[[channel]]\n"
                                                       "group = \"239.192.0.2:4711\"\n",
                                                "t")),
                    config_error);
  REQUIRE_THROWS_AS(load_config_string(head + "max_session_age = \"0s\"\n", "t"), config_error);
  const auto aged =
      load_config_string(head + "max_session_age = \"10m\"\nmax_clock_skew = \"30s\"\n", "t");
  REQUIRE(aged.max_session_age == std::chrono::minutes(10));
  REQUIRE(aged.max_clock_skew == std::chrono::seconds(30));
}

TEST_CASE("a bad configuration string is refused naming its source and the setting",
          "[unit][receiver][config]") {
  try {
    load_config_string("id = \"a\"\nbogus = 1\n", "test.toml");
    FAIL("no config_error");
  } catch (const config_error& e) {
    REQUIRE(std::string(e.what()).find("test.toml: unknown setting 'bogus' (line 2") == 0);
  }
  try {
    load_config_string("id = \n", "test.toml");
    FAIL("no config_error");
  } catch (const config_error& e) {
    REQUIRE(std::string(e.what()).find("test.toml: ") == 0);
    REQUIRE(std::string(e.what()).find("line 1") != std::string::npos);
  }
}

TEST_CASE("a size given as a float or beyond its setting's range is refused",
          "[unit][receiver][config]") {
  // Found by tests/fuzz/config_fuzz: buffer_pool = 54E030 reached toml++'s float-to-int64
  // conversion, undefined behaviour out of range.
  const auto refused = [](const std::string& text) {
    try {
      load_config_string(text, "test.toml");
    } catch (const config_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  REQUIRE(refused("buffer_pool = 54E030\n").find("'buffer_pool' must be a size") == 0);
  REQUIRE(refused("buffer_pool = 1.5\n").find("'buffer_pool' must be a size") == 0);
  REQUIRE(refused("socket_buffer = \"4G\"\n") == "'socket_buffer' = \"4G\" is too large");
  REQUIRE(refused("socket_buffer = 4294967296\n") ==
          "'socket_buffer' = \"4294967296\" is too large");
  REQUIRE(refused("max_sessions = 1e40\n").find("'max_sessions' must be a whole number") == 0);
  REQUIRE(load_config_string("socket_buffer = 65536\nbuffer_pool = \"1M\"\n", "test.toml")
              .socket_buffer_bytes == 65536);
}

TEST_CASE("a channel's source joins it source-specific; a bad one is refused",
          "[unit][receiver][config]") {
  const std::string head =
      "id = \"site-a\"\ntemp = \"/srv/tmp\"\ndest = \"/srv/in\"\nallow_unsigned = true\n";
  const auto cfg = load_config_string(head + R"(interface = "eth1"
[[channel]]
name = "eumetcast"
group = "232.223.223.1:6000"
source = "192.0.2.10"
[[channel]]
name = "asm"
group = "239.192.0.1:4711"
)",
                                      "t");
  REQUIRE(cfg.interface.name == "eth1");
  REQUIRE(cfg.channels.at(0).source == parse_address("192.0.2.10"));
  REQUIRE_FALSE(cfg.channels.at(1).source);
  REQUIRE_NOTHROW(validate(cfg));
  REQUIRE(ssm_warning(cfg.channels[0]).empty());
  REQUIRE(ssm_warning(cfg.channels[1]).empty());

  const auto v6 = load_config_string(head + R"(interface = "fd00:a::2"
[[channel]]
group = "[ff3e::8000:1]:6000"
source = "fd00:a::1"
)",
                                     "t");
  REQUIRE(v6.channels.at(0).source == parse_address("fd00:a::1"));
  REQUIRE_NOTHROW(validate(v6));

  const auto error_of = [&](const std::string& channel) -> std::string {
    try {
      validate(load_config_string(head + "[[channel]]\n" + channel, "t"));
    } catch (const config_error& e) {
      return e.what();
    }
    return "";
  };
  using Catch::Contains;
  CHECK_THAT(error_of("group = \"232.1.1.1:6000\"\nsource = \"sender.example\"\n"),
             Contains("channel[0].source = \"sender.example\" is not an IP address"));
  CHECK_THAT(error_of("group = \"232.1.1.1:6000\"\nsource = \"fd00::1\"\n"),
             Contains("not of the address family of the group 232.1.1.1"));
  CHECK_THAT(error_of("group = \"232.1.1.1:6000\"\nsource = \"232.1.1.2\"\n"),
             Contains("not a sender's unicast address"));
  CHECK_THAT(error_of("group = \"232.1.1.1:6000\"\nsource = \"0.0.0.0\"\n"),
             Contains("not a sender's unicast address"));
  CHECK_THAT(error_of("group = \"232.1.1.1:6000\"\nsource = 7\n"),
             Contains("'channel[0].source' must be a string"));
  // parse_source is --source's parser too.
  REQUIRE(parse_source("192.0.2.10", *parse_endpoint("232.1.1.1:6000"), "--source") ==
          *parse_address("192.0.2.10"));
  CHECK_THROWS_WITH(parse_source("192.0.2", *parse_endpoint("232.1.1.1:6000"), "--source"),
                    Contains("--source = \"192.0.2\" is not an IP address"));

  // Groups outside the SSM range are taken, with a warning; so is an SSM group without source.
  auto outside = cfg.channels[0];
  outside.group = *parse_endpoint("239.192.0.1:4711");
  CHECK_THAT(ssm_warning(outside), Contains("outside the SSM range (232.0.0.0/8)"));
  auto sourceless = cfg.channels[0];
  sourceless.source.reset();
  CHECK_THAT(ssm_warning(sourceless), Contains("joined without a source"));
}

TEST_CASE("the interface is a name or an address, of the channels' one family",
          "[unit][receiver][config]") {
  const std::string head =
      "id = \"site-a\"\ntemp = \"/srv/tmp\"\ndest = \"/srv/in\"\nallow_unsigned = true\n";
  const auto error_of = [&](const std::string& text) -> std::string {
    try {
      validate(load_config_string(head + text, "t"));
    } catch (const config_error& e) {
      return e.what();
    }
    return "";
  };
  using Catch::Contains;
  CHECK(error_of("interface = \"lo\"\n[[channel]]\ngroup = \"239.192.0.1:4711\"\n").empty());
  // Unset: the channels' family, whichever it is.
  CHECK(error_of("[[channel]]\ngroup = \"[ff15::1]:4711\"\n").empty());
  CHECK_THAT(error_of("interface = \"eth 1\"\n[[channel]]\ngroup = \"239.192.0.1:4711\"\n"),
             Contains("neither an IP address nor an interface name"));
  CHECK_THAT(error_of("interface = \"\"\n[[channel]]\ngroup = \"239.192.0.1:4711\"\n"),
             Contains("neither an IP address nor an interface name"));
  CHECK_THAT(error_of("interface = \"::1\"\n[[channel]]\ngroup = \"239.192.0.1:4711\"\n"),
             Contains("are of different address families"));
  CHECK_THAT(error_of("interface = \"eth1\"\n[[channel]]\nname = \"a\"\n"
                      "group = \"239.192.0.1:4711\"\n[[channel]]\nname = \"b\"\n"
                      "group = \"[ff15::1]:4711\"\n"),
             Contains("channels a and b are of different address families"));
}

TEST_CASE("a relayed channel takes its own group, interface and TTL; loops and mixes are refused",
          "[unit][receiver][config]") {
  const std::string head =
      "id = \"relay-a\"\ntemp = \"/srv/tmp\"\ndest = \"/srv/in\"\nallow_unsigned = true\n";
  const auto cfg = load_config_string(head + R"([[channel]]
name = "regional"
group = "239.192.0.1:4711"
silent = true
relay_group = "239.193.0.1:4711"
relay_interface = "eth2"
relay_ttl = 4
relays = ["rb"]
[[channel]]
name = "local"
group = "239.192.0.2:4711"
behind_relay = "ra"
)",
                                      "t");
  REQUIRE(cfg.channels.at(0).relay_group == parse_endpoint("239.193.0.1:4711"));
  REQUIRE(cfg.channels[0].relay_interface.name == "eth2");
  REQUIRE(cfg.channels[0].relay_ttl == 4);
  REQUIRE(cfg.channels[0].relays == std::vector<std::string>{"rb"});
  REQUIRE_FALSE(cfg.channels[1].relay_group);
  REQUIRE(cfg.channels[1].relay_ttl == 1);
  REQUIRE(relay_channels(cfg.channels) == std::vector<bool>{true, false});
  REQUIRE(upstream_relays(cfg.channels) == std::vector<std::string>{"", "ra"});
  REQUIRE_NOTHROW(validate(cfg));

  const auto error_of = [&](const std::string& channels) -> std::string {
    try {
      validate(load_config_string(head + channels, "t"));
    } catch (const config_error& e) {
      return e.what();
    }
    return "";
  };
  using Catch::Contains;
  CHECK_THAT(
      error_of("[[channel]]\ngroup = \"239.192.0.1:4711\"\nrelay_group = \"10.0.0.1:4711\"\n"),
      Contains("'channel[0].relay_group' = \"10.0.0.1:4711\" is not a multicast ADDR:PORT"));
  CHECK_THAT(error_of("[[channel]]\ngroup = \"239.192.0.1:4711\"\nrelay_ttl = 4\n"),
             Contains("relay_interface, relay_ttl and relays need relay_group"));
  CHECK_THAT(error_of("[[channel]]\ngroup = \"239.192.0.1:4711\"\nrelays = [\"rb\"]\n"),
             Contains("need relay_group"));
  CHECK_THAT(error_of("[[channel]]\ngroup = \"239.192.0.1:4711\"\nrelay_group = "
                      "\"239.193.0.1:4711\"\nrelays = [\"bad id\"]\n"),
             Contains("'channel[0].relays' lists \"bad id\""));
  CHECK_THAT(error_of("[[channel]]\ngroup = \"239.192.0.1:4711\"\nbehind_relay = \"a b\"\n"),
             Contains("'channel[0].behind_relay' = \"a b\" is not a valid site id"));
  // A misspelt setting is refused, not left at its default.
  CHECK_THAT(error_of("[[channel]]\ngroup = \"239.192.0.1:4711\"\nrelay_grup = "
                      "\"239.193.0.1:4711\"\n"),
             Contains("unknown setting 'relay_grup'"));
  CHECK_THAT(error_of("[[channel]]\ngroup = \"239.192.0.1:4711\"\nrelay_group = "
                      "\"239.193.0.1:4711\"\nrelay_ttl = 0\n"),
             Contains("'channel[0].relay_ttl' must be 1 to 255"));
  CHECK_THAT(error_of("[[channel]]\ngroup = \"239.192.0.1:4711\"\nrelay_group = "
                      "\"239.193.0.1:4711\"\nrelay_interface = \"bad name\"\n"),
             Contains("is neither an IP address nor an interface name"));
  // Into a group this daemon receives, on another port too: it would hear its own relay.
  CHECK_THAT(error_of("[[channel]]\nname = \"a\"\ngroup = \"239.192.0.1:4711\"\nrelay_group = "
                      "\"239.192.0.2:5000\"\n[[channel]]\nname = \"b\"\ngroup = "
                      "\"239.192.0.2:4711\"\n"),
             Contains("is the group of channel b"));
  CHECK_THAT(error_of("[[channel]]\nname = \"a\"\ngroup = \"239.192.0.1:4711\"\nrelay_group = "
                      "\"239.193.0.1:4711\"\n[[channel]]\nname = \"b\"\ngroup = "
                      "\"239.192.0.2:4711\"\nrelay_group = \"239.193.0.1:4711\"\n"),
             Contains("channels a and b both relay into 239.193.0.1:4711"));
  CHECK_THAT(error_of("[[channel]]\ngroup = \"239.192.0.1:4711\"\nrelay_group = "
                      "\"[ff15::1]:4711\"\n"),
             Contains("is not of the channel's address family"));
  CHECK_THAT(error_of("[[channel]]\ngroup = \"239.192.0.1:4711\"\nrelay_group = "
                      "\"239.193.0.1:4711\"\nrelay_interface = \"fd00::1\"\n"),
             Contains("is not of relay_group's address family"));
}
