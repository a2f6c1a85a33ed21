#pragma once
/// @file
/// A byte range of one file of a session: what a receiver still needs after multicast
/// (receiver_engine hands it to its shell), what the unicast client asks for in its request
/// frames, and what the server and client track (common/unicast). One type for all of them.

#include "common/ids.hpp"

#include <compare>
#include <cstdint>

namespace mcdist {

/// Bytes [offset, offset + length) of file `file` of a session's manifest.
struct byte_range {
  file_index file{};
  std::uint64_t offset = 0;  ///< bytes from the start of the file
  std::uint64_t length = 0;  ///< bytes

  auto operator<=>(const byte_range&) const = default;
};

}  // namespace mcdist
