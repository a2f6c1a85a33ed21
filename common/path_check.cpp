#include "common/path_check.hpp"

#include "common/error.hpp"

namespace mcdist {

std::error_code check_relative_path(std::string_view path) noexcept {
  if (path.empty()) return errc::path_empty;
  if (path.size() > max_path_bytes) return errc::path_too_long;
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
