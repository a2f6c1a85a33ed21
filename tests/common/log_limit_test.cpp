#include "common/log_limit.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <thread>
#include <vector>

using mcdist::log_limiter;
using mcdist::worth_logging;

TEST_CASE("worth_logging logs the first few, then every power of two") {
  for (std::uint64_t n = 1; n <= 10; ++n) CHECK(worth_logging(n));
  CHECK_FALSE(worth_logging(11));
  CHECK_FALSE(worth_logging(15));
  CHECK(worth_logging(16));
  CHECK_FALSE(worth_logging(17));
  CHECK(worth_logging(std::uint64_t{1} << 40));
  CHECK_FALSE(worth_logging((std::uint64_t{1} << 40) + 1));
  CHECK(worth_logging(1, 1));
  CHECK_FALSE(worth_logging(3, 1));
  CHECK(worth_logging(4, 1));
}

TEST_CASE("a log_limiter logs a bounded number of lines over a million events") {
  log_limiter limit;
  std::uint64_t logged = 0;
  for (int i = 0; i < 1'000'000; ++i) logged += limit.tick() ? 1 : 0;
  CHECK(limit.count() == 1'000'000);
  // 1..10, then 16, 32, ..., 2^19 (524288): 10 + 16 lines.
  CHECK(logged == 26);
}

TEST_CASE("a log_limiter shared by threads counts every event") {
  log_limiter limit{1};
  std::vector<std::thread> threads;
  std::uint64_t logged[4] = {};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10'000; ++i) logged[t] += limit.tick() ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(limit.count() == 40'000);
  // Each occurrence number is seen by exactly one thread: 1, 2, 4, ..., 32768 are 16 lines.
  CHECK(logged[0] + logged[1] + logged[2] + logged[3] == 16);
}
