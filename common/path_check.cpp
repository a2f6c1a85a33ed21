#include "common/path_check.hpp"

#include "common/error.hpp"

#include <algorithm>

namespace mcdist {

std::string printable(std::string_view name, std::size_t max_bytes) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(std::min(name.size(), max_bytes));
  for (const char c : name.substr(0, max_bytes)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '\\') {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  if (name.size() > max_bytes) out += "...";
  return out;
}

bool valid_utf8(std::string_view text) noexcept {
  // The table of RFC 3629 section 4 (UTF8-2 .. UTF8-4): the lead byte fixes the length and the
  // range of the first continuation byte, which is what excludes overlong forms, surrogates
  // and code points above U+10FFFF; every later byte is 80..BF.
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* const end = p + text.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int more = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      more = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      more = 2;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      more = 3;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return false;  // 80..C1 (continuation or overlong lead), F5..FF
    }
    if (end - p <= more) return false;
    if (p[1] < lo || p[1] > hi) return false;
    for (int k = 2; k <= more; ++k) {
      if (p[k] < 0x80 || p[k] > 0xbf) return false;
    }
    p += more + 1;
  }
  return true;
}

std::error_code check_relative_path(std::string_view path) noexcept {
  if (path.empty()) return errc::path_empty;
  if (path.size() > max_path_bytes) return errc::path_too_long;
  if (!valid_utf8(path)) return errc::path_not_utf8;
  if (path.front() == '/') return errc::path_absolute;
  for (const char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return errc::path_control_char;
  }
  std::size_t depth = 0;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view component = path.substr(start, end - start);
    if (component.empty()) return errc::path_empty_component;
    if (component == "." || component == "..") return errc::path_dot_dot;
    if (component.size() > max_component_bytes) return errc::path_component_too_long;
    if (++depth > max_path_depth) return errc::path_too_deep;
    start = end + 1;
  }
  return {};
}

}  // namespace mcdist
