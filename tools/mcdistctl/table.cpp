#include "tools/mcdistctl/table.hpp"

#include "common/units.hpp"

#include <algorithm>

namespace mcdist::ctl {

std::size_t display_width(std::string_view s) noexcept {
  std::size_t n = 0;
  for (const char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;  // not a continuation byte
  return n;
}

std::string sanitize_cell(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) {
      out += '?';
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9F) {
      out += '?';  // C1 control (U+0080..U+009F), e.g. CSI U+009B
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string format_table(const table& t) {
  const auto ncol = t.columns.size();
  std::vector<std::vector<std::string>> cells;
  cells.reserve(t.rows.size() + 1);
  std::vector<std::string> head;
  for (const auto& c : t.columns) head.push_back(sanitize_cell(c.header));
  cells.push_back(std::move(head));
  for (const auto& r : t.rows) {
    std::vector<std::string> row(ncol);
    for (std::size_t i = 0; i < ncol && i < r.size(); ++i) row[i] = sanitize_cell(r[i]);
    cells.push_back(std::move(row));
  }
  std::vector<std::size_t> width(ncol, 0);
  for (const auto& row : cells)
    for (std::size_t i = 0; i < ncol; ++i) width[i] = std::max(width[i], display_width(row[i]));

  std::string out;
  for (const auto& row : cells) {
    std::string line;
    for (std::size_t i = 0; i < ncol; ++i) {
      const auto pad = width[i] - display_width(row[i]);
      if (i > 0) line += "  ";
      if (t.columns[i].side == align::right) line.append(pad, ' ');
      line += row[i];
      if (t.columns[i].side == align::left) line.append(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

std::string format_size(std::uint64_t bytes) { return format_bytes(static_cast<double>(bytes)); }

}  // namespace mcdist::ctl
