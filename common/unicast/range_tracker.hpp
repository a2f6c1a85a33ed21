#pragma once
/// @file
/// The client's ledger of requested bytes not yet received (pure; no I/O). Every record piece
/// from the server must fall inside a range still outstanding, so a server that sends bytes
/// nobody asked for, or the same bytes twice, is caught; and after a cut connection
/// outstanding() is exactly what to ask for again.

#include "common/unicast/types.hpp"

#include <cstdint>
#include <map>
#include <system_error>
#include <vector>

namespace mcdist::unicast {

class range_tracker {
 public:
  /// Adds a requested range (length > 0; offset + length must not wrap).
  /// @return errc::invalid_field, and nothing added, when it overlaps a range still
  ///         outstanding (the same bytes would come twice) or is empty or wraps.
  std::error_code add(const byte_range& r);

  /// True when `r` shares a byte with a range still outstanding.
  bool overlaps(const byte_range& r) const;

  /// Records that [offset, offset + length) of `file` arrived.
  /// @param file_done set to true when `file` has nothing outstanding left afterwards
  /// @return errc::invalid_field, and nothing changed, unless the bytes lie inside one
  ///         outstanding range.
  std::error_code take(file_index file, std::uint64_t offset, std::uint64_t length,
                       bool& file_done);

  /// Ranges still outstanding, ordered by file then offset; adjacent pieces are merged.
  std::vector<byte_range> outstanding() const;
  /// Bytes still outstanding.
  std::uint64_t outstanding_bytes() const noexcept { return m_bytes; }
  /// Files with something outstanding.
  std::size_t outstanding_files() const noexcept { return m_files.size(); }
  /// True when nothing is outstanding.
  bool complete() const noexcept { return m_files.empty(); }

 private:
  /// Per file: outstanding intervals, start -> end (exclusive), disjoint and not adjacent.
  std::map<file_index, std::map<std::uint64_t, std::uint64_t>> m_files;
  std::uint64_t m_bytes = 0;
};

}  // namespace mcdist::unicast
