#include "common/wis2/wis2_publisher.hpp"

#include "common/path_check.hpp"

#include <mosquitto.h>
#include <nlohmann/json.hpp>

#include <ctime>
#include <stdexcept>
#include <vector>

namespace mcdist {

namespace {

/// MQTT keep-alive, seconds: the broker notices a dead daemon within 1.5 times this.
constexpr int keepalive_seconds = 60;
/// Reconnect back-off, seconds: first retry after 1 s, doubling up to 10 s (a
/// broker back after an outage gets the queue within 10 s).
constexpr unsigned reconnect_delay_min = 1;
constexpr unsigned reconnect_delay_max = 10;

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  s = s.substr(s.size() - suffix.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = (s[i] >= 'A' && s[i] <= 'Z') ? static_cast<char>(s[i] - 'A' + 'a') : s[i];
    if (c != suffix[i]) return false;
  }
  return true;
}

/// Whether byte `c` may stand as itself in a URI path segment: RFC 3986 section 3.3
/// pchar = unreserved / pct-encoded / sub-delims / ":" / "@", less pct-encoded (a '%' is always
/// encoded: product names are text, not escapes). unreserved is section 2.3, sub-delims 2.2.
bool is_segment_char(unsigned char c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  constexpr std::string_view others =
      "-._~"         // unreserved besides ALPHA and DIGIT
      "!$&'()*+,;="  // sub-delims
      ":@";
  return others.find(static_cast<char>(c)) != std::string_view::npos;
}

/// libmosquitto is initialised once per process (mosquitto_lib_init is not thread-safe).
void lib_init_once() {
  static const int rc = mosquitto_lib_init();
  (void)rc;
}

}  // namespace

void check_wis2_action(wis2_action& a) {
  if (a.topic.empty()) throw std::invalid_argument("needs topic = \"origin/a/wis2/...\"");
  if (a.topic.find_first_of("#+") != std::string::npos) {
    throw std::invalid_argument("topic \"" + a.topic + "\" must not contain MQTT wildcards # or +");
  }
  std::string_view rest;
  for (std::string_view root : {"origin/a/wis2/", "cache/a/wis2/"}) {
    const std::string_view topic(a.topic);
    if (topic.starts_with(root)) rest = topic.substr(root.size());
  }
  if (rest.empty()) {
    throw std::invalid_argument("topic \"" + a.topic +
                                "\" is not a WIS2 topic: it must start with origin/a/wis2/ or "
                                "cache/a/wis2/ (WIS2 topic hierarchy)");
  }
  if (a.base_url.empty()) throw std::invalid_argument("needs base_url = \"https://...\"");
  if (!a.base_url.starts_with("http://") && !a.base_url.starts_with("https://")) {
    throw std::invalid_argument("base_url \"" + a.base_url +
                                "\" must be an http:// or https:// URL (the canonical link "
                                "subscribers download from)");
  }
  if (a.base_url.back() != '/') a.base_url += '/';
  if (a.qos < 0 || a.qos > 2) throw std::invalid_argument("qos must be 0, 1 or 2");
  check_mqtt_broker(a.broker);
  if (a.max_queued == 0) a.max_queued = wis2_queue_limit;
  if (a.data_id_prefix.empty()) {
    a.data_id_prefix = std::string(rest);
    if (a.data_id_prefix.back() != '/') a.data_id_prefix += '/';
  }
}

std::string base64(std::span<const std::uint8_t> bytes) {
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v =
        (std::uint32_t{bytes[i]} << 16) | (std::uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  if (const auto left = bytes.size() - i; left > 0) {
    std::uint32_t v = std::uint32_t{bytes[i]} << 16;
    if (left == 2) v |= std::uint32_t{bytes[i + 1]} << 8;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += left == 2 ? alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string format_uuid_v4(std::array<std::uint8_t, 16> r) {
  r[6] = static_cast<std::uint8_t>((r[6] & 0x0f) | 0x40);  // version 4
  r[8] = static_cast<std::uint8_t>((r[8] & 0x3f) | 0x80);  // variant 10xx
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += hex[r[i] >> 4];
    out += hex[r[i] & 15];
  }
  return out;
}

std::string rfc3339_utc(std::int64_t ns) {
  std::int64_t s = ns / 1'000'000'000;
  std::int64_t frac = ns % 1'000'000'000;
  if (frac < 0) {
    frac += 1'000'000'000;
    --s;
  }
  const std::time_t t = static_cast<std::time_t>(s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[48];
  const auto n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[64];
  std::snprintf(out, sizeof out, "%.*s.%06dZ", static_cast<int>(n), buf,
                static_cast<int>(frac / 1000));
  return out;
}

std::string percent_encode_path(std::string_view path) {
  static constexpr char hex[] = "0123456789ABCDEF";  // upper case: RFC 3986 section 2.1
  std::string out;
  out.reserve(path.size());
  for (const char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '/' || is_segment_char(c)) {
      out += ch;
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string canonical_href(std::string_view base_url, std::string_view path) {
  std::string out(base_url);
  out += percent_encode_path(path);
  return out;
}

std::string_view guess_media_type(std::string_view path) {
  struct entry {
    std::string_view ext;
    std::string_view type;
  };
  // BUFR and GRIB as WIS2 publishers (wis2box) name them; the rest from the IANA registry.
  static constexpr entry table[] = {
      {".bufr", "application/bufr"},
      {".bufr4", "application/bufr"},
      {".bin", "application/octet-stream"},
      {".grib", "application/grib"},
      {".grib2", "application/grib"},
      {".grb", "application/grib"},
      {".grb2", "application/grib"},
      {".nc", "application/netcdf"},
      {".geojson", "application/geo+json"},
      {".json", "application/json"},
      {".xml", "application/xml"},
      {".txt", "text/plain"},
      {".csv", "text/csv"},
      {".png", "image/png"},
      {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},
      {".gz", "application/gzip"},
      {".zip", "application/zip"},
      {".h5", "application/x-hdf5"},
  };
  for (const auto& e : table) {
    if (ends_with_ci(path, e.ext)) return e.type;
  }
  return "application/octet-stream";
}

std::string build_wis2_message(const wis2_notice& n) {
  const auto pub_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(n.pubtime.time_since_epoch()).count();
  nlohmann::json j;
  j["id"] = n.id;
  j["conformsTo"] = {"http://wis.wmo.int/spec/wnm/1/conf/core"};
  j["type"] = "Feature";
  j["geometry"] = nullptr;
  j["properties"] = {
      {"data_id", n.data_id},
      {"pubtime", rfc3339_utc(pub_ns)},
      {"datetime", rfc3339_utc(n.datetime_ns)},
      {"integrity", {{"method", "sha256"}, {"value", base64(n.digest)}}},
  };
  j["links"] = nlohmann::json::array(
      {{{"href", n.href}, {"rel", "canonical"}, {"type", n.media_type}, {"length", n.length}}});
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

wis2_publisher::wis2_publisher(wis2_action action, std::string channel,
                               std::shared_ptr<spdlog::logger> log)
    : m_action(std::move(action)), m_channel(std::move(channel)), m_log(std::move(log)),
      m_rng(std::random_device{}()) {
  lib_init_once();
  m_mosq = mosquitto_new(nullptr, true, this);
  if (!m_mosq) throw std::runtime_error("WIS2: libmosquitto cannot create a client");
  try {
    configure_mqtt_client(m_mosq, m_action.broker);
  } catch (const std::runtime_error& e) {
    mosquitto_destroy(m_mosq);
    throw std::runtime_error("WIS2 (channel " + m_channel + "): broker " +
                             m_action.broker.display() + ": " + e.what());
  }
  mosquitto_connect_callback_set(m_mosq, &wis2_publisher::on_connect);
  mosquitto_disconnect_callback_set(m_mosq, &wis2_publisher::on_disconnect);
  mosquitto_publish_callback_set(m_mosq, &wis2_publisher::on_publish);
  mosquitto_log_callback_set(m_mosq, &wis2_publisher::on_log);
  mosquitto_reconnect_delay_set(m_mosq, reconnect_delay_min, reconnect_delay_max, true);
  // The loop thread starts before the connect: with the connect first, libmosquitto 2.0 never
  // retries a first connect that failed (eclipse-mosquitto/mosquitto issues 1903 and 2576);
  // this way a broker that is down when mcdistd starts is reached once it comes up.
  if (const int lrc = mosquitto_loop_start(m_mosq); lrc != MOSQ_ERR_SUCCESS) {
    mosquitto_destroy(m_mosq);
    throw std::runtime_error(std::string("WIS2: cannot start libmosquitto's thread: ") +
                             mosquitto_strerror(lrc));
  }
  const int rc = mosquitto_connect_async(m_mosq, m_action.broker.url.host.c_str(),
                                         m_action.broker.url.port, keepalive_seconds);
  if (rc != MOSQ_ERR_SUCCESS && m_log) {
    m_log->warn("WIS2 (channel {}): broker {} not reachable yet ({}); retrying", m_channel,
                m_action.broker.display(), mosquitto_strerror(rc));
  }
}

wis2_publisher::~wis2_publisher() {
  mosquitto_disconnect(m_mosq);
  mosquitto_loop_stop(m_mosq, true);
  mosquitto_destroy(m_mosq);
}

void wis2_publisher::publish(std::string_view path, std::uint64_t size, std::int64_t mtime_ns,
                             const sha256_digest& digest) {
  std::array<std::uint8_t, 16> r;
  for (std::size_t i = 0; i < r.size(); i += 8) {
    const auto v = m_rng();
    for (std::size_t k = 0; k < 8; ++k) r[i + k] = static_cast<std::uint8_t>(v >> (8 * k));
  }
  wis2_notice n;
  n.id = format_uuid_v4(r);
  n.data_id = m_action.data_id_prefix + std::string(path);
  n.pubtime = std::chrono::system_clock::now();
  n.datetime_ns = mtime_ns;
  n.digest = digest;
  n.href = canonical_href(m_action.base_url, path);
  n.media_type = std::string(guess_media_type(path));
  n.length = size;
  auto msg = build_wis2_message(n);
  {
    std::lock_guard lock(m_mutex);
    if (m_queue.size() + m_unacked >= m_action.max_queued) {
      ++m_stats.dropped;
      return;
    }
    m_queue.push_back(std::move(msg));
  }
  flush();
}

void wis2_publisher::flush() {
  // mosquitto_publish only queues for the loop thread; it is called outside m_mutex so the
  // loop thread's callbacks, which take m_mutex, can never wait on it in a cycle.
  std::vector<std::string> batch;
  {
    std::lock_guard lock(m_mutex);
    if (!m_connected) return;
    while (!m_queue.empty()) {
      batch.push_back(std::move(m_queue.front()));
      m_queue.pop_front();
    }
    m_unacked += batch.size();
  }
  for (auto& msg : batch) {
    const int rc = mosquitto_publish(m_mosq, nullptr, m_action.topic.c_str(),
                                     static_cast<int>(msg.size()), msg.data(), m_action.qos, false);
    if (rc == MOSQ_ERR_SUCCESS) continue;
    std::lock_guard lock(m_mutex);
    --m_unacked;
    if (rc == MOSQ_ERR_NO_CONN) {
      m_queue.push_front(std::move(msg));  // lost the connection meanwhile: wait for the next
    } else {
      ++m_stats.failed;
      if (m_log) {
        m_log->warn("WIS2 (channel {}): publish failed: {}", m_channel, mosquitto_strerror(rc));
      }
    }
  }
}

void wis2_publisher::on_connect(struct mosquitto*, void* self, int rc) {
  auto* p = static_cast<wis2_publisher*>(self);
  {
    std::lock_guard lock(p->m_mutex);
    p->m_connected = rc == 0;
    if (rc == 0) p->m_warned_down = false;
  }
  if (p->m_log) {
    if (rc == 0) {
      p->m_log->info("WIS2 (channel {}): connected to {}, topic {}", p->m_channel,
                     p->m_action.broker.display(), p->m_action.topic);
    } else {
      p->m_log->warn("WIS2 (channel {}): broker refused the connection: {}", p->m_channel,
                     mosquitto_connack_string(rc));
    }
  }
  if (rc == 0) p->flush();
}

void wis2_publisher::on_disconnect(struct mosquitto*, void* self, int rc) {
  auto* p = static_cast<wis2_publisher*>(self);
  bool warn = false;
  {
    std::lock_guard lock(p->m_mutex);
    p->m_connected = false;
    // QoS 0 messages not yet written are gone; QoS 1/2 ones libmosquitto resends on reconnect.
    if (p->m_action.qos == 0) p->m_unacked = 0;
    warn = rc != 0 && !p->m_warned_down;
    if (warn) p->m_warned_down = true;
  }
  if (warn && p->m_log) {
    p->m_log->warn("WIS2 (channel {}): lost the broker {} ({}); reconnecting", p->m_channel,
                   p->m_action.broker.display(), mosquitto_strerror(rc));
  }
}

void wis2_publisher::on_publish(struct mosquitto*, void* self, int) {
  auto* p = static_cast<wis2_publisher*>(self);
  std::lock_guard lock(p->m_mutex);
  if (p->m_unacked > 0) --p->m_unacked;
  ++p->m_stats.published;
}

void wis2_publisher::on_log(struct mosquitto*, void* self, int level, const char* text) {
  auto* p = static_cast<wis2_publisher*>(self);
  // libmosquitto's errors name what the callbacks cannot: a TLS handshake or certificate
  // verification that failed ("certificate verify failed"), a socket error.
  if (!(level & (MOSQ_LOG_ERR | MOSQ_LOG_WARNING)) || !p->m_log || !p->m_lib_errors.tick()) return;
  p->m_log->warn("WIS2 (channel {}): broker {}: {}", p->m_channel, p->m_action.broker.display(),
                 printable(text ? text : "", 300));
}

wis2_stats wis2_publisher::stats() const {
  std::lock_guard lock(m_mutex);
  auto s = m_stats;
  s.queued = m_queue.size() + m_unacked;
  s.connected = m_connected;
  return s;
}

}  // namespace mcdist
