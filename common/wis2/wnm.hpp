#pragma once
/// @file
/// Reading WIS2 Notification Messages received from a broker (the hub's `[[wis2_input]]`):
/// everything in a notification comes from the network and is checked here, in order, before
/// anything is allocated for it beyond the payload itself: size, JSON nesting depth, JSON
/// syntax, then the WNM's fields and their values. Pure: no I/O, no clock.
///
/// Specifications followed:
/// - WMO WIS2 Notification Message (WNM) 1.0, Manual on WIS (WMO-No. 1060) Volume II,
///   Appendix E: /req/core/message_size (at most 8192 bytes), /req/core/id (an id unique to
///   the message, the anti-loop key), /req/core/type ("Feature"), /req/core/conformance
///   (conformsTo lists the core class), /req/core/pubtime (RFC 3339), /req/core/data_id,
///   /req/core/links (rel "canonical" for new data, ".../wnm/-/update" for an update,
///   ".../wnm/-/deletion" for a deletion; HTTP, HTTPS, FTP or SFTP links), properties.integrity
///   (method sha256, sha384, sha512, sha3-256, sha3-384 or sha3-512, value in base64).
/// - Guide to WIS (WMO-No. 1061) Volume II, 2.7.3.1 (Global Brokers drop messages whose id was
///   seen) and 2.7.4.2 (a Global Cache downloads a data_id only when new, or updated: a later
///   pubtime; it checks the integrity value).
/// - RFC 3339 section 5.6 (date-time), RFC 4648 section 4 (base64), RFC 3986 (URIs).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist {

/// Largest notification payload taken, bytes. WNM 1.0 requires at most 8192 bytes
/// (/req/core/message_size); 8 times that leaves room for publishers that add properties,
/// and still bounds the memory one message can take in the queue between the MQTT thread and
/// the feed's.
inline constexpr std::size_t max_notification_bytes = 64 * 1024;
/// Deepest JSON nesting taken (a WNM is 4 levels deep): bounds the parser's work on hostile
/// input such as 60 000 nested arrays.
inline constexpr std::size_t max_notification_depth = 32;
/// Longest id taken, bytes (a UUID is 36).
inline constexpr std::size_t max_notification_id_bytes = 128;
/// Longest link taken, bytes.
inline constexpr std::size_t max_href_bytes = 4096;

/// The link relation of an update notification (WNM 1.0 /req/core/links F).
inline constexpr std::string_view wnm_rel_update = "http://def.wmo.int/def/rel/wnm/-/update";
/// The link relation of a deletion notification (WNM 1.0 /req/core/links G).
inline constexpr std::string_view wnm_rel_deletion = "http://def.wmo.int/def/rel/wnm/-/deletion";

/// Why a notification is refused before any download (its word labels the counter
/// mcdist_feed_wis2_input_refused_total{reason}).
enum class wnm_refusal : std::uint8_t {
  too_large,      ///< payload above max_notification_bytes
  bad_json,       ///< not JSON, or nested deeper than max_notification_depth
  not_wnm,        ///< not a WNM 1.0 Feature: id, type, conformsTo, properties, pubtime
  no_data_id,     ///< properties.data_id missing, empty, too long or not UTF-8
  no_link,        ///< no link with rel canonical (or update) and an href
  bad_link,       ///< the link is not an http:// or https:// URL we take
  deletion,       ///< a deletion notification: nothing to download (not supported)
  no_integrity,   ///< properties.integrity missing (require_integrity)
  bad_integrity,  ///< an unknown method, or a value that is not the method's digest in base64
  bad_length,     ///< links[].length is not a whole number of bytes
};

/// The word of a refusal ("too_large", ...).
std::string_view to_string(wnm_refusal r) noexcept;

/// The hash a notification's integrity value was made with.
enum class integrity_method : std::uint8_t { sha256, sha384, sha512, sha3_256, sha3_384, sha3_512 };

/// Parses a WNM integrity method, case-insensitively ("sha256", "SHA3-512").
std::optional<integrity_method> parse_integrity_method(std::string_view text) noexcept;
/// The method's WNM word ("sha3-256").
std::string_view to_string(integrity_method m) noexcept;
/// The method's name for OpenSSL's EVP_get_digestbyname ("SHA3-256").
const char* openssl_digest_name(integrity_method m) noexcept;
/// The method's digest size, bytes.
std::size_t digest_size(integrity_method m) noexcept;

/// properties.integrity, decoded.
struct wnm_integrity {
  integrity_method method = integrity_method::sha256;
  std::vector<std::uint8_t> digest;  ///< digest_size(method) bytes
};

/// A notification that passed every check.
struct wis2_notification {
  std::string id;               ///< the message's id (anti-loop key)
  std::string data_id;          ///< properties.data_id, valid UTF-8, 1..1024 bytes
  std::int64_t pubtime_ns = 0;  ///< properties.pubtime, ns since the Unix epoch (UTC)
  std::string href;             ///< the link to download: http:// or https://
  bool update = false;          ///< the link's rel is update: newer data under a known data_id
  std::optional<std::uint64_t> length;     ///< the link's length, bytes, when given
  std::optional<wnm_integrity> integrity;  ///< properties.integrity, when given
};

/// A parse's outcome: the notification, or why it was refused with a detail for the log.
struct wnm_result {
  std::optional<wis2_notification> notification;
  wnm_refusal refusal = wnm_refusal::not_wnm;
  std::string detail;  ///< printable, at most a few hundred bytes
};

/// Reads one notification payload (see the file comment for the checks, in their order).
/// Additional properties are ignored (WNM 1.0 permits them); properties.content is not used
/// (the product is always downloaded from its link).
/// @param require_integrity refuse a notification without properties.integrity
wnm_result parse_wnm(std::string_view payload, bool require_integrity);

/// The deepest nesting of JSON arrays and objects in `text` (brackets inside strings not
/// counted), stopping once above `limit`.
std::size_t json_depth(std::string_view text, std::size_t limit) noexcept;

/// RFC 3339 section 5.6 date-time ("2024-03-20T04:50:18.314854383Z", "...+02:00"), as ns
/// since the Unix epoch. Fractions beyond ns are cut. nullopt when not of that form or out
/// of range (years 1970 to 9999).
std::optional<std::int64_t> parse_rfc3339(std::string_view text) noexcept;

/// RFC 4648 section 4 base64, padding required, no whitespace. nullopt when malformed.
std::optional<std::vector<std::uint8_t>> base64_decode(std::string_view text);

/// True when `url` is an http:// or https:// URL with a host that we download from: at most
/// max_href_bytes, printable ASCII (RFC 3986 section 2: non-ASCII must be percent-encoded),
/// no user information (credentials in a link would land in logs), an authority and a path.
bool acceptable_download_url(std::string_view url) noexcept;

/// The path of an http(s) URL (without query and fragment), percent-decoded (RFC 3986
/// section 2.1), without its leading '/': "https://h/a/b%20c.bufr?x" -> "a/b c.bufr". nullopt
/// when a %XX is malformed or decodes to NUL.
std::optional<std::string> url_path(std::string_view url);

/// What a downloaded product is named below its channel's spool, after a prefix.
enum class wis2_name_source : std::uint8_t {
  data_id,  ///< properties.data_id as it is ("centre-id/data/core/.../file")
  url,      ///< the download link's path, percent-decoded, without its leading '/'
};

/// The product name of a notification: `prefix` + its data_id or its link's path, which must
/// be a safe relative path (check_relative_path: UTF-8, no "..", no control characters, not
/// too long or deep) with no component starting with '.' (the spool ignores those).
/// @return the name, or nullopt with `why` set
std::optional<std::string> wis2_product_name(const wis2_notification& n, wis2_name_source source,
                                             std::string_view prefix, std::string& why);

}  // namespace mcdist
