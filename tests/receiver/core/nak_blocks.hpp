#pragma once
/// @file
/// Test helper of the receiver core's NAK tests: what a round's NAK datagrams ask for.

#include "common/ranges.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

namespace mcdist::receiver::testing {

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
