#pragma once
/// @file
/// mcdistd's relays of one-way sessions (docs/design-notes.md "Relays"). A channel with
/// `relay_group` has, besides its channel socket, a relay socket: bound to an ephemeral port of
/// the relay interface's address and multicasting into relay_group. The daemon hands the
/// forwarder, as they arrive, each datagram it authenticated of a session silent here, and each
/// heartbeat it took; the forwarder copies them into a batch and sends them on byte for byte at
/// the end of the read (flush): one sendmmsg(2) for up to 64 datagrams, no pacing (they arrive
/// paced by the hub). The sites behind the relay take the relay socket's address for the
/// sender of the session (the source of its first announce) and check the hub's signatures
/// themselves: a relay can withhold or delay a product, never alter one.
///
/// Two-way sessions are relayed by running them for the sites behind (relay_downstream.hpp):
/// the relay answers its sites' registrations, NAKs and COMPLETEs from what it holds, and only
/// its own engine's NAKs go upstream. A signed one needs the hub's delegation of the session
/// to this relay (common/auth.hpp "Relays of signed two-way sessions"), and is relayed from the
/// first datagram after both the manifest and the delegation are here; the hub's signed
/// announces, digest lists and END are kept from its first datagram on. Encrypted sessions, and
/// signed ones the hub does not delegate within delegation_wait, are not relayed: they are
/// counted and logged once per session.
///
/// Catch-up goes through the relay (signed hub or not): the gap reports its sites
/// send it in answer to the relayed heartbeats, and the gaps their REGISTERs name in the
/// sessions it runs, go into a gap_book; a gather time after each hub heartbeat the relay sends
/// the hub one gap report of its own for the whole subtree, and runs the catch-up the hub then
/// sends it (named to the relay) for the sites that reported the numbers. Other datagrams that
/// reach a relay socket for no session it runs are read, counted and dropped.
///
/// Runs on the daemon's io thread. Memory: the batch (at most max_batch datagrams, copied into
/// a buffer of max_batch_bytes), a ring of the last delay_samples forwarding delays, per
/// channel a set of at most max_sessions_seen session ids, and at most max_ends ENDs kept for
/// end_memory.

#include "common/auth.hpp"
#include "common/endpoint.hpp"
#include "common/ids.hpp"
#include "common/log_limit.hpp"
#include "common/net/interface.hpp"
#include "common/net/udp.hpp"
#include "common/time.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/core/gap_book.hpp"
#include "receiver/io/daemon_config.hpp"
#include "receiver/io/relay_downstream.hpp"

#include <nlohmann/json_fwd.hpp>
#include <spdlog/fwd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_set>
#include <vector>

namespace mcdist::receiver {

class receiver_engine;

/// The relay sockets by channel index (the daemon's channel indexes; a channel without
/// relay_group has none).
class relay_forwarder {
 public:
  /// Datagrams held before a flush is forced (one sendmmsg call's worth).
  static constexpr std::size_t max_batch = 64;
  /// Bytes of datagrams held before a flush is forced.
  static constexpr std::size_t max_batch_bytes = 1 << 20;
  /// Forwarding delays (kernel arrival to the send call) kept for the quantiles in status.
  static constexpr std::size_t delay_samples = 4096;
  /// Session ids remembered per channel to count sessions and log each unrelayed one once;
  /// the set is forgotten whole when full.
  static constexpr std::size_t max_sessions_seen = 4096;
  /// How long an END is kept for its repeats, and how many are kept at most.
  static constexpr std::chrono::seconds end_memory{10};
  static constexpr std::size_t max_ends = 64;
  /// SO_SNDBUF of a relay socket, bytes: a read's worth of datagrams of a 1 Gbit/s channel.
  static constexpr int send_buffer_bytes = 8 << 20;

  /// Per relayed channel.
  struct counters {
    std::uint64_t forwarded = 0;              ///< datagrams sent on (heartbeats included)
    std::uint64_t forwarded_bytes = 0;        ///< their bytes
    std::uint64_t heartbeats = 0;             ///< heartbeats among them
    std::uint64_t sessions = 0;               ///< distinct sessions relayed
    std::uint64_t not_relayed_sessions = 0;   ///< two-way sessions, not relayed
    std::uint64_t not_relayed_datagrams = 0;  ///< their datagrams
    std::uint64_t send_failed = 0;     ///< datagrams the socket refused (buffer full, errors)
    std::uint64_t site_datagrams = 0;  ///< datagrams that arrived on the relay socket (dropped)
    /// Two-way sessions run for the sites behind (relay_downstream), and of their sites'
    /// datagrams those taken (registrations, NAKs, COMPLETEs, to a session it runs).
    std::uint64_t two_way_sessions = 0;
    std::uint64_t two_way_site_datagrams = 0;
    /// What finished two-way sessions sent (the running ones are added in status()).
    relay_downstream::counters two_way;
    std::uint64_t two_way_sites_completed = 0;  ///< sites that completed them
    std::uint64_t two_way_sites_failed = 0;     ///< sites failed by them
    /// Catch-up through the relay: its sites' gap reports taken into the gap book, and those
    /// refused (malformed, on a channel that does not gather them, the book full).
    std::uint64_t gap_reports_taken = 0;
    std::uint64_t gap_reports_refused = 0;
    /// The relay's own gap reports upstream that carried its sites' gaps.
    std::uint64_t subtree_reports_sent = 0;
    /// Catch-up sessions of the hub (named to the relay) run for the sites behind.
    std::uint64_t catch_ups = 0;
    /// Signed two-way sessions run under the hub's delegation (of two_way_sessions).
    std::uint64_t signed_sessions = 0;
    /// Relays behind this one asking the hub for their delegation (for_origin key requests):
    /// passed upstream, the hub's answers passed back, and requests dropped (a session not run
    /// signed here, past origin_requests_per_second, malformed).
    std::uint64_t origin_requests = 0;
    std::uint64_t origin_replies = 0;
    std::uint64_t origin_dropped = 0;
  };
  /// Two-way sessions run at once per relayed channel; past it a new one is not relayed.
  static constexpr std::size_t max_two_way_sessions = 64;
  /// How long a signed session whose manifest is complete here waits for the hub's delegation
  /// before it is given up as not relayed (the relay asks auth::max_delegation_asks times, one
  /// round trip each).
  static constexpr std::chrono::seconds delegation_wait{10};
  /// How often a session waiting for its delegation is looked at again without a datagram of it.
  static constexpr std::chrono::milliseconds delegation_poll{200};
  /// Relays behind this one ask the hub for their delegation through it (for_origin key
  /// requests, which only the hub can check): at most this many are passed upstream per second
  /// and relayed channel, and each waits origin_wait for the hub's answer, at most
  /// max_origin_pending at once (the oldest forgotten first). A relay asks
  /// auth::max_delegation_asks times per session.
  static constexpr unsigned origin_requests_per_second = 20;
  static constexpr std::chrono::seconds origin_wait{10};
  static constexpr std::size_t max_origin_pending = 64;
  /// What the daemon's keyring knows of a signed session's delegation to this relay
  /// (auth::receiver_keys::delegation): the delegation once it came, or that the hub refused
  /// it (or the session is encrypted, which a relay does not serve).
  struct delegation_state {
    std::optional<auth::relay_delegation> delegation;
    bool refused = false;
  };
  using delegation_fn = std::function<delegation_state(session_id)>;
  /// How long after a hub heartbeat the relay sends its gap report upstream: its sites answer
  /// the heartbeat it passed on within their round trip to it (milliseconds on a LAN), and the
  /// hub takes one report per site and half heartbeat interval (1 s at the shortest), so the
  /// relay's one report must carry theirs. A site that answers later is in the next report.
  static constexpr std::chrono::milliseconds gap_gather{300};
  /// Sends a relay's gap report upstream to `hub` from the daemon's control socket, signed by
  /// this site's key when `sign` (the hub's heartbeat was signed); false when it was not sent.
  using report_fn =
      std::function<bool(const endpoint& hub, const wire::gap_report& report, bool sign)>;
  /// Sends `d` as it is to `hub` from the daemon's control socket (where the hub's answer comes
  /// back); false when it was not sent.
  using upstream_fn = std::function<bool(const endpoint& hub, std::span<const std::byte> d)>;

  /// @param daemon_interface  the daemon's resolved interface: a channel without
  ///        relay_interface relays from it
  relay_forwarder(boost::asio::io_context& io, net::resolved_interface daemon_interface,
                  std::shared_ptr<spdlog::logger> log);
  ~relay_forwarder();
  relay_forwarder(const relay_forwarder&) = delete;
  relay_forwarder& operator=(const relay_forwarder&) = delete;

  /// Opens channel `index`'s relay socket when `ch` has relay_group (else only notes the
  /// index), and starts reading it. Indexes come in order, as the daemon's channels.
  /// @throws config_error when relay_interface does not resolve; std::system_error when the
  ///         socket cannot be opened or bound
  void open(std::size_t index, const channel_config& ch);
  /// Resolves `ch`'s relay interface as open would (a reload checks before it changes anything).
  /// @throws config_error naming the channel
  void check(const channel_config& ch) const;
  /// True when channel `index` relays.
  bool relays(std::size_t index) const noexcept {
    return index < m_relays.size() && m_relays[index] != nullptr;
  }
  /// True when `from` is one of the relay sockets (a datagram this host relayed came back:
  /// dropped, whatever the configuration of the routers).
  bool own_source(const endpoint& from) const noexcept;

  /// Queues `d`, an authenticated datagram of silent session `s` read on channel `index`, to
  /// be sent on at the next flush. @param arrival  when the kernel received it, if known
  void forward(std::size_t index, session_id s, std::span<const std::byte> d,
               std::optional<time_point> arrival);
  /// Keeps `d`, the END of silent session `s` that channel `index` authenticated and relayed,
  /// for end_repeat: the session closes here at its first END, and the hub's repeats of it
  /// could no longer be checked.
  void remember_end(std::size_t index, session_id s, std::span<const std::byte> d, time_point now);
  /// True when `d` is byte for byte an END remember_end kept for channel `index` and session
  /// `s` less than end_memory ago (Ed25519 signatures are deterministic: the hub's repeats are
  /// the same bytes), so it may be relayed without the session.
  bool end_repeat(std::size_t index, session_id s, std::span<const std::byte> d,
                  time_point now) const;
  /// Queues `d`, a heartbeat channel `index` took.
  void forward_heartbeat(std::size_t index, std::span<const std::byte> d,
                         std::optional<time_point> arrival);
  /// Counts a datagram of session `s`, which is not silent here, as not relayed (the first of
  /// each session is logged, ever more rarely past ten: log_limiter).
  void not_relayed(std::size_t index, session_id s);
  /// The relay's engine, asked whether a relayed session is still tracked upstream (and for
  /// its manifest); set once by the daemon before any datagram.
  void set_engine(const receiver_engine* engine) noexcept { m_engine = engine; }
  /// How the relay's gap reports go upstream; set once by the daemon (none: never sent).
  void set_report_sender(report_fn f) { m_send_report = std::move(f); }
  /// Where the delegations of signed sessions come from; set once by the daemon (none: signed
  /// two-way sessions are not relayed).
  void set_delegations(delegation_fn f) { m_delegation = std::move(f); }
  /// True while a signed session waits here for the hub's delegation (its manifest complete):
  /// the daemon keeps its keys after the session ended upstream, for the delegation to come.
  bool awaits_delegation(session_id s) const noexcept;
  /// Called when a session awaits_delegation no longer after it ended upstream (its keys may
  /// go); set once by the daemon.
  void set_keys_release(std::function<void(session_id)> f) { m_release = std::move(f); }
  /// How the delegation requests of relays behind this one go upstream; set once by the daemon
  /// (none: they are dropped).
  void set_upstream_sender(upstream_fn f) { m_send_upstream = std::move(f); }
  /// `d`, a register_reply that came to the daemon's control socket from `from`: when it
  /// answers a delegation request this relay passed upstream for a relay behind it (the same
  /// session and receiver id, from the host it was sent to, within origin_wait), it is sent on
  /// to that relay unopened. @return true when it was (the daemon drops it then)
  bool on_origin_reply(const wire::header& h, std::span<const std::byte> d, const endpoint& from,
                       time_point now);
  /// True when channel `index` gathers its sites' gap reports: it relays and may transmit.
  bool gathers_gaps(std::size_t index) const noexcept;
  /// Channel `index` (gathers_gaps) took a heartbeat from `hub` (`sign`: a signed one) whose
  /// newest number is `newest`; `own` is this relay's answer to it (its own gaps, perhaps
  /// none). A report still pending goes now; the sites' reports older than the previous
  /// heartbeat are forgotten (gap_book::next_generation); gap_gather later, `own` joined with
  /// its sites' gaps goes to `hub` (signed by this site when `sign`), when it names any number.
  void on_hub_heartbeat(std::size_t index, const endpoint& hub, wire::gap_report own,
                        std::uint64_t newest, bool sign = false);
  /// Where the parameters of the two-way sessions it runs are kept (the daemon's TEMP/relay,
  /// made if missing), so that after a restart it takes them up again for their sites. Set once
  /// by the daemon before any datagram. @throws std::filesystem::filesystem_error
  void set_state_dir(std::filesystem::path dir);
  /// Removes what set_state_dir's directory keeps of sessions the engine does not track (the
  /// daemon calls it once it restored its sessions).
  void forget_stale_states();
  /// `plain`, an authenticated datagram of session `h.session` (two-way here) on channel
  /// `index`, as the engine took it (`raw`: as it came). The session is run for the sites
  /// behind the relay (relay_downstream), from the first datagram after its manifest is
  /// complete here (and, signed, the hub's delegation came); a session resumed after a restart
  /// is taken up again from what set_state_dir's directory kept (signed: under a new
  /// delegation).
  /// A session named to this relay (only_receivers: a catch-up or a resend for its subtree) is
  /// run for the sites whose gap reports its catch-up ranges cover, or for every site when it
  /// covers none.
  /// @return false when the session is not relayed (with a unicast start; resumed without what
  ///         was kept of it; more than max_two_way_sessions): the caller counts it with
  ///         not_relayed. A signed session the hub does not delegate (an encrypted one among
  ///         them) is counted and logged here (true is returned).
  /// `from` is where it came from: the hub's session socket, where a relay behind this one's
  /// delegation requests go.
  bool on_upstream(std::size_t index, const wire::header& h, std::span<const std::byte> raw,
                   std::span<const std::byte> plain, const endpoint& from, time_point now);
  /// True when channel `index` runs session `s` for its sites (its END still matters there
  /// after the engine closed it).
  bool runs(std::size_t index, session_id s) const noexcept;
  /// The relay's storage delivered (ok) or failed file `f` of session `s`.
  void on_file_stored(session_id s, file_index f, bool ok);
  /// Sends what is queued. @param now  for the forwarding delays
  void flush(time_point now);
  /// Closes channel `index`'s relay socket (its channel was left).
  void close(std::size_t index);
  /// Cancels the sockets' pending reads (the daemon stops).
  void cancel_all();

  /// The status file's "relay": per relayed channel its name, group, source address, the
  /// counters, and the forwarding delay's p50 and p99 (us) over the last delay_samples
  /// datagrams. Empty array when no channel relays.
  nlohmann::json status(const std::vector<channel_config>& channels) const;
  /// Channel `index`'s counters, its running two-way sessions' included (nullopt when it does
  /// not relay).
  std::optional<counters> stats(std::size_t index) const;

 private:
  struct relay;
  struct queued {
    std::size_t index;
    std::size_t offset;
    std::size_t size;
    std::optional<time_point> arrival;
  };
  struct kept_end {
    std::size_t index;
    session_id session;
    std::vector<std::byte> bytes;
    time_point expires;
  };
  net::resolved_interface resolve(const channel_config& ch) const;
  void queue(std::size_t index, std::span<const std::byte> d, std::optional<time_point> arrival);
  void read_sites(std::size_t index);
  /// A datagram a site sent to channel `index`'s relay socket.
  void on_site(std::size_t index, std::span<const std::byte> d, const endpoint& from);
  /// A register_request a site sent for two-way session `down` on channel `index`: when it is
  /// a for_origin key request (a relay behind this one asks the hub for its delegation), it is
  /// passed upstream unopened. @return true when it was one (passed or dropped)
  bool on_origin_request(relay& r, const relay_downstream& down, const wire::header& h,
                         std::span<const std::byte> d, const endpoint& from, time_point now);
  /// A gap report a site sent to channel `index`'s relay socket.
  void on_gap_report(std::size_t index, std::span<const std::byte> d, const endpoint& from);
  /// Sends channel `index`'s pending gap report upstream, if any.
  void send_gap_report(std::size_t index);
  /// A finished two-way session's sites: what they reported missing and completed.
  void note_sites(relay& r, const relay_downstream& down, const sender::session_report& rep);
  /// Counts session `s` as not relayed on `r` (its first datagram only) and logs it with `why`,
  /// ever more rarely past ten sessions.
  void note_not_relayed(relay& r, session_id s, std::string_view why);
  /// Starts two-way session `s` of `r` for its sites from its kept parameters (r.params),
  /// manifest `files`, and for a signed one `sig`; logs it. @return the session, or null when
  /// its parameters are gone or a relay_downstream refuses them (logged, forgotten)
  relay_downstream* start_two_way(relay& r, session_id s, std::vector<manifest_entry> files,
                                  std::optional<relay_downstream::signed_session> sig,
                                  time_point now);
  /// Counts signed session `s` as not relayed and logs it once with `why` (appended to "the hub
  /// did not delegate it to this relay"), forgetting what was kept of it.
  void give_up_undelegated(relay& r, session_id s, std::string_view why);
  /// Services every two-way session and arms the timer for the earliest deadline.
  void service_two_way();
  /// The kept parameters of two-way session `s`: its run (0, then one more per restart) and
  /// its announce's session_params (`TEMP/relay/<session>`, "MCRS", run, the params); a signed
  /// session's copies of the hub's datagrams beside them (save_signed).
  void save_state(session_id s, std::uint32_t run, const wire::session_params& p) const;
  bool load_state(session_id s, std::uint32_t& run, wire::session_params& p) const;
  /// A signed session's copies of the hub's announces and digest lists
  /// (`TEMP/relay/<session>.signed`), kept beside its parameters.
  void save_signed(session_id s, const signed_copies& c) const;
  std::shared_ptr<signed_copies> load_signed(session_id s) const;
  void drop_state(session_id s) const;
  void arm(time_point at);

  boost::asio::io_context& m_io;
  net::resolved_interface m_daemon_interface;
  std::shared_ptr<spdlog::logger> m_log;
  /// Every two-way session's cache (relay_downstream); before m_relays, which it outlives.
  std::size_t m_cache_used = 0;
  std::vector<std::unique_ptr<relay>> m_relays;
  std::vector<queued> m_queue;
  std::vector<std::span<const std::byte>> m_run;  ///< flush's datagrams of one channel
  std::deque<kept_end> m_ends;
  std::vector<std::byte> m_buffer;
  std::array<std::uint32_t, delay_samples> m_delays{};
  std::size_t m_delays_taken = 0;
  log_limiter m_send_errors_logged{3};
  log_limiter m_not_relayed_logged{10};
  log_limiter m_site_datagrams_logged{3};
  log_limiter m_gap_reports_logged{3};
  report_fn m_send_report;
  delegation_fn m_delegation;
  upstream_fn m_send_upstream;
  std::function<void(session_id)> m_release;
  log_limiter m_origin_logged{10};
  const receiver_engine* m_engine = nullptr;
  std::filesystem::path m_state_dir;  ///< empty: nothing kept (tests without a daemon)
  boost::asio::steady_timer m_timer;
  std::optional<time_point> m_armed;  ///< when m_timer fires, if armed
  std::uint64_t m_seed;
};

}  // namespace mcdist::receiver
