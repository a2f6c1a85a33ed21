// common/net/interface.hpp: parsing an `interface` setting, resolving it against a table of
// interfaces (the pure part, with made-up tables), and against this host's own table (lo).
#include "common/net/interface.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using mcdist::endpoint;
using mcdist::parse_address;
using mcdist::net::interface_error;
using mcdist::net::interface_spec;
using mcdist::net::local_interface;
using mcdist::net::parse_interface;
using mcdist::net::resolve_interface;

namespace {

local_interface itf(std::string name, unsigned index,
                    std::vector<std::pair<const char*, unsigned>> addresses) {
  local_interface l;
  l.name = std::move(name);
  l.index = index;
  for (const auto& [a, prefix] : addresses) l.addresses.push_back({*parse_address(a), prefix});
  return l;
}

/// A multi-homed host: loopback, two links, and a link with only a link-local IPv6 address.
std::vector<local_interface> host() {
  return {itf("lo", 1, {{"127.0.0.1", 8}, {"::1", 128}}),
          itf("eth0", 2, {{"192.0.2.7", 24}, {"fe80::1", 64}, {"2001:db8:a::7", 64}}),
          itf("eth1", 3, {{"198.51.100.7", 24}, {"198.51.100.8", 24}, {"fd00:b::7", 64}}),
          itf("tun0", 4, {{"fe80::4", 64}}), itf("down0", 0, {{"203.0.113.1", 24}})};
}

std::string error_of(const interface_spec& s, bool v6) {
  try {
    resolve_interface(s, v6, host());
  } catch (const interface_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("an interface setting is an address, a name, or neither", "[unit][net]") {
  REQUIRE(parse_interface("")->any());
  REQUIRE(parse_interface("")->to_string() == "any");
  const auto a = parse_interface("10.0.0.7");
  REQUIRE(a);
  REQUIRE(a->address == parse_address("10.0.0.7"));
  REQUIRE(a->name.empty());
  REQUIRE(parse_interface("fd00::7")->address->v6);
  const auto n = parse_interface("eth1");
  REQUIRE(n);
  REQUIRE(n->name == "eth1");
  REQUIRE_FALSE(n->address);
  REQUIRE(n->to_string() == "eth1");
  REQUIRE(parse_interface("enp0s31f6.100")->name == "enp0s31f6.100");
  REQUIRE(parse_interface("abcdefghijklmno"));  // 15 bytes: IFNAMSIZ less the NUL
  // What the kernel would not name a device, and addresses mistyped.
  for (const char* bad : {"abcdefghijklmnop", "eth 1", "a/b", "eth0:1", ".", "..", "10.0.0.256",
                          "10.0.0", "fe80::1%eth0", "::g"}) {
    INFO(bad);
    REQUIRE_FALSE(parse_interface(bad));
  }
}

TEST_CASE("an interface resolves to its address of the family and its index", "[unit][net]") {
  // Unset: the wildcard of the family, no index (the kernel's routes decide).
  const auto any4 = resolve_interface({}, false, host());
  REQUIRE(any4.address == *parse_address("0.0.0.0"));
  REQUIRE(any4.index == 0);
  REQUIRE(any4.to_string() == "any");
  REQUIRE(resolve_interface({}, true, host()).address == *parse_address("::"));
  REQUIRE(resolve_interface(*parse_interface("0.0.0.0"), false, host()).index == 0);

  // By name: IPv4's first address; IPv6's first beyond link-local.
  const auto e1 = resolve_interface(*parse_interface("eth1"), false, host());
  REQUIRE(e1.address == *parse_address("198.51.100.7"));
  REQUIRE(e1.index == 3);
  REQUIRE(e1.name == "eth1");
  REQUIRE(e1.to_string() == "eth1 (198.51.100.7, index 3)");
  const auto e0 = resolve_interface(*parse_interface("eth0"), true, host());
  REQUIRE(e0.address == *parse_address("2001:db8:a::7"));
  REQUIRE(e0.index == 2);

  // By address: the interface holding it.
  const auto by_addr = resolve_interface(*parse_interface("198.51.100.8"), false, host());
  REQUIRE(by_addr.index == 3);
  REQUIRE(by_addr.address == *parse_address("198.51.100.8"));
  const auto lo = resolve_interface(*parse_interface("127.0.0.1"), false, host());
  REQUIRE(lo.index == 1);
  REQUIRE(lo.name == "lo");
  REQUIRE(resolve_interface(*parse_interface("fd00:b::7"), true, host()).index == 3);
  // An IPv4 address no interface lists: the one whose prefix holds it, else the kernel's own
  // lookup by address (index 0).
  const auto lo2 = resolve_interface(*parse_interface("127.0.0.2"), false, host());
  REQUIRE(lo2.index == 1);
  REQUIRE(lo2.address == *parse_address("127.0.0.2"));
  const auto elsewhere = resolve_interface(*parse_interface("10.9.9.9"), false, host());
  REQUIRE(elsewhere.index == 0);
  REQUIRE(elsewhere.address == *parse_address("10.9.9.9"));
  REQUIRE(elsewhere.to_string() == "10.9.9.9");
}

TEST_CASE("an interface that cannot serve the family is refused, saying why", "[unit][net]") {
  using Catch::Contains;
  CHECK_THAT(error_of(*parse_interface("eth9"), false), Contains("no interface named 'eth9'"));
  // Listed without an index (if_nametoindex failed): as good as absent.
  CHECK_THAT(error_of(*parse_interface("down0"), false), Contains("no interface named 'down0'"));
  CHECK_THAT(error_of(*parse_interface("tun0"), false),
             Contains("interface tun0 has no IPv4 address"));
  CHECK_THAT(error_of(*parse_interface("tun0"), true), Contains("beyond link-local"));
  CHECK_THAT(error_of(*parse_interface("10.0.0.7"), true),
             Contains("is an IPv4 address; the group is IPv6"));
  CHECK_THAT(error_of(*parse_interface("::1"), false),
             Contains("is an IPv6 address; the group is IPv4"));
  CHECK_THAT(error_of(*parse_interface("2001:db8::99"), true),
             Contains("not an address of any interface of this host"));
  CHECK_THAT(error_of(*parse_interface("fe80::1"), true), Contains("is link-local"));
}

TEST_CASE("this host's table has loopback, which resolves by name and by address", "[unit][net]") {
  const auto table = mcdist::net::list_interfaces();
  const auto it = std::find_if(table.begin(), table.end(),
                               [](const local_interface& l) { return l.name == "lo"; });
  REQUIRE(it != table.end());
  REQUIRE(it->index > 0);
  const auto by_name = resolve_interface(*parse_interface("lo"), false);
  REQUIRE(by_name.address == *parse_address("127.0.0.1"));
  REQUIRE(by_name.index == it->index);
  REQUIRE(resolve_interface(*parse_interface("127.0.0.1"), false).index == it->index);
  REQUIRE_THROWS_AS(resolve_interface(*parse_interface("mcdist-none0"), false), interface_error);
}

TEST_CASE("the source-specific multicast ranges", "[unit][net]") {
  REQUIRE(parse_address("232.1.2.3")->is_source_specific());
  REQUIRE_FALSE(parse_address("239.192.0.1")->is_source_specific());
  REQUIRE_FALSE(parse_address("233.0.0.1")->is_source_specific());
  REQUIRE(parse_address("ff3e::8000:1")->is_source_specific());
  REQUIRE(parse_address("ff35::1")->is_source_specific());
  REQUIRE_FALSE(parse_address("ff3e:40:2001:db8::1")->is_source_specific());  // RFC 3306 prefix
  REQUIRE_FALSE(parse_address("ff0e::1")->is_source_specific());
  REQUIRE_FALSE(parse_address("ff1e::1")->is_source_specific());
}
