#include "common/wis2/wis2_publisher.hpp"

// Boost.URL (Boost 1.81) as an independent RFC 3986 parser for the hrefs, compiled header-only
// into this test (its documented way without the separately built library).
#include <boost/url/parse.hpp>
#include <boost/url/src.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <vector>

using namespace mcdist;

namespace {

wis2_notice sample() {
  wis2_notice n;
  n.id = format_uuid_v4({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  n.data_id = "xx-centre/data/core/weather/surface-based-observations/synop/obs/a.bufr4";
  // 2026-11-23T11:02:03.5Z
  n.pubtime = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(1'795'431'723'500'000'000)));
  n.datetime_ns = 1'795'431'600'000'000'000;
  for (std::size_t i = 0; i < n.digest.size(); ++i) n.digest[i] = static_cast<std::uint8_t>(i);
  n.href = "https://data.example.org/obs/a.bufr4";
  n.media_type = "application/bufr";
  n.length = 1234;
  return n;
}

}  // namespace

TEST_CASE("build_wis2_message gives a WNM 1.0 core Feature with every required key") {
  const auto j = nlohmann::json::parse(build_wis2_message(sample()));
  CHECK(j["id"] == "00010203-0405-4607-8809-0a0b0c0d0e0f");
  CHECK(j["conformsTo"] == nlohmann::json::array({"http://wis.wmo.int/spec/wnm/1/conf/core"}));
  CHECK(j["type"] == "Feature");
  CHECK(j.contains("geometry"));
  CHECK(j["geometry"].is_null());
  const auto& p = j["properties"];
  CHECK(p["data_id"] == "xx-centre/data/core/weather/surface-based-observations/synop/obs/a.bufr4");
  CHECK(p["pubtime"] == "2026-11-23T11:02:03.500000Z");
  CHECK(p["datetime"] == "2026-11-23T11:00:00.000000Z");
  CHECK(p["integrity"]["method"] == "sha256");
  CHECK(p["integrity"]["value"] == "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=");
  REQUIRE(j["links"].size() == 1);
  const auto& l = j["links"][0];
  CHECK(l["href"] == "https://data.example.org/obs/a.bufr4");
  CHECK(l["rel"] == "canonical");
  CHECK(l["type"] == "application/bufr");
  CHECK(l["length"] == 1234);
}

TEST_CASE("build_wis2_message replaces invalid UTF-8 in paths instead of throwing") {
  auto n = sample();
  n.href += "\xff";
  const auto j = nlohmann::json::parse(build_wis2_message(n));
  CHECK(j["links"][0]["href"].get<std::string>().starts_with("https://data.example.org/obs/"));
}

TEST_CASE("percent_encode_path encodes each segment's bytes outside RFC 3986 pchar") {
  CHECK(percent_encode_path("obs/a.bufr4") == "obs/a.bufr4");
  CHECK(percent_encode_path("a b.bufr") == "a%20b.bufr");
  // '%' is text in a name: "%20" stays three characters ("%2520"), not a space.
  CHECK(percent_encode_path("pct%20x?y#z.bufr") == "pct%2520x%3Fy%23z.bufr");
  // Non-ASCII as its UTF-8 bytes, upper-case hex; the '/' between segments stays.
  CHECK(percent_encode_path("Ünï/名前.bufr") == "%C3%9Cn%C3%AF/%E5%90%8D%E5%89%8D.bufr");
  // unreserved, sub-delims, ':' and '@' may stand in a segment as they are.
  CHECK(percent_encode_path("obs/keep-._~!$&'()*+,;=:@.bufr") == "obs/keep-._~!$&'()*+,;=:@.bufr");
  // Delimiters and characters no URI may hold, control bytes, invalid UTF-8.
  CHECK(percent_encode_path("x\"<>\\^`{|}[]\x01\x7f\xff.bin") ==
        "x%22%3C%3E%5C%5E%60%7B%7C%7D%5B%5D%01%7F%FF.bin");
  CHECK(percent_encode_path("") == "");
}

TEST_CASE("canonical_href keeps base_url and gives a URI that parses back to the name") {
  const std::string base = "https://data.example.org/wis2/";
  CHECK(canonical_href(base, "a b.bufr") == "https://data.example.org/wis2/a%20b.bufr");
  CHECK(canonical_href(base, "pct%20x?y#z.bufr") ==
        "https://data.example.org/wis2/pct%2520x%3Fy%23z.bufr");
  CHECK(canonical_href(base, "Ünï/名前.bufr") ==
        "https://data.example.org/wis2/%C3%9Cn%C3%AF/%E5%90%8D%E5%89%8D.bufr");
  // The operator's base_url is not re-encoded (its own escapes and query-free path stay).
  CHECK(canonical_href("https://h.example/a%7Eb/", "c d") == "https://h.example/a%7Eb/c%20d");
  // The raw join these names used to give is no URI at all: the check below has teeth.
  CHECK_FALSE(boost::urls::parse_uri(base + "a b.bufr"));

  const std::vector<std::string> names = {"a b.bufr", "pct%20x?y#z.bufr", "Ünï/名前.bufr",
                                          "obs/keep-._~!$&'()*+,;=:@.bufr",
                                          "x\"<>\\^`{|}[]\x01\x7f.bin"};
  for (const auto& name : names) {
    INFO(name);
    const auto href = canonical_href(base, name);
    const auto u = boost::urls::parse_uri(href);
    REQUIRE(u);
    CHECK(u->scheme() == "https");
    CHECK(u->encoded_host() == "data.example.org");
    // The whole name is in the path: nothing became a query or a fragment.
    CHECK_FALSE(u->has_query());
    CHECK_FALSE(u->has_fragment());
    CHECK(std::string(u->encoded_path()) == "/wis2/" + percent_encode_path(name));
    // Decoded, the path is the name again.
    CHECK(u->path() == "/wis2/" + name);
  }
}

TEST_CASE("base64 follows RFC 4648 test vectors") {
  auto b = [](std::string_view s) {
    return base64({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()});
  };
  CHECK(b("") == "");
  CHECK(b("f") == "Zg==");
  CHECK(b("fo") == "Zm8=");
  CHECK(b("foo") == "Zm9v");
  CHECK(b("foob") == "Zm9vYg==");
  CHECK(b("fooba") == "Zm9vYmE=");
  CHECK(b("foobar") == "Zm9vYmFy");
}

TEST_CASE("format_uuid_v4 sets version 4 and the RFC 9562 variant") {
  std::array<std::uint8_t, 16> ff;
  ff.fill(0xff);
  CHECK(format_uuid_v4(ff) == "ffffffff-ffff-4fff-bfff-ffffffffffff");
}

TEST_CASE("rfc3339_utc handles times before the epoch") {
  CHECK(rfc3339_utc(0) == "1970-01-01T00:00:00.000000Z");
  CHECK(rfc3339_utc(-1'000) == "1969-12-31T23:59:59.999999Z");
}

TEST_CASE("guess_media_type knows WMO formats and falls back to octet-stream") {
  CHECK(guess_media_type("a/B.BUFR") == "application/bufr");
  CHECK(guess_media_type("x.grib2") == "application/grib");
  CHECK(guess_media_type("x.json") == "application/json");
  CHECK(guess_media_type("x") == "application/octet-stream");
}

TEST_CASE("parse_mqtt_url takes host, port and TLS, refuses other schemes") {
  CHECK(parse_mqtt_url("mqtt://127.0.0.1:1884") == mqtt_url{"127.0.0.1", 1884, false});
  CHECK(parse_mqtt_url("mqtt://broker.example.org") == mqtt_url{"broker.example.org", 1883, false});
  CHECK(parse_mqtt_url("mqtt://[::1]:1883/") == mqtt_url{"::1", 1883, false});
  CHECK(parse_mqtt_url("mqtts://h") == mqtt_url{"h", 8883, true});
  CHECK(parse_mqtt_url("mqtts://h:9883") == mqtt_url{"h", 9883, true});
  CHECK_FALSE(parse_mqtt_url("mqtt://h:"));
  CHECK_FALSE(parse_mqtt_url("mqtt://h:0"));
  CHECK_FALSE(parse_mqtt_url("mqtt://h:70000"));
  CHECK_FALSE(parse_mqtt_url("mqtt://user@h:1883"));
  CHECK_FALSE(parse_mqtt_url("mqtt://h:1883/path"));
  CHECK_FALSE(parse_mqtt_url("ws://h:1883"));
  CHECK_FALSE(parse_mqtt_url("127.0.0.1:1883"));
}

TEST_CASE("check_mqtt_broker refuses TLS settings without TLS and half credentials") {
  mqtt_broker b;
  b.url = *parse_mqtt_url("mqtts://h");
  b.ca_file = "/etc/ssl/certs/ca.pem";
  b.username = "u";
  b.password = "p";
  CHECK_NOTHROW(check_mqtt_broker(b));
  auto bad = [&](auto change) {
    auto c = b;
    change(c);
    CHECK_THROWS_AS(check_mqtt_broker(c), std::invalid_argument);
  };
  bad([](mqtt_broker& c) { c.url.tls = false; });          // ca_file on mqtt://
  bad([](mqtt_broker& c) { c.client_cert = "c.pem"; });    // without client_key
  bad([](mqtt_broker& c) { c.password_file = "p.txt"; });  // both password kinds
  bad([](mqtt_broker& c) { c.username.clear(); });         // password without username
  CHECK(b.display() == "mqtts://h:8883");
  b.url = *parse_mqtt_url("mqtt://[::1]:1");
  CHECK(b.display() == "mqtt://[::1]:1");
}

TEST_CASE("topic filters: validity and matching (MQTT 3.1.1 section 4.7)") {
  CHECK(valid_topic_filter("cache/a/wis2/+/data/core/weather/#"));
  CHECK(valid_topic_filter("#"));
  CHECK(valid_topic_filter("+"));
  CHECK_FALSE(valid_topic_filter(""));
  CHECK_FALSE(valid_topic_filter("a/#/b"));
  CHECK_FALSE(valid_topic_filter("a/b#"));
  CHECK_FALSE(valid_topic_filter("a/+b/c"));
  CHECK(topic_matches("cache/a/wis2/+/data/#", "cache/a/wis2/de-dwd/data/core/weather"));
  CHECK(topic_matches("a/#", "a"));
  CHECK(topic_matches("a/+/c", "a/b/c"));
  CHECK_FALSE(topic_matches("a/+/c", "a/b/d"));
  CHECK_FALSE(topic_matches("a/+", "a/b/c"));
  CHECK_FALSE(topic_matches("a/b", "a/b/c"));
  CHECK_FALSE(topic_matches("a/b/c", "a/b"));
  CHECK_FALSE(topic_matches("#", "$SYS/broker"));
  CHECK(topic_matches("$SYS/#", "$SYS/broker"));
}

TEST_CASE("check_wis2_action fills defaults and refuses bad fields") {
  wis2_action a;
  a.topic = "origin/a/wis2/xx-centre/data/core/weather/surface-based-observations/synop";
  a.base_url = "https://data.example.org";
  check_wis2_action(a);
  CHECK(a.base_url == "https://data.example.org/");
  CHECK(a.max_queued == wis2_queue_limit);
  CHECK(a.data_id_prefix == "xx-centre/data/core/weather/surface-based-observations/synop/");
  auto bad = [&](auto change) {
    auto b = a;
    change(b);
    CHECK_THROWS_AS(check_wis2_action(b), std::invalid_argument);
  };
  bad([](wis2_action& b) { b.topic = "origin/a/wis2/#"; });
  bad([](wis2_action& b) { b.topic = "weather/synop"; });
  bad([](wis2_action& b) { b.base_url = "ftp://x/"; });
  bad([](wis2_action& b) { b.qos = 3; });
  bad([](wis2_action& b) { b.broker.password = "p"; });
}
