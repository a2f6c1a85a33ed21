#pragma once
/// @file
/// Reading a daemon's TOML configuration (mcdistd's, mcdist-feed's) with toml++, in one place:
/// syntax errors as "FILE: what (line L, column C)", unknown settings refused, typed settings
/// read with the same messages. Header-only (only the config parsers include toml++). `Error`
/// is the daemon's configuration error, constructed from a std::string.

#include "common/units.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace mcdist {

/// "line L, column C" of where `r` begins (1-based, as toml++ counts).
inline std::string toml_where(const toml::source_region& r) {
  std::ostringstream os;
  os << "line " << r.begin.line << ", column " << r.begin.column;
  return os.str();
}

/// Parses `text` as TOML; `source` names it in messages.
/// @throws Error  (constructed from a std::string) "SOURCE: description (line L, column C)" on a
///                syntax error
template <class Error>
toml::table parse_toml(std::string_view text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw Error(source + ": " + std::string(e.description()) + " (" + toml_where(e.source()) + ")");
  }
}

/// Parses the TOML file `file`.
/// @throws Error  as parse_toml does, also when the file cannot be read (toml++ reports that as
///                a parse error naming the file)
template <class Error>
toml::table parse_toml_file(const std::filesystem::path& file) {
  try {
    return toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    throw Error(file.string() + ": " + std::string(e.description()) + " (" +
                toml_where(e.source()) + ")");
  }
}

/// Refuses a key of `t` in neither `known` nor `also` (keys several tables share).
/// @throws Error "WHERE: unknown setting 'PREFIXKEY' (line L, column C)"; `where` names the file
///               or the table ("action[2]"), `prefix` is "channel[0]." or empty
template <class Error>
void refuse_unknown_settings(const toml::table& t, std::initializer_list<const char*> known,
                             const std::string& where, std::string_view prefix = {},
                             std::span<const char* const> also = {}) {
  for (const auto& [key, v] : t) {
    const std::string name(key.str());  // not the binding: clang 14 cannot capture one
    const auto is_name = [&name](const char* k) { return name == k; };
    if (std::none_of(known.begin(), known.end(), is_name) &&
        std::none_of(also.begin(), also.end(), is_name)) {
      throw Error(where + ": unknown setting '" + std::string(prefix) + name + "' (" +
                  toml_where(v.source()) + ")");
    }
  }
}

/// The typed settings of one table. Messages are "LEAD'PREFIXKEY' WHAT (line L, column C)":
/// LEAD names the file ("FILE: ") or is empty, PREFIX the table ("channel[0].").
template <class Error>
class table_reader {
 public:
  /// @param known   with `also`, the keys the table may hold (refuse_unknown_settings with
  ///                where = `source`); empty: not checked
  /// @param source  the file, before every message with ": "; empty: nothing
  table_reader(const toml::table& t, std::string prefix, std::string source,
               std::initializer_list<const char*> known = {},
               std::span<const char* const> also = {})
      : m_t(t), m_prefix(std::move(prefix)), m_lead(source.empty() ? "" : source + ": ") {
    if (known.size() > 0) refuse_unknown_settings<Error>(t, known, source, m_prefix, also);
  }

  /// `name` as messages show it: with the table's prefix.
  std::string key(std::string_view name) const { return m_prefix + std::string(name); }

  /// @throws Error "LEAD'KEY' WHAT (line L, column C)" (the location when the key is set)
  [[noreturn]] void fail(std::string_view name, const std::string& what) const {
    std::string at;
    if (const auto* n = m_t.get(name)) at = " (" + toml_where(n->source()) + ")";
    throw Error(m_lead + "'" + key(name) + "' " + what + at);
  }

  /// The value node, or nullptr when unset.
  const toml::node* get(std::string_view name) const { return m_t.get(name); }

  /// A setting of type T (std::string, bool, std::int64_t, double); integers only for an
  /// integer: toml++ casts a float (1e40) out of range with undefined behaviour (config_fuzz).
  /// @throws Error "must be TYPE" (`type`: "a string", "0, 1 or 2")
  template <class T>
  std::optional<T> value(std::string_view name, const std::string& type) const {
    const auto* n = m_t.get(name);
    if (!n) return std::nullopt;
    const bool ok = std::is_same_v<T, bool>          ? n->is_boolean()
                    : std::is_integral_v<T>          ? n->is_integer()
                    : std::is_same_v<T, std::string> ? n->is_string()
                                                     : true;
    const auto v = ok ? n->value<T>() : std::nullopt;
    if (!v) fail(name, "must be " + type);
    return v;
  }

  /// A string setting. @throws Error "must be a string"
  std::optional<std::string> string(std::string_view name) const {
    return value<std::string>(name, "a string");
  }

  /// A string setting that must be set and not empty. @param example its value in the message
  /// @throws Error "LEAD'KEY' is required (e.g. KEY = EXAMPLE)"
  std::string required_string(std::string_view name, const char* example) const {
    auto s = string(name);
    if (!s || s->empty()) {
      throw Error(m_lead + "'" + key(name) + "' is required (e.g. " + key(name) + " = " + example +
                  ")");
    }
    return *s;
  }

  /// A whole number in [lo, hi]. @throws Error "must be a whole number", "must be LO to HI"
  std::optional<std::int64_t> integer(std::string_view name, std::int64_t lo,
                                      std::int64_t hi) const {
    const auto v = value<std::int64_t>(name, "a whole number");
    if (v && (*v < lo || *v > hi)) {
      fail(name, "must be " + std::to_string(lo) + " to " + std::to_string(hi));
    }
    return v;
  }

  /// A string or a list of strings; empty when unset. @throws Error "must be a list of strings"
  std::vector<std::string> strings(std::string_view name) const {
    std::vector<std::string> out;
    const auto* n = m_t.get(name);
    if (!n) return out;
    if (n->is_string()) return {*n->value<std::string>()};
    const auto* a = n->as_array();
    if (!a) fail(name, "must be a list of strings");
    for (const auto& e : *a) {
      if (!e.is_string()) fail(name, "must be a list of strings");
      out.push_back(*e.value<std::string>());
    }
    return out;
  }

  /// A duration string ("200ms", "24h", "7d"), not negative. @throws Error "is not a duration"
  std::optional<std::chrono::nanoseconds> duration(std::string_view name) const {
    auto s = string(name);
    if (!s) return std::nullopt;
    const auto d = parse_duration(*s);
    if (!d || d->count() < 0)
      fail(name, "= \"" + *s + "\" is not a duration (e.g. \"200ms\", \"24h\")");
    return d;
  }

  /// A positive rate in bit/s ("500M"). @throws Error "is not a rate in bit/s"
  std::optional<std::uint64_t> rate(std::string_view name) const {
    auto s = string(name);
    if (!s) return std::nullopt;
    const auto r = parse_rate(*s);
    if (!r || *r == 0)
      fail(name, "= \"" + *s + "\" is not a rate in bit/s (e.g. \"500M\", \"1G\")");
    return r;
  }

  /// true or false. @throws Error "must be true or false"
  std::optional<bool> boolean(std::string_view name) const {
    return value<bool>(name, "true or false");
  }

  /// A positive size, bytes: a whole number or a string with a suffix ("512M").
  /// @throws Error "must be positive", "is not a size"
  std::optional<std::uint64_t> size(std::string_view name) const {
    const auto* n = m_t.get(name);
    if (!n) return std::nullopt;
    if (n->is_integer()) {
      const auto v = *n->value<std::int64_t>();
      if (v <= 0) fail(name, "must be positive");
      return static_cast<std::uint64_t>(v);
    }
    auto s = string(name);
    const auto v = parse_size(*s);
    if (!v || *v == 0) fail(name, "= \"" + *s + "\" is not a size (e.g. \"512M\", \"2G\")");
    return v;
  }

 private:
  const toml::table& m_t;
  std::string m_prefix;
  std::string m_lead;
};

}  // namespace mcdist
