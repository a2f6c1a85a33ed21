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
  const auto open = load_config_string(head + "[[channel]]\nname = \"obs\"\n"
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
  REQUIRE_THROWS_AS(
      validate(load_config_string(head + "[[channel]]\ngroup = \"239.192.0.1:4711\"\n"
                                         "allow_unsigned = true\n[[channel]]\n"
                                         "group = \"239.192.0.2:4711\"\n",
                                  "t")),
      config_error);
  REQUIRE_THROWS_AS(load_config_string(head + "max_session_age = \"0s\"\n", "t"), config_error);
  const auto aged = load_config_string(
      head + "max_session_age = \"10m\"\nmax_clock_skew = \"30s\"\n", "t");
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
