#pragma once
/// @file
/// Pieces of the daemons' status pages: HTML escaping, ages and sizes for a person, and a bar
/// chart as inline SVG (no script, no external asset: the page works offline and in a
/// browser with scripts off). Pure functions.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist::http {

/// Text safe inside HTML elements and double-quoted attributes: & < > " ' escaped.
/// Invalid UTF-8 bytes (names from the network) are replaced with U+FFFD.
std::string html_escape(std::string_view text);

/// "4 s", "3 min 20 s", "2 h 5 min", "3 d 4 h" for an age in seconds (negative: "0 s").
std::string format_age(double seconds);

/// `t` as ISO 8601 UTC to the second, "2026-11-23T10:20:03Z" (status JSON and pages).
std::string iso_time(std::chrono::system_clock::time_point t);

/// The time of day of `t` in UTC, "10:20:03", for table cells.
std::string utc_clock(std::chrono::system_clock::time_point t);

/// A bar chart of `values` (oldest first) as an `<svg>` element, `width` x `height` pixels
/// plus axis text: one bar per value, the y axis scaled to the largest value and labelled
/// with `format_y(max)`, the x axis labelled with `left_label` and `right_label`. Each bar
/// carries a `<title>` (a tooltip) from `bar_titles` when given (same length as values).
/// @param title  the chart's accessible name (aria-label)
std::string svg_bar_chart(const std::vector<double>& values,
                          const std::vector<std::string>& bar_titles, std::string_view title,
                          std::string_view y_max_label, std::string_view left_label,
                          std::string_view right_label, int width = 720, int height = 160);

/// The stylesheet of the daemons' status pages (mcdistd's and mcdist-feed's look the same), for
/// an inline `<style>` element: summary cards (.cards/.card/.v/.k), tables with .num cells,
/// .path (monospace, wrapping), state colours (.ok, .bad, .warning, .error, .none).
std::string_view page_style() noexcept;

/// A summary card: `value` (escaped) in an element with id `id`, above `caption` (trusted HTML).
std::string card(std::string_view id, std::string_view value, std::string_view caption);

}  // namespace mcdist::http
