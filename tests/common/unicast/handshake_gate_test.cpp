#include "common/unicast/handshake_gate.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace mcdist;
using namespace mcdist::unicast;
using verdict = handshake_gate::admission::verdict;

namespace {

handshake_source ip(const char* text) {
  const auto e = parse_address(text);
  REQUIRE(e);
  return source_of(*e);
}

}  // namespace

TEST_CASE("sources count by IPv4 address and IPv6 /64, never by port",
          "[unit][unicast][handshake_gate]") {
  auto a = *parse_endpoint("192.0.2.7:4000");
  auto b = *parse_endpoint("192.0.2.7:4001");
  CHECK(source_of(a) == source_of(b));
  CHECK(source_of(a) != ip("192.0.2.8"));
  // One host's /64: any address in it is the same source; the next /64 is another.
  CHECK(ip("2001:db8:1:2::1") == ip("2001:db8:1:2:ffff:ffff:ffff:ffff"));
  CHECK(ip("2001:db8:1:2::1") != ip("2001:db8:1:3::1"));
  // An IPv4 peer seen through a dual-stack socket is its IPv4 address.
  CHECK(ip("::ffff:192.0.2.7") == source_of(a));
  CHECK_FALSE(ip("::ffff:192.0.2.7").v6);
  // IPv4 and IPv6 never collide, even with the same leading bytes.
  CHECK(ip("192.0.2.7") != ip("c000:207::"));
  CHECK(to_string(source_of(a)) == "192.0.2.7");
  CHECK(to_string(ip("2001:db8:1:2::1")) == "2001:db8:1:2::/64");
}

TEST_CASE("a source is refused beyond its share, others are not",
          "[unit][unicast][handshake_gate]") {
  handshake_gate g({.per_source = 16, .total = 256});
  const auto flood = ip("198.51.100.1");
  const auto site = ip("192.0.2.7");
  std::vector<handshake_gate::ticket> held;
  for (int i = 0; i < 16; ++i) {
    const auto a = g.admit(flood);
    REQUIRE(a.outcome == verdict::admitted);
    REQUIRE_FALSE(a.evicted);
    held.push_back(a.id);
  }
  // The 17th to the 300th from the same host: refused, the host keeps 16.
  for (int i = 16; i < 300; ++i) REQUIRE(g.admit(flood).outcome == verdict::refused_per_source);
  CHECK(g.pending(flood) == 16);
  CHECK(g.pending() == 16);
  // A site's 8 connections all get in.
  for (int i = 0; i < 8; ++i) REQUIRE(g.admit(site).outcome == verdict::admitted);
  CHECK(g.pending(site) == 8);
  CHECK(g.sources() == 2);
  // One of the flood's ends (timed out, closed): that host gets exactly one slot back.
  REQUIRE(g.release(held[3]));
  REQUIRE_FALSE(g.release(held[3]));  // twice is harmless
  REQUIRE(g.admit(flood).outcome == verdict::admitted);
  REQUIRE(g.admit(flood).outcome == verdict::refused_per_source);
}

TEST_CASE("at the total, the heaviest source gives up its oldest handshake",
          "[unit][unicast][handshake_gate]") {
  handshake_gate g({.per_source = 16, .total = 32});
  const auto a = ip("198.51.100.1");
  const auto b = ip("198.51.100.2");
  const auto c = ip("198.51.100.3");
  const auto site = ip("192.0.2.7");
  std::vector<handshake_gate::ticket> of_a;
  std::vector<handshake_gate::ticket> of_b;
  for (int i = 0; i < 16; ++i) of_a.push_back(g.admit(a).id);
  for (int i = 0; i < 12; ++i) of_b.push_back(g.admit(b).id);
  for (int i = 0; i < 4; ++i) REQUIRE_FALSE(g.admit(c).evicted);
  REQUIRE(g.pending() == 32);

  // Full: a site's connection gets in, in place of a's oldest (a holds the most).
  auto s1 = g.admit(site);
  REQUIRE(s1.outcome == verdict::admitted);
  REQUIRE(s1.evicted == of_a[0]);
  CHECK(s1.evicted_source == a);
  CHECK(s1.evicted_source_pending == 16);
  CHECK(g.pending() == 32);
  CHECK(g.pending(a) == 15);
  // The evicted one is gone: its connection's own release later is a no-op.
  CHECK_FALSE(g.release(of_a[0]));

  // a keeps losing its oldest until it is down to b's 12; then the tie goes to the source
  // whose oldest handshake is older (a's, admitted first).
  for (int i = 1; i < 4; ++i) REQUIRE(g.admit(site).evicted == of_a[static_cast<std::size_t>(i)]);
  CHECK(g.pending(a) == 12);
  CHECK(g.pending(b) == 12);
  REQUIRE(g.admit(site).evicted == of_a[4]);
  REQUIRE(g.admit(site).evicted == of_b[0]);
  CHECK(g.pending(site) == 6);
  CHECK(g.pending(c) == 4);
  CHECK(g.pending() == 32);
}

TEST_CASE("a flood from many sources cannot keep a site's connections out",
          "[unit][unicast][handshake_gate]") {
  // 20 hosts reopen every connection as soon as it closes, 15 each (under their share of
  // 16): 300 wanted, 256 slots. Between two of a site's connections the flood opens 100 more.
  handshake_gate g({.per_source = 16, .total = 256});
  std::vector<handshake_source> hosts;
  for (int i = 0; i < 20; ++i) hosts.push_back(ip(("198.51.100." + std::to_string(i + 1)).c_str()));
  const auto site = ip("192.0.2.7");
  std::uint64_t evicted = 0;
  std::vector<handshake_gate::ticket> site_tickets;
  for (int round = 0; round < 8; ++round) {
    for (int i = 0; i < 100; ++i) {
      const auto a = g.admit(hosts[static_cast<std::size_t>((round * 100 + i) % 20)]);
      if (a.outcome == verdict::admitted && a.evicted) ++evicted;
    }
    const auto s = g.admit(site);
    REQUIRE(s.outcome == verdict::admitted);
    site_tickets.push_back(s.id);
  }
  CHECK(g.pending() == 256);
  CHECK(evicted > 0);
  // The flood only ever evicted its own: the site's 8 are all still pending (none of the
  // hosts fell to the site's count of 8).
  CHECK(g.pending(site) == 8);
  for (const auto t : site_tickets) CHECK(g.release(t));
  for (const auto& h : hosts) CHECK(g.pending(h) <= 16);
}

TEST_CASE("without a per-source limit only the total applies", "[unit][unicast][handshake_gate]") {
  handshake_gate g({.per_source = 0, .total = 3});
  const auto a = ip("198.51.100.1");
  const auto t1 = g.admit(a).id;
  const auto t2 = g.admit(a).id;
  const auto t3 = g.admit(a).id;
  CHECK(t1 < t2);
  CHECK(t2 < t3);
  const auto t4 = g.admit(a);
  REQUIRE(t4.outcome == verdict::admitted);
  CHECK(t4.evicted == t1);  // its own oldest: the newcomer is the heaviest source
  CHECK(g.pending() == 3);
  CHECK(g.release(t2));
  CHECK(g.release(t3));
  CHECK(g.release(t4.id));
  CHECK(g.pending() == 0);
  CHECK(g.sources() == 0);
  // A total of 0 is taken as 1.
  handshake_gate one({.per_source = 0, .total = 0});
  CHECK(one.limits().total == 1);
  const auto x = one.admit(a).id;
  CHECK(one.admit(a).evicted == x);
}
