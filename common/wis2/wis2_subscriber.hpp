#pragma once
/// @file
/// The hub's subscription to WIS2 notifications on an MQTT broker (`[[wis2_input]]`), with
/// libmosquitto on libmosquitto's own thread (mosquitto_loop_start), like wis2_publisher: the
/// daemon's io thread never waits for the broker. Every message within
/// max_notification_bytes is copied and handed to the caller's handler on libmosquitto's
/// thread (the feed posts it to its io thread); a larger one is counted and dropped before it
/// is copied. The subscriptions are made again at every (re)connect; libmosquitto reconnects by
/// itself (back-off 1 s doubling to 30 s). With a client id the broker keeps the session
/// (clean session off: MQTT 3.1.1 section 3.1.2.4), so QoS 1 notifications published while
/// the hub was away are delivered when it is back.

#include "common/log_limit.hpp"
#include "common/wis2/mqtt_broker.hpp"

#include <spdlog/logger.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

struct mosquitto;
struct mosquitto_message;

namespace mcdist {

/// What to subscribe to, where.
struct mqtt_subscription {
  mqtt_broker broker;
  std::vector<std::string> filters;  ///< valid_topic_filter each
  std::string client_id;             ///< empty: a random id and a clean session
  int qos = 1;
};

/// Counters of one subscriber.
struct wis2_subscriber_stats {
  bool connected = false;
  std::uint64_t received = 0;   ///< messages taken from the broker (too large ones included)
  std::uint64_t too_large = 0;  ///< dropped: above max_notification_bytes
  std::uint64_t connects = 0;   ///< successful connects (the first and every reconnect)
};

/// One broker connection subscribed to WIS2 topics. Thread-safe.
class wis2_subscriber {
 public:
  /// Called on libmosquitto's thread with each message's topic and payload.
  using handler = std::function<void(std::string topic, std::string payload)>;

  /// Starts libmosquitto's thread and an asynchronous connect; never waits for the broker.
  /// @param name the input's name, in log lines
  /// @throws std::runtime_error when libmosquitto cannot make the client or its thread, or
  ///         refuses the broker settings (configure_mqtt_client)
  wis2_subscriber(mqtt_subscription sub, std::string name, handler on_message,
                  std::shared_ptr<spdlog::logger> log);
  /// Disconnects and joins libmosquitto's thread: no handler call after it returns.
  ~wis2_subscriber();
  wis2_subscriber(const wis2_subscriber&) = delete;
  wis2_subscriber& operator=(const wis2_subscriber&) = delete;

  wis2_subscriber_stats stats() const;

 private:
  static void on_connect(struct mosquitto*, void* self, int rc);
  static void on_disconnect(struct mosquitto*, void* self, int rc);
  static void on_message(struct mosquitto*, void* self, const struct mosquitto_message* m);
  static void on_log(struct mosquitto*, void* self, int level, const char* text);

  mqtt_subscription m_sub;
  std::string m_name;
  handler m_handler;
  std::shared_ptr<spdlog::logger> m_log;
  struct mosquitto* m_mosq = nullptr;
  std::atomic<bool> m_connected{false};
  std::atomic<bool> m_warned_down{false};
  std::atomic<std::uint64_t> m_received{0};
  std::atomic<std::uint64_t> m_too_large{0};
  std::atomic<std::uint64_t> m_connects{0};
  log_limiter m_lib_errors{5};  ///< libmosquitto's own error lines (TLS failures, ...)
};

}  // namespace mcdist
