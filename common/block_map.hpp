#pragma once
/// @file
/// A fixed-size bitmap over the blocks of one file: which blocks a receiver holds, which a
/// sender still has to send. One bit per block (a 2 GB file of 1400-byte blocks: 187 KB).

#include <cstdint>
#include <span>
#include <vector>

namespace mcdist {

/// Bitmap of `size()` bits with a running count of set bits. All operations on indexes past
/// size() are the caller's bug and are checked only by assertions.
class block_map {
 public:
  block_map() = default;
  /// `bits` bits, all clear.
  explicit block_map(std::uint32_t bits);

  std::uint32_t size() const noexcept { return m_size; }
  std::uint32_t count() const noexcept { return m_count; }
  bool all() const noexcept { return m_count == m_size; }
  bool none() const noexcept { return m_count == 0; }

  bool test(std::uint32_t i) const noexcept { return (m_words[i >> 6] >> (i & 63)) & 1u; }
  /// Sets bit i. @return true if it was clear.
  bool set(std::uint32_t i) noexcept;
  /// Clears bit i. @return true if it was set.
  bool reset(std::uint32_t i) noexcept;
  /// Sets bits [first, first + n).
  void set_range(std::uint32_t first, std::uint32_t n) noexcept;
  /// Sets every bit.
  void set_all() noexcept;
  /// Clears every bit.
  void clear_all() noexcept;

  /// First set bit at or after `from`, or size() if none.
  std::uint32_t find_set(std::uint32_t from) const noexcept;
  /// First clear bit at or after `from`, or size() if none.
  std::uint32_t find_clear(std::uint32_t from) const noexcept;

  /// Raw words, little-endian bit order within each word, for checkpoints.
  std::span<const std::uint64_t> words() const noexcept { return m_words; }
  /// Restores from raw words of a bitmap of the same size; recounts. @return false if the
  /// word count does not match.
  bool assign_words(std::span<const std::uint64_t> words) noexcept;

 private:
  std::vector<std::uint64_t> m_words;
  std::uint32_t m_size = 0;
  std::uint32_t m_count = 0;
};

}  // namespace mcdist
