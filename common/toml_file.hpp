#pragma once
/// @file
/// Reading a daemon's TOML configuration (mcdistd's, mcdist-feed's) with toml++: one place that
/// turns a syntax error into the message an operator reads, "FILE: what (line L, column C)".
/// Header-only: toml++ is a header library and only the shells' config readers include this.

#include <toml++/toml.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>

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

}  // namespace mcdist
