#pragma once
/// @file
/// Vocabulary of the unicast fallback (docs/design-notes.md "Unicast fallback"), shared by the
/// server and client sides and by the framing: which transport, what a record is, where the
/// server's bytes come from.

#include "common/byte_range.hpp"
#include "common/ids.hpp"
#include "common/transport.hpp"

#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>

namespace mcdist::unicast {

/// The transport under a unicast session: the one enum of common/transport.hpp, spelt "sctp",
/// "sctp-kernel", "tcp" in logs and summaries.
using mcdist::parse_transport_kind;
using mcdist::to_string;
using mcdist::transport_kind;

/// A byte range of one file: the one type of common/byte_range.hpp (a request's ranges, the
/// client's outstanding bytes, the server's schedule).
using mcdist::byte_range;

/// One record on the wire: a piece of a file of at most the record size, tagged with its file
/// and byte offset (XFTP's records, Allman et al. section 3).
struct record {
  file_index file{};
  std::uint64_t offset = 0;
  std::uint32_t length = 0;

  auto operator<=>(const record&) const = default;
};

/// Where the server's file bytes come from (the sender shell gives one that preads its files).
/// Called on the network thread; a read should not block for long (page cache or fast disk).
class byte_source {
 public:
  virtual ~byte_source() = default;
  /// Number of files; valid indexes are [0, file_count()).
  virtual std::uint32_t file_count() const = 0;
  /// Size of `file` in bytes; only called with file < file_count().
  virtual std::uint64_t size(file_index file) const = 0;
  /// Fills all of `out` with the bytes of `file` at `offset`. Only called with ranges inside
  /// the file. @return empty, or the I/O error (the session using it then fails).
  virtual std::error_code read(file_index file, std::uint64_t offset, std::span<std::byte> out) = 0;
};

}  // namespace mcdist::unicast
