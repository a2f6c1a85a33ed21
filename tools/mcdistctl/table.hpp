#pragma once
/// @file
/// mcdistctl's aligned tables: column widths from the content (in characters, not bytes: UTF-8
/// product names align), numbers right-aligned, two spaces between columns, no trailing blanks.
/// Cells are made safe for a terminal first: a product name is bytes from a file system, and a
/// control character in it (ESC, CR, a newline) must not move the cursor or split a row.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist::ctl {

enum class align { left, right };

struct column {
  std::string header;
  align side = align::left;
};

/// A table to print: columns and rows of cells (a row shorter than the columns is padded with
/// empty cells; extra cells are ignored).
struct table {
  std::vector<column> columns;
  std::vector<std::vector<std::string>> rows;
};

/// Characters a terminal shows for `s` (UTF-8 code points; an invalid byte counts as one).
std::size_t display_width(std::string_view s) noexcept;

/// Replaces each C0/C1 control character and DEL by '?', so a cell prints on one line and sends
/// the terminal no escape sequence.
std::string sanitize_cell(std::string_view s);

/// The header line and one line per row, each ending in '\n'. An empty table (no rows) is the
/// header alone.
std::string format_table(const table& t);

/// "1.2 KiB"-style sizes (common/units format_bytes) for the SIZE columns.
std::string format_size(std::uint64_t bytes);

}  // namespace mcdist::ctl
