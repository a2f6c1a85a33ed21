#include "receiver/core/replay_guard.hpp"

#include <fmt/format.h>

#include <charconv>

namespace mcdist::receiver {

namespace {

constexpr std::string_view version_line = "mcdist-replay 1";
constexpr std::string_view floor_prefix = "floor ";

/// A key's text as the cache keeps it: printable ASCII, no space, not over max_key_bytes.
bool valid_key_text(std::string_view k) noexcept {
  if (k.empty() || k.size() > replay_guard::max_key_bytes) return false;
  for (const char c : k) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

template <class T>
bool parse_number(std::string_view text, T& out, int base = 10) {
  if (text.empty()) return false;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && p == text.data() + text.size();
}

}  // namespace

errc replay_guard::admit(const entry& e, std::uint64_t now_ms) {
  expire(now_ms);
  if (e.stamp_ms == 0) return errc::unstamped;
  const auto age = static_cast<std::uint64_t>(m_limits.max_age.count());
  const auto skew = static_cast<std::uint64_t>(m_limits.max_skew.count());
  if (e.stamp_ms > now_ms && e.stamp_ms - now_ms > skew) return errc::clock_skew;
  if ((now_ms > e.stamp_ms && now_ms - e.stamp_ms > age) || e.stamp_ms <= m_floor_ms) {
    return errc::expired;
  }
  if (!valid_key_text(e.sender)) return errc::invalid_field;
  if (!m_entries.insert(e).second) return errc::replayed;
  while (m_entries.size() > m_limits.max_entries) {
    m_floor_ms = std::max(m_floor_ms, m_entries.begin()->stamp_ms);
    m_entries.erase(m_entries.begin());
  }
  // A full cache whose oldest entry was `e` itself, or one stamped the same ms: the floor now
  // covers `e`, so it could not be told from its replay. Refused like any stamp at the floor.
  if (e.stamp_ms <= m_floor_ms) {
    m_entries.erase(e);
    return errc::expired;
  }
  return errc::ok;
}

bool replay_guard::restore(const entry& e, std::uint64_t now_ms) {
  const auto age = static_cast<std::uint64_t>(m_limits.max_age.count());
  if (e.stamp_ms == 0 || (now_ms > e.stamp_ms && now_ms - e.stamp_ms > age) ||
      !valid_key_text(e.sender)) {
    return false;
  }
  m_entries.insert(e);
  while (m_entries.size() > m_limits.max_entries) {
    m_floor_ms = std::max(m_floor_ms, m_entries.begin()->stamp_ms);
    m_entries.erase(m_entries.begin());
  }
  return true;
}

std::size_t replay_guard::expire(std::uint64_t now_ms) {
  const auto age = static_cast<std::uint64_t>(m_limits.max_age.count());
  std::size_t n = 0;
  while (!m_entries.empty() && now_ms > m_entries.begin()->stamp_ms &&
         now_ms - m_entries.begin()->stamp_ms > age) {
    m_entries.erase(m_entries.begin());
    ++n;
  }
  return n;
}

std::string replay_guard::encode(const entry& e) {
  return fmt::format("{} {} {}\n", e.stamp_ms, e.session, e.sender);
}

std::string replay_guard::encode() const {
  std::string out = fmt::format("{}\n{}{}\n", version_line, floor_prefix, m_floor_ms);
  for (const auto& e : m_entries) out += encode(e);
  return out;
}

std::string replay_guard::decode(std::string_view text, std::uint64_t now_ms, replay_guard& out) {
  out.m_entries.clear();
  out.m_floor_ms = 0;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    if (nl == std::string_view::npos) break;  // a last line cut short by a crash mid-append
    const auto line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    ++line_no;
    auto fail = [&](std::string_view why) {
      out.m_entries.clear();
      out.m_floor_ms = 0;
      return fmt::format("line {}: {}", line_no, why);
    };
    if (line_no == 1) {
      if (line != version_line) return fail("not an mcdist replay cache of version 1");
      continue;
    }
    if (line_no == 2) {
      std::uint64_t floor = 0;
      if (!line.starts_with(floor_prefix) ||
          !parse_number(line.substr(floor_prefix.size()), floor)) {
        return fail("expected \"floor <ms>\"");
      }
      out.m_floor_ms = floor;
      continue;
    }
    const auto s1 = line.find(' ');
    const auto s2 = s1 == std::string_view::npos ? s1 : line.find(' ', s1 + 1);
    entry e;
    std::uint32_t id = 0;
    if (s2 == std::string_view::npos || !parse_number(line.substr(0, s1), e.stamp_ms) ||
        s2 - s1 - 1 != 8 || !parse_number(line.substr(s1 + 1, 8), id, 16) ||
        !valid_key_text(line.substr(s2 + 1))) {
      return fail("expected \"<stamp ms> <session hex> <sender key>\"");
    }
    e.session = session_id{id};
    e.sender = std::string(line.substr(s2 + 1));
    out.restore(e, now_ms);
  }
  if (line_no < 2) {
    out.m_entries.clear();
    return "too short for an mcdist replay cache";
  }
  return {};
}

}  // namespace mcdist::receiver
