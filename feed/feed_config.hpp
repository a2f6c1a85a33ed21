#pragma once
/// @file
/// mcdist-feed settings, from its TOML file (README "A hub: mcdist-feed"). The top level names
/// the hub (interface, key, total rate, journal, retention, control socket); each
/// `[[channel]]` a multicast group fed from spool directories, with its priority, its part of
/// the rate, its batching and what happens to a product once sent. Every error names the key.

#include "common/endpoint.hpp"
#include "common/http/status_address.hpp"
#include "common/net/interface.hpp"
#include "common/wis2/mqtt_broker.hpp"
#include "common/wis2/wis2_publisher.hpp"
#include "common/wis2/wnm.hpp"
#include "sender/io/session_profile.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist::feed {

/// A configuration the daemon cannot run with; the message names the file, the key and, where
/// toml++ knows it, the line.
class config_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What becomes of a spool file once its session ended (every site stored or held it, or
/// failed: failures are journaled and served by resend/catch-up from the retained copy).
enum class after_send : std::uint8_t {
  remove,  ///< "delete": unlink the spool file
  keep,    ///< "keep": leave it (the journal's idempotent enqueue keeps it from being resent)
  move,    ///< "move:DIR": rename it below DIR, keeping its name relative to the spool
};

/// The hub's status port (next to mcdistd's 9611, so both run on one host).
inline constexpr std::uint16_t default_http_port = 9612;

/// One `[[channel]]`.
struct channel_config {
  std::string name;  ///< journal, logs, receivers' per-channel sequence numbers
  endpoint group;    ///< multicast group + port
  /// Spool directories, watched recursively; a product's name is its path below its spool.
  std::vector<std::filesystem::path> spools;
  /// Strict priority: a higher number is served first (arbiter.hpp).
  int priority = 0;
  /// Part of the feed's rate this channel takes when it is the most urgent one sending,
  /// 0 < share <= 1. Used when cap_bps is 0.
  double share = 1.0;
  /// Fixed rate ceiling, bit/s (0 = none: share applies).
  std::uint64_t cap_bps = 0;
  /// A batch closes this long after its first product arrived ...
  std::chrono::nanoseconds batch_window = std::chrono::milliseconds(200);
  /// ... or when it holds this many files ...
  std::size_t batch_max_files = 1000;
  /// ... or this many bytes.
  std::uint64_t batch_max_bytes = std::uint64_t{4} << 30;
  after_send after = after_send::keep;
  std::filesystem::path move_dir;  ///< after_send::move
  /// fnmatch(3) globs on the file name and on the name below the spool; dot-files are always
  /// ignored (the usual "write .name, rename to name" convention).
  std::vector<std::string> ignore;
  int ttl = 1;  ///< multicast TTL, hops
  /// Closed group: these sites must take part in every session (empty: open group).
  std::vector<std::string> receivers;
  /// How its sessions are sent, in mcdist-send's words (sender/io/session_profile.hpp):
  /// fec_k, fec_depth, fec_overhead, silent_passes, fallback, register_window. A channel's
  /// register_window defaults to 1 s (a hub's sites listen all the time), the rest to
  /// mcdist-send's defaults.
  sender::session_profile profile = [] {
    sender::session_profile p;
    p.register_window = std::chrono::seconds(1);
    return p;
  }();
  /// Sessions of this channel sent at once (batches, catch-ups and resends together): a long
  /// field no longer holds the channel's later products behind it; each session's rate is its
  /// share of the channel's (arbiter.hpp).
  std::uint32_t concurrent_sessions = 2;
  /// How often the channel announces its newest session number while idle (and between
  /// sessions), so a returning site reports its gaps without waiting for the next product
  /// (wire heartbeat; docs/design-notes.md "Heartbeats"). 0: never.
  std::chrono::nanoseconds heartbeat = std::chrono::seconds(10);
  /// Closed group: longest wait for every listed site.
  std::chrono::nanoseconds register_timeout = std::chrono::seconds(10);
  /// Encrypted sessions (mcdist-send --encrypt; needs the feed's key and site_keys): manifest,
  /// digests and data readable only by the pinned sites; the unicast fallback seals its frames.
  bool encrypt = false;
  friend bool operator==(const channel_config&, const channel_config&) = default;
};

/// `[cluster]` of the feed's configuration.
struct cluster_settings {
  std::string hub;  ///< this hub's name, unique in the cluster (default: the host name)
  /// How long a lease lasts from a round that renews it (6 s: a hub that dies is replaced
  /// within lease + renew, ~7 s, while a database pause of up to lease - margin - renew, 4 s,
  /// costs no failover).
  std::chrono::milliseconds lease{6000};
  /// How often the lease round runs (1 s: four rounds may fail before a healthy hub's fence).
  std::chrono::milliseconds renew{1000};
  /// How long before the lease's end the hub stops sending (1 s: far more than clock-rate
  /// drift over a lease and than one round of datagrams, at most max_datagrams_per_round, takes
  /// to leave).
  std::chrono::milliseconds margin{1000};
  /// Bound of one lease round (2 s: a round normally takes a few ms; longer means the database
  /// or the path to it stalled, and the next round starts afresh on a new connection).
  std::chrono::milliseconds round_timeout{2000};
};

/// One MQTT topic filter a `[[wis2_input]]` subscribes to and the channel its products feed.
struct wis2_subscription {
  std::string filter;   ///< MQTT topic filter, wildcards allowed (valid_topic_filter)
  std::string channel;  ///< the [[channel]] whose spool the products are written into
  friend bool operator==(const wis2_subscription&, const wis2_subscription&) = default;
};

/// One `[[wis2_input]]`: the hub subscribes to WIS2 topics on a broker, downloads every product
/// notified from its canonical link, checks it against the notification's integrity value and
/// writes it into the channel's spool (feed/wis2_input.hpp; README "WIS2 input").
struct wis2_input_config {
  std::string name;  ///< unique among the inputs; logs, metrics (label input), status
  mqtt_broker broker;
  /// In order: a notification's topic picks the first filter it matches.
  std::vector<wis2_subscription> topics;
  /// MQTT client id; set, the broker keeps the subscription and QoS 1 notifications while the
  /// hub is away (clean session off); empty: a random id and a clean session.
  std::string client_id;
  int qos = 1;  ///< subscription QoS (WIS2 Guide: 1)
  /// Trusted certificates for https:// downloads (PEM); empty: the system's.
  std::filesystem::path download_ca_file;
  /// Turns off the verification of download servers' certificates (a test server only).
  bool download_tls_insecure = false;
  /// Largest product downloaded, bytes: a larger declared length is refused before, a larger
  /// body during the download.
  std::uint64_t max_bytes = std::uint64_t{2} << 30;
  /// Longest one download attempt may take, connect to last byte.
  std::chrono::nanoseconds download_timeout = std::chrono::minutes(10);
  /// Downloads at once.
  std::uint32_t concurrency = 8;
  /// Further attempts after a failure that may pass (network, timeout, HTTP 5xx, 408, 429) ...
  std::uint32_t retries = 5;
  /// ... after this delay, doubling each time (at most wis2 max_retry_delay).
  std::chrono::nanoseconds retry_delay = std::chrono::seconds(10);
  /// Notifications accepted and not yet done (downloading, waiting for a slot or a retry);
  /// beyond it new ones are refused (reason overload) until the backlog shrinks.
  std::size_t max_pending = 10000;
  /// Refuse notifications without properties.integrity (the Guide lets a Global Cache take
  /// them unchecked; a hub that multicasts them on checks by default).
  bool require_integrity = true;
  /// What a product is named below the spool (the name sites store it under), after
  /// name_prefix.
  wis2_name_source product_name = wis2_name_source::data_id;
  /// Put before every product name (a relative directory ending in '/', e.g. "wis2/"); empty:
  /// none.
  std::string name_prefix;
  friend bool operator==(const wis2_input_config&, const wis2_input_config&) = default;
};

/// Everything mcdist-feed needs.
struct feed_config {
  /// `interface`: the name or local address of the interface sessions leave by
  /// (common/net/interface.hpp; resolved when the feed starts, for the channels' family).
  net::interface_spec interface;
  std::filesystem::path key_file;   ///< sender key (mcdist-keygen); empty: unsigned sessions
  std::filesystem::path site_keys;  ///< "SITE-ID KEY" lines (sender_app read_site_keys); optional
  std::uint64_t rate_bps = 100'000'000;  ///< total multicast rate of all channels, bit/s
  /// `rate = "auto"`: every session's rate follows its sites' reports (mcdist-send --rate auto,
  /// TFMCC), within its priority share of rate_max_bps; rate_bps is then rate_max_bps.
  bool rate_auto = false;
  std::uint64_t rate_max_bps = 0;  ///< `rate_max`, with rate auto: the ceiling of every channel
  /// The hub journal: an SQLite file (a single hub), or a PostgreSQL URI ("postgresql://...")
  /// that several hubs share (feed/journal.hpp is_postgresql).
  std::filesystem::path journal;
  /// `[cluster]`: this hub's name and its leases (with a PostgreSQL journal only).
  cluster_settings cluster;
  /// `relays`: the site ids that are relays (mcdistd relay_group). A session fails such a site
  /// only after `relay_timeout` of silence (60 s by default) instead of 10 s, so a relay's
  /// restart resumes the session for the sites behind it (docs/design-notes.md "Relays").
  std::vector<std::string> relays;
  std::chrono::nanoseconds relay_timeout = std::chrono::seconds(60);
  /// How long sent products stay in retained_dir for catch-up and resend (0 = none kept).
  std::chrono::nanoseconds retention = std::chrono::hours(24);
  std::filesystem::path retained_dir;
  std::filesystem::path control_socket;  ///< mcdistctl's Unix socket
  std::string control_group;             ///< group that may use it besides the daemon's user
  /// Status page, /status and /metrics (feed_http.hpp); std::nullopt = "off". Default
  /// 127.0.0.1:default_http_port: status stays on the host unless the operator opens it.
  std::optional<endpoint> http = http::loopback_status_address(default_http_port);
  bool http_explicit = false;  ///< `http` was set: an address in use is then an error
  /// `products_http`: the product server (feed/product_server.hpp) for one-way sites' catch-up
  /// over a terrestrial path and WIS2 links: /catch-up/, /products/, /data/. std::nullopt:
  /// off (the default: it serves products, so the operator chooses where).
  std::optional<endpoint> products_http;
  /// `products_tls_cert`, `products_tls_key`: PEM certificate chain and its private key; the
  /// product server then speaks HTTPS only. Both or neither.
  std::filesystem::path products_tls_cert;
  std::filesystem::path products_tls_key;
  std::vector<channel_config> channels;
  /// `[wis2]`: a WIS2 Notification Message per product once the batch session that sent it
  /// ended (common/wis2/wis2_publisher.hpp; README "WIS2 notifications"). nullopt: none.
  std::optional<wis2_action> wis2;
  /// `[wis2] channels`: the channels announced (empty: every channel).
  std::vector<std::string> wis2_channels;
  /// `[[wis2_input]]`: WIS2 subscriptions whose products feed channels.
  std::vector<wis2_input_config> wis2_inputs;
  /// `wis2_dedupe_window`: how long notification ids and data_ids are remembered (journal) to
  /// drop duplicates (Guide to WIS, Volume II, 2.7.3.1 and 2.7.4.2; a Global Cache keeps
  /// data 24 h).
  std::chrono::nanoseconds wis2_dedupe_window = std::chrono::hours(24);
};

/// Parses TOML text. @param source names the text in messages (the file name)
/// @throws config_error
feed_config parse_feed_config(std::string_view text, const std::string& source);

/// Reads and parses a file. @throws config_error (unreadable, syntax, settings)
feed_config load_feed_config(const std::filesystem::path& file);

/// Parses `after`: "delete", "keep" or "move:DIR". @throws config_error naming `key`
after_send parse_after(const std::string& text, const std::string& key,
                       std::filesystem::path& move_dir);

}  // namespace mcdist::feed
