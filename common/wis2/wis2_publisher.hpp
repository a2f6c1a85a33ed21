#pragma once
/// @file
/// WIS2 notifications: when mcdistd stores a product (a `wis2` action), or mcdist-feed ends the
/// session that sent it (its `[wis2]` hook), the product is announced on an MQTT broker with a
/// WIS2 Notification Message (WNM), as WMO's WIS 2.0 expects of a centre publishing data.
/// Shared by both daemons (library mcdist_wis2).
///
/// Specification followed: WMO WIS2 Notification Message, version 1.0 (WMO-No. 1313, Manual
/// on WIS Volume II, Appendix "WIS2 Notification Message"; schema
/// http://schemas.wmo.int/wnm/1.0.0, conformance class http://wis.wmo.int/spec/wnm/1/conf/core).
///
/// Message shape (GeoJSON Feature, one per stored file):
///
///     { "id": UUID v4, "conformsTo": ["http://wis.wmo.int/spec/wnm/1/conf/core"],
///       "type": "Feature", "geometry": null,
///       "properties": { "data_id", "pubtime" (RFC 3339 UTC), "datetime" (the file's mtime
///                       from the manifest, RFC 3339 UTC), "integrity": {"method": "sha256",
///                       "value": base64 of the SHA-256 the receiver verified} },
///       "links": [{ "href": base_url + path (percent-encoded), "rel": "canonical", "type",
///                   "length" }] }
///
/// The WNM requires a temporal property (`datetime`, or `start_datetime` and `end_datetime`);
/// mcdist does not read the products, so the data's time it knows is the file's mtime that the
/// sender put in the manifest.
///
/// wis2_publisher talks to the broker with libmosquitto on libmosquitto's own thread
/// (mosquitto_loop_start): publish() only formats the message and queues it, so a slow or
/// absent broker never blocks the daemon's io thread. The queue is bounded; while the broker is
/// down messages wait there, beyond the bound they are dropped and counted, and libmosquitto
/// reconnects on its own.

#include "common/log_limit.hpp"
#include "common/sha256.hpp"
#include "common/wis2/mqtt_broker.hpp"

#include <spdlog/logger.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>

struct mosquitto;  // libmosquitto's handle (mosquitto.h stays in the .cpp)

namespace mcdist {

/// One `[[channel.action]] type = "wis2"` of the configuration (README "WIS2 notifications").
struct wis2_action {
  /// broker = "mqtt://HOST[:PORT]" or "mqtts://HOST[:PORT]", with its TLS settings and
  /// credentials (mqtt_broker.hpp)
  mqtt_broker broker;
  std::string topic;     ///< origin/a/wis2/... or cache/a/wis2/..., no wildcards
  std::string base_url;  ///< http(s)://..., always ends in '/'
  /// Prepended to the manifest path to make properties.data_id. Default: the topic after
  /// "origin/a/wis2/" or "cache/a/wis2/", with a trailing '/' (the WIS2 Guide's
  /// "centre-id/data/..." form).
  std::string data_id_prefix;
  int qos = 1;  ///< MQTT QoS 0, 1 or 2 (WIS2 Guide: 1)
  /// Most notifications held at once (queued plus unacknowledged); 0 until check_wis2_action
  /// sets the default, wis2_queue_limit. Tests set a few to see drops.
  std::size_t max_queued = 0;
  friend bool operator==(const wis2_action&, const wis2_action&) = default;
};

/// Checks an action's fields (the broker's with check_mqtt_broker) and fills data_id_prefix's
/// default and base_url's trailing '/'.
/// @throws std::invalid_argument with an operator-facing message (the caller adds which
/// channel and action)
void check_wis2_action(wis2_action& a);

/// Inputs of one notification (all known when the engine reports a stored file).
struct wis2_notice {
  std::string id;  ///< UUID v4 text (format_uuid_v4)
  std::string data_id;
  std::chrono::system_clock::time_point pubtime;
  std::int64_t datetime_ns = 0;  ///< the data's time: the file's mtime, ns since the epoch
  sha256_digest digest{};        ///< SHA-256 of the stored file
  std::string href;              ///< canonical link
  std::string media_type;
  std::uint64_t length = 0;  ///< bytes
};

/// The WNM 1.0 JSON text of `n` (compact, UTF-8; invalid UTF-8 in paths replaced). Pure.
std::string build_wis2_message(const wis2_notice& n);

/// RFC 3339 UTC with microseconds ("2026-11-23T11:02:03.123456Z") of ns since the epoch.
std::string rfc3339_utc(std::int64_t ns_since_epoch);

/// RFC 4648 section 4 base64 with padding.
std::string base64(std::span<const std::uint8_t> bytes);

/// RFC 9562 section 5.4 UUID version 4 text from 16 random bytes (version and variant bits set).
std::string format_uuid_v4(std::array<std::uint8_t, 16> random);

/// Percent-encodes a '/'-separated product path as the path of a URI (RFC 3986 section 3.3),
/// e.g. "obs/a b#1.bufr" -> "obs/a%20b%231.bufr", "Ünï/x" -> "%C3%9Cn%C3%AF/x". In each segment
/// the bytes a segment may hold as they are stay (pchar: unreserved, section 2.3, sub-delims,
/// section 2.2, ':' and '@'); every other byte, '%' included (a name's "%20" is text, not an
/// escape), becomes "%XX" with upper-case hex digits (section 2.1); non-ASCII text is encoded as
/// its UTF-8 bytes (section 2.5). The '/' between segments stays. Pure.
std::string percent_encode_path(std::string_view path);

/// The canonical link of a product (properties' links[0].href): `base_url` as the operator
/// gave it (check_wis2_action added its trailing '/') followed by percent_encode_path(path).
/// `path` is the manifest path or the feed's product name (relative, '/'-separated). Pure.
std::string canonical_href(std::string_view base_url, std::string_view path);

/// A media type for a product path, from its extension (WMO formats first: BUFR, GRIB, then
/// common ones); application/octet-stream when unknown.
std::string_view guess_media_type(std::string_view path);

/// Most notifications one publisher holds (queued for the broker plus handed to libmosquitto
/// and not yet acknowledged). At ~1 KB each this bounds its memory to about 10 MB, and covers
/// a broker outage of a few minutes at hundreds of products a minute.
inline constexpr std::size_t wis2_queue_limit = 10000;

/// Counters of one publisher (status JSON "wis2").
struct wis2_stats {
  std::uint64_t published = 0;  ///< acknowledged by the broker (QoS 0: written to the socket)
  std::uint64_t failed = 0;     ///< refused by libmosquitto (e.g. payload too large)
  std::uint64_t dropped = 0;    ///< queue full (broker down or slow)
  std::uint64_t queued = 0;     ///< waiting now (queue + not yet acknowledged)
  bool connected = false;
};

/// Publishes WNMs for one wis2 action. Thread-safe: publish() from the io thread, the
/// callbacks from libmosquitto's thread.
class wis2_publisher {
 public:
  /// Starts libmosquitto's thread and an asynchronous connect; never waits for the broker.
  /// @throws std::runtime_error if libmosquitto cannot create its client or thread, or refuses
  /// the broker's TLS settings or credentials (configure_mqtt_client; a password_file that
  /// cannot be read)
  wis2_publisher(wis2_action action, std::string channel, std::shared_ptr<spdlog::logger> log);
  ~wis2_publisher();
  wis2_publisher(const wis2_publisher&) = delete;
  wis2_publisher& operator=(const wis2_publisher&) = delete;

  /// Announces a stored file: `path` is its manifest path (relative, '/'-separated).
  /// Never blocks on the network.
  void publish(std::string_view path, std::uint64_t size, std::int64_t mtime_ns,
               const sha256_digest& digest);

  wis2_stats stats() const;
  const wis2_action& action() const { return m_action; }
  const std::string& channel() const { return m_channel; }

 private:
  static void on_connect(struct mosquitto*, void* self, int rc);
  static void on_disconnect(struct mosquitto*, void* self, int rc);
  static void on_publish(struct mosquitto*, void* self, int mid);
  static void on_log(struct mosquitto*, void* self, int level, const char* text);
  /// Hands queued messages to libmosquitto while connected.
  void flush();

  wis2_action m_action;
  std::string m_channel;
  std::shared_ptr<spdlog::logger> m_log;
  struct mosquitto* m_mosq = nullptr;
  std::mt19937_64 m_rng;       ///< UUIDs; io thread only
  mutable std::mutex m_mutex;  ///< guards everything below
  std::deque<std::string> m_queue;
  std::uint64_t m_unacked = 0;
  wis2_stats m_stats;
  bool m_connected = false;
  bool m_warned_down = false;
  log_limiter m_lib_errors{5};  ///< libmosquitto's own error lines (TLS failures, ...)
};

}  // namespace mcdist
