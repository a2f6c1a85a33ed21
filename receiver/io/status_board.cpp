#include "receiver/io/status_board.hpp"

namespace mcdist::receiver {

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
  m_minutes.add(delta, now);
}

std::vector<std::uint64_t> status_board::bytes_per_minute(wall_time now) const {
  return m_minutes.per_minute(now);
}

}  // namespace mcdist::receiver
