#include "common/block_map.hpp"

#include <algorithm>
#include <bit>
#include <cassert>

namespace mcdist {

block_map::block_map(std::uint32_t bits) : m_words((std::size_t{bits} + 63) / 64), m_size(bits) {}

bool block_map::set(std::uint32_t i) noexcept {
  assert(i < m_size);
  std::uint64_t& w = m_words[i >> 6];
  const std::uint64_t bit = std::uint64_t{1} << (i & 63);
  if (w & bit) return false;
  w |= bit;
  ++m_count;
  return true;
}

bool block_map::reset(std::uint32_t i) noexcept {
  assert(i < m_size);
  std::uint64_t& w = m_words[i >> 6];
  const std::uint64_t bit = std::uint64_t{1} << (i & 63);
  if (!(w & bit)) return false;
  w &= ~bit;
  --m_count;
  return true;
}

void block_map::set_range(std::uint32_t first, std::uint32_t n) noexcept {
  assert(std::uint64_t{first} + n <= m_size);
  std::uint32_t i = first;
  const std::uint32_t end = first + n;
  while (i < end && (i & 63)) set(i++);
  while (i + 64 <= end) {
    std::uint64_t& w = m_words[i >> 6];
    m_count += 64 - static_cast<std::uint32_t>(std::popcount(w));
    w = ~std::uint64_t{0};
    i += 64;
  }
  while (i < end) set(i++);
}

void block_map::set_all() noexcept {
  std::fill(m_words.begin(), m_words.end(), ~std::uint64_t{0});
  if (m_size & 63) m_words.back() = (std::uint64_t{1} << (m_size & 63)) - 1;
  m_count = m_size;
}

void block_map::clear_all() noexcept {
  std::fill(m_words.begin(), m_words.end(), 0);
  m_count = 0;
}

std::uint32_t block_map::find_set(std::uint32_t from) const noexcept {
  if (from >= m_size) return m_size;
  std::size_t wi = from >> 6;
  std::uint64_t w = m_words[wi] & (~std::uint64_t{0} << (from & 63));
  while (true) {
    if (w) {
      const auto i = static_cast<std::uint32_t>(wi * 64 + std::countr_zero(w));
      return std::min(i, m_size);
    }
    if (++wi >= m_words.size()) return m_size;
    w = m_words[wi];
  }
}

std::uint32_t block_map::find_clear(std::uint32_t from) const noexcept {
  if (from >= m_size) return m_size;
  std::size_t wi = from >> 6;
  std::uint64_t w = ~m_words[wi] & (~std::uint64_t{0} << (from & 63));
  while (true) {
    if (w) {
      const auto i = static_cast<std::uint32_t>(wi * 64 + std::countr_zero(w));
      return std::min(i, m_size);
    }
    if (++wi >= m_words.size()) return m_size;
    w = ~m_words[wi];
  }
}

bool block_map::assign_words(std::span<const std::uint64_t> words) noexcept {
  if (words.size() != m_words.size()) return false;
  std::copy(words.begin(), words.end(), m_words.begin());
  if (m_size & 63) m_words.back() &= (std::uint64_t{1} << (m_size & 63)) - 1;
  m_count = 0;
  for (auto w : m_words) m_count += static_cast<std::uint32_t>(std::popcount(w));
  return true;
}

}  // namespace mcdist
