#pragma once
/// @file
/// mcdistd's unicast fallback clients (docs/design-notes.md "Unicast fallback"): one slot per
/// session moved to unicast, holding its client (common/unicast/io/client.hpp), the generation
/// that tells a stale callback from the current client's, the bytes and times of the transfer,
/// and, for a session served over unicast from the start, the client opened ahead of the
/// FALLBACK order while the site registers (adopted, grown, or replaced when its handshake is
/// late). It pauses every client while the storage pool is nearly full, the back-pressure the
/// multicast sockets get too, and counts the connections ended by a sealed frame that did not
/// open. What arrives goes to the engine through a unicast_port. Runs on the daemon's io thread.

#include "common/endpoint.hpp"
#include "common/ids.hpp"
#include "common/sys/single_thread.hpp"
#include "common/time.hpp"
#include "common/unicast/io/client.hpp"
#include "receiver/core/unicast_fetch.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// What the unicast clients need of the daemon.
struct unicast_port {
  /// Bytes of `file` at `offset` arrived for session `s` at `at` (receiver_engine::
  /// on_unicast_data); valid during the call only.
  std::function<void(session_id s, file_index file, std::uint64_t offset,
                     std::span<const std::byte> bytes, time_point at)>
      data;
  /// The client of a FALLBACK order ended; `ok`: it fetched everything asked
  /// (receiver_engine::on_unicast_closed).
  std::function<void(session_id s, bool ok, const std::string& detail, time_point at)> closed;
  /// After a client ended: the daemon's service() (timers, idle channels).
  std::function<void()> service;
  /// Free bytes in the storage pool (file_store::free_bytes).
  std::function<std::size_t()> pool_room;
};

/// The unicast clients, by session.
class unicast_slots {
 public:
  struct settings {
    std::string receiver_id;
    /// The address the clients connect from; nullopt: the kernel's choice (the interface is
    /// the any address).
    std::optional<endpoint> local;
    /// Clients pause while the pool has less room than this, and go on at 4 times it.
    std::size_t min_pool_room = 0;
    /// How often a paused pool is looked at again.
    std::chrono::microseconds poll{500};
  };

  unicast_slots(boost::asio::io_context& io, settings s, std::shared_ptr<spdlog::logger> log,
                unicast_port port);
  ~unicast_slots();
  unicast_slots(const unicast_slots&) = delete;
  unicast_slots& operator=(const unicast_slots&) = delete;

  /// Session `s` is served over unicast from the start (receiver_sink::prepare_unicast): a
  /// client for `order` (token zero) begins connecting while the site registers, and waits
  /// for its credentials.
  void prepare(session_id s, const unicast_order& order);
  /// Fetches `wanted` for session `s` as `order` says (receiver_sink::start_unicast) with
  /// `creds`: on the prepared client when it goes to the same place (grown to the order's
  /// connection count; replaced by a fresh one when its handshake is not up within 3 round
  /// trips), else on a new client.
  void start(session_id s, const unicast_order& order, const std::vector<byte_range>& wanted,
             const unicast::client_credentials& creds);
  /// Ends session `s`'s client, if any, without a callback.
  void stop(session_id s) { m_slots.erase(s); }
  /// Ends every client without callbacks and stops polling the pool (the daemon stops).
  void close_all();

  /// Clients running (status "unicast_active").
  std::size_t size() const noexcept { return m_slots.size(); }
  /// Connections of encrypted sessions ended by a sealed frame that did not open.
  std::uint64_t unsealed() const noexcept { return m_unsealed; }

 private:
  struct slot {
    std::unique_ptr<unicast::client> client;
    std::uint64_t generation = 0;
    bool paused = false;
    std::uint64_t bytes = 0;                                     ///< payload received
    std::optional<std::chrono::steady_clock::time_point> first;  ///< first payload byte
    std::chrono::steady_clock::time_point last{};                ///< latest payload byte
    /// Opened by prepare and not yet given its token: not the engine's yet.
    bool prepared = false;
    unicast_order prepared_for;                           ///< what prepare opened (token zero)
    std::chrono::steady_clock::time_point prepared_at{};  ///< when it began connecting
    /// A prepared client taken by an order before it was up: replaced by a fresh one when its
    /// handshake is not up in time (start).
    std::unique_ptr<boost::asio::steady_timer> hedge;
  };

  /// Client settings for `order` of session `s`, without the credentials.
  unicast::client_options options(session_id s, const unicast_order& order) const;
  /// The callbacks of client generation `gen` of session `s`.
  unicast::client_events events(session_id s, std::uint64_t gen);
  /// Replaces session `s`'s client with a new one connecting for `order`, asking for `req`.
  void connect(session_id s, const unicast_order& order, const std::vector<mcdist::byte_range>& req,
               const unicast::client_credentials& creds);
  /// Session `s`'s prepared client takes the order: true when it could (else connect afresh).
  bool adopt(session_id s, const unicast_order& order, std::vector<mcdist::byte_range>& req,
             const unicast::client_credentials& creds);
  /// Pauses the clients while the pool is nearly full; polls until it has room again.
  void check_backpressure();

  boost::asio::io_context& m_io;
  settings m_settings;
  std::shared_ptr<spdlog::logger> m_log;
  unicast_port m_port;
  std::map<session_id, slot> m_slots;
  std::uint64_t m_generation = 0;
  /// Fallback connections of encrypted sessions ended by a sealed frame that did not open
  /// (tampered or injected on the path; common/unicast/record_seal.hpp): counted, logged
  /// rate-limited (common/log_limit.hpp).
  std::uint64_t m_unsealed = 0;
  boost::asio::steady_timer m_poll;
  bool m_polling = false;
  bool m_stopping = false;
  single_thread m_io_thread;  ///< the daemon's io thread: every call and callback runs there
};

}  // namespace mcdist::receiver
