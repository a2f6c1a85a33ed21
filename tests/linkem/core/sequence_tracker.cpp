#include "tests/linkem/core/sequence_tracker.hpp"

namespace mcdist::linkem {

void sequence_tracker::record(std::uint64_t seq) {
  ++m_received;
  if (seq >= k_max_tracked_sequence) {
    ++m_out_of_range;
    return;
  }
  const std::uint64_t word = seq / 64;
  const std::uint64_t bit = 1ULL << (seq % 64);
  if (word >= m_bits.size()) {
    m_bits.resize(word + 1 + word / 2, 0);  // grow geometrically
  }
  if ((m_bits[word] & bit) != 0) {
    ++m_duplicates;
    return;
  }
  m_bits[word] |= bit;
  if (m_any && seq < m_highest) {
    ++m_reordered;
  }
  if (!m_any || seq > m_highest) {
    m_highest = seq;
  }
  m_any = true;
}

sequence_tracker::summary sequence_tracker::summarize(std::uint64_t total) const {
  summary s;
  s.total = total;
  s.received = m_received;
  s.duplicates = m_duplicates;
  s.reordered = m_reordered;
  s.out_of_range = m_out_of_range;
  std::uint64_t run = 0;
  for (std::uint64_t seq = 0; seq < total; ++seq) {
    const std::uint64_t word = seq / 64;
    const bool have = word < m_bits.size() && (m_bits[word] & (1ULL << (seq % 64))) != 0;
    if (have) {
      ++s.unique;
      if (run > 0) {
        ++s.loss_bursts;
        s.max_burst = run > s.max_burst ? run : s.max_burst;
        run = 0;
      }
    } else {
      ++run;
    }
  }
  if (run > 0) {
    ++s.loss_bursts;
    s.max_burst = run > s.max_burst ? run : s.max_burst;
  }
  // Numbers at or above total were counted as unique arrivals by record(); report them.
  for (std::uint64_t w = total / 64; w < m_bits.size(); ++w) {
    for (std::uint64_t b = 0; b < 64; ++b) {
      const std::uint64_t seq = w * 64 + b;
      if (seq >= total && (m_bits[w] & (1ULL << b)) != 0) {
        ++s.out_of_range;
      }
    }
  }
  s.lost = total - s.unique;
  s.mean_burst =
      s.loss_bursts > 0 ? static_cast<double>(s.lost) / static_cast<double>(s.loss_bursts) : 0;
  return s;
}

}  // namespace mcdist::linkem
