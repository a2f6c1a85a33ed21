#include "receiver/core/session_table.hpp"

#include <catch2/catch.hpp>

#include <memory>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

struct fake_session {
  endpoint sender;
  std::uint32_t channel = 0;
};

const time_point t0{std::chrono::seconds(1000)};
const endpoint host_a = *parse_endpoint("10.0.0.1:4711");
const endpoint host_a2 = *parse_endpoint("10.0.0.1:5000");  // same host, another port
const endpoint host_b = *parse_endpoint("10.0.0.2:4711");

std::unique_ptr<fake_session> session(const endpoint& from, std::uint32_t channel) {
  return std::make_unique<fake_session>(fake_session{from, channel});
}

}  // namespace

TEST_CASE("sessions are found by id until retired, then their datagrams are stale",
          "[unit][receiver][session_table]") {
  session_table<fake_session> t(16);
  auto& a = t.insert(session_id{7}, session(host_a, 1));
  t.insert(session_id{3}, session(host_b, 2));
  REQUIRE(t.find(session_id{7}) == &a);
  REQUIRE(t.size() == 2);
  CHECK(t.untracked_reason(session_id{9}) == errc::unknown_session);
  // In id order.
  const auto list = t.snapshot();
  REQUIRE(list.size() == 2);
  CHECK(list[0]->channel == 2);
  CHECK(list[1] == &a);

  t.retire(session_id{7}, t0 + 10s);
  CHECK_FALSE(t.find(session_id{7}));
  CHECK(t.ended(session_id{7}));
  CHECK(t.untracked_reason(session_id{7}) == errc::stale);
  CHECK(t.tombstones() == 1);
  t.expire(t0 + 9s);
  CHECK(t.ended(session_id{7}));
  t.expire(t0 + 10s);
  CHECK_FALSE(t.ended(session_id{7}));
  CHECK(t.tombstones() == 0);
  CHECK(t.size() == 1);
}

TEST_CASE("admission counts sessions in all and per source host, and by channel",
          "[unit][receiver][session_table]") {
  session_table<fake_session> t(16);
  t.insert(session_id{1}, session(host_a, 0));
  t.insert(session_id{2}, session(host_a2, 1));
  t.insert(session_id{3}, session(host_b, 1));
  CHECK(t.on_channel(1) == 2);
  CHECK(t.on_channel(5) == 0);
  CHECK(t.admits(host_a, 4, 3));
  CHECK_FALSE(t.admits(host_a, 4, 2));  // two from host a already, whatever their ports
  CHECK(t.admits(host_b, 4, 2));
  CHECK_FALSE(t.admits(host_b, 3, 16));  // three in all
}

TEST_CASE("tombstones past the cap forget the oldest; a re-added id keeps its new expiry",
          "[unit][receiver][session_table]") {
  tombstone_list l(3);
  l.add(session_id{1}, t0 + 1s);
  l.add(session_id{2}, t0 + 2s);
  l.add(session_id{3}, t0 + 3s);
  l.add(session_id{1}, t0 + 10s);  // again, later
  CHECK(l.size() == 3);
  l.add(session_id{4}, t0 + 4s);  // evicts 2, the oldest still current (1's first entry is stale)
  CHECK(l.size() == 3);
  CHECK(l.contains(session_id{1}));
  CHECK_FALSE(l.contains(session_id{2}));
  CHECK(l.contains(session_id{3}));
  CHECK(l.contains(session_id{4}));
  l.expire(t0 + 5s);
  CHECK(l.size() == 1);
  CHECK(l.contains(session_id{1}));

  // Many adds of one id: the order list is compacted, the one id stays.
  for (int i = 0; i < 1000; ++i) l.add(session_id{9}, t0 + std::chrono::seconds(20 + i));
  CHECK(l.size() == 2);
  l.expire(t0 + 1000s);
  CHECK(l.contains(session_id{9}));
  CHECK_FALSE(l.contains(session_id{1}));
}
