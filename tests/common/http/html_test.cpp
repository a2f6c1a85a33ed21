#include "common/http/html.hpp"

#include <catch2/catch.hpp>

using namespace mcdist::http;

TEST_CASE("html_escape escapes markup and replaces invalid UTF-8 and control bytes", "[html]") {
  CHECK(html_escape("a&b<c>\"d'e") == "a&amp;b&lt;c&gt;&quot;d&#39;e");
  CHECK(html_escape("Zürich") == "Zürich");
  CHECK(html_escape("x\xff"
                    "y") == "x\xef\xbf\xbdy");                                   // stray byte
  CHECK(html_escape("\xc0\xaf") == "\xef\xbf\xbd\xef\xbf\xbd");                  // overlong '/'
  CHECK(html_escape("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
  CHECK(html_escape("a\x01z") == "a\xef\xbf\xbdz");
  CHECK(html_escape("\xe2\x82") == "\xef\xbf\xbd\xef\xbf\xbd");  // truncated sequence
}

TEST_CASE("format_age reads as a person says it", "[html]") {
  CHECK(format_age(-3) == "0 s");
  CHECK(format_age(4.7) == "4 s");
  CHECK(format_age(200) == "3 min 20 s");
  CHECK(format_age(7500) == "2 h 5 min");
  CHECK(format_age(3 * 86400 + 4 * 3600 + 5) == "3 d 4 h");
}

TEST_CASE("svg_bar_chart draws one bar per non-zero value, scaled to the largest", "[html]") {
  const auto svg =
      svg_bar_chart({0, 5, 10}, {"a", "b<", "c"}, "t&", "10 B/s", "then", "now", 300, 120);
  CHECK(svg.starts_with("<svg "));
  CHECK(svg.find("aria-label=\"t&amp;\"") != std::string::npos);
  std::size_t bars = 0;
  for (auto p = svg.find("class=\"bar\""); p != std::string::npos;
       p = svg.find("class=\"bar\"", p + 1))
    ++bars;
  CHECK(bars == 2);
  CHECK(svg.find("<title>b&lt;</title>") != std::string::npos);
  // Plot height 120 - 8 - 20 = 92: the largest bar is full height, the half one half.
  CHECK(svg.find("height=\"92.0\" fill") != std::string::npos);
  CHECK(svg.find("height=\"46.0\" fill") != std::string::npos);
}
