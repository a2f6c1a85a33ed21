#include "tests/linkem/core/packet_pool.hpp"

#include <vector>

#include <catch2/catch.hpp>

using namespace mcdist::linkem;

TEST_CASE("buffers come from the smallest fitting class", "[pool]") {
  packet_pool pool(64U << 20U);
  auto small = pool.acquire(1500);
  auto medium = pool.acquire(9000);
  auto large = pool.acquire(65000);
  REQUIRE(small);
  REQUIRE(medium);
  REQUIRE(large);
  CHECK(small->capacity() == 2048);
  CHECK(medium->capacity() == 16384);
  CHECK(large->capacity() == packet_pool::k_class_capacity[2]);
  CHECK_FALSE(pool.acquire(200000));
  CHECK(pool.in_use_bytes() == 2048 + 16384 + packet_pool::k_class_capacity[2]);
}

TEST_CASE("the last handle returns the buffer", "[pool]") {
  packet_pool pool(64U << 20U);
  auto a = pool.acquire(100);
  const auto* raw = a.get();
  {
    buffer_handle b = a;  // shared by two "receivers"
    a.reset();
    CHECK(pool.in_use_bytes() == 2048);
  }
  CHECK(pool.in_use_bytes() == 0);
  // The freed buffer is reused first.
  auto c = pool.acquire(100);
  CHECK(c.get() == raw);
}

TEST_CASE("steady state reserves no more memory", "[pool]") {
  packet_pool pool(64U << 20U);
  std::vector<buffer_handle> window;
  for (int i = 0; i < 1000; ++i) {
    window.push_back(pool.acquire(1500));
  }
  const auto reserved = pool.reserved_bytes();
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 1000; ++i) {
      window[static_cast<std::size_t>(i)] = pool.acquire(1500);
    }
  }
  CHECK(pool.reserved_bytes() == reserved);
  CHECK(pool.peak_in_use_bytes() <= 1001 * 2048);
}

TEST_CASE("the memory cap refuses buffers instead of growing", "[pool]") {
  packet_pool pool(2U << 20U);  // two 1 MiB chunks
  std::vector<buffer_handle> held;
  for (;;) {
    auto b = pool.acquire(65000);
    if (!b) {
      break;
    }
    held.push_back(std::move(b));
    REQUIRE(held.size() < 1000);
  }
  CHECK(pool.exhausted() == 1);
  CHECK(pool.reserved_bytes() <= 2U << 20U);
  held.clear();
  CHECK(pool.acquire(65000));
}
