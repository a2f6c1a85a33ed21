#include "receiver/storage/chunk_pool.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <numeric>
#include <stdexcept>
#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

/// A pool whose submitted chunks are collected, standing in for the writer queue.
struct pool_fixture {
  std::vector<chunk*> submitted;
  chunk_pool pool;

  pool_fixture(std::size_t pool_bytes, std::size_t chunk_bytes)
      : pool(pool_bytes, chunk_bytes, [this](chunk* c) { submitted.push_back(c); }) {}

  /// What the writer does: release every submitted chunk.
  void release_all() {
    for (chunk* c : submitted) pool.release(c);
    submitted.clear();
  }
};

std::vector<std::byte> bytes(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return v;
}

}  // namespace

TEST_CASE("chunk_pool coalesces consecutive blocks of one file into one entry") {
  pool_fixture f(4096, 1024);
  const auto a = bytes(100, 1);
  const auto b = bytes(100, 2);
  REQUIRE(f.pool.add_data(7, 0, a));
  REQUIRE(f.pool.add_data(7, 100, b));
  f.pool.submit_current();
  REQUIRE(f.submitted.size() == 1);
  const chunk& c = *f.submitted[0];
  REQUIRE(c.entries.size() == 1);
  CHECK(c.entries[0].what == chunk_entry::kind::data);
  CHECK(c.entries[0].handle == 7);
  CHECK(c.entries[0].offset == 0);
  CHECK(c.entries[0].len == 200);
  const auto got = c.bytes(c.entries[0]);
  CHECK(std::equal(a.begin(), a.end(), got.begin()));
  CHECK(std::equal(b.begin(), b.end(), got.begin() + 100));
}

TEST_CASE("chunk_pool keeps a gap, another file and a finalize as separate ordered entries") {
  pool_fixture f(4096, 1024);
  const auto d = bytes(50, 3);
  REQUIRE(f.pool.add_data(1, 0, d));
  REQUIRE(f.pool.add_data(1, 100, d));  // gap: not contiguous in the file
  REQUIRE(f.pool.add_data(2, 150, d));  // another file
  sha256_digest digest{};
  digest[0] = 0xab;
  REQUIRE(f.pool.add_finalize(1, digest));
  f.pool.submit_current();
  REQUIRE(f.submitted.size() == 1);
  const chunk& c = *f.submitted[0];
  REQUIRE(c.entries.size() == 4);
  CHECK(c.entries[1].offset == 100);
  CHECK(c.entries[2].handle == 2);
  CHECK(c.entries[3].what == chunk_entry::kind::finalize);
  CHECK(c.entries[3].handle == 1);
  REQUIRE(c.digests.size() == 1);
  CHECK(c.digests[c.entries[3].pos] == digest);
}

TEST_CASE("chunk_pool add_finalize needs a chunk being filled") {
  pool_fixture f(4096, 1024);
  CHECK_FALSE(f.pool.add_finalize(1, sha256_digest{}));
  REQUIRE(f.pool.add_data(1, 0, bytes(10, 0)));
  CHECK(f.pool.add_finalize(1, sha256_digest{}));
  f.pool.submit_current();
  CHECK_FALSE(f.pool.add_finalize(1, sha256_digest{}));  // submitted: a new chunk is not open
}

TEST_CASE("chunk_pool carves several chunks out of one slab: a flush wastes no pool memory") {
  pool_fixture f(2048, 1024);  // two slabs
  for (int i = 0; i < 5; ++i) {
    REQUIRE(f.pool.add_data(1, static_cast<std::uint64_t>(i) * 100, bytes(100, 0)));
    f.pool.submit_current();  // a flush per receive batch
  }
  CHECK(f.submitted.size() == 5);
  CHECK(f.pool.chunks_in_flight() == 1);  // all five chunks share the first slab
  CHECK(f.pool.free_bytes() == 1024);
  f.release_all();
  CHECK(f.pool.chunks_in_flight() == 1);  // the network thread still fills that slab
  f.pool.leave_slab();
  CHECK(f.pool.chunks_in_flight() == 0);
  CHECK(f.pool.free_bytes() == 2048);
}

TEST_CASE("chunk_pool refuses a block all or nothing when the pool is exhausted") {
  pool_fixture f(2048, 1024);  // two slabs
  REQUIRE(f.pool.add_data(1, 0, bytes(1000, 0)));
  REQUIRE(f.pool.add_data(1, 1000, bytes(1000, 0)));  // spills into the second slab
  CHECK(f.pool.chunks_in_flight() == 2);
  // 48 bytes left in the second slab; 100 do not fit and no slab is free.
  CHECK_FALSE(f.pool.add_data(1, 2000, bytes(100, 0)));
  CHECK(f.pool.exhausted() == 1);
  CHECK(f.pool.free_bytes() == 0);
  // Nothing of the refused block was copied: the pending chunk ends at 2000 bytes.
  f.pool.submit_current();
  std::uint64_t total = 0;
  for (const chunk* c : f.submitted)
    for (const auto& e : c->entries) total += e.len;
  CHECK(total == 2000);
  f.release_all();
  f.pool.leave_slab();
  CHECK(f.pool.free_bytes() == 2048);
  CHECK(f.pool.add_data(1, 2000, bytes(100, 0)));
}

TEST_CASE("chunk_pool splits a block larger than a slab across slabs, in order") {
  pool_fixture f(4096, 1024);
  const auto big = bytes(2500, 9);
  REQUIRE(f.pool.add_data(3, 10, big));
  f.pool.submit_current();
  std::vector<std::byte> joined;
  std::uint64_t next = 10;
  for (const chunk* c : f.submitted) {
    for (const auto& e : c->entries) {
      CHECK(e.offset == next);
      next += e.len;
      const auto part = c->bytes(e);
      joined.insert(joined.end(), part.begin(), part.end());
    }
  }
  CHECK(joined == big);
  CHECK(f.pool.chunks_in_flight() == 3);
}

TEST_CASE("chunk_pool rejects sizes it cannot hold") {
  auto none = [](chunk*) {};
  CHECK_THROWS_AS(chunk_pool(1024, 0, none), std::invalid_argument);
  CHECK_THROWS_AS(chunk_pool(512, 1024, none), std::invalid_argument);
  CHECK_THROWS_AS(chunk_pool(std::size_t{4} << 30, (std::size_t{1} << 30) + 1, none),
                  std::invalid_argument);
}
