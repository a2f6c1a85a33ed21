#include "receiver/core/loss_estimator.hpp"

#include <algorithm>

namespace mcdist::receiver {

void loss_estimator::on_datagram(std::uint32_t seq, time_point now, duration rtt) noexcept {
  if (!m_started) {
    m_started = true;
    m_first = seq;
    m_highest = seq;
    return;
  }
  const auto ahead = static_cast<std::int32_t>(seq - m_highest);
  if (ahead <= 0) return;  // duplicate or reordered: already counted (as lost, if reordered)
  if (ahead > 1) {
    const std::uint32_t first_lost = m_highest + 1;
    m_lost += static_cast<std::uint32_t>(ahead - 1);
    if (m_events == 0 || now - m_event_at > rtt) {
      // A new loss event: the interval since the previous one's first loss closes.
      const std::uint64_t closed = m_events == 0 ? first_lost - m_first : first_lost - m_event_seq;
      std::copy_backward(m_closed.begin(), m_closed.end() - 1, m_closed.end());
      m_closed[0] = std::max<std::uint64_t>(closed, 1);
      m_closed_count = std::min(m_closed_count + 1, intervals);
      m_event_seq = first_lost;
      m_event_at = now;
      ++m_events;
    }
  }
  m_highest = seq;
}

std::uint64_t loss_estimator::open_interval() const noexcept {
  return m_events == 0 ? 0 : std::uint64_t{static_cast<std::uint32_t>(m_highest - m_event_seq)} + 1;
}

double loss_estimator::loss_event_rate() const noexcept {
  if (m_events == 0) return 0;
  // I_0 is the open interval, I_1..I_k the closed ones (k = m_closed_count).
  auto interval = [this](std::size_t i) {
    return static_cast<double>(i == 0 ? open_interval() : m_closed[i - 1]);
  };
  const std::size_t k = m_closed_count;
  double tot0 = 0, w0 = 0, tot1 = 0, w1 = 0;
  for (std::size_t i = 0; i <= std::min(k, intervals - 1); ++i) {
    tot0 += interval(i) * weights[i];
    w0 += weights[i];
  }
  for (std::size_t i = 1; i <= k; ++i) {
    tot1 += interval(i) * weights[i - 1];
    w1 += weights[i - 1];
  }
  const double mean = std::max(tot0 / w0, tot1 / w1);
  return mean > 1 ? 1 / mean : 1.0;
}

}  // namespace mcdist::receiver
