#pragma once
/// @file
/// The Asio shell of mcdistd: channel sockets, the control socket, timers and signals around a
/// receiver_engine, with file_store as its storage path. One io_context on one thread; the
/// store runs its own writer, finalizer and scanner threads.

#include "common/auth.hpp"
#include "common/daemon/daemon_shell.hpp"
#include "common/daemon/status_port.hpp"
#include "common/log_limit.hpp"
#include "common/net/udp.hpp"
#include "common/sys/single_thread.hpp"
#include "common/unicast/io/client.hpp"
#include "receiver/core/receiver_engine.hpp"
#include "receiver/io/action_runner.hpp"
#include "receiver/io/catch_up_runner.hpp"
#include "receiver/io/channel_sockets.hpp"
#include "receiver/io/channel_table.hpp"
#include "receiver/io/daemon_config.hpp"
#include "receiver/io/delivery_recorder.hpp"
#include "receiver/io/heartbeat_intake.hpp"
#include "receiver/io/relay_forwarder.hpp"
#include "receiver/io/replay_store.hpp"
#include "receiver/io/retention_sweeper.hpp"
#include "receiver/io/session_keys.hpp"
#include "receiver/io/status_board.hpp"
#include "receiver/io/unicast_slots.hpp"
#include "receiver/storage/file_store.hpp"

#include <nlohmann/json_fwd.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

namespace mcdist {
struct channel_match;
class reload_diff;
}  // namespace mcdist

namespace mcdist::receiver {

/// The directory checks the daemon makes before it opens sockets: the temp directory and every
/// channel's destination exist (or, with create, are created; without, could be created: their
/// nearest existing ancestor is a writable directory), are writable directories, and every
/// destination is on the temp directory's filesystem (files are renamed from temp into place).
/// The journal's, log file's and status file's directories exist or could be created (the
/// journal's is created with create). `mcdistd
/// --check-config` runs it with create = false, the daemon with create = true.
/// @throws config_error naming the directory and the problem
void check_directories(const daemon_config& cfg, bool create);

/// The receiver daemon. Construct, then run() until SIGTERM/SIGINT. Under systemd
/// (Type=notify) it reports READY=1 once its sockets are bound and its saved sessions restored,
/// WATCHDOG=1 every half $WATCHDOG_USEC from its io_context, STOPPING=1 when a signal stops it
/// (common/daemon/daemon_shell.hpp). SIGHUP reopens the log file and, with a config source
/// (set_config_source), reloads the configuration (reload(), daemon_reload.cpp). With
/// daemon_config::http set it serves /metrics, /status and a status page on that address
/// (daemon_http.cpp).
///
/// The daemon holds components with one job each and routes events between them, the engine
/// and the storage path (docs/architecture.md "Inside the receiver daemon"): channel_sockets,
/// session_keys, heartbeat_intake, catch_up_runner, unicast_slots, delivery_recorder,
/// retention_sweeper. What it keeps itself: the control socket and its reads, the timers and
/// signals, the replay store, the sequences file, the status board, port and file, and the WIS2
/// publishers.
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

  /// Where SIGHUP gets the next configuration: mcdistd's main re-reads --config and applies
  /// its command-line options over it. Unset: SIGHUP only reopens the log file.
  void set_config_source(std::function<daemon_config()> source) {
    m_config_source = std::move(source);
  }
  /// Applies the configuration `source` gives, after checking it whole (validate, directories);
  /// an invalid one is logged and changes nothing. Channels are matched by name: an added one
  /// is joined; a removed one takes no new session and is left once its sessions under way
  /// ended (they finish, into its old destination); a changed one (group, dest or
  /// trusted_senders) is both: the old channel finishes its sessions while the new one takes
  /// the next. Actions, retention, status_interval and the session counts are replaced;
  /// settings that need a restart keep their value and are logged. Logs a one-line summary.
  /// @return true when applied
  bool reload(const std::function<daemon_config()>& source);

  /// Local address of the control socket (tests).
  endpoint control_endpoint() const;

  // receiver_sink
  void send(const endpoint& to, std::span<const std::byte> datagram) override;
  void session_closed(session_id s, bool remove_temp) override;
  void start_unicast(session_id s, const unicast_order& order,
                     std::vector<byte_range> wanted) override;
  void prepare_unicast(session_id s, const unicast_order& order) override;
  void stop_unicast(session_id s) override;
  void file_finished(const file_outcome& outcome) override;
  std::string sender_key(session_id s) override;
  errc admit_signed_session(session_id s, std::string_view key,
                            std::uint64_t created_unix_ms) override;

 private:
  /// do_receive's index of the control (unicast reply) socket; channel sockets are 0..n-1.
  static constexpr std::size_t control_index = static_cast<std::size_t>(-1);
  net::udp::socket& socket_at(std::size_t index) {
    return index == control_index ? *m_control_socket : m_channels.socket(index);
  }
  void do_receive(std::size_t socket_index);
  /// On a channel socket: false for a datagram of a session another channel holds (a changed
  /// channel's old and new sockets share the group) or, on a channel a reload removed, of a
  /// session it does not hold.
  bool channel_takes(std::size_t index, const wire::header& h) const;
  /// Opens channel `ch` as the next channel index (socket, keyring, destination root, board,
  /// WIS2 publishers). @throws std::system_error when the socket cannot be opened
  void add_channel(const channel_config& ch);
  /// A heartbeat on channel `index` (daemon_heartbeat.cpp): what heartbeat_intake plans, done.
  /// A heartbeat it took is relayed when the channel relays (`arrival` for the relay's delay).
  void on_heartbeat(std::size_t index, std::span<const std::byte> d, const endpoint& from,
                    std::optional<time_point> arrival);
  /// Sends gap report `r` from the control socket to `to`, signed by the site key when `sign`.
  /// @return false when it could not be encoded or sent (logged at debug)
  bool send_gap_report(const wire::gap_report& r, bool sign, const endpoint& to);
  /// A reload's changes to the channels it keeps as they were: WIS2 publishers, retention.
  void apply_kept_channels(const daemon_config& next, const channel_match& match,
                           reload_diff& diff);
  /// A reload's changes to the settings that are not per channel: actions, retention,
  /// session limits, status_interval; settings that need a restart are noted.
  void apply_settings(const daemon_config& next, reload_diff& diff);
  /// Leaves (closes the socket of) removed channels whose sessions all ended.
  void close_idle_channels();
  /// Makes the storage path, its finalizer hooks journaling deliveries and its results going
  /// to the engine (constructor).
  void make_store();
  /// Restores the sessions the last run saved (checkpoints and keys, their channel indexes
  /// mapped by TEMP/channels) and sweeps what is left of the others (constructor).
  void restore_sessions();
  void service();
  void arm_timer(time_point now);
  void log_status(bool final);
  /// What the unicast clients need of the daemon: the engine, the storage pool, service()
  /// (daemon_unicast.cpp).
  unicast_port unicast_hooks();
  void write_status_file();
  /// Writes TEMP/sequences when the engine's sequence book changed since the last write.
  void save_sequences_if_changed();
  /// One datagram from socket `index`: authenticated, then handed to the engine, and on a
  /// relayed channel queued for the relay when its session is silent here.
  /// @param arrival  when the kernel received it, if the socket says (batch_receiver::arrival)
  void handle_datagram(std::size_t index, std::span<const std::byte> d, const endpoint& from,
                       time_point now, std::optional<time_point> arrival = std::nullopt);
  /// Reads what the control socket holds now (at most max_control_per_key_poll datagrams).
  void poll_control(time_point now);
  /// The status file's document (also the base of /status).
  nlohmann::json status_json();
  // Status HTTP server (daemon_http.cpp).
  /// Samples the bytes received into the status board's per-minute ring, every second.
  void do_sample();
  /// The body of one view of the status port.
  std::string render_status(status_view view, log_summary log);
  /// The end of stop(), once running actions finished or their grace ran out.
  void finish_stop();
  /// Hands a file's end to the delivery journal (file_finished, catch-up).
  /// @param key  the sender key to record; nullptr: the key that signed its session
  void journal_delivery(const file_outcome& outcome, const std::string* key = nullptr);
  /// What catch-up needs of the daemon: the storage path, the journal, board and WIS2, the
  /// sequence book (daemon_heartbeat.cpp).
  catch_up_port catch_up_hooks();
  /// A stored file's WIS2 notifications, by the publishers of its channel.
  void publish_wis2(const file_outcome& outcome);

  boost::asio::io_context& m_io;
  daemon_config m_cfg;
  std::shared_ptr<spdlog::logger> m_log;
  /// The channels' multicast sockets by index, the interface they are joined on, their
  /// counters and which a reload retired.
  channel_sockets m_channels;
  /// The relay sockets of the channels with relay_group (after m_channels: it takes its
  /// interface).
  relay_forwarder m_relays;
  /// Sessions closed here whose keys stay for a delegation the relay still awaits, with
  /// session_closed's remove_temp (relay_forwarder::awaits_delegation; at most its
  /// max_two_way_sessions per relayed channel).
  std::unordered_map<std::uint32_t, bool> m_keys_kept;
  std::optional<net::udp::socket> m_control_socket;
  std::function<daemon_config()> m_config_source;
  std::uint64_t m_reloads_ok = 0;
  std::uint64_t m_reloads_failed = 0;
  boost::asio::steady_timer m_timer;
  boost::asio::steady_timer m_status_timer;
  daemon_shell m_shell;
  /// The delivery journal and the actions on receipt (made before m_store: the store's hook
  /// journals deliveries), and retention, which deletes what the journal says expired.
  std::unique_ptr<delivery_recorder> m_deliveries;
  std::unique_ptr<retention_sweeper> m_retention;
  std::unique_ptr<file_store> m_store;
  std::unique_ptr<receiver_engine> m_engine;
  /// This site's key, the channels' keyrings, saved session keys, the refusal counters.
  std::unique_ptr<session_keys> m_keys;
  /// Datagrams this daemon sent from its control socket (feedback and key requests); a site
  /// whose sessions are all silent keeps it at 0 (status file "datagrams_sent").
  std::uint64_t m_datagrams_sent = 0;
  net::batch_receiver m_receiver;
  /// Reads the control socket in the middle of a channel's batch (poll_control), so its own
  /// buffers are not m_receiver's, which hold that batch.
  net::batch_receiver m_key_poll_receiver{4, wire::max_datagram_size};
  static constexpr std::size_t max_control_per_key_poll = 16;
  std::mt19937_64 m_drop_rng;
  std::uint64_t m_dropped_by_option = 0;
  std::uint64_t m_read_pauses = 0;
  /// Unicast fallback clients, one per session in fallback.
  unicast_slots m_unicast;
  /// The signed sessions taken within max_session_age, kept in TEMP/replay
  /// (receiver/io/replay_store.hpp): a recorded session replayed later is refused.
  std::unique_ptr<replay_store> m_replay;
  /// Heartbeat budgets, the newest heartbeat per stream, and what a heartbeat asks for.
  heartbeat_intake m_heartbeats;
  log_limiter m_stale_sessions_logged{20};
  std::optional<time_point> m_timer_at;
  bool m_stopping = false;
  /// The thread of m_io: handlers, store callbacks and the engine's calls all run there
  /// (common/sys/single_thread.hpp).
  single_thread m_io_thread;
  bool m_stop_finished = false;
  /// sequence_book::changes() as of the last write of TEMP/sequences.
  std::uint64_t m_sequences_saved = 0;
  // Status HTTP server (daemon_http.cpp).
  status_board m_board;
  status_port m_status;
  boost::asio::steady_timer m_sample_timer;
  /// WIS2 notification publishers, each with the index of its channel.
  std::vector<std::pair<std::size_t, std::unique_ptr<wis2_publisher>>> m_wis2;
  /// Catch-up over HTTP(S) of silent channels: the numbers missed, the client, its timer.
  catch_up_runner m_catch_up;
};

}  // namespace mcdist::receiver
