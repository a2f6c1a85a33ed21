#pragma once
/// @file
/// mcdist-feed's engine on the daemon's io_context: spool products go through
/// the hub journal's durable outbox into per-channel batches; each batch is one signed session
/// (sender_app::start) numbered by the channel's sequence; channels send at once and share the
/// total rate by strict priority (arbiter.hpp); after a session every product x site outcome is
/// journaled and the spool file disposed of (delete / move / keep), with a copy kept in the
/// retained directory for catch-up and resend. Sites that report sequence gaps in REGISTER get
/// a catch-up session of the retained products; an operator's resend is served the same way.
///
/// A channel runs up to `concurrent_sessions` sessions at once (batches, catch-ups and resends
/// together, sharing the channel's rate equally), so a short product is not held behind a long
/// field of its own channel, and other channels go on by priority (a warning never waits for a
/// model field). A new version of a product waits while a session of its channel still sends
/// an older one, so versions reach the sites in order.
///
/// With a PostgreSQL journal several hubs run the same configuration against it and one sends
/// each channel: the one holding its lease (lease_keeper.hpp). A channel is `active` here while
/// this hub holds its lease, else `standby`: no spool intake, no session, no heartbeat. On
/// taking a channel the hub reads its state from the journal: the batches the previous holder
/// left open are sent again under their own numbers (sites hold what they completed, and see no
/// gap), then the queue. On losing it (the lease passed to another hub, a round that could not
/// renew it before its fence, or a journal write that failed) the channel's sessions stop
/// without another datagram and leave the journal as it was, for the next holder.

#include "common/sys/single_thread.hpp"
#include "common/unicast/io/server.hpp"
#include "feed/arbiter.hpp"
#include "feed/batcher.hpp"
#include "feed/control_protocol.hpp"
#include "feed/feed_board.hpp"
#include "feed/feed_config.hpp"
#include "feed/heartbeat_service.hpp"
#include "feed/journal.hpp"
#include "feed/lease_keeper.hpp"
#include "feed/loss_book.hpp"
#include "feed/spool_file.hpp"
#include "feed/spool_watcher.hpp"
#include "feed/wis2_input.hpp"
#include "feed/wis2_seen.hpp"
#include "sender/io/sender_app.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mcdist::feed {

/// Products to send again to some sites, outside the channel's numbered batches.
struct extra_request {
  session_kind kind = session_kind::catchup;  ///< catchup or resend
  std::set<std::string> sites;                ///< only these sites take part
  std::map<std::int64_t, product> products;   ///< by journal id (merging requests dedups)
  /// Catch-up: the channel's sequence ranges the products come from (sender_config
  /// catch_up_seqs), so sites that complete it stop reporting them missing.
  std::set<wire::seq_span> seqs;
  bool unicast = false;  ///< resend --unicast: every site over unicast
};

/// An operator's resend (mcdistctl resend): which products, to which sites.
struct resend_order {
  std::vector<std::string> sites;
  product_filter filter;  ///< retained products matching it ...
  /// ... or, when set, the products the journal lists as missing at these sites since then
  std::optional<wall_time> missing_since;
  bool unicast = false;
};

/// Products of a resend by channel name (feed_daemon::find_resend).
using resend_products = std::map<std::string, std::vector<product>, std::less<>>;

/// The hub daemon's engine.
class feed_daemon {
 public:
  /// Opens the journal and reads the keys. Sessions start only after start().
  /// @throws config_error (keys), sqlite::error / std::runtime_error (journal)
  feed_daemon(boost::asio::io_context& io, feed_config cfg, std::shared_ptr<spdlog::logger> log);
  ~feed_daemon();
  feed_daemon(const feed_daemon&) = delete;
  feed_daemon& operator=(const feed_daemon&) = delete;

  /// Recovers the outbox after a crash (unfinished batches are queued again, open sessions
  /// closed as aborted), queues what the journal holds, starts the spool watcher (which scans
  /// every spool) and the retention timer. @throws std::system_error (spools)
  void start();

  /// Shutdown: no new session starts; running sessions are aborted (END sent to the sites),
  /// their outcomes journaled and their products queued again for the next start; then
  /// `done` is posted.
  void stop(std::function<void()> done);

  /// Reloads the configuration `source` gives (SIGHUP), after checking it (parse, keys,
  /// receivers in site_keys); an invalid one is logged and changes nothing. Channels are
  /// matched by name: an added one's spools are watched and scanned; a removed one starts no
  /// new session (the one under way finishes; its queued products stay queued in the journal)
  /// and its spools are no longer watched; a kept one takes its new settings from its next
  /// batch (priority, share, cap, batching, group, receivers, after, spools). site_keys and
  /// retention are re-read; interface, key_file, rate, journal, retained_dir, control socket
  /// and http need a restart (logged, kept). Logs a one-line summary.
  /// @return true when applied
  bool reload(const std::function<feed_config()>& source);

  /// The configuration in force (channel indexes stable: removed channels stay, retired).
  const feed_config& config() const noexcept { return m_cfg; }

  /// Channels, running sessions, queue depths and rates, for `mcdistctl status`.
  nlohmann::json status() const;

  /// Queues a resend: one session per channel concerned, merged with a resend already waiting
  /// there. @return "products" (count), "bytes", "channels" {name: count}, "session": "" (the
  /// sessions are queued behind the channels' running ones)
  /// @throws std::invalid_argument when no site is given or nothing matches
  nlohmann::json resend(const resend_order& order);

  /// A resend's lookup alone, on any connection to the journal (daemon_handler.hpp runs it on its
  /// query worker's read-only one): the retained products the order selects, by channel.
  /// @throws std::invalid_argument when no site is given; sqlite::error
  static resend_products find_resend(hub_journal& journal, const resend_order& order);

  /// A resend's second half, on the io thread: queues the looked-up products (resend() =
  /// queue_resend(order, find_resend(journal(), order))). Products of channels no longer
  /// configured are skipped. Same answer and errors as resend().
  nlohmann::json queue_resend(const resend_order& order, resend_products by_channel);

  /// The journal, read-write, for the io thread only (mcdistctl's queries do not use it: they
  /// run on daemon_handler's query workers (daemon_handler.hpp) with read-only connections).
  hub_journal& journal() { return *m_journal; }

  /// The journal file (for read-only connections of other threads).
  const std::filesystem::path& journal_path() const noexcept { return m_cfg.journal; }

  /// True when this hub shares its journal with others (PostgreSQL) and sends a channel only
  /// while it holds its lease.
  bool clustered() const noexcept { return m_keeper != nullptr; }
  /// The hub's key (std::nullopt: unsigned sessions). Read once at construction and never
  /// changed (a reload keeps it), so the product server takes a copy.
  const std::optional<crypto::identity>& identity() const noexcept { return m_identity; }

  /// Counters, sites and recent products since the start, for the status port (feed_http).
  const feed_board& board() const noexcept { return m_board; }

 private:
  struct running {
    std::size_t channel = 0;  ///< index of its channel
    std::unique_ptr<sender::sender_app> app;
    session_kind kind = session_kind::batch;
    std::uint64_t seq = 0;
    std::int64_t row = 0;           ///< journal session row
    std::vector<product> products;  ///< file index i of the session = products[i]
    /// products[i] as opened for the session (spool_file.hpp): sent, retained, announced and
    /// disposed of through this, never by its path again.
    std::vector<opened_product> opened;
    std::vector<std::string> only;  ///< catch-up/resend sites
    /// A catch-up's ranges of the channel's numbers: a site it names that reports them again
    /// while it runs (a heartbeat during a long catch-up) is not caught up twice.
    std::set<wire::seq_span> catch_up_seqs;
    rate_claim claim;
    /// It has data to send (sender::session_activity): only such sessions share the rate;
    /// the others get the floor, enough for announces and markers. Rate auto: always.
    bool wants_data = true;
    /// It only waits for listed sites to register (sender::session_activity): it holds none
    /// of the channel's concurrent_sessions slots.
    bool lingering = false;
    bool rate_auto = false;
    /// Stopped because the channel was lost: its end is not journaled (the next holder sends
    /// it again) and its spool files stay.
    bool fenced = false;
  };
  struct channel_state {
    const channel_config* cfg = nullptr;
    batcher batch;
    std::unique_ptr<boost::asio::steady_timer> timer;
    /// Its sessions under way, oldest first: another starts while fewer than
    /// cfg->concurrent_sessions of them are busy (not lingering) and fewer than twice that run
    /// in all (slot_free).
    std::vector<std::unique_ptr<running>> runs;
    std::deque<extra_request> extras;
    bool last_was_extra = false;
    std::uint64_t sessions = 0;
    bool retired = false;  ///< a reload removed it: no new session
    /// Interrupted batches to send again under their own numbers, before anything new.
    std::deque<open_batch> repeats;
    /// The channel's newest number (heartbeats): the journal's, cached on the io thread.
    std::uint64_t last_seq = 0;
    /// This hub sends the channel (a single hub: always; a cluster: while it holds the lease).
    bool active = false;
    std::uint64_t epoch = 0;            ///< the lease's epoch (cluster)
    std::optional<wall_time> acquired;  ///< when this hub took the lease (database clock)
    std::chrono::steady_clock::time_point role_since{};  ///< when it became active or standby
    std::chrono::steady_clock::time_point fence{};       ///< the lease's fence (lease_keeper.hpp)
    std::unique_ptr<boost::asio::steady_timer> fence_timer;
    std::string lost_reason;  ///< why it is standby after being active ("" before)
    std::uint64_t takeovers = 0;
    /// The FEC block size of the channel's latest session (fec_k "auto" chooses it per
    /// session; 0: none yet).
    std::uint32_t fec_k_now = 0;
    std::uint32_t fec_k_logged = 0;  ///< the k the log last named (0: none)
    /// Listed sites that did not register in the channel's latest batch session (down): its
    /// next sessions do not wait for them (sender_config::not_awaited) until they are heard
    /// again (registered in a session, or a gap report).
    std::set<std::string, std::less<>> absent;
  };

  /// Takes channel `ch` (its lease granted, or a single hub's start): recovers its open
  /// batches and queue from the journal.
  void take_channel(std::size_t ch, std::uint64_t epoch, std::optional<wall_time> acquired);
  /// Stops channel `ch` (see the class): sessions fenced, queues dropped, heartbeats off.
  void lose_channel(std::size_t ch, const std::string& why);
  void on_lease_report(lease_report r);
  void arm_fence(std::size_t ch);
  /// Runs `f`, a journal step for channel `ch` (all channels: npos). A failure in a cluster
  /// loses the channel(s) and returns false; a single hub's failure propagates (the daemon
  /// exits and systemd restarts it, as before).
  template <class F>
  bool guarded(std::size_t ch, const char* what, F&& f);
  void on_found(spooled_file f);
  void flush_found();
  void queue_product(std::size_t ch, const product& p);
  void maybe_start(std::size_t ch);
  void arm_batch_timer(std::size_t ch);
  /// `repeat_seq`: an interrupted batch sent again under its number (no new number).
  bool start_session(std::size_t ch, session_kind kind, std::vector<product> products,
                     const extra_request* extra, std::uint64_t repeat_seq = 0);
  void on_session_done(std::size_t ch, const running* which, sender::run_result r);
  /// True when a session of channel `ch` under way sends another version of `p` (or, with
  /// `same_too`, `p` itself): a batch holds a new version back, an extra session waits.
  bool name_in_flight(std::size_t ch, const product& p, bool same_too) const;
  /// Keeps channel_state::absent: a listed site `heard` (registered in a session, or sent a gap
  /// report) leaves it; one that did not register in batch session `seq` (0: not a batch of the
  /// whole group, which tells nothing) joins it. Logs each change.
  void note_presence(std::size_t ch, const std::string& site, bool heard, std::uint64_t seq);
  void record_outcomes(std::size_t ch, const running& run, const sender::run_result& r);
  void request_catch_up(std::size_t ch, const std::string& site,
                        const std::vector<wire::seq_span>& ranges);
  void add_extra(std::size_t ch, extra_request req);
  /// Keeps a sent product for catch-up and resend: a hard link to the file sent (`o`), else a
  /// copy of it. @return its path
  std::optional<std::string> retain(std::size_t ch, const product& p, const opened_product& o);
  /// The channel's `after`: delete, move or keep the spool file, if its name still leads to
  /// the file sent (`o`).
  void dispose_spool(std::size_t ch, const product& p, const opened_product& o);
  /// Refuses a spool file at intake (its name cannot be a product): journaled failed with
  /// `why`, moved below its spool's rejected_dir_name, logged.
  void reject(const spooled_file& f, const std::string& why);
  /// Every running session's rate, bit/s, in channel and session order: the channels whose
  /// sessions have data to send by strict priority (share_rate), each channel's rate split
  /// equally among those sessions (split_rate); a session with nothing to send (announcing,
  /// waiting for NAKs, ending) gets the floor of share_rate. With `adding`: only the rate of a
  /// session about to start on that channel, counted as having data.
  std::vector<std::uint64_t> session_rates(std::optional<std::size_t> adding) const;
  /// A session of channel `ch` started or stopped having data to send (the rates follow) or
  /// lingering (another session may start).
  void on_activity(std::size_t ch, session_id session, sender::session_activity a);
  /// Channel `cs` may start another session: fewer than concurrent_sessions of its sessions
  /// are busy (not lingering), and fewer than twice concurrent_sessions run in all. A session
  /// that waits only for a site that is down (register_timeout, the first session to miss it)
  /// then does not hold back the next warning of its channel, and the sessions of one hub stay
  /// well within a site's max_sessions_per_source.
  static bool slot_free(const channel_state& cs);
  void rebalance();
  void do_expire();
  void check_stopped();
  std::optional<std::size_t> channel_index(std::string_view name) const;

  boost::asio::io_context& m_io;
  feed_config m_cfg;
  std::shared_ptr<spdlog::logger> m_log;
  /// In a cluster every statement of the io thread's connection is bounded by the fencing
  /// margin: a call that began before the fence ends (or fails, losing the channel) before the
  /// lease can be granted to another hub, so the io thread never wakes to send past it.
  std::unique_ptr<hub_journal> m_journal;
  /// The cluster's lease thread (null: a single hub, every channel active).
  std::unique_ptr<lease_keeper> m_keeper;
  /// The latest lease round's report (the cluster's hubs and leases, the database's state).
  lease_report m_lease;
  std::optional<std::chrono::steady_clock::time_point> m_lease_ok_at;  ///< last good round
  bool m_lease_failing = false;  ///< the last round failed (logged once per outage)
  std::optional<crypto::identity> m_identity;
  /// m_cfg.interface resolved at start for the channels' family (a restart-only setting).
  net::resolved_interface m_interface;
  std::filesystem::path m_key_path;  ///< the key file read (key, or its systemd credential)
  std::map<std::string, crypto::key32, std::less<>> m_site_keys;
  std::vector<channel_state> m_channels;
  std::unique_ptr<spool_watcher> m_watcher;
  /// The unicast fallback server every session of every channel shares (one usrsctp stack per
  /// process, one SCTP-over-UDP and one TCP listener), its events routed to the session's app
  /// by session id; null when it could not start (sessions then fall back over TCP listeners
  /// of their own).
  std::unique_ptr<unicast::server> m_unicast;
  std::map<session_id, sender::sender_app*> m_apps;  ///< running sessions, for m_unicast's events
  void start_unicast();
  /// Every channel's heartbeats and the gap reports they bring back (null before start()).
  std::unique_ptr<heartbeat_service> m_heartbeats;
  /// The channels as the heartbeats see them (a retired one sends none).
  std::vector<heartbeat_channel> heartbeat_channels() const;
  /// The hub's own files (key, site keys, journal): never sent, even if a producer hard-links
  /// one into a spool.
  std::vector<file_identity> m_own_files;
  std::vector<spooled_file> m_found;  ///< reported, not yet enqueued (flush_found)
  boost::asio::steady_timer m_expire_timer;
  bool m_stopping = false;
  /// The thread of m_io: spool events, sessions, timers and control requests are handled there;
  /// the query workers touch their own journal connections only (common/sys/single_thread.hpp).
  single_thread m_io_thread;
  std::function<void()> m_stopped;
  feed_board m_board;
  /// The sites' reported loss of the multicast path, for channels with fec_k "auto".
  loss_book m_loss;
  /// `[wis2]`: announces each product of a batch once its session ended (nullptr: off).
  std::unique_ptr<wis2_publisher> m_wis2;
  /// Publishes the WNMs of a batch session's products (their SHA-256 from the digest cache the
  /// session wrote on the spool file, else hashed).
  void announce_wis2(std::size_t ch, const running& run);
  std::uint64_t m_reloads_ok = 0;
  std::uint64_t m_reloads_failed = 0;
  /// `[[wis2_input]]`: the notifications taken (the journal's WIS2 table, shared by every
  /// input so that duplicates across brokers are found) and the inputs (started by start(),
  /// stopped by stop()).
  /// The WIS2 input's notifications (a table of the SQLite journal); null with a PostgreSQL
  /// journal, beside which feed_config refuses [[wis2_input]].
  std::unique_ptr<wis2_seen> m_wis2_seen;
  std::vector<std::unique_ptr<wis2_input>> m_wis2_inputs;
  /// Starts every [[wis2_input]] with its pending journal rows; a pending row of an input no
  /// longer configured is failed.
  void start_wis2_inputs();
};

}  // namespace mcdist::feed
