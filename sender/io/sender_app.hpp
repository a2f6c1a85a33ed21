#pragma once
/// @file
/// The Asio shell of mcdist-send: one io_context on one thread runs the socket, the timer and
/// the pacing loop around a sender_session; hashing runs on its own thread.

#include "common/auth.hpp"
#include "common/endpoint.hpp"
#include "common/net/udp.hpp"
#include "common/sys/single_thread.hpp"
#include "common/unicast/io/server.hpp"
#include "sender/core/sender_session.hpp"
#include "sender/io/block_reader.hpp"
#include "sender/io/digest_source.hpp"
#include "sender/io/file_hasher.hpp"
#include "sender/io/file_set.hpp"
#include "sender/io/parity_source.hpp"
#include "sender/io/summary.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mcdist::sender {

/// What a running session is doing, as its owner shares out the rate and the session slots of
/// a channel (mcdist-feed).
struct session_activity {
  /// It has data to send: its core's phase is `transferring` (a pass or repairs under way, as
  /// against announcing, waiting for NAKs or ending). mcdist-feed divides its rate among the
  /// sessions that have data, so one waiting for a round trip does not hold its share idle.
  bool wants_data = true;
  /// sender_session::lingering(): every site that registered is done and the session only
  /// waits for listed sites to register; such a session holds none of its channel's
  /// `concurrent_sessions` slots.
  bool lingering = false;
  bool operator==(const session_activity&) const = default;
};

/// Settings of one run of mcdist-send beyond the session's own.
struct app_options {
  endpoint group;      ///< multicast group + port
  endpoint interface;  ///< local address (port = our control port, 0 = any)
  /// The interface multicast leaves by (common/net/interface.hpp resolve_interface): its
  /// index (0: the kernel picks by address or route) and name, for the log.
  unsigned interface_index = 0;
  std::string interface_name;
  int ttl = 1;
  bool progress = false;  ///< draw a progress line on stderr
  std::optional<std::string> summary_json;
  bool digest_cache = true;  ///< record digests hashed during the session in the files' xattr
  /// Unicast fallback server: the port its UDP (SCTP encapsulation) and TCP listeners use on
  /// the interface address; 0 = ephemeral. Not started when the fallback is off.
  std::uint16_t unicast_port = 0;
  /// TCP congestion control for fallback connections ("bbr", "cubic"; empty = system default).
  std::string tcp_congestion;
  /// Sign the session (--key): every datagram is authenticated (common/auth.hpp, wire
  /// version 2). Empty: version 1, which any host could forge.
  std::optional<crypto::identity> identity;
  /// Sites whose keys are pinned (--site-keys): only they may register, each with its key.
  std::map<std::string, crypto::key32, std::less<>> site_keys;
  /// Encrypt the session (--encrypt; needs identity and site_keys): manifest, digest lists and
  /// data payloads are encrypted under the session key (common/auth.hpp, docs/security.md
  /// "Encrypted sessions"); the unicast fallback seals its frames under per-site keys
  /// (common/unicast/record_seal.hpp).
  bool encrypt = false;
  /// A unicast fallback server shared by every session of the process (mcdist-feed: usrsctp is
  /// one stack per process, one listener port): grants go there, naming this session's files,
  /// and its owner routes the server's events to on_unicast_start and on_unicast_end by
  /// session id. Null: the session starts a server of its own (mcdist-send). Must outlive the
  /// session.
  unicast::server* shared_unicast = nullptr;
  /// A hub of several (mcdist-feed with a PostgreSQL journal): the steady_clock time, in ns
  /// since its epoch, after which this session must not send another datagram because its hub
  /// may no longer hold the channel's lease (feed/lease_keeper.hpp). Written by the lease
  /// thread, read before every round of sending: a session whose io thread was held up past
  /// the fence stops on its next wake-up without sending, whatever order its timers fire in.
  /// Null: no fence (a single sender).
  const std::atomic<std::int64_t>* fence = nullptr;
  /// Told when the session's activity changes (session_activity), posted to the io_context.
  /// A session counts as having data and not lingering until its first call says otherwise.
  /// Empty: not told.
  std::function<void(session_activity)> on_activity;
};

/// Reads a site key file for --site-keys: one site per line, "ID KEY" where KEY is
/// "mcdist-ed25519:BASE64" or the path of a public key file; '#' starts a comment.
/// @throws crypto::key_error naming the file, the line and the problem
std::map<std::string, crypto::key32, std::less<>> read_site_keys(const std::string& file);

/// Runs one session to its end.
class sender_app {
 public:
  /// A signed session with relays: how long its END waits at least, once every receiver
  /// completed, for relays behind relays to be delegated (sender_config::relay_end_wait; the
  /// core waits 4 GRTT when that is longer). Two seconds: a relay's request passed on by the
  /// relay in front, over a geostationary hop, with room for a second level of nesting.
  static constexpr duration relay_end_wait = std::chrono::seconds(2);

  /// @param files   the file set (digests of small files already filled in)
  /// @param started when the program started, for wall_seconds
  /// @throws std::system_error when the socket cannot be set up
  sender_app(boost::asio::io_context& io, app_options opts, sender_config cfg,
             std::vector<source_file> files, std::shared_ptr<spdlog::logger> log,
             std::chrono::steady_clock::time_point started);
  ~sender_app();

  /// Runs the io_context until the session is done (mcdist-send): SIGINT/SIGTERM abort the
  /// session, a second one stops the io_context at once. @return the outcome
  run_result run();

  /// Starts the session on the shared io_context and returns (mcdist-feed: several sessions,
  /// one per channel, run at once on the daemon's io_context). No signal handling and no
  /// io_context::stop(): `done` is posted to the io_context once the session has ended and
  /// every operation of this object was cancelled, so `done` may destroy the sender_app (the
  /// destruction must itself be posted, see feed/channel_runner). Call once, instead of run().
  void start(std::function<void(run_result)> done);

  /// Stops waiting for listed site `id` to register (sender_session::stop_awaiting): its
  /// owner learned that the site is down. Safe from any handler on the io_context's thread.
  void stop_awaiting(const std::string& id);

  /// Changes the multicast rate of the running session (bit/s, 0 = unpaced): the pacer uses it
  /// from the next datagram on. Safe from any handler on the io_context's thread.
  void set_rate(std::uint64_t rate_bps);
  /// The multicast rate in force, bit/s.
  std::uint64_t rate_bps() const { return m_session.rate_bps(); }

  /// Aborts the running session (daemon shutdown): END(aborted) is sent and `done` follows.
  void abort(const std::string& why);

  /// A receiver's unicast session of this session started / ended (the unicast server's
  /// events; the shared server's owner routes them here by session id).
  void on_unicast_start(const unicast::session_info& info);
  void on_unicast_end(const unicast::session_info& info, const std::error_code& ec,
                      const std::string& detail);

 private:
  void service();
  void begin();
  run_result result() const;
  void send_data(time_point now);
  void collect_digests(time_point now);
  /// Sends m_pending from m_pending_pos, building what is not built yet (build_pending).
  /// @return true when all of it went; false when the socket is full (a wait for writability
  ///         is armed; what was built is kept for the retry) or after fail()
  bool flush_pending(time_point now);
  /// Lays m_pending[m_pending_pos, end) out in m_gso_buffer as GSO runs (m_runs) and builds
  /// every datagram: payload read or copied, header, parity, seal. @return false after fail()
  bool build_pending(std::string& why);
  /// Block digest sessions: builds and multicasts the block digests the core queued (first
  /// copies are built, hashed and signed by m_digest_source). @return false after fail()
  bool send_digest_windows();
  /// Block digest sessions: copies m_pending[first, last) as m_digest_source built them to
  /// `base` (within m_gso_buffer), `segment` apart. @return false after fail()
  bool copy_built(std::size_t first, std::size_t last, std::size_t segment, std::byte* base);
  /// Reads the payloads of m_pending[first, last) into their slots from `base` (within
  /// m_gso_buffer; datagram i at (i - first) x segment, payload after the header).
  /// @return an error with `why`
  std::error_code read_payloads(std::size_t first, std::size_t last, std::size_t segment,
                                std::byte* base, std::string& why);
  /// Sends what the session core queued: in an authenticated session, sealed first, the
  /// announces of the batch together (one signature per announce tree,
  /// auth::sender_keys::seal_announces).
  void flush_control();
  /// Seals m_control_batch into m_sealed (length 0: not sealed, not sent).
  void seal_batch();
  void arm_timer(time_point now);
  void do_receive();
  /// One datagram from the socket: opened (authenticated sessions; a key request is answered
  /// at once) and handed to the session core.
  void on_feedback(std::span<const std::byte> d, const endpoint& from, time_point now);
  /// Reads what the socket holds now, without waiting: flush_control calls it between the
  /// announce chunks of a burst, so a site's key request is answered while the burst is still
  /// being sent instead of after it (docs/benchmarks.md "Key exchange during the announce
  /// burst").
  void poll_feedback();
  void do_wait_writable();
  void draw_progress(bool final_line);
  void fail(const std::string& why);
  void start_unicast_server(const sender_config& cfg);
  void register_fallbacks();
  /// Answers the key request m_keys just consumed, and tells the session core that the site
  /// holds the session key (for the start of pass 1) once the answer is sent.
  void send_key_reply(const endpoint& to, time_point now);

  /// The file set as a unicast::byte_source, reading through its own block_reader.
  class file_source final : public unicast::byte_source {
   public:
    explicit file_source(const std::vector<source_file>& files) : m_files(files), m_reader(files) {}
    std::uint32_t file_count() const override { return static_cast<std::uint32_t>(m_files.size()); }
    std::uint64_t size(file_index f) const override { return m_files[f.value].entry.size; }
    std::error_code read(file_index f, std::uint64_t offset, std::span<std::byte> out) override;

   private:
    const std::vector<source_file>& m_files;
    block_reader m_reader;
  };

  /// Notifies app_options::on_activity when the session's activity changed.
  void note_activity();

  boost::asio::io_context& m_io;
  app_options m_opts;
  session_activity m_activity;  ///< as last told to app_options::on_activity
  std::vector<source_file> m_files;
  std::shared_ptr<spdlog::logger> m_log;
  std::chrono::steady_clock::time_point m_started;
  net::udp::socket m_socket;
  boost::asio::steady_timer m_timer;
  boost::asio::steady_timer m_progress_timer;
  boost::asio::signal_set m_signals;
  sender_session m_session;
  block_reader m_reader;
  /// Parity blocks of a session sent with FEC (--fec-k); null otherwise.
  std::unique_ptr<parity_source> m_parity;
  /// Parity blocks coded per service() round at most (gf16_parity_bytes_per_round); SIZE_MAX:
  /// no limit (GF(2^8), or no parity).
  std::size_t m_parity_per_round = SIZE_MAX;
  /// Silent signed sessions: the windows of datagrams built, hashed and signed ahead (block
  /// digests, docs/security.md); null otherwise.
  std::unique_ptr<digest_source> m_digest_source;
  net::batch_sender m_batch;
  net::batch_receiver m_receiver;
  std::unique_ptr<file_source> m_source;
  std::unique_ptr<unicast::server> m_unicast;  ///< a server of its own (no shared_unicast)
  /// The fallback server in use: m_unicast, or app_options::shared_unicast; null when off.
  unicast::server* unicast_server() const {
    return m_opts.shared_unicast ? m_opts.shared_unicast : m_unicast.get();
  }
  /// Fallback hashing of files the block reader could not hash in order.
  std::vector<std::unique_ptr<background_hasher>> m_hashers;
  std::vector<std::uint32_t> m_fallback_index;
  std::uint32_t m_block_size;
  session_id m_session_id;
  /// Bytes after each data and parity payload: the GMAC tag of a signed session, none in an
  /// unsigned or a block digest session.
  std::size_t m_data_trailer;
  /// The session's keys when it is signed (app_options::identity).
  std::unique_ptr<auth::sender_keys> m_keys;
  std::vector<std::byte> m_control_buffer;
  std::vector<control_send> m_control_batch;  ///< flush_control: what the core queued, in order
  /// flush_control: m_control_batch sealed, each with room for its trailer, and its sealed length.
  std::vector<std::vector<std::byte>> m_sealed;
  std::vector<std::size_t> m_sealed_len;
  std::vector<auth::sender_keys::announce_slot> m_announce_slots;  ///< seal_batch's announces
  std::vector<std::size_t> m_announce_index;  ///< their places in m_control_batch
  std::vector<data_send> m_sends;
  std::vector<data_send> m_pending;  ///< taken from the session, not yet accepted by the socket
  std::size_t m_pending_pos = 0;
  /// m_pending[m_pending_pos, m_built_end) is built in m_gso_buffer, as m_runs say.
  std::size_t m_built_end = 0;
  /// One GSO run of m_pending as build_pending laid it out in m_gso_buffer: datagrams from
  /// m_pending[first], run.count() of them.
  struct built_run {
    std::size_t first = 0;
    net::gso_run run;
  };
  std::vector<built_run> m_runs;
  std::vector<net::gso_run> m_run_views;  ///< flush_pending: the runs not sent yet
  std::vector<std::byte> m_gso_buffer;
  std::vector<iovec> m_payload_iov;  ///< read_payloads: one run of consecutive blocks
  bool m_waiting_writable = false;
  bool m_timer_armed = false;
  std::optional<time_point> m_timer_at;
  std::string m_error;
  std::uint64_t m_last_progress_bytes = 0;
  std::chrono::steady_clock::time_point m_last_progress_time;
  int m_interrupts = 0;
  /// start(): the completion to post when the session is done (empty for run()).
  std::function<void(run_result)> m_done;
  /// The thread of m_io: the session, its sockets and the unicast server are used there only
  /// (common/sys/single_thread.hpp).
  single_thread m_io_thread;
  bool m_completed = false;
  /// The fence (app_options::fence) passed: the session was stopped without a further datagram.
  bool m_fenced = false;
  /// True, and the session stopped, when the fence has passed at `now`.
  bool fence_passed(std::chrono::steady_clock::time_point now);
  /// Ends the session's I/O and reports the result (the end of service()'s done path).
  void finish(time_point now);
};

}  // namespace mcdist::sender
