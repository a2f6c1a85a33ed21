#include "tests/linkem/core/units.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace mcdist::linkem {
namespace {

/// Longest duration accepted anywhere: one day. Longer delays are certainly a typo and
/// would make the delay line hold unbounded data.
constexpr double k_max_duration_ns = 86400.0 * 1e9;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

struct number_and_unit {
  double value;
  std::string_view unit;
};

/// Splits "12.5Mbit" into 12.5 and "Mbit". Throws if there is no leading number.
number_and_unit split_number(std::string_view text, std::string_view what) {
  const std::string_view s = trim(text);
  double value = 0;
  const auto* begin = s.data();
  const auto* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc{} || !std::isfinite(value)) {
    throw config_error("invalid " + std::string(what) + " '" + std::string(text) +
                       "': expected a number followed by a unit");
  }
  return {value, trim(std::string_view(ptr, static_cast<std::size_t>(end - ptr)))};
}

}  // namespace

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) {
    s.remove_prefix(1);
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) {
    s.remove_suffix(1);
  }
  return s;
}

std::chrono::nanoseconds parse_duration(std::string_view text) {
  const auto [value, unit] = split_number(text, "duration");
  double scale = 0;
  if (unit.empty()) {
    if (value != 0) {
      throw config_error("duration '" + std::string(text) +
                         "' needs a unit: ns, us, ms or s (e.g. 350ms)");
    }
    scale = 1;
  } else if (unit == "ns") {
    scale = 1;
  } else if (unit == "us" || unit == "\xC2\xB5s") {
    scale = 1e3;
  } else if (unit == "ms") {
    scale = 1e6;
  } else if (unit == "s" || unit == "sec") {
    scale = 1e9;
  } else {
    throw config_error("unknown duration unit '" + std::string(unit) + "' in '" +
                       std::string(text) + "': use ns, us, ms or s");
  }
  const double ns = value * scale;
  if (ns < 0 || ns > k_max_duration_ns) {
    throw config_error("duration '" + std::string(text) + "' out of range [0, 1 day]");
  }
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(ns)));
}

double parse_bit_rate(std::string_view text) {
  const auto [value, unit_text] = split_number(text, "rate");
  std::string_view unit = unit_text;
  double scale = 1;
  if (!unit.empty()) {
    switch (std::tolower(static_cast<unsigned char>(unit.front()))) {
      case 'k':
        scale = 1e3;
        unit.remove_prefix(1);
        break;
      case 'm':
        scale = 1e6;
        unit.remove_prefix(1);
        break;
      case 'g':
        scale = 1e9;
        unit.remove_prefix(1);
        break;
      case 't':
        scale = 1e12;
        unit.remove_prefix(1);
        break;
      default: break;
    }
  }
  // What remains after the prefix: a byte unit (case-sensitive "B", since "Bps" and "bps"
  // differ by a factor 8) or a bit unit (case-insensitive).
  static constexpr std::array<std::string_view, 3> byte_units = {"B/s", "Bps", "byte/s"};
  static constexpr std::array<std::string_view, 5> bit_units = {"", "bit", "bit/s", "bits/s",
                                                                "bps"};
  bool known = false;
  if (std::find(byte_units.begin(), byte_units.end(), unit) != byte_units.end()) {
    known = true;
    scale *= 8;
  } else {
    for (const auto u : bit_units) {
      known = known || iequals(unit, u);
    }
  }
  if (!known) {
    throw config_error("unknown rate unit '" + std::string(unit_text) + "' in '" +
                       std::string(text) + "': use e.g. 100Mbit, 1.5Gbit/s, 64kbit or 10MB/s");
  }
  const double bps = value * scale;
  if (!(bps > 0)) {
    throw config_error("rate '" + std::string(text) + "' must be positive");
  }
  return bps;
}

double parse_probability(std::string_view text) {
  auto [value, unit] = split_number(text, "probability");
  if (unit == "%") {
    value /= 100;
  } else if (!unit.empty()) {
    throw config_error("invalid probability '" + std::string(text) +
                       "': expected a fraction (1e-3) or a percentage (0.1%)");
  }
  if (value < 0 || value > 1) {
    throw config_error("probability '" + std::string(text) + "' outside [0, 1]");
  }
  return value;
}

std::uint64_t parse_byte_size(std::string_view text) {
  const auto [value, unit] = split_number(text, "size");
  double scale = 0;
  struct entry {
    std::string_view name;
    double scale;
  };
  static constexpr std::array<entry, 10> units = {{{"", 1},
                                                   {"B", 1},
                                                   {"KB", 1e3},
                                                   {"MB", 1e6},
                                                   {"GB", 1e9},
                                                   {"KiB", 1024.0},
                                                   {"MiB", 1024.0 * 1024},
                                                   {"GiB", 1024.0 * 1024 * 1024},
                                                   {"kB", 1e3},
                                                   {"k", 1e3}}};
  for (const auto& u : units) {
    if (unit == u.name) {
      scale = u.scale;
    }
  }
  if (scale == 0) {
    throw config_error("unknown size unit '" + std::string(unit) + "' in '" + std::string(text) +
                       "': use B, KB, MB, GB (1000) or KiB, MiB, GiB (1024)");
  }
  const double bytes = value * scale;
  if (bytes < 0 || bytes > 1e18) {
    throw config_error("size '" + std::string(text) + "' out of range");
  }
  return static_cast<std::uint64_t>(std::llround(bytes));
}

std::uint64_t parse_count(std::string_view text, std::uint64_t max_value) {
  const std::string_view s = trim(text);
  std::uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || ptr != s.data() + s.size()) {
    throw config_error("invalid count '" + std::string(text) + "': expected a whole number");
  }
  if (value > max_value) {
    throw config_error("count '" + std::string(text) + "' above the limit " +
                       std::to_string(max_value));
  }
  return value;
}

double parse_number(std::string_view text, double min_value, double max_value) {
  const auto [value, unit] = split_number(text, "number");
  if (!unit.empty()) {
    throw config_error("invalid number '" + std::string(text) + "': no unit expected");
  }
  if (value < min_value || value > max_value) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "number '%s' outside [%g, %g]", std::string(text).c_str(),
                  min_value, max_value);
    throw config_error(buf);
  }
  return value;
}

std::string format_duration(std::chrono::nanoseconds d) {
  const double ns = static_cast<double>(d.count());
  char buf[64];
  if (ns == 0) {
    return "0";
  }
  if (ns >= 1e9) {
    std::snprintf(buf, sizeof buf, "%gs", ns / 1e9);
  } else if (ns >= 1e6) {
    std::snprintf(buf, sizeof buf, "%gms", ns / 1e6);
  } else if (ns >= 1e3) {
    std::snprintf(buf, sizeof buf, "%gus", ns / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%gns", ns);
  }
  return buf;
}

std::string format_bit_rate(double bps) {
  char buf[64];
  if (bps >= 1e9) {
    std::snprintf(buf, sizeof buf, "%gGbit/s", bps / 1e9);
  } else if (bps >= 1e6) {
    std::snprintf(buf, sizeof buf, "%gMbit/s", bps / 1e6);
  } else if (bps >= 1e3) {
    std::snprintf(buf, sizeof buf, "%gkbit/s", bps / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%gbit/s", bps);
  }
  return buf;
}

}  // namespace mcdist::linkem
