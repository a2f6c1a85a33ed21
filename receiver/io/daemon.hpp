#pragma once
/// @file
/// The Asio shell of mcdistd: channel sockets, the control socket, timers and signals around a
/// receiver_engine, with file_store as its storage path. One io_context on one thread; the
/// store runs its own writer, finalizer and scanner threads.

#include "common/net/udp.hpp"
#include "common/sd_notify.hpp"
#include "common/unicast/client.hpp"
#include "receiver/core/receiver_engine.hpp"
#include "receiver/io/daemon_config.hpp"
#include "receiver/io/file_store.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <vector>

namespace mcdist::receiver {

/// The directory checks the daemon makes before it opens sockets: the temp directory and every
/// channel's destination exist (or, with create, are created; without, could be created: their
/// nearest existing ancestor is a writable directory), are writable directories, and every
/// destination is on the temp directory's filesystem (files are renamed from temp into place).
/// The log file's and status file's directories exist or could be created. `mcdistd
/// --check-config` runs it with create = false, the daemon with create = true.
/// @throws config_error naming the directory and the problem
void check_directories(const daemon_config& cfg, bool create);

/// The receiver daemon. Construct, then run() until SIGTERM/SIGINT. Under systemd
/// (Type=notify) it reports READY=1 once its sockets are bound and its saved sessions restored,
/// WATCHDOG=1 every half $WATCHDOG_USEC from its io_context, STOPPING=1 when a signal stops it.
/// SIGHUP reopens the log file.
class daemon final : public receiver_sink {
 public:
  /// Creates directories, opens sockets, restores checkpoints.
  /// @throws config_error or std::system_error with an operator-facing message
  daemon(boost::asio::io_context& io, daemon_config cfg, std::shared_ptr<spdlog::logger> log);
  ~daemon() override;

  /// Serves until a signal (or stop()). Saves every session's state on the way out.
  void run();
  /// Asks run() to return (from the io thread).
  void stop();

  /// Local address of the control socket (tests).
  endpoint control_endpoint() const;

  // receiver_sink
  void send(const endpoint& to, std::span<const std::byte> datagram) override;
  void begin_file(const file_ref& ref) override;
  bool write_block(session_id s, file_index f, std::uint64_t offset,
                   std::span<const std::byte> data) override;
  void finalize_file(session_id s, file_index f, const sha256_digest& expected) override;
  void discard_file(session_id s, file_index f) override;
  void query_held(session_id s, std::uint32_t channel, std::vector<held_query> q) override;
  void checkpoint(session_id s, std::string blob) override;
  void session_closed(session_id s, bool remove_temp) override;
  void start_unicast(session_id s, const unicast_order& order,
                     std::vector<byte_range> wanted) override;
  void stop_unicast(session_id s) override;

 private:
  void do_receive(std::size_t socket_index);
  void service();
  void arm_timer(time_point now);
  void log_status(bool final);
  void check_unicast_backpressure();
  void write_status_file();
  void wait_signal();
  void arm_watchdog();

  boost::asio::io_context& m_io;
  daemon_config m_cfg;
  std::shared_ptr<spdlog::logger> m_log;
  std::vector<net::udp::socket> m_sockets;  ///< one per channel, then the control socket
  boost::asio::steady_timer m_timer;
  boost::asio::steady_timer m_status_timer;
  boost::asio::signal_set m_signals;
  service_notifier m_notifier;
  boost::asio::steady_timer m_watchdog_timer;
  std::unique_ptr<file_store> m_store;
  std::unique_ptr<receiver_engine> m_engine;
  net::batch_receiver m_receiver;
  std::mt19937_64 m_drop_rng;
  std::uint64_t m_dropped_by_option = 0;
  std::uint64_t m_read_pauses = 0;
  /// Unicast fallback clients, one per session in fallback; generation tells a stale
  /// callback from the current client's.
  struct unicast_slot {
    std::unique_ptr<unicast::client> client;
    std::uint64_t generation = 0;
    bool paused = false;
    std::uint64_t bytes = 0;  ///< payload received
    std::optional<std::chrono::steady_clock::time_point> first;  ///< first payload byte
    std::chrono::steady_clock::time_point last{};                ///< latest payload byte
  };
  std::map<session_id, unicast_slot> m_unicast;
  std::uint64_t m_unicast_generation = 0;
  boost::asio::steady_timer m_unicast_poll;
  bool m_unicast_polling = false;
  std::optional<time_point> m_timer_at;
  bool m_stopping = false;
  std::uint64_t m_last_logged_drops = 0;
};

}  // namespace mcdist::receiver
