#include "common/fec/fec_layout.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

using namespace mcdist;

namespace {

/// Checks that locate and source are inverse bijections over the whole session.
void check_bijection(const std::vector<std::uint32_t>& blocks, std::uint32_t k,
                     std::uint32_t depth) {
  const fec::layout l(blocks, k, depth);
  std::uint64_t total = 0;
  for (const auto b : blocks) total += b;
  REQUIRE(l.total_blocks() == total);
  std::uint64_t sum = 0;
  for (std::uint32_t fb = 0; fb < l.fec_blocks(); ++fb) {
    const auto n = l.sources(fb);
    REQUIRE(n >= 1);
    REQUIRE(n <= k);
    sum += n;
  }
  REQUIRE(sum == total);
  std::set<std::pair<std::uint32_t, std::uint32_t>> seen;
  for (std::uint32_t f = 0; f < blocks.size(); ++f) {
    const auto span = l.fec_blocks_of(f);
    REQUIRE(span.has_value() == (blocks[f] > 0));
    for (std::uint32_t b = 0; b < blocks[f]; ++b) {
      const auto p = l.locate(f, b);
      INFO("file " << f << " block " << b << " -> fec " << p.fec_block << " index " << p.index);
      REQUIRE(p.fec_block < l.fec_blocks());
      REQUIRE(p.index < l.sources(p.fec_block));
      REQUIRE(seen.insert({p.fec_block, p.index}).second);
      const auto back = l.source(p.fec_block, p.index);
      REQUIRE(back.file == f);
      REQUIRE(back.block == b);
      // Sources sent before this block's sequence number: exactly its index.
      REQUIRE(l.sources_before(p.fec_block, l.sequence_number(f, b)) == p.index);
      REQUIRE(l.sources_before(p.fec_block, l.sequence_number(f, b) + 1) == p.index + 1);
      REQUIRE(p.fec_block >= span->first);
      REQUIRE(p.fec_block <= span->second);
    }
  }
  REQUIRE(seen.size() == total);
  // completed_in: the FEC blocks whose last source lies in [g0, g1), against the definition
  // (the sequence number of source sources(fb) - 1), for ranges that split groups anywhere.
  std::vector<std::uint64_t> last(l.fec_blocks());
  for (std::uint32_t fb = 0; fb < l.fec_blocks(); ++fb) {
    const auto r = l.source(fb, l.sources(fb) - 1);
    last[fb] = l.sequence_number(r.file, r.block);
  }
  std::vector<std::uint32_t> all;
  for (std::uint64_t g0 = 0, step = 1; g0 <= total; g0 += step, step = step % 7 + 1) {
    for (const std::uint64_t len : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{5},
                                    std::uint64_t{k * depth}, total + 3}) {
      std::vector<std::uint32_t> want;
      for (std::uint32_t fb = 0; fb < l.fec_blocks(); ++fb) {
        if (last[fb] >= g0 && last[fb] < g0 + len) want.push_back(fb);
      }
      INFO("range [" << g0 << ", " << g0 + len << ")");
      REQUIRE(l.completed_in(g0, g0 + len) == want);
    }
    // Consecutive ranges see every FEC block exactly once.
    const auto part = l.completed_in(g0, g0 + step);
    all.insert(all.end(), part.begin(), part.end());
  }
  std::sort(all.begin(), all.end());
  REQUIRE(all.size() == l.fec_blocks());
  REQUIRE(std::adjacent_find(all.begin(), all.end()) == all.end());
}

}  // namespace

TEST_CASE("fec layout maps every block to one FEC block slot and back", "[unit][fec]") {
  check_bijection({1}, 1, 1);
  check_bijection({10}, 4, 1);
  check_bijection({0, 3, 0, 0, 8, 1}, 4, 2);  // empty files in between
  check_bijection({100, 1, 1, 1, 200}, 16, 4);
  check_bijection({64}, 16, 4);  // exactly one group
  check_bijection({65}, 16, 4);  // one block into a second group
  std::mt19937_64 rng(5);
  for (int round = 0; round < 30; ++round) {
    std::vector<std::uint32_t> blocks(1 + rng() % 40);
    for (auto& b : blocks) b = static_cast<std::uint32_t>(rng() % 5 == 0 ? 0 : rng() % 300);
    const auto k = static_cast<std::uint32_t>(1 + rng() % 128);
    const auto depth = static_cast<std::uint32_t>(1 + rng() % 8);
    INFO("round " << round << " k " << k << " depth " << depth);
    check_bijection(blocks, k, depth);
  }
}

TEST_CASE("fec layout spans small files with one FEC block", "[unit][fec]") {
  // 1000 products of 8 blocks (10 kB) at k = 128, depth 1: 8000 blocks in 63 FEC blocks, not
  // 1000 (one per product).
  const fec::layout l(std::vector<std::uint32_t>(1000, 8), 128, 1);
  REQUIRE(l.fec_blocks() == 63);
  REQUIRE(l.locate(0, 0).fec_block == l.locate(15, 7).fec_block);
  REQUIRE(l.locate(16, 0).fec_block == 1);
}

TEST_CASE("fec layout puts a burst of up to depth consecutive blocks in distinct FEC blocks",
          "[unit][fec]") {
  const std::uint32_t k = 32;
  for (const std::uint32_t depth : {1u, 4u, 8u}) {
    const std::vector<std::uint32_t> blocks{700, 3, 5000, 17};
    const fec::layout l(blocks, k, depth);
    // Walk the session's blocks in sequence (pass 1's send order) and check every window of
    // `depth` consecutive blocks hits each FEC block at most once.
    std::vector<std::uint32_t> seq;
    for (std::uint32_t f = 0; f < blocks.size(); ++f) {
      for (std::uint32_t b = 0; b < blocks[f]; ++b) seq.push_back(l.locate(f, b).fec_block);
    }
    // Full groups; the last, shorter group is interleaved less deeply (fec_layout.hpp).
    const std::size_t full = seq.size() / (k * depth) * (k * depth);
    for (std::size_t i = 0; i + depth <= full; ++i) {
      std::set<std::uint32_t> window(seq.begin() + static_cast<std::ptrdiff_t>(i),
                                     seq.begin() + static_cast<std::ptrdiff_t>(i + depth));
      // Windows that cross a group boundary may meet a FEC block of the next group only once
      // too: different groups have different FEC blocks.
      INFO("depth " << depth << " at " << i);
      REQUIRE(window.size() == depth);
    }
  }
}

TEST_CASE("fec layout refuses shapes out of range", "[unit][fec]") {
  REQUIRE_THROWS_AS(fec::layout({10}, 0, 1), std::invalid_argument);
  REQUIRE_THROWS_AS(fec::layout({10}, 4, 0), std::invalid_argument);
  REQUIRE_THROWS_AS(fec::layout({10}, 4, fec::max_depth + 1), std::invalid_argument);
  const fec::layout empty({0, 0}, 8, 2);
  REQUIRE(empty.fec_blocks() == 0);
  REQUIRE_FALSE(empty.fec_blocks_of(1).has_value());
}
