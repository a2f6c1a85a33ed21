// A growable FIFO ring buffer.
#pragma once

#include <cassert>
#include <cstddef>
#include <utility>
#include <vector>

namespace mcdist::linkem {

/// FIFO queue on a power-of-two circular array that doubles when full and never shrinks,
/// so that in steady state push and pop allocate nothing (a delay line of 700 ms at
/// 1 Gbit/s holds ~60 000 entries and would otherwise churn the allocator). Elements
/// are moved in and out; popped slots are reset to T{} to release what they hold.
template <typename T>
class ring {
 public:
  /// @param initial_capacity rounded up to a power of two, >= 16
  explicit ring(std::size_t initial_capacity = 64) {
    std::size_t cap = 16;
    while (cap < initial_capacity) {
      cap *= 2;
    }
    m_slots.resize(cap);
  }

  [[nodiscard]] bool empty() const noexcept { return m_size == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return m_size; }
  [[nodiscard]] std::size_t capacity() const noexcept { return m_slots.size(); }

  void push_back(T value) {
    if (m_size == m_slots.size()) {
      grow();
    }
    m_slots[(m_head + m_size) & (m_slots.size() - 1)] = std::move(value);
    ++m_size;
  }

  T& front() noexcept {
    assert(m_size > 0);
    return m_slots[m_head];
  }
  const T& front() const noexcept {
    assert(m_size > 0);
    return m_slots[m_head];
  }

  /// Element i positions behind the front (0 = front). i < size().
  T& at(std::size_t i) noexcept {
    assert(i < m_size);
    return m_slots[(m_head + i) & (m_slots.size() - 1)];
  }

  T& back() noexcept {
    assert(m_size > 0);
    return m_slots[(m_head + m_size - 1) & (m_slots.size() - 1)];
  }

  /// Removes and returns the front element.
  T pop_front() noexcept {
    assert(m_size > 0);
    T value = std::move(m_slots[m_head]);
    m_slots[m_head] = T{};
    m_head = (m_head + 1) & (m_slots.size() - 1);
    --m_size;
    return value;
  }

  void clear() noexcept {
    while (!empty()) {
      (void)pop_front();
    }
  }

 private:
  void grow() {
    std::vector<T> bigger(m_slots.size() * 2);
    for (std::size_t i = 0; i < m_size; ++i) {
      bigger[i] = std::move(m_slots[(m_head + i) & (m_slots.size() - 1)]);
    }
    m_slots = std::move(bigger);
    m_head = 0;
  }

  std::vector<T> m_slots;
  std::size_t m_head = 0;
  std::size_t m_size = 0;
};

}  // namespace mcdist::linkem
