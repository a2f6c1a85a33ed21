#include "common/wis2/wnm.hpp"

#include "common/path_check.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <limits>

namespace mcdist {

namespace {

/// WNM 1.0's conformance class (/req/core/conformance).
constexpr std::string_view wnm_core_class = "http://wis.wmo.int/spec/wnm/1/conf/core";

wnm_result refuse(wnm_refusal r, std::string detail) {
  wnm_result out;
  out.refusal = r;
  out.detail = std::move(detail);
  return out;
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool equal_ci(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant, "chrono-Compatible
/// Low-Level Date Algorithms", days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

bool leap(std::int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

/// `n` decimal digits at `s[at]`.
std::optional<unsigned> digits(std::string_view s, std::size_t at, std::size_t n) {
  if (at + n > s.size()) return std::nullopt;
  unsigned v = 0;
  for (std::size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(s[i] - '0');
  }
  return v;
}

/// A printable form of untrusted text for a log line (common/path_check.hpp printable).
std::string shown(std::string_view s) { return printable(s, 120); }

const nlohmann::json* member(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

const std::string* string_member(const nlohmann::json& j, const char* key) {
  const auto* v = member(j, key);
  return v && v->is_string() ? v->get_ptr<const std::string*>() : nullptr;
}

}  // namespace

std::string_view to_string(wnm_refusal r) noexcept {
  static constexpr std::array<std::string_view, 10> words{
      "too_large", "bad_json", "not_wnm",      "no_data_id",    "no_link",
      "bad_link",  "deletion", "no_integrity", "bad_integrity", "bad_length"};
  return words[static_cast<std::size_t>(r)];
}

std::optional<integrity_method> parse_integrity_method(std::string_view text) noexcept {
  static constexpr std::array<std::string_view, 6> words{"sha256",   "sha384",   "sha512",
                                                         "sha3-256", "sha3-384", "sha3-512"};
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (equal_ci(text, words[i])) return static_cast<integrity_method>(i);
  }
  return std::nullopt;
}

std::string_view to_string(integrity_method m) noexcept {
  static constexpr std::array<std::string_view, 6> words{"sha256",   "sha384",   "sha512",
                                                         "sha3-256", "sha3-384", "sha3-512"};
  return words[static_cast<std::size_t>(m)];
}

const char* openssl_digest_name(integrity_method m) noexcept {
  static constexpr std::array<const char*, 6> names{"SHA256",   "SHA384",   "SHA512",
                                                    "SHA3-256", "SHA3-384", "SHA3-512"};
  return names[static_cast<std::size_t>(m)];
}

std::size_t digest_size(integrity_method m) noexcept {
  static constexpr std::array<std::size_t, 6> sizes{32, 48, 64, 32, 48, 64};
  return sizes[static_cast<std::size_t>(m)];
}

std::size_t json_depth(std::string_view text, std::size_t limit) noexcept {
  std::size_t depth = 0;
  std::size_t deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::optional<std::int64_t> parse_rfc3339(std::string_view s) noexcept {
  // full-date "T" partial-time time-offset: YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)
  const auto y = digits(s, 0, 4);
  const auto mo = digits(s, 5, 2);
  const auto d = digits(s, 8, 2);
  const auto h = digits(s, 11, 2);
  const auto mi = digits(s, 14, 2);
  const auto se = digits(s, 17, 2);
  if (!y || !mo || !d || !h || !mi || !se || s[4] != '-' || s[7] != '-' ||
      (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  static constexpr std::array<unsigned, 12> month_days{31, 28, 31, 30, 31, 30,
                                                       31, 31, 30, 31, 30, 31};
  if (*y < 1970 || *mo < 1 || *mo > 12 || *d < 1 || *h > 23 || *mi > 59 || *se > 60) {
    return std::nullopt;
  }
  const unsigned last = month_days[*mo - 1] + ((*mo == 2 && leap(*y)) ? 1u : 0u);
  if (*d > last) return std::nullopt;
  std::size_t at = 19;
  std::int64_t frac_ns = 0;
  if (at < s.size() && s[at] == '.') {
    ++at;
    std::size_t n = 0;
    std::int64_t scale = 100'000'000;
    while (at < s.size() && s[at] >= '0' && s[at] <= '9') {
      if (n++ < 9) {
        frac_ns += (s[at] - '0') * scale;
        scale /= 10;
      }
      ++at;
    }
    if (n == 0) return std::nullopt;
  }
  if (at >= s.size()) return std::nullopt;
  std::int64_t offset_s = 0;
  if (s[at] == 'Z' || s[at] == 'z') {
    ++at;
  } else if (s[at] == '+' || s[at] == '-') {
    const auto oh = digits(s, at + 1, 2);
    const auto om = digits(s, at + 4, 2);
    if (!oh || !om || s[at + 3] != ':' || *oh > 23 || *om > 59) return std::nullopt;
    offset_s = (s[at] == '+' ? 1 : -1) * static_cast<std::int64_t>(*oh * 3600 + *om * 60);
    at += 6;
  } else {
    return std::nullopt;
  }
  if (at != s.size()) return std::nullopt;
  const std::int64_t secs =
      days_from_civil(*y, *mo, *d) * 86400 + *h * 3600 + *mi * 60 + *se - offset_s;
  if (secs < 0) return std::nullopt;
  return secs * 1'000'000'000 + frac_ns;
}

std::optional<std::vector<std::uint8_t>> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<std::uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + static_cast<std::size_t>(k)];
      if (c == '=' && last && k >= 2) {
        ++pad;
        v[k] = 0;
        continue;
      }
      if (pad > 0) return std::nullopt;  // data after padding
      v[k] = value(c);
      if (v[k] < 0) return std::nullopt;
    }
    const std::uint32_t n =
        (static_cast<std::uint32_t>(v[0]) << 18) | (static_cast<std::uint32_t>(v[1]) << 12) |
        (static_cast<std::uint32_t>(v[2]) << 6) | static_cast<std::uint32_t>(v[3]);
    out.push_back(static_cast<std::uint8_t>(n >> 16));
    if (pad < 2) out.push_back(static_cast<std::uint8_t>(n >> 8));
    if (pad < 1) out.push_back(static_cast<std::uint8_t>(n));
    // Canonical encoding only: the bits the padding leaves unused are zero (RFC 4648 3.5).
    if ((pad == 1 && (n & 0xff) != 0) || (pad == 2 && (n & 0xffff) != 0)) return std::nullopt;
  }
  return out;
}

bool acceptable_download_url(std::string_view url) noexcept {
  if (url.size() > max_href_bytes) return false;
  std::string_view rest;
  if (url.size() > 8 && equal_ci(url.substr(0, 8), "https://")) {
    rest = url.substr(8);
  } else if (url.size() > 7 && equal_ci(url.substr(0, 7), "http://")) {
    rest = url.substr(7);
  } else {
    return false;
  }
  for (const char c : url) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return false;  // spaces, controls, raw non-ASCII
  }
  const auto end = rest.find_first_of("/?#");
  const auto authority = rest.substr(0, end);
  if (authority.empty() || authority.find('@') != std::string_view::npos) return false;
  if (authority.front() == ':') return false;  // a port without a host
  return true;
}

std::optional<std::string> url_path(std::string_view url) {
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::nullopt;
  auto rest = url.substr(scheme + 3);
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos) return std::string();
  auto path = rest.substr(slash + 1);
  path = path.substr(0, path.find_first_of("?#"));
  std::string out;
  out.reserve(path.size());
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      out += path[i];
      continue;
    }
    const auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (i + 2 >= path.size()) return std::nullopt;
    const int hi = hex(path[i + 1]);
    const int lo = hex(path[i + 2]);
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

wnm_result parse_wnm(std::string_view payload, bool require_integrity) {
  if (payload.size() > max_notification_bytes) {
    return refuse(wnm_refusal::too_large, std::to_string(payload.size()) + " bytes");
  }
  if (json_depth(payload, max_notification_depth) > max_notification_depth) {
    return refuse(wnm_refusal::bad_json,
                  "nested deeper than " + std::to_string(max_notification_depth) + " levels");
  }
  const auto j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded()) return refuse(wnm_refusal::bad_json, "not JSON");
  if (!j.is_object()) return refuse(wnm_refusal::not_wnm, "not a JSON object");

  wis2_notification n;
  const auto* id = string_member(j, "id");
  if (!id || id->empty() || id->size() > max_notification_id_bytes) {
    return refuse(wnm_refusal::not_wnm,
                  "no id (or longer than " + std::to_string(max_notification_id_bytes) + " bytes)");
  }
  for (const char c : *id) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x21 || u > 0x7e) return refuse(wnm_refusal::not_wnm, "id is not printable ASCII");
  }
  n.id = *id;
  const auto* type = string_member(j, "type");
  if (!type || *type != "Feature") return refuse(wnm_refusal::not_wnm, "type is not Feature");
  const auto* conforms = member(j, "conformsTo");
  bool core = false;
  if (conforms && conforms->is_array()) {
    for (const auto& c : *conforms) core = core || (c.is_string() && c == wnm_core_class);
  }
  if (!core) {
    return refuse(wnm_refusal::not_wnm,
                  "conformsTo does not list " + std::string(wnm_core_class) + " (WNM 1.0)");
  }
  const auto* props = member(j, "properties");
  if (!props || !props->is_object()) return refuse(wnm_refusal::not_wnm, "no properties");
  const auto* pubtime = string_member(*props, "pubtime");
  const auto pub_ns = pubtime ? parse_rfc3339(*pubtime) : std::nullopt;
  if (!pub_ns) {
    return refuse(wnm_refusal::not_wnm,
                  "properties.pubtime is not an RFC 3339 date-time" +
                      (pubtime ? ": \"" + shown(*pubtime) + "\"" : std::string()));
  }
  n.pubtime_ns = *pub_ns;
  const auto* data_id = string_member(*props, "data_id");
  if (!data_id || data_id->empty() || data_id->size() > max_path_bytes || !valid_utf8(*data_id)) {
    return refuse(wnm_refusal::no_data_id, "properties.data_id missing, empty, over " +
                                               std::to_string(max_path_bytes) +
                                               " bytes or not UTF-8");
  }
  n.data_id = *data_id;

  const auto* links = member(j, "links");
  if (!links || !links->is_array()) return refuse(wnm_refusal::no_link, "no links array");
  const nlohmann::json* chosen = nullptr;
  bool deletion = false;
  for (const auto& l : *links) {
    const auto* rel = string_member(l, "rel");
    if (!rel || !string_member(l, "href")) continue;
    if (*rel == wnm_rel_deletion) deletion = true;
    // A new product's canonical link first; an update's link when that is all there is.
    if (*rel == "canonical" && (!chosen || n.update)) {
      chosen = &l;
      n.update = false;
    } else if (*rel == wnm_rel_update && !chosen) {
      chosen = &l;
      n.update = true;
    }
  }
  if (!chosen) {
    if (deletion) return refuse(wnm_refusal::deletion, "a deletion notification");
    return refuse(wnm_refusal::no_link, "no link with rel canonical or update and an href");
  }
  n.href = *string_member(*chosen, "href");
  if (!acceptable_download_url(n.href)) {
    return refuse(wnm_refusal::bad_link,
                  "link \"" + shown(n.href) +
                      "\" is not an http:// or https:// URL (printable ASCII, a host, no user "
                      "information)");
  }
  if (const auto* len = member(*chosen, "length")) {
    if (!len->is_number_unsigned() &&
        !(len->is_number_integer() && len->get<std::int64_t>() >= 0)) {
      return refuse(wnm_refusal::bad_length, "links[].length is not a whole number of bytes");
    }
    n.length = len->get<std::uint64_t>();
  }

  const auto* integrity = member(*props, "integrity");
  if (!integrity || integrity->is_null()) {
    if (require_integrity) {
      return refuse(wnm_refusal::no_integrity, "no properties.integrity (require_integrity)");
    }
  } else {
    const auto* method = string_member(*integrity, "method");
    const auto* value = string_member(*integrity, "value");
    const auto m = method ? parse_integrity_method(*method) : std::nullopt;
    if (!m) {
      return refuse(wnm_refusal::bad_integrity,
                    "integrity method " + (method ? "\"" + shown(*method) + "\"" : "missing") +
                        " is not sha256, sha384, sha512, sha3-256, sha3-384 or sha3-512");
    }
    auto digest = value ? base64_decode(*value) : std::nullopt;
    if (!digest || digest->size() != digest_size(*m)) {
      return refuse(wnm_refusal::bad_integrity,
                    "integrity value is not a " + std::string(to_string(*m)) + " digest in base64");
    }
    n.integrity = wnm_integrity{*m, std::move(*digest)};
  }
  wnm_result out;
  out.notification = std::move(n);
  return out;
}

std::optional<std::string> wis2_product_name(const wis2_notification& n, wis2_name_source source,
                                             std::string_view prefix, std::string& why) {
  std::string name(prefix);
  if (source == wis2_name_source::data_id) {
    name += n.data_id;
  } else {
    const auto p = url_path(n.href);
    if (!p || p->empty()) {
      why = "the link's path is empty or holds a malformed %XX";
      return std::nullopt;
    }
    name += *p;
  }
  if (const auto ec = check_relative_path(name)) {
    why = "\"" + printable(name, 200) + "\" is not a safe relative name: " + ec.message();
    return std::nullopt;
  }
  std::size_t start = 0;
  while (start < name.size()) {
    if (name[start] == '.') {
      why = "\"" + printable(name, 200) + "\" has a component starting with '.'";
      return std::nullopt;
    }
    const auto slash = name.find('/', start);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return name;
}

}  // namespace mcdist
