#include "common/units.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace mcdist {

namespace {

/// Splits "1.5G" into 1.5 and "G". Accepts digits and one '.'.
bool split_number(std::string_view text, double& number, std::string_view& suffix) noexcept {
  std::size_t i = 0;
  bool dot = false;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || (text[i] == '.' && !dot))) {
    dot = dot || text[i] == '.';
    ++i;
  }
  if (i == 0) return false;
  const std::string_view digits = text.substr(0, i);
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
  if (ec != std::errc{} || p != digits.data() + digits.size() || !std::isfinite(number)) {
    return false;
  }
  suffix = text.substr(i);
  return true;
}

}  // namespace

std::optional<std::uint64_t> parse_rate(std::string_view text) noexcept {
  if (text == "max") return 0;
  double n = 0;
  std::string_view s;
  if (!split_number(text, n, s)) return std::nullopt;
  double mult = 1;
  if (!s.empty() && (s[0] == 'k' || s[0] == 'K')) {
    mult = 1e3;
    s.remove_prefix(1);
  } else if (!s.empty() && s[0] == 'M') {
    mult = 1e6;
    s.remove_prefix(1);
  } else if (!s.empty() && s[0] == 'G') {
    mult = 1e9;
    s.remove_prefix(1);
  }
  if (!(s.empty() || s == "bit/s" || s == "bps" || s == "b/s")) return std::nullopt;
  const double v = n * mult;
  if (v > 1e12) return std::nullopt;
  return static_cast<std::uint64_t>(std::llround(v));
}

std::optional<std::uint64_t> parse_size(std::string_view text) noexcept {
  std::uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc{} || p == text.data()) return std::nullopt;
  std::string_view s(p, static_cast<std::size_t>(text.data() + text.size() - p));
  if (s == "B") s = {};
  std::uint64_t mult = 1;
  if (s == "K" || s == "KiB" || s == "k") {
    mult = 1ull << 10;
  } else if (s == "M" || s == "MiB") {
    mult = 1ull << 20;
  } else if (s == "G" || s == "GiB") {
    mult = 1ull << 30;
  } else if (!s.empty()) {
    return std::nullopt;
  }
  if (n > UINT64_MAX / mult) return std::nullopt;
  return n * mult;
}

std::optional<std::chrono::nanoseconds> parse_duration(std::string_view text) noexcept {
  double n = 0;
  std::string_view s;
  if (!split_number(text, n, s)) return std::nullopt;
  double ns = 0;
  if (s == "us") {
    ns = n * 1e3;
  } else if (s == "ms") {
    ns = n * 1e6;
  } else if (s == "s" || s.empty()) {
    ns = n * 1e9;
  } else if (s == "m" || s == "min") {
    ns = n * 60e9;
  } else if (s == "h") {
    ns = n * 3600e9;
  } else if (s == "d") {
    ns = n * 86400e9;
  } else {
    return std::nullopt;
  }
  if (ns > 1e18) return std::nullopt;
  return std::chrono::nanoseconds{static_cast<std::int64_t>(std::llround(ns))};
}

std::string format_rate(double bps) {
  const char* unit = "bit/s";
  double v = bps;
  if (bps >= 1e9) {
    v = bps / 1e9;
    unit = "Gbit/s";
  } else if (bps >= 1e6) {
    v = bps / 1e6;
    unit = "Mbit/s";
  } else if (bps >= 1e3) {
    v = bps / 1e3;
    unit = "kbit/s";
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v, unit);
  return buf;
}

std::string format_bytes(double bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  } else {
    std::snprintf(buf, sizeof buf,
                  bytes >= 100  ? "%.0f %s"
                  : bytes >= 10 ? "%.1f %s"
                                : "%.2f %s",
                  bytes, units[u]);
  }
  return buf;
}

}  // namespace mcdist
