#include "common/unicast/record_scheduler.hpp"

#include <algorithm>
#include <cassert>

namespace mcdist::unicast {

record_scheduler::record_scheduler(std::uint32_t record_size, std::size_t max_active,
                                   std::size_t tail_spread)
    : m_record_size(std::max<std::uint32_t>(record_size, 1)),
      m_max_active(std::max<std::size_t>(max_active, 1)), m_tail_spread(tail_spread) {}

void record_scheduler::push(const byte_range& r) {
  assert(r.length > 0);
  m_pending_bytes += r.length;
  if (m_active.size() < m_max_active) {
    m_active.push_back(r);
  } else {
    m_waiting.push_back(r);
  }
}

std::optional<record> record_scheduler::next() {
  if (m_active.empty()) return std::nullopt;
  if (m_cursor >= m_active.size()) m_cursor = 0;
  byte_range& r = m_active[m_cursor];
  std::uint64_t size = m_record_size;
  if (m_tail_spread > 1) {
    const std::uint64_t share = m_pending_bytes / (4 * m_tail_spread);
    size = std::min<std::uint64_t>(size, std::max<std::uint64_t>(share, min_tail_record));
  }
  const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(r.length, size));
  const record out{r.file, r.offset, n};
  r.offset += n;
  r.length -= n;
  m_pending_bytes -= n;
  if (r.length == 0) {
    // Refill the slot from the waiting queue so the round-robin order stays stable.
    if (!m_waiting.empty()) {
      r = m_waiting.front();
      m_waiting.pop_front();
      ++m_cursor;
    } else {
      m_active.erase(m_active.begin() + static_cast<std::ptrdiff_t>(m_cursor));
    }
  } else {
    ++m_cursor;
  }
  return out;
}

void record_scheduler::clear() noexcept {
  m_active.clear();
  m_waiting.clear();
  m_cursor = 0;
  m_pending_bytes = 0;
}

}  // namespace mcdist::unicast
