#include "common/unicast/send_queue.hpp"

#include <catch2/catch.hpp>

using namespace mcdist::unicast;
using std::chrono::microseconds;

TEST_CASE("a connection takes records while its unsent queue is below the limit",
          "[unit][unicast][send_queue]") {
  constexpr std::uint64_t rate = 1'000'000;  // bytes/s: 50 ms = 50,000 bytes
  REQUIRE(paced_queue.limit(rate) == 50'000);
  CHECK_FALSE(paced_queue.wait(0, rate));
  CHECK_FALSE(paced_queue.wait(49'999, rate));
  // At the limit it waits until half the limit is left: 25,000 bytes at 1 MB/s = 25 ms.
  const auto w = paced_queue.wait(50'000, rate);
  REQUIRE(w);
  CHECK(*w == microseconds(25'000));
  const auto w2 = paced_queue.wait(80'000, rate);
  REQUIRE(w2);
  CHECK(*w2 == microseconds(55'000));
}

TEST_CASE("an unknown rate leaves the queueing to the kernel", "[unit][unicast][send_queue]") {
  CHECK_FALSE(unpaced_queue.wait(10 << 20, 0));
  CHECK_FALSE(paced_queue.wait(10 << 20, 0));
}

TEST_CASE("the queue limit is clamped, and a wait is never shorter than the timer's resolution",
          "[unit][unicast][send_queue]") {
  // A slow connection: 31 kB/s (a quarter of 1 Mbit/s) would allow 1.5 kB in 50 ms.
  CHECK(paced_queue.limit(31'250) == 8 << 10);
  CHECK(unpaced_queue.limit(31'250) == 2 * 1448);
  // A fast one: 2.5 GB/s would allow 125 MB.
  CHECK(paced_queue.limit(2'500'000'000) == 4 << 20);
  CHECK(unpaced_queue.limit(2'500'000'000) == 4 << 20);
  // Just over the limit of a fast connection: the drain to half takes 0.8 ms; waits 1 ms.
  const auto w = unpaced_queue.wait(4 << 20, 2'500'000'000);
  REQUIRE(w);
  CHECK(*w == unpaced_queue.min_wait);
}

TEST_CASE("an unpaced connection of a 1 Mbit/s link holds about two segments beyond a record",
          "[unit][unicast][send_queue]") {
  // Four connections share Ladha & Amer's 1 Mbit/s: the kernel paces each near 31 kB/s.
  constexpr std::uint64_t rate = 31'250;
  CHECK_FALSE(unpaced_queue.wait(2 * 1448 - 1, rate));
  // A 10 kB record on top of it: the writer looks again when 1448 bytes are left.
  const auto w = unpaced_queue.wait(2 * 1448 - 1 + 10'020, rate);
  REQUIRE(w);
  CHECK(*w == microseconds((2 * 1448 - 1 + 10'020 - 1448) * 1'000'000ull / rate));
}
