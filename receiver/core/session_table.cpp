#include "receiver/core/session_table.hpp"

namespace mcdist::receiver {

void tombstone_list::add(session_id id, time_point until) {
  m_until[id] = until;
  m_order.emplace_back(id, until);
  // Forget the oldest past the cap; entries of ids re-added or expired since are skipped.
  while (m_until.size() > m_max && !m_order.empty()) {
    const auto [old, at] = m_order.front();
    m_order.pop_front();
    const auto it = m_until.find(old);
    if (it != m_until.end() && it->second == at) m_until.erase(it);
  }
  // The order list holds at most twice the cap: drop entries that no longer match.
  if (m_order.size() > 2 * m_max + 16) {
    std::erase_if(m_order, [this](const auto& e) {
      const auto it = m_until.find(e.first);
      return it == m_until.end() || it->second != e.second;
    });
  }
}

void tombstone_list::expire(time_point now) {
  for (auto it = m_until.begin(); it != m_until.end();) {
    it = it->second <= now ? m_until.erase(it) : std::next(it);
  }
  while (!m_order.empty() && m_order.front().second <= now) m_order.pop_front();
}

}  // namespace mcdist::receiver
