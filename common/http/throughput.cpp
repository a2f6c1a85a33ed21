#include "common/http/throughput.hpp"

#include "common/http/html.hpp"
#include "common/units.hpp"

#include <algorithm>
#include <chrono>

namespace mcdist::http {

std::int64_t minute_of(wall_time t) noexcept {
  return std::chrono::floor<std::chrono::minutes>(t.time_since_epoch()).count();
}

void minute_ring::add(std::uint64_t bytes, wall_time now) {
  const std::int64_t m = minute_of(now);
  if (m_minutes.empty() || m_minutes.back().first < m) m_minutes.emplace_back(m, 0);
  m_minutes.back().second += bytes;
  while (!m_minutes.empty() &&
         m_minutes.front().first <= m - static_cast<std::int64_t>(minutes_kept)) {
    m_minutes.pop_front();
  }
}

std::vector<std::uint64_t> minute_ring::per_minute(wall_time now) const {
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

std::string throughput_figure(std::span<const std::uint64_t> per_minute, wall_time now,
                              std::string_view what, std::string_view caption) {
  std::vector<double> rates;
  std::vector<std::string> titles;
  double peak = 0;
  const std::int64_t last = minute_of(now);
  for (std::size_t i = 0; i < per_minute.size(); ++i) {
    const double bps = static_cast<double>(per_minute[i]) * 8 / 60;
    rates.push_back(bps);
    peak = std::max(peak, bps);
    const auto at = wall_time(
        std::chrono::minutes(last - static_cast<std::int64_t>(per_minute.size() - 1 - i)));
    titles.push_back(utc_clock(at).substr(0, 5) + " UTC: " +
                     format_bytes(static_cast<double>(per_minute[i])) + ", " + format_rate(bps));
  }
  return "<h2>Throughput, last hour</h2>\n<figure id=\"throughput\" style=\"margin:0\">" +
         svg_bar_chart(rates, titles, what, format_rate(peak), "60 min ago", "now") +
         "<figcaption class=\"sub\">" + std::string(caption) + "; peak " + format_rate(peak) +
         ".</figcaption></figure>\n";
}

}  // namespace mcdist::http
