#pragma once
/// @file
/// Fallback tokens for the unicast tests: a readable integer spread into the 128-bit token.

#include "common/ids.hpp"

#include <cstdint>

namespace mcdist::unicast::test {

/// The token whose last 8 bytes are `v` big-endian (and whose first 8 are a fixed pattern, so
/// two tokens that differ only in the low bits still share most of their bytes).
inline fallback_token tok(std::uint64_t v) {
  fallback_token t{0xa5, 0x5a, 0xa5, 0x5a, 0xa5, 0x5a, 0xa5, 0x5a};
  if (v == 0) return fallback_token{};
  for (int i = 0; i < 8; ++i)
    t[8 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (56 - 8 * i));
  return t;
}

}  // namespace mcdist::unicast::test
