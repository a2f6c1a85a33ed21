#pragma once
/// @file
/// The receivers a sender may fail for silence, in the order it last heard from them, so that
/// the earliest timeout is the front of a list instead of a scan of every receiver on every
/// wake-up (at 10,000 receivers those scans were most of the sender's CPU). The
/// least-recently-used list of a cache: an intrusive doubly linked list over receiver indexes,
/// O(1) to move one to the back when it is heard and to take one out when it completes.
/// Pure; 9 bytes per receiver.

#include <cstdint>
#include <limits>
#include <vector>

namespace mcdist::sender {

/// Receiver indexes ordered by when they were last heard, least recent first.
class silence_list {
 public:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

  /// Receiver `i` was heard now: it goes to the back (inserted if it was not in the list).
  void touch(std::uint32_t i) {
    if (i >= m_in.size()) {
      m_prev.resize(i + 1, none);
      m_next.resize(i + 1, none);
      m_in.resize(i + 1, false);
    }
    if (m_in[i]) {
      if (m_tail == i) return;
      unlink(i);
    }
    m_prev[i] = m_tail;
    m_next[i] = none;
    if (m_tail != none) m_next[m_tail] = i;
    m_tail = i;
    if (m_head == none) m_head = i;
    m_in[i] = true;
  }
  /// Receiver `i` can no longer time out (completed, failed, waiting for its unicast
  /// connection): out of the list. No effect if it was not in it.
  void remove(std::uint32_t i) {
    if (i >= m_in.size() || !m_in[i]) return;
    unlink(i);
    m_in[i] = false;
  }
  bool contains(std::uint32_t i) const noexcept { return i < m_in.size() && m_in[i]; }
  bool empty() const noexcept { return m_head == none; }
  /// The least recently heard receiver, or `none`.
  std::uint32_t front() const noexcept { return m_head; }
  /// The one heard after `i`, or `none`.
  std::uint32_t next(std::uint32_t i) const noexcept { return m_next[i]; }

 private:
  void unlink(std::uint32_t i) {
    const std::uint32_t p = m_prev[i];
    const std::uint32_t n = m_next[i];
    if (p != none)
      m_next[p] = n;
    else
      m_head = n;
    if (n != none)
      m_prev[n] = p;
    else
      m_tail = p;
  }

  std::vector<std::uint32_t> m_prev;
  std::vector<std::uint32_t> m_next;
  std::vector<bool> m_in;
  std::uint32_t m_head = none;
  std::uint32_t m_tail = none;
};

}  // namespace mcdist::sender
