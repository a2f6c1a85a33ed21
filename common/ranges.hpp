#pragma once
/// @file
/// Compact run-length lists of indexes, as carried in NAKs (missing blocks) and REGISTER
/// (held files): (gap, count) pairs, where a run starts `gap` after the previous run's end
/// (the first run after index 0). Protobuf packs them as varints, so a NAK for a few lost
/// blocks costs a few bytes.

#include "common/error.hpp"

#include <cstdint>
#include <span>
#include <system_error>
#include <vector>

namespace mcdist {

/// Appends runs to a (gap, count) list. Runs must be appended in increasing order and must
/// not overlap.
class range_encoder {
 public:
  explicit range_encoder(std::vector<std::uint32_t>& out) : m_out(&out) {}
  /// Adds the run [first, first + count). count == 0 is ignored.
  void add(std::uint32_t first, std::uint32_t count) {
    if (count == 0) return;
    m_out->push_back(first - m_end);
    m_out->push_back(count);
    m_end = first + count;
  }
  /// Bytes the pairs added so far take as protobuf varints (an upper bound for budgeting).
  static std::size_t varint_size(std::uint32_t v) noexcept {
    return v < (1u << 7) ? 1 : v < (1u << 14) ? 2 : v < (1u << 21) ? 3 : v < (1u << 28) ? 4 : 5;
  }
  /// Bytes a run starting at `first` of `count` would add.
  std::size_t cost(std::uint32_t first, std::uint32_t count) const noexcept {
    return varint_size(first - m_end) + varint_size(count);
  }

 private:
  std::vector<std::uint32_t>* m_out;
  std::uint32_t m_end = 0;
};

/// Decodes a (gap, count) list, calling fn(first, count) per run, after checking every run:
/// even length, count > 0, no overflow, every run inside [0, limit).
/// @return empty, or errc::invalid_field (fn is not called at all in that case)
template <class Fn>
std::error_code for_each_range(std::span<const std::uint32_t> pairs, std::uint32_t limit, Fn&& fn) {
  if (pairs.size() % 2 != 0) return errc::invalid_field;
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < pairs.size(); i += 2) {
    const std::uint64_t first = end + pairs[i];
    if (pairs[i + 1] == 0) return errc::invalid_field;
    end = first + pairs[i + 1];
    if (end > limit) return errc::invalid_field;
  }
  end = 0;
  for (std::size_t i = 0; i < pairs.size(); i += 2) {
    const auto first = static_cast<std::uint32_t>(end + pairs[i]);
    fn(first, pairs[i + 1]);
    end = std::uint64_t{first} + pairs[i + 1];
  }
  return {};
}

}  // namespace mcdist
