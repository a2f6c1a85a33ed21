#pragma once
/// @file
/// Writer of the Prometheus text exposition format, version 0.0.4
/// (https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format), served as
/// `Content-Type: text/plain; version=0.0.4; charset=utf-8`:
///
///     # HELP mcdist_receiver_files_stored_total Files verified and renamed into place.
///     # TYPE mcdist_receiver_files_stored_total counter
///     mcdist_receiver_files_stored_total{channel="products"} 42
///
/// Each family is written once: HELP, TYPE, then its samples. Escaping per the format: in HELP
/// text `\` -> `\\` and newline -> `\n`; in label values also `"` -> `\"`. Names follow the
/// Prometheus data model (`[a-zA-Z_:][a-zA-Z0-9_:]*`, labels `[a-zA-Z_][a-zA-Z0-9_]*` not
/// starting with `__`) and the naming practice (https://prometheus.io/docs/practices/naming/):
/// a counter's name ends in `_total`. A name that breaks these is a programming error and
/// throws std::invalid_argument, so a unit test catches it before a scraper does. Pure: no
/// I/O.

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace mcdist::http {

/// The content type of the format.
inline constexpr std::string_view prometheus_content_type =
    "text/plain; version=0.0.4; charset=utf-8";

/// A family's TYPE.
enum class metric_type { counter, gauge };

/// One label: name and (any UTF-8) value.
using label = std::pair<std::string_view, std::string_view>;

/// Builds one exposition text.
class prometheus_text {
 public:
  /// Starts a family: writes its HELP and TYPE lines.
  /// @throws std::invalid_argument for an invalid name, a counter not ending in _total, or a
  ///         family already written
  void family(std::string_view name, metric_type type, std::string_view help);

  /// A sample of the current family. Integers are written exactly.
  /// @throws std::invalid_argument before any family(), or for an invalid label name
  void sample(std::initializer_list<label> labels, double value);
  void sample(std::initializer_list<label> labels, std::uint64_t value);
  void sample(double value) { sample({}, value); }
  void sample(std::uint64_t value) { sample({}, value); }

  /// The text so far.
  const std::string& text() const noexcept { return m_text; }

  /// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
  static bool valid_metric_name(std::string_view name) noexcept;
  /// `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with "__" (reserved).
  static bool valid_label_name(std::string_view name) noexcept;
  /// A label value with `\`, `"` and newline escaped.
  static std::string escape_label_value(std::string_view v);
  /// HELP text with `\` and newline escaped.
  static std::string escape_help(std::string_view v);
  /// A sample value as the format writes it: shortest round-trip decimal, `+Inf`, `-Inf`,
  /// `NaN`.
  static std::string format_value(double v);

 private:
  void write_labels(std::initializer_list<label> labels);

  std::string m_text;
  std::string m_family;                       ///< current family's name
  std::set<std::string, std::less<>> m_seen;  ///< names of families written
};

}  // namespace mcdist::http
