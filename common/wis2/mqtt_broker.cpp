#include "common/wis2/mqtt_broker.hpp"

#include "common/path_check.hpp"
#include "common/sys/key_file.hpp"

#include <mosquitto.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace mcdist {

namespace {

/// OpenSSL's pass phrase callback for the client key: no pass phrase, so an encrypted key
/// fails to load instead of OpenSSL prompting on the daemon's terminal.
int no_pass_phrase(char*, int, int, void*) { return 0; }

/// The path a password_file names (resolving "credential:NAME").
/// @throws crypto::key_error
std::filesystem::path password_path(const mqtt_broker& b) {
  return crypto::resolve_key_path(b.password_file);
}

void check_readable(const std::filesystem::path& p, const char* setting) {
  if (p.empty()) return;
  if (::access(p.c_str(), R_OK) != 0) {
    throw std::invalid_argument(std::string(setting) + " \"" + p.string() +
                                "\" cannot be read: " + std::strerror(errno));
  }
}

}  // namespace

std::optional<mqtt_url> parse_mqtt_url(std::string_view url) {
  mqtt_url out;
  if (url.starts_with("mqtts://")) {
    out.tls = true;
    out.port = mqtts_default_port;
    url.remove_prefix(8);
  } else if (url.starts_with("mqtt://")) {
    url.remove_prefix(7);
  } else {
    return std::nullopt;
  }
  if (!url.empty() && url.back() == '/') url.remove_suffix(1);
  std::string_view host = url;
  std::string_view port;
  bool has_port = false;
  if (url.starts_with('[')) {
    const auto close = url.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = url.substr(1, close - 1);
    const auto rest = url.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return std::nullopt;
      port = rest.substr(1);
      has_port = true;
    }
  } else if (const auto colon = url.rfind(':'); colon != std::string_view::npos) {
    host = url.substr(0, colon);
    port = url.substr(colon + 1);
    has_port = true;
  }
  if (host.empty() || host.find_first_of("/@ []") != std::string_view::npos) return std::nullopt;
  if (has_port) {
    std::uint16_t p = 0;
    const auto r = std::from_chars(port.data(), port.data() + port.size(), p);
    if (port.empty() || r.ec != std::errc{} || r.ptr != port.data() + port.size() || p == 0) {
      return std::nullopt;
    }
    out.port = p;
  }
  out.host = std::string(host);
  return out;
}

std::string mqtt_broker::display() const {
  const bool v6 = url.host.find(':') != std::string::npos;
  return std::string(url.tls ? "mqtts://" : "mqtt://") + (v6 ? "[" : "") + url.host +
         (v6 ? "]" : "") + ":" + std::to_string(url.port);
}

void check_mqtt_broker(const mqtt_broker& b) {
  if (!b.url.tls) {
    for (const auto& [set, name] : {std::pair{!b.ca_file.empty(), "ca_file"},
                                    std::pair{!b.client_cert.empty(), "client_cert"},
                                    std::pair{!b.client_key.empty(), "client_key"},
                                    std::pair{b.tls_insecure, "tls_insecure"}}) {
      if (set) {
        throw std::invalid_argument(std::string(name) + " needs a TLS broker: broker = \"mqtts://" +
                                    b.url.host + "\"");
      }
    }
  }
  if (b.client_cert.empty() != b.client_key.empty()) {
    throw std::invalid_argument("client_cert and client_key go together: give both or neither");
  }
  if (!b.password.empty() && !b.password_file.empty()) {
    throw std::invalid_argument("password and password_file exclude each other: give one");
  }
  if ((!b.password.empty() || !b.password_file.empty()) && b.username.empty()) {
    throw std::invalid_argument("a password is set without username");
  }
}

void check_mqtt_broker_files(const mqtt_broker& b) {
  check_readable(b.ca_file, "ca_file");
  check_readable(b.client_cert, "client_cert");
  check_readable(b.client_key, "client_key");
  if (b.password_file.empty()) return;
  if (b.password_file.starts_with("credential:") && !std::getenv("CREDENTIALS_DIRECTORY")) {
    return;  // systemd hands it over when the unit runs
  }
  try {
    check_readable(password_path(b), "password_file");
    (void)resolve_mqtt_password(b);
  } catch (const crypto::key_error& e) {
    throw std::invalid_argument(std::string("password_file: ") + e.what());
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
}

std::string resolve_mqtt_password(const mqtt_broker& b) {
  if (b.password_file.empty()) return b.password;
  std::filesystem::path p;
  try {
    p = password_path(b);
  } catch (const crypto::key_error& e) {
    throw std::runtime_error(std::string("password_file: ") + e.what());
  }
  std::ifstream in(p, std::ios::binary);
  std::string line;
  if (!in || !std::getline(in, line)) {
    throw std::runtime_error("password_file \"" + p.string() + "\" cannot be read");
  }
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
  if (line.empty()) {
    throw std::runtime_error("password_file \"" + p.string() + "\" holds no password");
  }
  return line;
}

void configure_mqtt_client(struct mosquitto* mosq, const mqtt_broker& b) {
  mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311);
  if (!b.username.empty()) {
    const auto password = resolve_mqtt_password(b);
    if (const int rc = mosquitto_username_pw_set(mosq, b.username.c_str(),
                                                 password.empty() ? nullptr : password.c_str());
        rc != MOSQ_ERR_SUCCESS) {
      throw std::runtime_error(std::string("username: ") + mosquitto_strerror(rc));
    }
  }
  if (!b.url.tls) return;
  const std::string ca = b.ca_file.string();
  const std::string cert = b.client_cert.string();
  const std::string key = b.client_key.string();
  const std::string ca_dir(system_ca_directory);
  int rc = mosquitto_tls_set(
      mosq, ca.empty() ? nullptr : ca.c_str(), ca.empty() ? ca_dir.c_str() : nullptr,
      cert.empty() ? nullptr : cert.c_str(), key.empty() ? nullptr : key.c_str(), &no_pass_phrase);
  if (rc != MOSQ_ERR_SUCCESS) {
    throw std::runtime_error("TLS settings (ca_file, client_cert, client_key) refused: " +
                             std::string(mosquitto_strerror(rc)));
  }
  // SSL_VERIFY_PEER (1): the connection fails unless the chain verifies; tls_insecure alone
  // turns it off (SSL_VERIFY_NONE, 0). TLS 1.2 at least (libmosquitto's default).
  rc = mosquitto_tls_opts_set(mosq, b.tls_insecure ? 0 : 1, nullptr, nullptr);
  if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_tls_insecure_set(mosq, b.tls_insecure);
  if (rc != MOSQ_ERR_SUCCESS) {
    throw std::runtime_error(std::string("TLS options refused: ") + mosquitto_strerror(rc));
  }
}

bool valid_topic_filter(std::string_view filter) {
  if (filter.empty() || filter.size() > 65535 || !valid_utf8(filter)) return false;
  if (filter.find('\0') != std::string_view::npos) return false;
  std::size_t start = 0;
  while (true) {
    const auto slash = filter.find('/', start);
    const auto level = filter.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (level.find_first_of("+#") != std::string_view::npos) {
      if (level.size() != 1) return false;
      if (level == "#" && slash != std::string_view::npos) return false;
    }
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

bool topic_matches(std::string_view filter, std::string_view topic) {
  if (!topic.empty() && topic[0] == '$' && !filter.empty() &&
      (filter[0] == '+' || filter[0] == '#')) {
    return false;
  }
  std::size_t f = 0;
  std::size_t t = 0;
  while (true) {
    const auto fs = filter.find('/', f);
    const auto flevel =
        filter.substr(f, fs == std::string_view::npos ? std::string_view::npos : fs - f);
    if (flevel == "#") return true;  // this level and all below (also "a/#" matching "a")
    const auto ts = topic.find('/', t);
    const auto tlevel =
        topic.substr(t, ts == std::string_view::npos ? std::string_view::npos : ts - t);
    if (flevel != "+" && flevel != tlevel) return false;
    const bool f_end = fs == std::string_view::npos;
    const bool t_end = ts == std::string_view::npos;
    if (f_end && t_end) return true;
    if (f_end) return false;
    if (t_end) {
      // The topic has no more levels: only a remaining "#" matches ("a/#" matches "a").
      return filter.substr(fs + 1) == "#";
    }
    f = fs + 1;
    t = ts + 1;
  }
}

}  // namespace mcdist
