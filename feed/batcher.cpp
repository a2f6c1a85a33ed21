#include "feed/batcher.hpp"

namespace mcdist::feed {

bool batcher::add(const product& p, time_point now) {
  if (!m_ids.insert(p.id).second) return false;
  m_waiting.push_back({p, now});
  m_bytes += p.size;
  return true;
}

bool batcher::ready(time_point now) const {
  if (m_waiting.empty()) return false;
  if (m_waiting.size() >= m_limits.max_files || m_bytes >= m_limits.max_bytes) return true;
  return now >= m_waiting.front().arrived + m_limits.window;
}

std::optional<time_point> batcher::deadline() const {
  if (m_waiting.empty()) return std::nullopt;
  if (m_waiting.size() >= m_limits.max_files || m_bytes >= m_limits.max_bytes) {
    return m_waiting.front().arrived;
  }
  return m_waiting.front().arrived + m_limits.window;
}

std::vector<product> batcher::take(const std::function<bool(const product&)>& hold) {
  std::vector<product> out;
  std::uint64_t bytes = 0;
  std::deque<waiting> kept;
  while (!m_waiting.empty() && out.size() < m_limits.max_files) {
    auto& w = m_waiting.front();
    if (hold && hold(w.p)) {
      kept.push_back(std::move(w));
      m_waiting.pop_front();
      continue;
    }
    if (!out.empty() && bytes + w.p.size > m_limits.max_bytes) break;
    bytes += w.p.size;
    m_bytes -= w.p.size;
    m_ids.erase(w.p.id);
    out.push_back(std::move(w.p));
    m_waiting.pop_front();
  }
  // Held products go back in front, in their order, with their arrival times.
  m_waiting.insert(m_waiting.begin(), std::make_move_iterator(kept.begin()),
                   std::make_move_iterator(kept.end()));
  return out;
}

}  // namespace mcdist::feed
