#pragma once
/// @file
/// Test helpers of the receiver core's component tests: a session's files in a given state, and
/// what a round's NAK datagrams ask for.

#include "common/block_map.hpp"
#include "common/ranges.hpp"
#include "mcdist.pb.h"
#include "receiver/core/file_table.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mcdist::receiver::testing {

/// Files "f0", "f1", ... of the given block counts, full blocks of `block_size` bytes, receiving,
/// with block maps holding every block but the `missing` (file, block) pairs.
inline std::vector<file_rx> receiving_files(
    const std::vector<std::uint32_t>& blocks,
    const std::set<std::pair<std::uint32_t, std::uint32_t>>& missing, std::uint32_t block_size) {
  std::vector<file_rx> files(blocks.size());
  for (std::uint32_t f = 0; f < blocks.size(); ++f) {
    auto& fr = files[f];
    fr.state = file_rx::state_t::receiving;
    fr.blocks = blocks[f];
    fr.entry.size = std::uint64_t{blocks[f]} * block_size;
    fr.entry.path = "f" + std::to_string(f);
    fr.received = block_map(blocks[f]);
    for (std::uint32_t b = 0; b < blocks[f]; ++b) {
      if (!missing.count({f, b})) fr.received.set(b);
    }
  }
  return files;
}

/// Every (file, block) the NAK datagrams name in their ranges; fails the test case when a
/// datagram's ranges do not decode.
inline std::set<std::pair<std::uint32_t, std::uint32_t>> nak_blocks(
    const std::vector<wire::nak>& naks) {
  std::set<std::pair<std::uint32_t, std::uint32_t>> out;
  for (const auto& n : naks) {
    for (const auto& fn : n.files()) {
      const std::vector<std::uint32_t> pairs(fn.ranges().begin(), fn.ranges().end());
      REQUIRE_FALSE(
          for_each_range(pairs, 0x7fffffff, [&](std::uint32_t first, std::uint32_t count) {
            for (std::uint32_t b = first; b < first + count; ++b) out.emplace(fn.file(), b);
          }));
    }
  }
  return out;
}

}  // namespace mcdist::receiver::testing
