/// @file
/// The sender session's receiver table: every receiver the session knows (listed in a closed
/// group, or registered), found by id and by index, in the order they became known.
///
/// The table owns the entries; their addresses and indexes stay valid for the table's life
/// (entries are never removed: a receiver that fails or completes keeps its row for the
/// session's report), so other components (the silence list, the list of receivers awaiting
/// their unicast connection) hold indexes into it instead of pointers of their own. Lookups by
/// id take a string_view (heterogeneous lookup, no copy of the id per datagram).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mcdist::sender {

/// What the table needs of an entry: a default constructor and an `index` it writes (the
/// entry's position in the table, 0-based).
template <class Entry>
concept receiver_table_entry = std::default_initializable<Entry> && requires(Entry e) {
  {e.index = std::uint32_t{}};
};

/// Receivers by id and index. Not thread-safe (the session's single thread owns it). `Entry`
/// may be incomplete where the table is declared (a class's private nested type); it must be a
/// receiver_table_entry where emplace is used.
template <class Entry>
class receiver_table {
 public:
  /// The entry for `id`, created (default-constructed, its `index` set) when the table has
  /// none. @return the entry and whether it was created now
  std::pair<Entry&, bool> emplace(std::string id) {
    static_assert(receiver_table_entry<Entry>);
    if (Entry* e = find(id)) return {*e, false};
    auto owned = std::make_unique<Entry>();
    owned->index = static_cast<std::uint32_t>(m_entries.size());
    Entry& e = *owned;
    m_index.emplace(std::move(id), owned->index);
    m_entries.push_back(std::move(owned));
    return {e, true};
  }

  /// The entry for `id`, or nullptr when the table has none.
  Entry* find(std::string_view id) noexcept {
    const auto it = m_index.find(id);
    return it == m_index.end() ? nullptr : m_entries[it->second].get();
  }
  const Entry* find(std::string_view id) const noexcept {
    const auto it = m_index.find(id);
    return it == m_index.end() ? nullptr : m_entries[it->second].get();
  }
  bool contains(std::string_view id) const noexcept { return find(id) != nullptr; }

  /// The entry at `index` (< size()).
  Entry& operator[](std::uint32_t index) noexcept { return *m_entries[index]; }
  const Entry& operator[](std::uint32_t index) const noexcept { return *m_entries[index]; }

  std::size_t size() const noexcept { return m_entries.size(); }
  bool empty() const noexcept { return m_entries.empty(); }

  /// Iteration in index order over the owning pointers (`for (auto& r : table) r->...`).
  auto begin() noexcept { return m_entries.begin(); }
  auto end() noexcept { return m_entries.end(); }
  auto begin() const noexcept { return m_entries.cbegin(); }
  auto end() const noexcept { return m_entries.cend(); }

 private:
  struct id_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };

  std::vector<std::unique_ptr<Entry>> m_entries;
  std::unordered_map<std::string, std::uint32_t, id_hash, std::equal_to<>> m_index;
};

}  // namespace mcdist::sender
