#include "receiver/io/status_board.hpp"

namespace mcdist::receiver {

std::int64_t minute_of(wall_time t) noexcept {
  return std::chrono::floor<std::chrono::minutes>(t.time_since_epoch()).count();
}

status_board::status_board(std::size_t channels) : m_channels(channels) {}

void status_board::file_finished(const file_outcome& o, wall_time now) {
  if (o.channel >= m_channels.size()) return;
  auto& ch = m_channels[o.channel];
  if (o.stored) {
    ++ch.files_stored;
    ch.bytes_stored += o.size;
    ch.last_stored = now;
  } else {
    ++ch.files_failed;
  }
  if (ch.recent.size() >= max_recent_products) ch.recent.pop_front();
  ch.recent.push_back(
      {std::string(o.path), o.size, o.session, now, o.stored, std::string(o.failure)});
}

void status_board::observe_bytes(std::uint64_t total, wall_time now) {
  const std::uint64_t delta = m_last_total && total >= *m_last_total ? total - *m_last_total : 0;
  m_last_total = total;
  const std::int64_t m = minute_of(now);
  if (m_minutes.empty() || m_minutes.back().first < m) {
    m_minutes.emplace_back(m, 0);
  }
  // A clock stepped back adds to the newest minute rather than reorder the ring.
  m_minutes.back().second += delta;
  while (!m_minutes.empty() &&
         m_minutes.front().first <= m - static_cast<std::int64_t>(minutes_kept)) {
    m_minutes.pop_front();
  }
}

std::vector<std::uint64_t> status_board::bytes_per_minute(wall_time now) const {
  std::vector<std::uint64_t> out(minutes_kept, 0);
  const std::int64_t last = minute_of(now);
  for (const auto& [m, bytes] : m_minutes) {
    const std::int64_t back = last - m;
    if (back >= 0 && back < static_cast<std::int64_t>(minutes_kept)) {
      out[minutes_kept - 1 - static_cast<std::size_t>(back)] += bytes;
    }
  }
  return out;
}

}  // namespace mcdist::receiver
