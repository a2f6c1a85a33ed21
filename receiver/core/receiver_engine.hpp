#pragma once
/// @file
/// The receiver's protocol state machine (docs/architecture.md "Data flow in one session"):
/// assembles manifests, registers, takes blocks, NAKs what it misses behind the sender's progress
/// markers, asks storage to verify and deliver complete files, reports COMPLETE. One engine serves
/// every session of the daemon, from any number of senders and channels. Pure: no sockets, no
/// clock, no global randomness; actions go out through receiver_sink.

#include "common/block_map.hpp"
#include "common/byte_range.hpp"
#include "common/delivery_path.hpp"
#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "common/ids.hpp"
#include "common/manifest.hpp"
#include "common/time.hpp"
#include "common/transport.hpp"
#include "receiver/core/memory_budget.hpp"
#include "receiver/core/sequence_book.hpp"
#include "receiver/core/session_table.hpp"
#include "receiver/core/storage_port.hpp"
#include "receiver/core/unicast_fetch.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::wire {
class announce;
class session_params;
class marker;
class digest_list;
class register_reply;
class session_end;
class fallback;
class repair_advert;
class nak;
}  // namespace mcdist::wire

namespace mcdist::receiver {

struct nak_round;

/// Receiver settings. Durations are core-clock durations.
struct receiver_config {
  std::string id;  ///< this site's receiver id (configured, stable)
  /// Channels the daemon listens on: a checkpoint naming a channel index at or above this
  /// (the configuration lost a channel since it was written) is refused by restore() instead
  /// of reaching the daemon's channel table. 0: not checked (tests, tools).
  std::uint32_t channel_count = 0;
  /// A session whose sender is silent this long is abandoned (temp files removed).
  duration session_timeout = std::chrono::seconds(60);
  /// How often a receiving session's state is checkpointed for resume.
  duration checkpoint_interval = std::chrono::seconds(2);
  /// Floor of the REGISTER / COMPLETE retransmission interval (else 2 x GRTT).
  duration retransmit_min = std::chrono::milliseconds(20);
  /// Most sessions at once; announces of more are dropped (errc::too_many_sessions).
  std::uint32_t max_sessions = 64;
  /// Most sessions from one source address at once: 64 fake sessions from one host must not
  /// take every slot from a real sender, yet a hub runs several channels from one host, each
  /// with up to concurrent_sessions (2) besides catch-ups and resends (docs/design-notes.md
  /// "Budgets").
  std::uint32_t max_sessions_per_source = 16;
  /// Bytes of engine state one session may hold: its file table, manifest bitmaps and the
  /// block maps of its files (256 MiB: a 1,000,000-file manifest costs about 200 MiB, a
  /// 1 TB file of 1400-byte blocks a 90 MiB block map). Charged before allocating
  /// (memory_budget); an announce that needs more is dropped (errc::over_budget) and a file
  /// whose block map does not fit fails with reason "memory budget exceeded".
  std::uint64_t session_memory_bytes = std::uint64_t{256} << 20;
  /// Bytes of engine state all sessions together may hold (1 GiB: four sessions at their
  /// budget; the daemon's RSS stays bounded by this plus the storage pool).
  std::uint64_t total_memory_bytes = std::uint64_t{1} << 30;
  /// Most files one announce may declare (at most max_files_per_session).
  std::uint32_t max_files = max_files_per_session;
  /// GRTT taken from the sender is clamped to this: the session timeout is
  /// max(session_timeout, 10 x GRTT), and a forged GRTT must not stretch it to hours (5 s:
  /// above any real path's round trip, RFC 5740's GRTT upper bound is 15 s for satellite
  /// paths we do not serve).
  duration max_grtt = std::chrono::seconds(5);
  /// Most remembered ended sessions (tombstones); the oldest is forgotten first (4096 ids
  /// and expiry times: ~200 KB).
  std::size_t max_tombstones = 4096;
  /// Most NAK datagrams in one NAK round; the rest waits for the next marker.
  std::uint32_t max_nak_datagrams = 64;
  /// A file whose data fails SHA-256 verification is fetched again at most this many times.
  std::uint32_t max_digest_retries = 2;
  /// COMPLETE is repeated at most this many times without an acknowledgement.
  std::uint32_t max_complete_repeats = 20;
  /// Channels configured silent (`silent = true`, docs/design-notes.md "Silent sessions"),
  /// indexed by channel: every session on them is silent here, whatever its announce says.
  /// Sessions whose announce carries silent_passes are silent on any channel.
  std::vector<bool> silent_channels;
  /// Channels this host relays (mcdistd `relay_group`), indexed by channel. A silent session
  /// on one of them that completes here stays open until the sender's END (or
  /// session_timeout of silence), so the rest of its passes and its END are still
  /// authenticated here and relayed to the sites behind this one.
  std::vector<bool> relay_channels;
  /// The relay each channel is received through (mcdistd `behind_relay`), indexed by channel;
  /// "" for none. A session for named sites (only_receivers) that names it is this site's too.
  std::vector<std::string> upstream_relays;
};

/// A byte range of one file the receiver still needs (common/byte_range.hpp).
using mcdist::byte_range;

/// How a file ended on this receiver, for status pages and metrics (receiver_sink::file_finished).
struct file_outcome {
  session_id session{};
  std::uint32_t channel = 0;  ///< the channel the session came on
  std::string_view path;      ///< manifest path; valid during the call only
  std::uint64_t size = 0;     ///< bytes
  bool stored = false;        ///< verified and renamed into place; false: failed
  std::string_view failure;   ///< why it failed; empty when stored
  std::int64_t mtime_ns = 0;  ///< the manifest's mtime, ns since the Unix epoch
  /// The SHA-256 the stored file was verified against (manifest entry); nullptr when failed.
  const sha256_digest* digest = nullptr;
};

/// Actions the engine asks of its shell, other than storage (storage_port). Calls happen
/// synchronously inside engine calls.
class receiver_sink {
 public:
  virtual ~receiver_sink() = default;
  /// Send a unicast control datagram.
  virtual void send(const endpoint& to, std::span<const std::byte> datagram) = 0;
  /// The session is over for this receiver (the engine has already closed it in its
  /// storage_port): drop the shell's own state for it (keys, ...).
  /// @param remove_temp  false: its temp files stay for a resume
  virtual void session_closed(session_id s, bool remove_temp) = 0;
  /// Fetch `wanted` over unicast as `order` says (connect, pipeline every range); bytes come
  /// back through receiver_engine::on_unicast_data, the end through on_unicast_closed.
  virtual void start_unicast(session_id s, const unicast_order& order,
                             std::vector<byte_range> wanted) = 0;
  /// Open the transport `order` names now, without a token (order.token is zero), for a
  /// session served over unicast from the start (session_params.unicast_start; called right
  /// after the first REGISTER is sent): the hello and
  /// the requests follow when start_unicast brings the token, on these connections if the
  /// order names the same transport, server and connection count. Nothing comes back through
  /// the engine before that. The default does nothing (start_unicast then connects).
  virtual void prepare_unicast(session_id s, const unicast_order& order) {
    (void)s;
    (void)order;
  }
  /// Drop the session's unicast client, if any, prepared or running (no on_unicast_closed
  /// follows).
  virtual void stop_unicast(session_id s) = 0;
  /// A file was stored or failed for good (counted in receiver_stats::files_stored /
  /// files_failed at the same moment). Observation only; the default does nothing.
  virtual void file_finished(const file_outcome& outcome) { (void)outcome; }
  /// The sender key that signed session `s`'s announce (crypto::format_public_key text), asked
  /// when the session is first announced; empty for an unsigned session (the default), whose
  /// session numbers are then kept per sender name (sequence_book::source_of).
  virtual std::string sender_key(session_id s) {
    (void)s;
    return {};
  }
  /// A new session signed by `key` (sender_key's text) is about to be taken, stamped
  /// `created_unix_ms` (session_params; 0: not stamped): errc::ok takes it (and the shell has
  /// recorded it, durably, so its replay is refused later: receiver/core/replay_guard.hpp);
  /// any other code refuses it and is counted as the drop reason (replayed, expired,
  /// clock_skew, unstamped, replay_cache_unwritable). Asked once per session, after every
  /// other check has passed; unsigned sessions are not asked. The default takes every session.
  virtual errc admit_signed_session(session_id s, std::string_view key,
                                    std::uint64_t created_unix_ms) {
    (void)s;
    (void)key;
    (void)created_unix_ms;
    return errc::ok;
  }
};

/// Counters for logs and status.
struct receiver_stats {
  std::uint64_t datagrams = 0;
  std::uint64_t data_blocks = 0;  ///< new blocks taken
  std::uint64_t data_bytes = 0;
  std::uint64_t naks_sent = 0;
  std::uint64_t files_stored = 0;
  std::uint64_t files_failed = 0;
  std::uint64_t files_refused = 0;
  std::uint64_t sessions_completed = 0;
  std::uint64_t sessions_failed = 0;
  std::uint64_t parity_blocks = 0;     ///< parity blocks kept for decoding
  std::uint64_t blocks_recovered = 0;  ///< source blocks recovered from parity
  /// FEC block lacks left out of NAKs because this receiver had reported them this pass or the
  /// sender advertised enough parity pending (nak_scheduler.hpp "Parity coverage").
  std::uint64_t fec_lacks_covered = 0;
  /// Files that silent sessions ended without (recorded with their session and channel through
  /// receiver_sink::file_finished, reason "incomplete: ..."; a catch-up brings them).
  std::uint64_t files_incomplete = 0;
  /// Feedback a silent session would have sent and did not (REGISTER, NAK, COMPLETE, rate
  /// report, unicast): what a normal session of the same data would have cost the uplink.
  std::uint64_t silent_suppressed = 0;
  /// --rate auto overrun reports sent: this host's socket buffer was half full or dropped
  /// datagrams (docs/design-notes.md "Receiver overrun").
  std::uint64_t overrun_reports = 0;
  /// Datagrams of receiving sessions lost to this host's full socket buffer (SO_RXQ_OVFL):
  /// gaps left out of the loss event rate.
  std::uint64_t overrun_lost = 0;
  drop_counters drops;
};

/// Every session of one receiver.
class receiver_engine {
 public:
  /// The `channel` argument of on_datagram for datagrams from the unicast reply socket (not a
  /// channel): announces arriving there are dropped (errc::wrong_socket).
  static constexpr std::uint32_t control_channel = 0xffffffffu;

  /// @param sink   where actions go; must outlive the engine
  /// @param store  where files go (the daemon's file_store); must outlive the engine
  /// @param seed   seeds the NAK backoff jitter
  /// @param log    may be null
  receiver_engine(receiver_config cfg, receiver_sink& sink, storage_port& store, std::uint64_t seed,
                  std::shared_ptr<spdlog::logger> log);
  ~receiver_engine();

  /// A datagram arrived on `channel` (control_channel: the unicast reply socket) from `from`.
  /// Never throws: malformed, truncated, wrong-version, unknown-session datagrams are counted
  /// and dropped; so is one whose handling fails to allocate (errc::out_of_memory).
  /// @param arrival  when the kernel received it (batch_receiver::arrival), if known: dates it
  ///                  for --rate auto's receive rates and loss intervals (loss_estimator),
  ///                  which `now`, the time a batch was read, blurs by the reading thread's
  ///                  scheduling. Later than `now` counts as `now`.
  void on_datagram(std::span<const std::byte> datagram, const endpoint& from, std::uint32_t channel,
                   time_point now, std::optional<time_point> arrival = std::nullopt);
  /// The same, for a datagram whose common header the shell parsed already (`h`, from
  /// wire::parse_header on the datagram as received; `datagram` is what authentication
  /// returned, trailer cut off, of the same type and session).
  void on_datagram(const wire::header& h, std::span<const std::byte> datagram, const endpoint& from,
                   std::uint32_t channel, time_point now,
                   std::optional<time_point> arrival = std::nullopt);
  /// A datagram the shell refused before the engine (its header did not parse, or its
  /// authentication failed for a framing reason): counted among the datagrams and the drops,
  /// by `why` (an errc).
  void on_refused(std::error_code why) noexcept;
  /// The kernel dropped datagrams of `channel`'s socket for a full receive buffer before the
  /// next datagram this engine gets on the channel (SO_RXQ_OVFL's count rose). A gap the next
  /// data or parity datagram on the channel reveals (whatever control datagrams come first) is
  /// this host's overrun, not the path's loss (loss_estimator), and a --rate auto session it
  /// belongs to reports the overrun (docs/design-notes.md "Receiver overrun").
  void on_socket_drops(std::uint32_t channel) noexcept { m_drops_channel = channel; }
  /// `fill` of `channel`'s socket receive buffer is queued (0 to 1, SO_MEMINFO before a read).
  /// From backlog_report_fill on, every receiving --rate auto session on the channel reports an
  /// overrun (at most once per RTT each), before the kernel has to drop anything.
  void on_socket_backlog(std::uint32_t channel, double fill, time_point now);
  /// The share of a socket's receive buffer in use from which --rate auto sessions report an
  /// overrun (half: the other half absorbs what is in flight until the sender slows down).
  static constexpr double backlog_report_fill = 0.5;
  /// Runs due timers (NAKs, retransmissions, checkpoints, timeouts).
  void on_timer(time_point now);
  /// Earliest time on_timer has work, or nullopt.
  std::optional<time_point> next_deadline() const;

  /// Answer to storage_port::query_held: dest files held with these digests.
  void on_held(session_id s, const std::vector<held_answer>& held, time_point now);
  /// Outcome of storage_port::finalize. ec empty: delivered.
  void on_file_stored(session_id s, file_index f, std::error_code ec, const std::string& detail,
                      time_point now);

  /// Outcome of storage_port::recover for FEC block `fec_block`. ec empty: its wanted sources
  /// were written; otherwise its missing blocks are NAKed one by one from now on.
  void on_recovered(session_id s, std::uint32_t fec_block, std::error_code ec, time_point now);

  /// Bytes of a file arrived over unicast (exact, final, each byte once per request).
  void on_unicast_data(session_id s, file_index f, std::uint64_t offset,
                       std::span<const std::byte> data, time_point now);
  /// The unicast client finished (`complete`) or lost its connection; what is still missing
  /// is asked for again after a back-off.
  void on_unicast_closed(session_id s, bool complete, const std::string& why, time_point now);

  /// Restores a session from a checkpoint blob written earlier.
  /// @return empty, or errc::bad_protobuf / invalid_field for a damaged blob
  std::error_code restore(std::string_view blob, time_point now);
  /// Checkpoints every receiving session now (shutdown), and every completing one (all files
  /// stored, held, failed or refused; COMPLETE sent, not yet acknowledged): its last
  /// checkpoint was written while it received and names files as missing that are in place
  /// now. Restored, a completing session has nothing to receive and repeats its COMPLETE.
  void checkpoint_all(time_point now);

  const receiver_stats& stats() const noexcept { return m_stats; }
  /// Sessions currently tracked (not tombstones).
  std::size_t active_sessions() const noexcept;
  /// Sessions currently tracked that came on `channel` (a channel a reload removed is left
  /// once none is).
  std::size_t active_sessions_on(std::uint32_t channel) const noexcept;
  /// The channel a tracked session came on; nullopt for an unknown or ended session.
  std::optional<std::uint32_t> channel_of(session_id s) const noexcept;
  /// True once a tracked session's manifest is complete: its further announces are repeats
  /// that only refresh the sender's timestamp and GRTT (the shell need not check every one's
  /// signature, auth::receiver_keys::repeat_verified_recently).
  bool manifest_complete(session_id s) const noexcept;
  /// The manifest of a tracked session whose manifest is complete, in file order (a relay runs
  /// the same session for the sites behind it); empty otherwise. Digests announced later
  /// (digest_list) are in it once they came.
  std::vector<manifest_entry> manifest_of(session_id s) const;
  /// True for a tracked session that is silent here: its announce carried silent_passes, or
  /// it came on a channel configured silent. Such a session never makes the engine call
  /// receiver_sink::send or start_unicast; the shell also sends no key request for it.
  bool silent(session_id s) const noexcept;
  /// A reload changed which channels are silent (receiver_config::silent_channels): applies to
  /// sessions announced from now on.
  void set_silent_channels(std::vector<bool> silent) { m_cfg.silent_channels = std::move(silent); }
  /// A reload changed which channels are relayed (receiver_config::relay_channels): applies to
  /// sessions that complete from now on.
  void set_relay_channels(std::vector<bool> relayed) { m_cfg.relay_channels = std::move(relayed); }
  /// A reload changed the relays channels are received through (receiver_config::upstream_relays).
  void set_upstream_relays(std::vector<std::string> relays) {
    m_cfg.upstream_relays = std::move(relays);
  }
  /// A reload added channels: restore() accepts checkpoints of indexes below `n`.
  void set_channel_count(std::uint32_t n) noexcept { m_cfg.channel_count = n; }
  /// A reload changed the session counts: they apply to sessions announced from now on
  /// (receiver_config::max_sessions, max_sessions_per_source; the memory budgets are fixed at
  /// construction).
  void set_session_limits(std::uint32_t max_sessions,
                          std::uint32_t max_sessions_per_source) noexcept {
    m_cfg.max_sessions = max_sessions;
    m_cfg.max_sessions_per_source = max_sessions_per_source;
  }
  /// Ended sessions remembered (tombstones).
  std::size_t tombstones() const noexcept { return m_sessions.tombstones(); }
  /// Bytes of session state charged to the memory budget now.
  std::uint64_t memory_charged() const noexcept { return m_budget.used(); }
  /// The channels' completed session numbers: sequenced sessions consult and update it; the
  /// shell loads it at start and saves it when sequences().changes() moves.
  sequence_book& sequences() noexcept { return m_sequences; }
  const sequence_book& sequences() const noexcept { return m_sequences; }

 private:
  struct session_rx;

  session_rx* find(session_id s) { return m_sessions.find(s); }
  /// The session a data or parity datagram of session `s` from `from` belongs to, or nullptr
  /// after counting why it is dropped (unknown or stale session, wrong source, a session that
  /// is completing or moved to unicast).
  session_rx* receiving_session(session_id s, const endpoint& from);
  void handle_announce(const wire::announce& m, session_id s, const endpoint& from,
                       std::uint32_t channel, time_point now);
  /// An announce of a session whose manifest is incomplete: its chunk's entries are taken (if
  /// the budget admits them); the manifest completes, or a malformed one ends the session.
  void take_chunk(session_rx& s, const wire::announce& m, time_point now);
  /// @param arrival  the datagram's arrival (on_datagram), for note_seq
  void handle_data(std::span<const std::byte> datagram, const endpoint& from, time_point now,
                   time_point arrival);
  void handle_marker(session_rx& s, const wire::marker& m, time_point now);
  /// Blocks the sender scheduled for repair: left out of this receiver's NAKs for the pass
  /// (nak_scheduler.hpp).
  void handle_advert(session_rx& s, const wire::repair_advert& m, time_point now);
  // Parity repairs (docs/design-notes.md "Parity repairs"; fec_tracker.hpp).
  void handle_parity(std::span<const std::byte> datagram, const endpoint& from, time_point now,
                     time_point arrival);
  /// Builds `s`'s FEC tracker once its manifest is complete (parity_repair::build).
  /// @return true when the session has one
  bool ensure_fec(session_rx& s);
  /// Asks storage to decode FEC block `fec_block`, whose parity covers its loss.
  /// @return false when `s` is gone: a block map that did not fit the budget failed the last
  ///         open file of a silent session, which closed it (the caller must not touch `s`)
  bool start_recovery(session_rx& s, std::uint32_t fec_block, time_point now);
  void handle_digests(session_rx& s, const wire::digest_list& m, time_point now);
  void handle_register_reply(session_rx& s, const wire::register_reply& m, time_point now);
  void handle_complete_ack(session_rx& s, time_point now);
  void handle_end(session_rx& s, const wire::session_end& m, time_point now);
  void handle_fallback(session_rx& s, const wire::fallback& m, const endpoint& from,
                       time_point now);
  void start_unicast_attempt(session_rx& s, time_point now);
  /// A new session's announce says it is served over unicast from the start: keeps where (in
  /// its unicast_fetch) for the shell to open it with the first REGISTER
  /// (receiver_sink::prepare_unicast).
  void note_unicast_start(session_rx& s, const wire::session_params& p, const endpoint& from);
  /// The register reply or FALLBACK answering REGISTER arrived: the registration RTT sample.
  void note_register_answer(session_rx& s, time_point now);
  void dispatch(const wire::header& h, std::span<const std::byte> datagram, const endpoint& from,
                std::uint32_t channel, time_point now, time_point arrival);
  /// A control datagram of a tracked session (marker, digests, replies, end, fallback,
  /// advert): checked against the session's sender and parsed, then handled.
  void dispatch_control(const wire::header& h, std::span<const std::byte> datagram,
                        const endpoint& from, time_point now);
  /// Block `b` of file `f` (receiving, the block's length checked) arrived over multicast:
  /// written and marked, the file finalized when it was the last.
  void take_block(session_rx& s, std::uint32_t f, std::uint32_t b,
                  std::span<const std::byte> payload, time_point now);
  bool new_session(const wire::announce& m, session_id id, const endpoint& from,
                   std::uint32_t channel, time_point now);
  /// A new session's parameters: block size, manifest chunks, numbering and catch-up ranges
  /// (read into `catch_up`). @return false when one is out of bounds
  bool valid_params(const wire::session_params& p, std::vector<wire::seq_span>& catch_up) const;
  /// A new session's declared size against the memory budget and file limit, and the
  /// sessions open in all and from its source; counts and logs a refusal.
  bool within_limits(const wire::session_params& p, session_id id, const endpoint& from);
  /// Creates the state of an admitted session from its announce's parameters.
  session_rx& open_session(const wire::session_params& p, session_id id, const endpoint& from,
                           std::uint32_t channel, const std::string& signer,
                           std::vector<wire::seq_span> catch_up, time_point now);
  bool ensure_block_map(session_rx& s, std::uint32_t f, time_point now);
  void fail_file(session_rx& s, std::uint32_t f, std::error_code ec, const std::string& detail,
                 time_point now);
  duration session_timeout(const session_rx& s) const;
  void mark_block(session_rx& s, std::uint32_t f, std::uint32_t b, time_point now);

  void manifest_complete(session_rx& s, time_point now);
  void start_receiving(session_rx& s, time_point now);
  /// Tells the sequence book of a numbered session (once, before its REGISTER; at the start of
  /// a silent one) and logs a reset or the numbers the site never completed.
  void open_sequence(session_rx& s);
  void send_register(session_rx& s, time_point now);
  /// Sends the NAK rounds due at `now`.
  void send_naks(session_rx& s, time_point now);
  void send_round(session_rx& s, const nak_round& r, time_point now);
  void send_complete(session_rx& s, time_point now);
  /// Opens file `f`'s temp file in storage unless it is open (storage_port::begin_file).
  void begin_file(session_rx& s, std::uint32_t f);
  void file_data_complete(session_rx& s, std::uint32_t f);
  /// A file stored or failed for good (`late`: finalized after its session closed): counted
  /// in the stats, told to the sink, logged.
  void finish_file(const file_outcome& o, bool late);
  void file_done(session_rx& s, time_point now);
  void close_session(session_rx& s, bool success, const std::string& why, time_point now);
  /// A silent session ends short of some files: each is recorded (receiver_sink::file_finished
  /// with stored false, files_incomplete) and logged, with `why`.
  void record_incomplete(session_rx& s, const std::string& why);
  void do_checkpoint(session_rx& s, time_point now);
  /// The outcome of a file finalized after its session closed (m_late_files).
  void late_file_stored(session_id id, file_index f, std::error_code ec, const std::string& detail);
  duration retransmit_interval(const session_rx& s) const;
  // --rate auto (receiver_engine_rate.cpp; docs/design-notes.md "Rate auto").
  /// The RTT `s`'s rates are computed with (rate_reporter::rtt_of).
  duration rate_rtt(const session_rx& s) const;
  /// A multicast data or parity datagram with sequence number `seq` arrived at `arrival` (at
  /// or before `now`: the loss history dates datagrams by it).
  void note_seq(session_rx& s, std::uint32_t seq, time_point now, time_point arrival);
  /// A marker's rate fields: schedules a rate report when this receiver should send one.
  void on_rate_marker(session_rx& s, const wire::marker& m, time_point now);
  /// The rate-report timer fired: sends a NAK with the rate fields and nothing to NAK.
  void send_rate_report(session_rx& s, time_point now);
  /// Sends `s` an overrun report when it is a receiving --rate auto session on multicast and
  /// its rate_reporter says one is due (rate_reporter::take_overrun).
  void report_overrun(session_rx& s, time_point now);
  /// Sends `s`'s sender a rate report (a NAK naming nothing, rate fields filled), with
  /// `overrun_bps` (bit/s) when above 0; a silent session counts it suppressed instead.
  void send_rate_nak(session_rx& s, double overrun_bps, time_point now);
  /// Sets a NAK's rate fields on multicast (rate_reporter::fill).
  void fill_rate(const session_rx& s, wire::nak& m, time_point now) const;
  std::uint64_t random() noexcept;

  receiver_config m_cfg;
  receiver_sink& m_sink;
  storage_port& m_store;
  std::shared_ptr<spdlog::logger> m_log;
  std::uint64_t m_rng_state;
  /// nak_scheduler::id_hash(m_cfg.id): which status slice this receiver answers.
  std::uint64_t m_id_hash = 0;
  /// Sessions by id, and those ended here or not for us (tombstones): datagrams for those are
  /// dropped quietly until they expire.
  session_table<session_rx> m_sessions;
  memory_budget m_budget;
  receiver_stats m_stats;
  /// The channel whose socket dropped datagrams before the datagram being handled (cleared
  /// when on_datagram returns): see on_socket_drops.
  std::optional<std::uint32_t> m_drops_channel;
  sequence_book m_sequences;
  /// Files that were being finalized (verified, made durable, renamed) when their session was
  /// given up or aborted: the storage still finishes them and reports the outcome, which is
  /// then passed on as for a live session (a file renamed into place is delivered: it is
  /// journaled and its actions run). Keyed by (session, file); an entry lives until its outcome
  /// arrives, so there are at most as many as files were finalizing at close.
  struct late_file {
    std::uint32_t channel = 0;
    std::string path;
    std::uint64_t size = 0;
    std::int64_t mtime_ns = 0;
    std::optional<sha256_digest> digest;
  };
  std::map<std::pair<std::uint32_t, std::uint32_t>, late_file> m_late_files;
};

}  // namespace mcdist::receiver
