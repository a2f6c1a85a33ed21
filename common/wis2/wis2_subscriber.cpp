#include "common/wis2/wis2_subscriber.hpp"

#include "common/path_check.hpp"
#include "common/wis2/wnm.hpp"

#include <mosquitto.h>

#include <stdexcept>

namespace mcdist {

namespace {

/// MQTT keep-alive, seconds (as the publisher's).
constexpr int keepalive_seconds = 60;
/// Reconnect back-off, seconds: 1 s doubling to 30 s.
constexpr unsigned reconnect_delay_min = 1;
constexpr unsigned reconnect_delay_max = 30;

void lib_init_once() {
  static const int rc = mosquitto_lib_init();
  (void)rc;
}

}  // namespace

wis2_subscriber::wis2_subscriber(mqtt_subscription sub, std::string name, handler on_message,
                                 std::shared_ptr<spdlog::logger> log)
    : m_sub(std::move(sub)), m_name(std::move(name)), m_handler(std::move(on_message)),
      m_log(std::move(log)) {
  lib_init_once();
  const bool persistent = !m_sub.client_id.empty();
  m_mosq = mosquitto_new(persistent ? m_sub.client_id.c_str() : nullptr, !persistent, this);
  if (!m_mosq)
    throw std::runtime_error("WIS2 input " + m_name + ": libmosquitto cannot create a client");
  try {
    configure_mqtt_client(m_mosq, m_sub.broker);
  } catch (const std::runtime_error& e) {
    mosquitto_destroy(m_mosq);
    throw std::runtime_error("WIS2 input " + m_name + ": broker " + m_sub.broker.display() + ": " +
                             e.what());
  }
  mosquitto_connect_callback_set(m_mosq, &wis2_subscriber::on_connect);
  mosquitto_disconnect_callback_set(m_mosq, &wis2_subscriber::on_disconnect);
  mosquitto_message_callback_set(m_mosq, &wis2_subscriber::on_message);
  mosquitto_log_callback_set(m_mosq, &wis2_subscriber::on_log);
  mosquitto_reconnect_delay_set(m_mosq, reconnect_delay_min, reconnect_delay_max, true);
  // The loop thread first, then the connect: libmosquitto 2.0 retries a failed first connect
  // only this way (see wis2_publisher.cpp).
  if (const int lrc = mosquitto_loop_start(m_mosq); lrc != MOSQ_ERR_SUCCESS) {
    mosquitto_destroy(m_mosq);
    throw std::runtime_error("WIS2 input " + m_name +
                             ": cannot start libmosquitto's thread: " + mosquitto_strerror(lrc));
  }
  const int rc = mosquitto_connect_async(m_mosq, m_sub.broker.url.host.c_str(),
                                         m_sub.broker.url.port, keepalive_seconds);
  if (rc != MOSQ_ERR_SUCCESS && m_log) {
    m_log->warn("WIS2 input {}: broker {} not reachable yet ({}); retrying", m_name,
                m_sub.broker.display(), mosquitto_strerror(rc));
  }
}

wis2_subscriber::~wis2_subscriber() {
  mosquitto_disconnect(m_mosq);
  mosquitto_loop_stop(m_mosq, true);
  mosquitto_destroy(m_mosq);
}

wis2_subscriber_stats wis2_subscriber::stats() const {
  wis2_subscriber_stats s;
  s.connected = m_connected.load();
  s.received = m_received.load();
  s.too_large = m_too_large.load();
  s.connects = m_connects.load();
  return s;
}

void wis2_subscriber::on_connect(struct mosquitto* mosq, void* self, int rc) {
  auto* p = static_cast<wis2_subscriber*>(self);
  if (rc != 0) {
    if (p->m_log && p->m_lib_errors.tick()) {
      p->m_log->warn("WIS2 input {}: broker {} refused the connection: {}", p->m_name,
                     p->m_sub.broker.display(), mosquitto_connack_string(rc));
    }
    return;
  }
  std::vector<char*> filters;
  for (auto& f : p->m_sub.filters) filters.push_back(f.data());
  const int src = mosquitto_subscribe_multiple(mosq, nullptr, static_cast<int>(filters.size()),
                                               filters.data(), p->m_sub.qos, 0, nullptr);
  p->m_connected = true;
  p->m_warned_down = false;
  ++p->m_connects;
  if (!p->m_log) return;
  if (src != MOSQ_ERR_SUCCESS) {
    p->m_log->error("WIS2 input {}: cannot subscribe: {}", p->m_name, mosquitto_strerror(src));
    return;
  }
  std::string list;
  for (const auto& f : p->m_sub.filters) list += (list.empty() ? "" : ", ") + f;
  p->m_log->info("WIS2 input {}: connected to {}, subscribed to {}", p->m_name,
                 p->m_sub.broker.display(), list);
}

void wis2_subscriber::on_disconnect(struct mosquitto*, void* self, int rc) {
  auto* p = static_cast<wis2_subscriber*>(self);
  p->m_connected = false;
  if (rc != 0 && !p->m_warned_down.exchange(true) && p->m_log) {
    p->m_log->warn("WIS2 input {}: lost the broker {} ({}); reconnecting", p->m_name,
                   p->m_sub.broker.display(), mosquitto_strerror(rc));
  }
}

void wis2_subscriber::on_message(struct mosquitto*, void* self, const struct mosquitto_message* m) {
  auto* p = static_cast<wis2_subscriber*>(self);
  ++p->m_received;
  const auto size = m->payloadlen > 0 ? static_cast<std::size_t>(m->payloadlen) : 0;
  if (size > max_notification_bytes) {
    const auto n = ++p->m_too_large;
    if (p->m_log && worth_logging(n)) {
      p->m_log->warn(
          "WIS2 input {}: notification refused: too_large: {} bytes on {} (at most {}; "
          "{} so far)",
          p->m_name, size, printable(m->topic ? m->topic : "", 200), max_notification_bytes, n);
    }
    return;
  }
  p->m_handler(std::string(m->topic ? m->topic : ""),
               std::string(static_cast<const char*>(m->payload), size));
}

void wis2_subscriber::on_log(struct mosquitto*, void* self, int level, const char* text) {
  auto* p = static_cast<wis2_subscriber*>(self);
  // libmosquitto's errors name what the callbacks cannot: a TLS handshake or certificate
  // verification that failed ("certificate verify failed"), a socket error.
  if (!(level & (MOSQ_LOG_ERR | MOSQ_LOG_WARNING)) || !p->m_log || !p->m_lib_errors.tick()) return;
  p->m_log->warn("WIS2 input {}: broker {}: {}", p->m_name, p->m_sub.broker.display(),
                 printable(text ? text : "", 300));
}

}  // namespace mcdist
