#pragma once
/// @file
/// mcdistd settings: from a TOML file (--config), overridden by command-line options.

#include "common/crypto.hpp"
#include "common/endpoint.hpp"
#include "common/http/status_address.hpp"
#include "common/net/interface.hpp"
#include "common/sys/logging.hpp"
#include "common/wis2/wis2_publisher.hpp"
#include "receiver/io/action_config.hpp"
#include "receiver/storage/file_store.hpp"

#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist::receiver {

/// A channel this receiver subscribes to.
struct channel_config {
  std::string name;            ///< for logs
  endpoint group;              ///< multicast group + port
  std::filesystem::path dest;  ///< destination tree of sessions on this channel
  /// Ed25519 keys of the senders whose sessions this channel accepts (docs/security.md). Empty
  /// only with allow_unsigned (validate() refuses it otherwise).
  std::vector<crypto::key32> trusted_senders;
  /// `allow_unsigned = true` (per channel, or top level for every channel): the channel may
  /// trust no sender, and then any host that reaches its group can write into dest. Asked for
  /// by name: without it a channel with no trusted_senders is a configuration error.
  bool allow_unsigned = false;
  /// `[[channel.action]] type = "wis2"`: announce each stored file on an MQTT broker
  /// (wis2_publisher.hpp; README "WIS2 notifications").
  std::vector<wis2_action> wis2;
  /// `[channel.retention] max_age`: delivered products older than this are deleted from dest
  /// (daemon_config::retention_max_age when unset; nullopt: kept).
  std::optional<std::chrono::nanoseconds> retention_max_age;
  /// `silent = true`: a one-way link (docs/design-notes.md "Silent sessions"). The daemon
  /// never transmits for a session on this channel (no REGISTER, NAK, COMPLETE, key request or
  /// unicast fallback): it delivers the files it completes from the multicast passes alone and
  /// records the others. Sessions a sender marks silent (mcdist-send --silent-passes) are
  /// silent on every channel.
  bool silent = false;
  /// `catch_up_url = "https://hub:9613/"`: the hub's product server (mcdist-feed
  /// products_http). A silent channel fetches over it, on a worker thread, every session
  /// number its heartbeats say it missed: the signed index, then each product it lacks
  /// (receiver/io/catch_up_client.hpp; docs/design-notes.md "Catch-up over HTTP"). Empty:
  /// none. Only with silent = true: a channel that may transmit is caught up by the hub's
  /// multicast catch-up after its gap report.
  std::string catch_up_url;
  /// `catch_up_ca = FILE`: PEM certificates the hub's TLS certificate must chain to (a private
  /// CA); empty: the system's CA store.
  std::filesystem::path catch_up_ca;
  /// `source = "ADDR"`: join (source, group) only (parse_source): the kernel delivers no
  /// datagram to the group from another host. nullopt: any-source.
  std::optional<endpoint> source;
  /// `relay_group = "239.193.0.1:4711"`: this host relays the channel's one-way sessions into
  /// a group of its own (receiver/io/relay_forwarder.hpp; docs/design-notes.md "Relays"): every
  /// datagram of a session silent here, and every heartbeat, that this site authenticated is
  /// sent on byte for byte as it arrives, so the sites behind it check the hub's own
  /// signatures. nullopt: no relay.
  std::optional<endpoint> relay_group;
  /// `relay_interface`: where the relayed datagrams leave from (a name or an address); unset:
  /// the daemon's `interface`.
  net::interface_spec relay_interface;
  /// `relay_ttl`: IP_MULTICAST_TTL (IPv6 hops) of the relayed datagrams, 1 to 255.
  int relay_ttl = 1;
  /// `relays = ["rb"]`: sites behind this relay that relay in turn. The two-way sessions it
  /// runs for its sites fail them only after 60 s of silence (sender_config::relay_timeout)
  /// instead of 10 s, as the hub does for the relays it lists, so their restarts resume.
  std::vector<std::string> relays;
  /// `behind_relay = "ra"`: the relay this site receives the channel through (its group is
  /// that relay's relay_group). A session the hub sends to named sites (only_receivers: a
  /// catch-up or an operator's resend for the relay's subtree) that names this relay is this
  /// site's too: a signed announce cannot be changed by the relay to name the sites behind it.
  std::string behind_relay;
};

/// Port of mcdistd's status HTTP server (/metrics, /status, /) unless configured otherwise.
inline constexpr std::uint16_t default_http_port = 9611;

/// Parses the `http` setting: "ADDR:PORT", or "off". @throws config_error naming `what`
std::optional<endpoint> parse_http_setting(const std::string& text, const std::string& what);

/// Everything mcdistd needs.
struct daemon_config {
  std::string id;  ///< receiver id (wire::valid_receiver_id)
  /// `interface`: the name or local address of the interface every channel is joined on and
  /// replies leave from (common/net/interface.hpp; resolved when the daemon starts, for the
  /// channels' address family). Unset: the kernel's routes decide.
  net::interface_spec interface;
  std::vector<channel_config> channels;
  std::filesystem::path temp;  ///< temp files and checkpoints; same filesystem as dest
  /// This site's secret key file (mcdist-keygen, mode 0600). Empty: temp/site.key, made at
  /// the first start, so the site keeps one key across restarts.
  std::filesystem::path key_file;
  /// The top-level dest: channels given on the command line (--group) that the file does not
  /// define take it.
  std::filesystem::path dest;
  /// The top-level trusted_senders: channels given on the command line (--group) take these.
  std::vector<crypto::key32> trusted_senders;
  /// The top-level allow_unsigned (--allow-unsigned): the default of every channel's.
  bool allow_unsigned = false;
  /// Freshness of signed sessions (receiver/core/replay_guard.hpp, docs/security.md
  /// "Freshness"): sessions stamped longer ago are refused, and the replay cache keeps this
  /// long ...
  std::chrono::milliseconds max_session_age = std::chrono::hours(1);
  /// ... and sessions stamped further ahead of this host's clock are refused.
  std::chrono::milliseconds max_clock_skew = std::chrono::minutes(5);
  sync_mode sync = sync_mode::batch;
  std::size_t buffer_pool_bytes = storage_config{}.buffer_pool_bytes;
  int socket_buffer_bytes = 32 << 20;
  std::chrono::nanoseconds session_timeout = std::chrono::seconds(60);
  std::chrono::nanoseconds status_interval = std::chrono::seconds(60);
  /// How often a receiving session's resume state is saved.
  std::chrono::nanoseconds checkpoint_interval = std::chrono::seconds(2);
  std::optional<std::filesystem::path> status_file;  ///< JSON status, rewritten every interval
  // Budgets (README "mcdistd configuration", design notes "Budgets"); defaults are the
  // engine's and the store's.
  std::uint32_t max_sessions = 64;             ///< receiver_config::max_sessions
  std::uint32_t max_sessions_per_source = 16;  ///< receiver_config::max_sessions_per_source
  std::uint64_t session_memory_bytes = std::uint64_t{256} << 20;  ///< receiver_config
  std::uint64_t total_memory_bytes = std::uint64_t{1} << 30;      ///< receiver_config
  /// Parity blocks kept awaiting a decode, all sessions (storage_config::parity_memory_bytes).
  std::uint64_t parity_memory_bytes = std::uint64_t{64} << 20;
  std::uint64_t disk_reserve_bytes = std::uint64_t{1} << 30;     ///< storage_config
  double disk_reserve_percent = 5;                               ///< storage_config
  std::uint64_t session_quota_bytes = std::uint64_t{256} << 30;  ///< storage_config; 0: none
  /// Status HTTP server address; nullopt: off ("off").
  std::optional<endpoint> http = http::loopback_status_address(default_http_port);
  /// `http` was set by the operator: failing to bind it is then fatal, while the default
  /// address only gets a warning (a second daemon on the host must still receive).
  bool http_explicit = false;
  log_options log;
  /// The delivery journal (delivery_journal.hpp). Empty: temp/journal.db.
  std::filesystem::path journal;
  /// `[[action]]`: actions on receipt (action_config.hpp, docs/actions.md).
  std::vector<action_config> actions;
  /// `[retention] max_age`: the default of channel_config::retention_max_age.
  std::optional<std::chrono::nanoseconds> retention_max_age;
  /// `[retention] interval`: how often retention and journal pruning run.
  std::chrono::nanoseconds retention_interval = std::chrono::seconds(60);
  /// `[retention] journal_max_age`: journal rows older than this are deleted (30 days: a
  /// month of history for the operator; at least every max_age).
  std::chrono::nanoseconds journal_max_age = std::chrono::hours(24 * 30);
  /// Test only: drop received datagrams with this probability before the core (like NORM's
  /// rxloss), seeded by drop_seed.
  double drop_rate = 0;
  std::uint64_t drop_seed = 1;
};

/// Bad configuration: the message names the setting and what is wrong.
class config_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Reads a TOML configuration file (README "mcdistd configuration").
/// @throws config_error on a syntax error (with line and column) or a bad value
daemon_config load_config_file(const std::filesystem::path& file);

/// Reads a TOML configuration from `text` (README "mcdistd configuration"); `source` names it
/// in error messages (a file name, "<fuzz>"). @throws config_error as load_config_file
daemon_config load_config_string(std::string_view text, const std::string& source);

/// Parses a channel's `source` (mcdistd `source = "ADDR"`, --source): the unicast address,
/// of the group's family, of the one sender whose datagrams the channel takes, joined
/// source-specific (RFC 4607; MCAST_JOIN_SOURCE_GROUP, RFC 3678 section 5.2). A group outside
/// the SSM ranges (232.0.0.0/8, ff3x::/32) is not refused: on a link, or with routers that
/// apply IGMPv3/MLDv2 source filters to any group, the join filters as well; the daemon warns
/// (ssm_warning) because routers may forward such a group from every source.
/// @param what names the setting in the message ("channel[0].source", "--source")
/// @throws config_error when `text` is not an IP address, is multicast or the wildcard, or is
///         not of the group's family
endpoint parse_source(const std::string& text, const endpoint& group, const std::string& what);

/// What is unusual about how `ch` is joined, for a warning at start; empty when nothing:
/// a source outside the SSM ranges (routers may forward every source of such a group), or an
/// SSM-range group joined any-source (routers following RFC 4607 forward nothing to it).
std::string ssm_warning(const channel_config& ch);

/// Which of `channels` are silent, by index (receiver_config::silent_channels).
std::vector<bool> silent_channels(const std::vector<channel_config>& channels);
/// Which of `channels` relay their one-way sessions, by index (receiver_config::relay_channels).
std::vector<bool> relay_channels(const std::vector<channel_config>& channels);
/// The relay each of `channels` is received through, by index ("" for none;
/// receiver_config::upstream_relays).
std::vector<std::string> upstream_relays(const std::vector<channel_config>& channels);

/// Parses an age: a parse_duration string ("90s", "6h") or a number of days ("7d").
std::optional<std::chrono::nanoseconds> parse_age(std::string_view text) noexcept;

/// Checks a complete configuration: id set and valid, at least one channel, every group
/// multicast and of one address family (the interface's, when it is an address), every
/// source of its group's family, temp and dest set, every channel trusting a sender or allowing
/// unsigned sessions by name (allow_unsigned); actions name existing channels, have unique names,
/// and exec programs that are absolute paths of executable files; journal_max_age is at least every
/// retention max_age. @throws config_error naming the first problem
void validate(const daemon_config& cfg);

}  // namespace mcdist::receiver
