#pragma once
/// @file
/// The input format of the stateful fuzz targets (receiver_fuzz, sender_fuzz): a script of
/// records, each one action on the engine under test.
///
///     0      1              3
///     +------+--------------+------------------+
///     | op   | length (BE)  | payload ...      |   repeated to the end of the input
///     +------+--------------+------------------+
///
/// A record whose length runs past the end of the input takes what is left. The meaning of
/// `op` (taken modulo the target's op count) and of the payload is the target's; a datagram
/// record's payload is the datagram itself, so seeds are real encoded datagrams framed by 3
/// bytes (tests/fuzz/make_corpus.cpp writes them).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace mcdist::fuzz {

/// Bytes in front of each record's payload.
inline constexpr std::size_t record_header_size = 3;

/// One record of a script.
struct record {
  std::uint8_t op = 0;
  std::span<const std::byte> payload;
};

/// Iterates over the records of a script (see the file comment).
class script_reader {
 public:
  explicit script_reader(std::span<const std::byte> in) noexcept : m_in(in) {}

  /// Takes the next record. @return false at the end of the input (fewer than 3 bytes left)
  bool next(record& out) noexcept {
    if (m_in.size() < record_header_size) return false;
    out.op = std::to_integer<std::uint8_t>(m_in[0]);
    const std::size_t len =
        std::to_integer<std::size_t>(m_in[1]) << 8 | std::to_integer<std::size_t>(m_in[2]);
    const std::size_t take =
        len < m_in.size() - record_header_size ? len : m_in.size() - record_header_size;
    out.payload = m_in.subspan(record_header_size, take);
    m_in = m_in.subspan(record_header_size + take);
    return true;
  }

 private:
  std::span<const std::byte> m_in;
};

/// Appends one record to a script (corpus generator).
inline void append_record(std::vector<std::byte>& out, std::uint8_t op,
                          std::span<const std::byte> payload) {
  out.push_back(static_cast<std::byte>(op));
  out.push_back(static_cast<std::byte>(payload.size() >> 8));
  out.push_back(static_cast<std::byte>(payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
}

/// Reads a big-endian unsigned integer of `n` bytes (n <= 8) at `at` of `p`, 0 past the end.
inline std::uint64_t read_be(std::span<const std::byte> p, std::size_t at, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    v = v << 8 | (at + i < p.size() ? std::to_integer<std::uint64_t>(p[at + i]) : 0);
  }
  return v;
}

}  // namespace mcdist::fuzz
