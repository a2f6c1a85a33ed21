#pragma once
/// @file
/// How the WIS2 code reaches an MQTT broker (library mcdist_wis2): the broker's URL,
/// `mqtt://HOST[:PORT]` or `mqtts://HOST[:PORT]` (MQTT over TLS), the TLS settings and the
/// credentials, shared by the publishers (mcdistd's wis2 action, mcdist-feed's `[wis2]`) and the
/// hub's subscriptions (`[[wis2_input]]`). WIS2 brokers are reached over TLS with a user name
/// and password (Guide to WIS, WMO-No. 1061, Volume II, 2.7.3.1 and Part IV "Security"); the
/// secure default here is TLS with the server's certificate chain and host name verified, and
/// only a setting named `tls_insecure` turns verification off.
///
/// Also MQTT topic filters (MQTT 3.1.1 section 4.7): validity and matching of `+` and `#`.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

struct mosquitto;  // libmosquitto's handle (mosquitto.h stays in the .cpp)

namespace mcdist {

/// MQTT default port (MQTT 3.1.1 section 4.2, IANA "mqtt").
inline constexpr std::uint16_t mqtt_default_port = 1883;
/// MQTT over TLS default port (IANA "secure-mqtt").
inline constexpr std::uint16_t mqtts_default_port = 8883;

/// The trusted certificates used for `mqtts://` when no ca_file is given: Debian's hashed
/// directory of the ca-certificates package (OpenSSL's c_rehash layout).
inline constexpr std::string_view system_ca_directory = "/etc/ssl/certs";

/// A broker URL taken apart.
struct mqtt_url {
  std::string host;  ///< a name, an IPv4 address or an IPv6 address (without brackets)
  std::uint16_t port = mqtt_default_port;
  bool tls = false;  ///< mqtts://
  friend bool operator==(const mqtt_url&, const mqtt_url&) = default;
};

/// Parses "mqtt://HOST[:PORT]" or "mqtts://HOST[:PORT]" (HOST a name, an IPv4 address or a
/// [bracketed] IPv6 address; a trailing '/' is allowed). Default ports: 1883 and 8883.
/// @return nullopt when the text is not of that form (another scheme, a path, user info, a
/// port of 0 or above 65535)
std::optional<mqtt_url> parse_mqtt_url(std::string_view url);

/// A broker and how to log in to it (the `broker`, `ca_file`, `client_cert`, `client_key`,
/// `username`, `password`, `password_file` and `tls_insecure` settings of every WIS2 table).
struct mqtt_broker {
  mqtt_url url;
  /// PEM file of the certificates that may sign the broker's (mqtts:// only); empty: the
  /// system's (system_ca_directory).
  std::filesystem::path ca_file;
  /// PEM client certificate and its unencrypted private key, for brokers that require one
  /// (mqtts:// only; both or neither).
  std::filesystem::path client_cert;
  std::filesystem::path client_key;
  std::string username;  ///< empty: anonymous
  /// Inline password (kept for old configurations: it then sits in a file others may read).
  std::string password;
  /// A file holding the password on its first line, or "credential:NAME" for systemd's
  /// credential NAME ($CREDENTIALS_DIRECTORY, crypto::resolve_key_path).
  std::string password_file;
  /// Turns off the verification of the broker's certificate chain and host name. Only for a
  /// test broker: anyone on the path can then impersonate the broker.
  bool tls_insecure = false;

  /// "mqtt://HOST:PORT" or "mqtts://HOST:PORT", for logs and status.
  std::string display() const;
  friend bool operator==(const mqtt_broker&, const mqtt_broker&) = default;
};

/// Checks a broker's settings that do not need the files (TLS settings on a plain mqtt://
/// URL, a client certificate without its key, password without username, both password and
/// password_file).
/// @throws std::invalid_argument with an operator-facing message naming the setting
void check_mqtt_broker(const mqtt_broker& b);

/// Checks that the broker's files can be read now (ca_file, client_cert, client_key,
/// password_file; a "credential:NAME" password file only when $CREDENTIALS_DIRECTORY is
/// set). For --check-config and the start of a daemon.
/// @throws std::invalid_argument naming the setting and the file
void check_mqtt_broker_files(const mqtt_broker& b);

/// The password to log in with: `password`, or the first line of `password_file` (trailing
/// "\r\n" removed). Empty when neither is set.
/// @throws std::runtime_error naming the file when it cannot be read
std::string resolve_mqtt_password(const mqtt_broker& b);

/// Applies the broker's TLS settings and credentials to a libmosquitto client before its
/// first connect: MQTT 3.1.1, user name and password, and for mqtts:// the trusted
/// certificates, the client certificate, peer verification (SSL_VERIFY_PEER) and host name
/// verification unless tls_insecure. An encrypted client key is refused instead of OpenSSL
/// asking for its pass phrase on the terminal.
/// @throws std::runtime_error naming the setting that libmosquitto refused
void configure_mqtt_client(struct mosquitto* mosq, const mqtt_broker& b);

/// True when `filter` is a valid MQTT topic filter (MQTT 3.1.1 section 4.7): 1 to 65535
/// bytes of UTF-8 without NUL, '+' only as a whole level, '#' only as the whole last level.
bool valid_topic_filter(std::string_view filter);

/// True when the topic name `topic` matches `filter` (MQTT 3.1.1 section 4.7.1: '+' one
/// level, '#' this level and every one below, including none; a filter starting with a
/// wildcard does not match a topic starting with '$', section 4.7.2). Pure.
bool topic_matches(std::string_view filter, std::string_view topic);

}  // namespace mcdist
