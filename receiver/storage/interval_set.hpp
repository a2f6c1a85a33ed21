#pragma once
/// @file
/// A set of disjoint half-open byte ranges, used by file_store's writer to remember what has
/// been written past a file's hashed prefix (docs/architecture.md "Data flow in one session": hash
/// incrementally as the in-order prefix grows). Ranges that touch or overlap are merged, so the set
/// holds one entry per gap-separated run: for a 1 GB file received with 1e-3 loss that is under a
/// thousand entries (~50 kB), whatever the block count.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <utility>

namespace mcdist::receiver {

/// Disjoint, merged half-open ranges [begin, end) of byte offsets. Not thread-safe.
class interval_set {
 public:
  /// A range [first, second).
  using range = std::pair<std::uint64_t, std::uint64_t>;

  /// Adds [begin, end), merging with every range it overlaps or touches. Empty ranges
  /// (begin >= end) are ignored. O(log n + merged).
  void insert(std::uint64_t begin, std::uint64_t end) {
    if (begin >= end) return;
    auto it = m_ranges.upper_bound(begin);
    if (it != m_ranges.begin()) {
      auto before = std::prev(it);
      if (before->second >= begin) {
        begin = before->first;
        end = std::max(end, before->second);
        it = m_ranges.erase(before);
      }
    }
    while (it != m_ranges.end() && it->first <= end) {
      end = std::max(end, it->second);
      it = m_ranges.erase(it);
    }
    m_ranges.emplace_hint(it, begin, end);
  }

  /// Forgets every byte below `point`: ranges ending at or below it go, a range straddling it
  /// is cut to start at `point`.
  void erase_below(std::uint64_t point) {
    while (!m_ranges.empty()) {
      auto first = m_ranges.begin();
      if (first->first >= point) return;
      const std::uint64_t end = first->second;
      m_ranges.erase(first);
      if (end > point) {
        m_ranges.emplace(point, end);
        return;
      }
    }
  }

  /// The lowest range, if any.
  std::optional<range> first() const {
    if (m_ranges.empty()) return std::nullopt;
    return *m_ranges.begin();
  }

  /// True when `[begin, end)` is entirely inside one range.
  bool contains(std::uint64_t begin, std::uint64_t end) const {
    if (begin >= end) return true;
    auto it = m_ranges.upper_bound(begin);
    if (it == m_ranges.begin()) return false;
    --it;
    return it->first <= begin && end <= it->second;
  }

  bool empty() const noexcept { return m_ranges.empty(); }
  /// Number of disjoint ranges.
  std::size_t size() const noexcept { return m_ranges.size(); }
  void clear() noexcept { m_ranges.clear(); }

 private:
  std::map<std::uint64_t, std::uint64_t> m_ranges;  ///< begin -> end, disjoint, not touching
};

}  // namespace mcdist::receiver
