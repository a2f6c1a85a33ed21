#include "receiver/core/replay_guard.hpp"

#include <catch2/catch.hpp>

#include <chrono>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

const std::string hub = "mcdist-ed25519:jZOmaoskCVjTgMTuBcl72lX8tUfj2WTS6rsIvEXUzAY=";
const std::string other = "mcdist-ed25519:AAAAaoskCVjTgMTuBcl72lX8tUfj2WTS6rsIvEXUzAY=";
/// 2026-12-02 00:00:00 UTC in Unix ms: a plausible "now".
constexpr std::uint64_t t0 = 1'796'169'600'000;

replay_guard::limits hour() {
  replay_guard::limits l;
  l.max_age = 1h;
  l.max_skew = 5min;
  return l;
}

replay_guard::entry session(std::uint32_t id, std::uint64_t stamp, const std::string& key = hub) {
  return {stamp, session_id{id}, key};
}

}  // namespace

TEST_CASE("a fresh signed session is taken once; the same session again is a replay",
          "[unit][receiver][replay]") {
  replay_guard g(hour());
  REQUIRE(g.admit(session(7, t0 - 1000), t0) == errc::ok);
  REQUIRE(g.size() == 1);
  // Replayed minutes later: the signed stamp is the same.
  REQUIRE(g.admit(session(7, t0 - 1000), t0 + 65'000) == errc::replayed);
  // The same random id from another sender, or another session with the same id later: new.
  REQUIRE(g.admit(session(7, t0 - 1000, other), t0 + 1) == errc::ok);
  REQUIRE(g.admit(session(7, t0 + 500), t0 + 600) == errc::ok);
  REQUIRE(g.size() == 3);
}

TEST_CASE("a session stamped longer ago than max_age is expired; one too far ahead is skew",
          "[unit][receiver][replay]") {
  replay_guard g(hour());
  REQUIRE(g.admit(session(1, t0 - 3'600'001), t0) == errc::expired);
  REQUIRE(g.admit(session(2, t0 - 3'600'000), t0) == errc::ok);  // at the limit: taken
  REQUIRE(g.admit(session(3, t0 + 300'001), t0) == errc::clock_skew);
  REQUIRE(g.admit(session(4, t0 + 300'000), t0) == errc::ok);
  REQUIRE(g.admit(session(5, 0), t0) == errc::unstamped);
  REQUIRE(g.size() == 2);
}

TEST_CASE("entries are kept exactly as long as their replay would pass the age check",
          "[unit][receiver][replay]") {
  replay_guard g(hour());
  REQUIRE(g.admit(session(1, t0), t0) == errc::ok);
  REQUIRE(g.expire(t0 + 3'600'000) == 0);
  REQUIRE(g.admit(session(1, t0), t0 + 3'600'000) == errc::replayed);
  REQUIRE(g.expire(t0 + 3'600'001) == 1);
  REQUIRE(g.size() == 0);
  // Gone from the cache, and refused by its age instead.
  REQUIRE(g.admit(session(1, t0), t0 + 3'600'001) == errc::expired);
}

TEST_CASE("evicting for max_entries raises the floor so a forgotten session stays refused",
          "[unit][receiver][replay]") {
  auto l = hour();
  l.max_entries = 3;
  replay_guard g(l);
  for (std::uint32_t i = 0; i < 4; ++i) REQUIRE(g.admit(session(i, t0 + i), t0 + 10) == errc::ok);
  REQUIRE(g.size() == 3);
  REQUIRE(g.floor_ms() == t0);
  // Session 0 was forgotten: its replay is refused by the floor, not let in.
  REQUIRE(g.admit(session(0, t0), t0 + 20) == errc::expired);
  REQUIRE(g.admit(session(3, t0 + 3), t0 + 20) == errc::replayed);
  REQUIRE(g.admit(session(9, t0 + 11), t0 + 20) == errc::ok);
}

TEST_CASE("a full cache refuses a session older than all it holds, or stamped at the new floor",
          "[unit][receiver][replay]") {
  auto l = hour();
  l.max_entries = 2;
  replay_guard g(l);
  REQUIRE(g.admit(session(1, t0 + 5), t0 + 10) == errc::ok);
  REQUIRE(g.admit(session(2, t0 + 6), t0 + 10) == errc::ok);
  // Older than both: kept, it would be the one evicted, its replay then indistinguishable.
  REQUIRE(g.admit(session(3, t0 + 4), t0 + 10) == errc::expired);
  REQUIRE(g.size() == 2);
  REQUIRE(g.floor_ms() == t0 + 4);
  // The same ms as the oldest entry: evicting that one puts the floor at this stamp too.
  REQUIRE(g.admit(session(4, t0 + 5), t0 + 10) == errc::expired);
  REQUIRE(g.floor_ms() == t0 + 5);
  for (const auto& e : g.entries()) REQUIRE(e.stamp_ms > g.floor_ms());
  REQUIRE(g.admit(session(5, t0 + 7), t0 + 10) == errc::ok);
}

TEST_CASE("the cache's text round-trips and a line cut by a crash is ignored",
          "[unit][receiver][replay]") {
  replay_guard g(hour());
  g.raise_floor(t0 - 5000);
  REQUIRE(g.admit(session(0xabcd, t0 - 10), t0) == errc::ok);
  REQUIRE(g.admit(session(0x1, t0 - 20, other), t0) == errc::ok);
  std::string text = g.encode();
  text += replay_guard::encode(session(0x2, t0 - 5));
  text += "17961696";  // an append cut short

  replay_guard back(hour());
  REQUIRE(replay_guard::decode(text, t0, back).empty());
  REQUIRE(back.size() == 3);
  REQUIRE(back.floor_ms() == t0 - 5000);
  REQUIRE(back.admit(session(0xabcd, t0 - 10), t0) == errc::replayed);
  REQUIRE(back.admit(session(0x2, t0 - 5), t0) == errc::replayed);
  // Entries already older than max_age are not read back.
  replay_guard later(hour());
  REQUIRE(replay_guard::decode(text, t0 + 3'599'993, later).empty());
  REQUIRE(later.size() == 1);
}

TEST_CASE("a damaged cache is refused whole, with the line named", "[unit][receiver][replay]") {
  replay_guard g(hour());
  const std::string head = "mcdist-replay 1\nfloor 0\n";
  REQUIRE_FALSE(replay_guard::decode("", t0, g).empty());
  REQUIRE_FALSE(replay_guard::decode("mcdist-replay 2\nfloor 0\n", t0, g).empty());
  REQUIRE_FALSE(replay_guard::decode("mcdist-replay 1\nfloor x\n", t0, g).empty());
  for (const char* bad : {"x 0000abcd " /* stamp */, "1 abcd key\n", "1 0000abcd \n",
                          "1 0000abcd has space\n", "1 0000abcz key\n", "-1 0000abcd key\n"}) {
    const auto why = replay_guard::decode(head + "1 00000001 k\n" + bad + "\n", t0, g);
    CAPTURE(bad);
    REQUIRE(why.find("line 4") != std::string::npos);
    REQUIRE(g.size() == 0);
  }
  const std::string long_key(replay_guard::max_key_bytes + 1, 'k');
  REQUIRE_FALSE(replay_guard::decode(head + "1 00000001 " + long_key + "\n", t0, g).empty());
}
