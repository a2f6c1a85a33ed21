#include "receiver/core/unicast_fetch.hpp"

#include "common/error.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

const time_point t0{std::chrono::seconds(10)};
const endpoint sender = *parse_endpoint("192.0.2.7:4711");

wire::fallback order_msg() {
  wire::fallback m;
  m.set_receiver_id("site");
  m.set_transport(wire::fallback::TCP);
  m.set_port(4800);
  m.set_token(std::string(16, '\x5a'));
  m.set_connections(4);
  return m;
}

/// A receiving file of `size` bytes in blocks of 100, with the given blocks in.
file_rx file_of(std::uint64_t size, std::vector<std::uint32_t> in) {
  file_rx fr;
  fr.state = file_rx::state_t::receiving;
  fr.entry.size = size;
  fr.blocks = static_cast<std::uint32_t>((size + 99) / 100);
  fr.received = block_map(fr.blocks);
  for (const auto b : in) fr.received.set(b);
  return fr;
}

}  // namespace

TEST_CASE("a FALLBACK order is read with its server, and refused when a field is out of range",
          "[unit][receiver][unicast_fetch]") {
  auto o = unicast_fetch::read_order(order_msg(), sender);
  REQUIRE(o);
  CHECK(o->transport == transport_kind::tcp);
  CHECK(o->server.addr == sender.addr);
  CHECK(o->server.port == 4800);
  CHECK(o->connections == 4);
  CHECK(o->token[15] == 0x5a);

  auto elsewhere = order_msg();
  elsewhere.set_address(std::string("\xc6\x33\x64\x01", 4));  // 198.51.100.1
  o = unicast_fetch::read_order(elsewhere, sender);
  REQUIRE(o);
  CHECK(o->server.to_string() == "198.51.100.1:4800");

  auto bad = [](auto&& change) {
    auto m = order_msg();
    change(m);
    return !unicast_fetch::read_order(m, sender);
  };
  CHECK(bad([](wire::fallback& m) { m.set_port(0); }));
  CHECK(bad([](wire::fallback& m) { m.set_port(70000); }));
  CHECK(bad([](wire::fallback& m) { m.set_token("short"); }));
  CHECK(bad([](wire::fallback& m) { m.set_address("abc"); }));
  CHECK(bad([](wire::fallback& m) { m.set_connections(unicast_fetch::max_connections + 1); }));
}

TEST_CASE("an announce's unicast_start points only at the announcing host",
          "[unit][receiver][unicast_fetch]") {
  wire::unicast_start u;
  u.set_transport(wire::fallback::SCTP_UDP);
  u.set_port(9899);
  std::optional<unicast_order> o;
  REQUIRE_FALSE(unicast_fetch::read_start(u, sender, o));
  REQUIRE(o);
  CHECK(o->server.addr == sender.addr);
  CHECK(o->server.port == 9899);
  CHECK(o->token == fallback_token{});

  u.set_address(std::string("\xc6\x33\x64\x01", 4));  // another host: ignored, not refused
  REQUIRE_FALSE(unicast_fetch::read_start(u, sender, o));
  CHECK_FALSE(o);
  u.set_address(std::string(16, '\x01'));  // an IPv6 address for an IPv4 sender
  CHECK(unicast_fetch::read_start(u, sender, o) == errc::invalid_field);
}

TEST_CASE("what is wanted is every gap of the receiving files as byte ranges",
          "[unit][receiver][unicast_fetch]") {
  std::vector<file_rx> files{file_of(450, {0, 2}), file_of(300, {0, 1, 2}), file_of(250, {})};
  files[2].state = file_rx::state_t::stored;
  const auto w = unicast_fetch::wanted(files, 100);
  REQUIRE(w.size() == 2);
  CHECK(w[0].file.value == 0);
  CHECK(w[0].offset == 100);
  CHECK(w[0].length == 100);
  CHECK(w[1].offset == 300);
  CHECK(w[1].length == 150);  // blocks 3 and 4, the last one short
}

TEST_CASE("orders, attempts and their back-off", "[unit][receiver][unicast_fetch]") {
  unicast_fetch u;
  CHECK_FALSE(u.moved());
  CHECK(u.path() == delivery_path::multicast);
  CHECK_FALSE(u.next_attempt());
  CHECK_FALSE(u.prepare());  // not served over unicast from the start

  const auto o = *unicast_fetch::read_order(order_msg(), sender);
  CHECK_FALSE(u.take_order(o));
  CHECK(u.moved());
  CHECK(u.path() == unicast_path(o.transport));
  CHECK(is_unicast(u.path()));
  REQUIRE(u.next_attempt());
  const auto& started = u.begin_attempt(25ms);
  CHECK(started.rtt == 25ms);
  CHECK(u.active());
  CHECK(u.holds_transport());
  CHECK_FALSE(u.next_attempt());
  CHECK(u.repeats(o));

  // A new order while connected: the running client is to be stopped.
  CHECK(u.take_order(o));
  CHECK_FALSE(u.active());
  u.begin_attempt(25ms);
  u.on_closed();
  REQUIRE(u.schedule_retry(t0));
  CHECK(u.next_attempt() == t0 + 2 * unicast_fetch::backoff);
  while (u.attempts() < unicast_fetch::max_attempts) u.begin_attempt(25ms);
  u.on_closed();
  CHECK_FALSE(u.schedule_retry(t0));

  // Nothing wanted: no attempt until a file must be fetched again.
  CHECK_FALSE(u.nothing_wanted());
  CHECK(u.next_attempt() == time_point::max());
  u.retry_now(t0);
  CHECK(u.next_attempt() == t0);
}

TEST_CASE("a transport prepared from the announce is held until an attempt takes it",
          "[unit][receiver][unicast_fetch]") {
  unicast_fetch u;
  wire::unicast_start s;
  s.set_port(9899);
  std::optional<unicast_order> o;
  REQUIRE_FALSE(unicast_fetch::read_start(s, sender, o));
  u.set_start(*o);
  const unicast_order* p = u.prepare();
  REQUIRE(p);
  CHECK(p->server.port == 9899);
  CHECK(u.holds_transport());
  CHECK_FALSE(u.active());
  // An order with nothing left to fetch: the prepared transport is to be dropped.
  u.take_order(*unicast_fetch::read_order(order_msg(), sender));
  CHECK(u.nothing_wanted());
  CHECK_FALSE(u.holds_transport());
  CHECK_FALSE(u.prepare());  // moved already
}

TEST_CASE("blocks that arrive in pieces are whole once their bytes add up",
          "[unit][receiver][unicast_fetch]") {
  unicast_fetch u;
  auto fr = file_of(450, {});
  std::vector<std::uint32_t> whole;
  auto take = [&](std::uint32_t b) {
    whole.push_back(b);
    fr.received.set(b);
  };
  u.on_bytes(0, fr, 0, 150, 100, take);  // block 0 whole, half of block 1
  CHECK(whole == std::vector<std::uint32_t>{0});
  u.on_bytes(0, fr, 150, 50, 100, take);  // the rest of block 1
  CHECK(whole == std::vector<std::uint32_t>{0, 1});
  u.on_bytes(0, fr, 400, 50, 100, take);  // the short last block, whole
  CHECK(whole == std::vector<std::uint32_t>{0, 1, 4});
  u.on_bytes(0, fr, 0, 100, 100, take);  // again: already in
  CHECK(whole.size() == 3);

  // An attempt forgets the pieces: blocks asked for again arrive whole.
  u.on_bytes(0, fr, 200, 60, 100, take);
  u.begin_attempt(duration::zero());
  u.on_bytes(0, fr, 260, 40, 100, take);
  CHECK(whole.size() == 3);
  u.on_bytes(0, fr, 200, 100, 100, take);
  CHECK(whole == std::vector<std::uint32_t>{0, 1, 4, 2});
}
