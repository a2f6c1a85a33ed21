// Reading WIS2 Notification Messages (common/wis2/wnm.hpp): a valid WNM 1.0 is taken with
// every field as sent; each check refuses with its own reason; hostile input (oversize, deep
// nesting, non-canonical base64, a link with credentials or another scheme, names that would
// leave the spool) is refused before anything is allocated for it.
#include "common/wis2/wnm.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

using namespace mcdist;

namespace {

// The SHA-512 of "abc" (FIPS 180-2 appendix C.1), base64.
constexpr const char* sha512_abc =
    "3a81oZNherrMQXNJriBBMRLm+k6JqX6iCp7u5ktV05ohkpkqJ0/BqDa6PCOj/uu9RU1EI2Q86A4qmslPpUyknw==";

nlohmann::json sample() {
  return nlohmann::json::parse(R"({
    "id": "31e9d66a-cd83-4174-9429-b932f1abe1be",
    "conformsTo": ["http://wis.wmo.int/spec/wnm/1/conf/core"],
    "type": "Feature",
    "geometry": null,
    "properties": {
      "data_id": "de-dwd/data/core/weather/surface-based-observations/synop/a.bufr4",
      "pubtime": "2024-03-20T04:50:18.314854383Z",
      "datetime": "2024-03-20T04:50:00Z",
      "integrity": {"method": "sha512", "value": ""}
    },
    "links": [
      {"href": "https://data.example.org/obs/a.bufr4", "rel": "canonical",
       "type": "application/bufr", "length": 3}
    ]
  })");
}

wnm_result parse(const nlohmann::json& j, bool require_integrity = true) {
  return parse_wnm(j.dump(), require_integrity);
}

nlohmann::json with_integrity(nlohmann::json j) {
  j["properties"]["integrity"]["value"] = sha512_abc;
  return j;
}

wnm_refusal refusal(const nlohmann::json& j, bool require_integrity = true) {
  const auto r = parse(j, require_integrity);
  REQUIRE_FALSE(r.notification);
  CHECK_FALSE(r.detail.empty());
  return r.refusal;
}

}  // namespace

TEST_CASE("parse_wnm takes a WNM 1.0 core notification with its fields") {
  const auto r = parse(with_integrity(sample()));
  REQUIRE(r.notification);
  const auto& n = *r.notification;
  CHECK(n.id == "31e9d66a-cd83-4174-9429-b932f1abe1be");
  CHECK(n.data_id == "de-dwd/data/core/weather/surface-based-observations/synop/a.bufr4");
  CHECK(n.pubtime_ns == 1'710'910'218'314'854'383);
  CHECK(n.href == "https://data.example.org/obs/a.bufr4");
  CHECK_FALSE(n.update);
  CHECK(n.length == 3u);
  REQUIRE(n.integrity);
  CHECK(n.integrity->method == integrity_method::sha512);
  REQUIRE(n.integrity->digest.size() == 64);
  CHECK(n.integrity->digest[0] == 0xdd);
  CHECK(n.integrity->digest[63] == 0x9f);
}

TEST_CASE("parse_wnm refuses each broken field with its reason") {
  const auto good = with_integrity(sample());
  auto j = good;
  CHECK(parse_wnm(std::string(max_notification_bytes + 1, ' '), true).refusal ==
        wnm_refusal::too_large);
  CHECK(parse_wnm("{\"id\": ", true).refusal == wnm_refusal::bad_json);
  CHECK(parse_wnm(std::string(100000 / 2, '['), true).refusal == wnm_refusal::bad_json);
  CHECK(parse_wnm("[1]", true).refusal == wnm_refusal::not_wnm);

  j = good;
  j.erase("id");
  CHECK(refusal(j) == wnm_refusal::not_wnm);
  j = good;
  j["id"] = "two words";
  CHECK(refusal(j) == wnm_refusal::not_wnm);
  j = good;
  j["type"] = "FeatureCollection";
  CHECK(refusal(j) == wnm_refusal::not_wnm);
  j = good;
  j["conformsTo"] = {"http://example.org/other"};
  CHECK(refusal(j) == wnm_refusal::not_wnm);
  j = good;
  j["properties"]["pubtime"] = "2024-02-30T00:00:00Z";
  CHECK(refusal(j) == wnm_refusal::not_wnm);
  j = good;
  j["properties"].erase("data_id");
  CHECK(refusal(j) == wnm_refusal::no_data_id);
  j = good;
  j["links"][0]["rel"] = "item";
  CHECK(refusal(j) == wnm_refusal::no_link);
  j = good;
  j["links"][0]["rel"] = std::string(wnm_rel_deletion);
  CHECK(refusal(j) == wnm_refusal::deletion);
  j = good;
  j["links"][0]["href"] = "ftp://data.example.org/a";
  CHECK(refusal(j) == wnm_refusal::bad_link);
  j = good;
  j["links"][0]["href"] = "https://user:secret@data.example.org/a";
  CHECK(refusal(j) == wnm_refusal::bad_link);
  j = good;
  j["links"][0]["href"] = "https://data.example.org/a b";
  CHECK(refusal(j) == wnm_refusal::bad_link);
  j = good;
  j["links"][0]["length"] = -1;
  CHECK(refusal(j) == wnm_refusal::bad_length);
  j = good;
  j["links"][0]["length"] = 1.5;
  CHECK(refusal(j) == wnm_refusal::bad_length);
}

TEST_CASE("parse_wnm checks the integrity property's method and value") {
  auto j = with_integrity(sample());
  j["properties"].erase("integrity");
  CHECK(refusal(j) == wnm_refusal::no_integrity);
  const auto r = parse(j, false);  // taken unchecked only when the operator says so
  REQUIRE(r.notification);
  CHECK_FALSE(r.notification->integrity);

  j = with_integrity(sample());
  j["properties"]["integrity"]["method"] = "md5";
  CHECK(refusal(j) == wnm_refusal::bad_integrity);
  j = with_integrity(sample());
  j["properties"]["integrity"]["method"] = "sha256";  // a SHA-512 value under sha256
  CHECK(refusal(j) == wnm_refusal::bad_integrity);
  j = with_integrity(sample());
  j["properties"]["integrity"]["value"] = "not base64!";
  CHECK(refusal(j) == wnm_refusal::bad_integrity);
  j = with_integrity(sample());
  j["properties"]["integrity"]["method"] = "SHA3-256";
  j["properties"]["integrity"]["value"] = "Ojp6enp6enp6enp6enp6enp6enp6enp6enp6enp6enp=";
  CHECK(refusal(j) == wnm_refusal::bad_integrity);  // unused bits set: not canonical
  j["properties"]["integrity"]["value"] = "Ojp6enp6enp6enp6enp6enp6enp6enp6enp6enp6eno=";
  const auto ok = parse(j);
  REQUIRE(ok.notification);
  CHECK(ok.notification->integrity->method == integrity_method::sha3_256);
}

TEST_CASE("parse_wnm prefers the canonical link and takes an update's link") {
  auto j = with_integrity(sample());
  j["links"] = nlohmann::json::array(
      {{{"rel", std::string(wnm_rel_update)}, {"href", "https://u.example.org/new"}},
       {{"rel", "canonical"}, {"href", "https://c.example.org/a"}}});
  auto r = parse(j);
  REQUIRE(r.notification);
  CHECK(r.notification->href == "https://c.example.org/a");
  CHECK_FALSE(r.notification->update);
  j["links"].erase(1);
  r = parse(j);
  REQUIRE(r.notification);
  CHECK(r.notification->href == "https://u.example.org/new");
  CHECK(r.notification->update);
}

TEST_CASE("json_depth counts nesting outside strings only") {
  CHECK(json_depth(R"({"a": [1, {"b": "[[[["}]})", 32) == 3);
  CHECK(json_depth(R"("\"[[[")", 32) == 0);
  CHECK(json_depth(std::string(1000, '['), 32) == 33);  // stops once above the limit
}

TEST_CASE("parse_rfc3339 takes RFC 3339 date-times only") {
  CHECK(parse_rfc3339("1970-01-01T00:00:00Z") == 0);
  CHECK(parse_rfc3339("1970-01-01T01:00:00+01:00") == 0);
  CHECK(parse_rfc3339("2024-02-29T00:00:00.5Z") == 1'709'164'800'500'000'000);
  CHECK(parse_rfc3339("2024-03-20T04:50:18.3148543839999Z") == 1'710'910'218'314'854'383);
  CHECK_FALSE(parse_rfc3339("2023-02-29T00:00:00Z"));
  CHECK_FALSE(parse_rfc3339("2024-03-20T04:50:18"));
  CHECK_FALSE(parse_rfc3339("2024-03-20T24:00:00Z"));
  CHECK_FALSE(parse_rfc3339("2024-03-20T04:50:18.Z"));
  CHECK_FALSE(parse_rfc3339("1969-12-31T23:59:59Z"));
  CHECK_FALSE(parse_rfc3339("2024-03-20T04:50:18Zjunk"));
}

TEST_CASE("base64_decode is RFC 4648 section 4 with padding") {
  CHECK(base64_decode("") == std::vector<std::uint8_t>{});
  CHECK(base64_decode("Zm9vYg==") == std::vector<std::uint8_t>{'f', 'o', 'o', 'b'});
  CHECK(base64_decode("Zm9vYmE=") == std::vector<std::uint8_t>{'f', 'o', 'o', 'b', 'a'});
  CHECK_FALSE(base64_decode("Zm9vYg"));      // no padding
  CHECK_FALSE(base64_decode("Zm9v\nYg=="));  // whitespace
  CHECK_FALSE(base64_decode("Zm=vYg=="));    // padding inside
  CHECK_FALSE(base64_decode("Zm9vYh=="));    // unused bits set
}

TEST_CASE("url_path and wis2_product_name give safe relative names only") {
  CHECK(url_path("https://h/a/b%20c.bufr?x=1#f") == "a/b c.bufr");
  CHECK(url_path("https://h") == "");
  CHECK_FALSE(url_path("https://h/a%2"));
  CHECK_FALSE(url_path("https://h/a%00b"));

  wis2_notification n;
  n.data_id = "de-dwd/data/core/a.bufr4";
  n.href = "https://h/x/y%20z.bufr4";
  std::string why;
  CHECK(wis2_product_name(n, wis2_name_source::data_id, "wis2/", why) ==
        "wis2/de-dwd/data/core/a.bufr4");
  CHECK(wis2_product_name(n, wis2_name_source::url, "", why) == "x/y z.bufr4");
  for (const auto* bad : {"../etc/passwd", "/abs/path", "a/../../b", "a/.hidden", ".x", "a//b"}) {
    n.data_id = bad;
    why.clear();
    CHECK_FALSE(wis2_product_name(n, wis2_name_source::data_id, "", why));
    CHECK_FALSE(why.empty());
  }
  n.href = "https://h/a/%2e%2e/%2e%2e/etc/passwd";
  CHECK_FALSE(wis2_product_name(n, wis2_name_source::url, "", why));
}

TEST_CASE("integrity methods: names, OpenSSL digests and sizes") {
  CHECK(parse_integrity_method("SHA3-512") == integrity_method::sha3_512);
  CHECK(parse_integrity_method("sha256") == integrity_method::sha256);
  CHECK_FALSE(parse_integrity_method("sha1"));
  CHECK(to_string(integrity_method::sha3_384) == "sha3-384");
  CHECK(std::string(openssl_digest_name(integrity_method::sha384)) == "SHA384");
  CHECK(digest_size(integrity_method::sha3_256) == 32);
  CHECK(to_string(wnm_refusal::bad_integrity) == "bad_integrity");
}
