#include "common/http/prometheus_text.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using mcdist::http::metric_type;
using mcdist::http::prometheus_text;

TEST_CASE("a family is its HELP line, its TYPE line, then its samples", "[prometheus]") {
  prometheus_text p;
  p.family("mcdist_receiver_files_stored_total", metric_type::counter, "Files stored.");
  p.sample({{"channel", "products"}}, std::uint64_t{42});
  p.sample({{"channel", "obs"}}, std::uint64_t{0});
  p.family("mcdist_receiver_sessions_active", metric_type::gauge, "Sessions now.");
  p.sample(std::uint64_t{3});
  CHECK(p.text() ==
        "# HELP mcdist_receiver_files_stored_total Files stored.\n"
        "# TYPE mcdist_receiver_files_stored_total counter\n"
        "mcdist_receiver_files_stored_total{channel=\"products\"} 42\n"
        "mcdist_receiver_files_stored_total{channel=\"obs\"} 0\n"
        "# HELP mcdist_receiver_sessions_active Sessions now.\n"
        "# TYPE mcdist_receiver_sessions_active gauge\n"
        "mcdist_receiver_sessions_active 3\n");
}

TEST_CASE("label values escape backslash, double quote and newline", "[prometheus]") {
  prometheus_text p;
  p.family("x_total", metric_type::counter, "h");
  p.sample({{"channel", "a\\b\"c\nd"}, {"reason", "plain"}}, std::uint64_t{1});
  CHECK(p.text().ends_with("x_total{channel=\"a\\\\b\\\"c\\nd\",reason=\"plain\"} 1\n"));
  // UTF-8 passes unchanged.
  CHECK(prometheus_text::escape_label_value("Zürich") == "Zürich");
}

TEST_CASE("HELP text escapes backslash and newline but not double quotes", "[prometheus]") {
  prometheus_text p;
  p.family("y", metric_type::gauge, "one\\two\nthree \"q\"");
  CHECK(p.text().starts_with("# HELP y one\\\\two\\nthree \"q\"\n# TYPE y gauge\n"));
}

TEST_CASE("a counter's name must end in _total", "[prometheus]") {
  prometheus_text p;
  CHECK_THROWS_AS(p.family("mcdist_receiver_files_stored", metric_type::counter, "h"),
                  std::invalid_argument);
  CHECK_NOTHROW(p.family("mcdist_receiver_files_stored_total", metric_type::counter, "h"));
  CHECK_NOTHROW(p.family("mcdist_receiver_sessions_active", metric_type::gauge, "h"));
}

TEST_CASE("invalid metric and label names are refused, as is a family written twice",
          "[prometheus]") {
  prometheus_text p;
  CHECK_THROWS_AS(p.family("", metric_type::gauge, "h"), std::invalid_argument);
  CHECK_THROWS_AS(p.family("1abc", metric_type::gauge, "h"), std::invalid_argument);
  CHECK_THROWS_AS(p.family("a-b", metric_type::gauge, "h"), std::invalid_argument);
  CHECK_THROWS_AS(p.sample(1.0), std::invalid_argument);  // no family yet
  p.family("ns:sub_metric", metric_type::gauge, "colons are allowed in metric names");
  CHECK_THROWS_AS(p.sample({{"__reserved", "x"}}, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(p.sample({{"a:b", "x"}}, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(p.family("ns:sub_metric", metric_type::gauge, "h"), std::invalid_argument);
  CHECK(prometheus_text::valid_label_name("_ok9"));
  CHECK_FALSE(prometheus_text::valid_label_name("9no"));
}

TEST_CASE(
    "values: integers exact, doubles shortest round-trip, Inf and NaN spelled as the "
    "format says",
    "[prometheus]") {
  CHECK(prometheus_text::format_value(0.5) == "0.5");
  CHECK(prometheus_text::format_value(1795429349.4941876) == "1795429349.4941876");
  CHECK(prometheus_text::format_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(prometheus_text::format_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(prometheus_text::format_value(std::nan("")) == "NaN");
  prometheus_text p;
  p.family("big_total", metric_type::counter, "h");
  p.sample(std::uint64_t{18446744073709551615u});
  CHECK(p.text().ends_with("big_total 18446744073709551615\n"));
}
