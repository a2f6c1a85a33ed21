#include "common/http/log_ring.hpp"

#include "common/http/html.hpp"

namespace mcdist::http {

log_ring_sink::log_ring_sink(std::size_t capacity, spdlog::level::level_enum keep)
    : m_capacity(capacity), m_keep(keep) {}

std::vector<log_entry> log_ring_sink::recent() const {
  std::lock_guard lock(const_cast<std::mutex&>(mutex_));
  return {m_entries.begin(), m_entries.end()};
}

std::uint64_t log_ring_sink::count(spdlog::level::level_enum level) const {
  std::lock_guard lock(const_cast<std::mutex&>(mutex_));
  const auto i = static_cast<std::size_t>(level);
  return i < m_counts.size() ? m_counts[i] : 0;
}

void log_ring_sink::sink_it_(const spdlog::details::log_msg& msg) {
  // base_sink holds mutex_ here.
  const auto i = static_cast<std::size_t>(msg.level);
  if (i < m_counts.size()) ++m_counts[i];
  if (msg.level < m_keep || m_capacity == 0) return;
  log_entry e;
  e.time = msg.time;
  e.level = msg.level;
  const std::string_view text(msg.payload.data(), msg.payload.size());
  e.text = std::string(text.substr(0, max_text_bytes));
  if (m_entries.size() >= m_capacity) m_entries.pop_front();
  m_entries.push_back(std::move(e));
}

const char* level_name(spdlog::level::level_enum level) noexcept {
  switch (level) {
    case spdlog::level::warn: return "warning";
    case spdlog::level::err: return "error";
    case spdlog::level::critical: return "critical";
    case spdlog::level::info: return "info";
    case spdlog::level::debug: return "debug";
    default: return "trace";
  }
}

std::string recent_log_html(const std::vector<log_entry>& entries) {
  std::string h = "<h2>Recent warnings and errors</h2>\n";
  if (entries.empty()) {
    h += "<p class=\"none\" id=\"recent-log\">None since the daemon started.</p>\n";
    return h;
  }
  h += "<table id=\"recent-log\"><thead><tr><th>time (UTC)</th><th>level</th><th>message</th>"
       "</tr></thead><tbody>\n";
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const char* lv = level_name(it->level);
    h += "<tr><td>" + iso_time(it->time) + "</td><td class=\"" + lv + "\">" + lv +
         "</td><td class=\"path\">" + html_escape(it->text) + "</td></tr>\n";
  }
  h += "</tbody></table>\n";
  return h;
}

}  // namespace mcdist::http
