#include "common/http/html.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace mcdist::http {

namespace {

/// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not one (RFC 3629:
/// no overlongs, no surrogates, at most U+10FFFF).
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n = 0;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3;
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
  }
  if (c == 0xe0 && b(1) < 0xa0) return 0;  // overlong
  if (c == 0xed && b(1) > 0x9f) return 0;  // surrogate
  if (c == 0xf0 && b(1) < 0x90) return 0;  // overlong
  if (c == 0xf4 && b(1) > 0x8f) return 0;  // above U+10FFFF
  return n;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const std::size_t n = utf8_length(text, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t')
          out += "\xef\xbf\xbd";
        else
          out += c;
    }
    ++i;
  }
  return out;
}

std::string format_age(double seconds) {
  if (!(seconds > 0)) return "0 s";
  const auto s = static_cast<std::uint64_t>(seconds);
  if (s < 60) return std::to_string(s) + " s";
  if (s < 3600) return std::to_string(s / 60) + " min " + std::to_string(s % 60) + " s";
  if (s < 86400) return std::to_string(s / 3600) + " h " + std::to_string(s % 3600 / 60) + " min";
  return std::to_string(s / 86400) + " d " + std::to_string(s % 86400 / 3600) + " h";
}

std::string_view page_style() noexcept {
  return R"(
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em 2em}
body{color:#1f2328;background:#fff}
h1{font-size:1.5em;margin:0 0 .2em}
h2{font-size:1.15em;margin:1.6em 0 .5em;border-bottom:1px solid #d0d7de;padding-bottom:.2em}
h3{font-size:1em;margin:1.2em 0 .4em}
.sub{color:#57606a;margin:0 0 1em}
.cards{display:flex;flex-wrap:wrap;gap:.6em}
.card{border:1px solid #d0d7de;border-radius:6px;padding:.5em .9em;min-width:8em}
.card .v{font-size:1.35em;font-weight:600}
.card .k{color:#57606a;font-size:.85em}
table{border-collapse:collapse;margin:.3em 0}
th,td{padding:.25em .7em;text-align:left;border-bottom:1px solid #eaeef2;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.path{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all}
.ok{color:#1a7f37}
.bad{color:#cf222e;font-weight:600}
.warning{color:#9a6700}
.error,.critical{color:#cf222e}
.none{color:#57606a;font-style:italic}
a{color:#0969da}
)";
}

std::string card(std::string_view id, std::string_view value, std::string_view caption) {
  return "<div class=\"card\"><div class=\"v\" id=\"" + html_escape(id) + "\">" +
         html_escape(value) + "</div><div class=\"k\">" + std::string(caption) + "</div></div>\n";
}

std::string svg_bar_chart(const std::vector<double>& values,
                          const std::vector<std::string>& bar_titles, std::string_view title,
                          std::string_view y_max_label, std::string_view left_label,
                          std::string_view right_label, int width, int height) {
  // Plot area inside margins for the axis text.
  constexpr int left = 70;
  constexpr int bottom = 20;
  constexpr int top = 8;
  const int plot_w = std::max(width - left - 4, 10);
  const int plot_h = std::max(height - top - bottom, 10);
  double max = 0;
  for (double v : values) max = std::max(max, v);
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
                    "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " +
                    std::to_string(width) + " " + std::to_string(height) +
                    "\" role=\"img\" aria-label=\"" + html_escape(title) + "\">\n";
  svg += "<rect x=\"" + std::to_string(left) + "\" y=\"" + std::to_string(top) + "\" width=\"" +
         std::to_string(plot_w) + "\" height=\"" + std::to_string(plot_h) +
         "\" fill=\"#f6f8fa\" stroke=\"#d0d7de\"/>\n";
  const auto text = [&](int x, int y, const char* anchor, std::string_view s) {
    svg += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) +
           "\" font-size=\"11\" fill=\"#57606a\" text-anchor=\"" + anchor + "\">" + html_escape(s) +
           "</text>\n";
  };
  text(left - 4, top + 10, "end", y_max_label);
  text(left - 4, top + plot_h, "end", "0");
  text(left, height - 5, "start", left_label);
  text(left + plot_w, height - 5, "end", right_label);
  if (!values.empty()) {
    const double slot = static_cast<double>(plot_w) / static_cast<double>(values.size());
    const double bar_w = std::max(slot - 1.0, 1.0);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double h = max > 0 ? values[i] / max * plot_h : 0;
      if (h <= 0) continue;
      svg += "<rect class=\"bar\" x=\"" + fmt("%.1f", left + static_cast<double>(i) * slot) +
             "\" y=\"" + fmt("%.1f", top + plot_h - h) + "\" width=\"" + fmt("%.1f", bar_w) +
             "\" height=\"" + fmt("%.1f", h) + "\" fill=\"#2f81f7\">";
      if (i < bar_titles.size()) svg += "<title>" + html_escape(bar_titles[i]) + "</title>";
      svg += "</rect>\n";
    }
  }
  svg += "</svg>";
  return svg;
}

namespace {
std::string utc_format(std::chrono::system_clock::time_point t, const char* format) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}
}  // namespace

std::string iso_time(std::chrono::system_clock::time_point t) {
  return utc_format(t, "%Y-%m-%dT%H:%M:%SZ");
}

std::string utc_clock(std::chrono::system_clock::time_point t) { return utc_format(t, "%H:%M:%S"); }

}  // namespace mcdist::http
