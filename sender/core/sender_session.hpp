#pragma once
/// @file
/// The sender's protocol state machine for one session (docs/architecture.md "Data flow in one
/// session"): announce and registration, paced passes over the wanted blocks, NAK merging,
/// completion. Pure: no sockets, no clock, no global randomness. Events in (on_datagram, on_timer,
/// on_digest), actions out (control datagrams to send, data blocks to send, next_deadline()).

#include "common/block_map.hpp"
#include "common/delivery_path.hpp"
#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "common/fec/fec_layout.hpp"
#include "common/ids.hpp"
#include "common/manifest.hpp"
#include "common/pacer.hpp"
#include "common/time.hpp"
#include "sender/core/announce.hpp"
#include "sender/core/fallback_policy.hpp"
#include "sender/core/feedback_plan.hpp"
#include "sender/core/group_lack.hpp"
#include "sender/core/grtt.hpp"
#include "sender/core/nak_intake.hpp"
#include "sender/core/parity_planner.hpp"
#include "sender/core/pass_scheduler.hpp"
#include "sender/core/rate_controller.hpp"
#include "sender/core/receiver_table.hpp"
#include "sender/core/relay_gate.hpp"
#include "sender/core/repair_advert.hpp"
#include "sender/core/silence_list.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::wire {
class nak;
class marker;
class register_request;
class complete;
}  // namespace mcdist::wire

namespace mcdist::sender {

class digest_windows;

/// Source blocks per FEC block by default: 200 over GF(2^8) leaves 55 parity indexes per FEC
/// block (k + parity <= 255), so one parity datagram repairs a different loss at each site
/// and a FEC block tolerates 27 % loss before a repair needs more than one round
/// (docs/design-notes.md "Parity by default" has the measurements that chose it).
inline constexpr std::uint32_t default_fec_k = 200;
/// Interleaving depth by default: a burst of up to 8 lost datagrams (a satellite link's burst
/// of 4 with margin) takes at most one block of each FEC block.
inline constexpr std::uint32_t default_fec_depth = 8;

/// Session settings. Durations are core-clock durations; rates bit/s; sizes bytes.
struct sender_config {
  session_id session{1};
  std::uint32_t block_size = 1400;  ///< payload bytes per data datagram
  /// Multicast rate at the start, bit/s incl. IPv4+UDP headers; 0 = unpaced. The session's
  /// pacer holds the current rate from then on (set_rate, --rate auto): this field is not
  /// live state.
  std::uint64_t rate_bps = 100'000'000;
  /// --rate auto: the rate follows the receivers' TFMCC reports (rate_controller.hpp) from
  /// rate_auto_initial_bps up to rate_max_bps; rate_bps is then only the pacer's bucket sizing.
  bool rate_auto = false;
  std::uint64_t rate_max_bps = 1'000'000'000;        ///< --rate-max: the ceiling of auto
  std::uint64_t rate_auto_initial_bps = 10'000'000;  ///< slow start's first rate
  std::uint32_t max_passes = 100;  ///< passes before incomplete receivers are failed
  /// Closed group: exactly these receiver ids; empty = open group with a registration window.
  std::vector<std::string> receivers;
  /// Resend mode: only these receiver ids take part; others ignore the session.
  std::vector<std::string> only_receivers;
  /// Closed group: listed receivers the session does not wait for. Registration closes as soon
  /// as every other listed receiver is in (at register_timeout at the latest); these may
  /// register until then. When no listed receiver is awaited, registration stays open for
  /// register_window, as in an open group. The hub names the sites that missed the channel's
  /// previous session, so that one site down does not hold every later session of its channel
  /// for register_timeout.
  std::vector<std::string> not_awaited;
  /// Open group: receivers accepted at most. Bounds the sender's per-receiver state (a few
  /// hundred bytes each) against a flood of REGISTERs under made-up ids from a host without a
  /// pinned site key; a closed group or pinned site keys (docs/security.md) keep strangers out.
  std::size_t max_receivers = 10'000;
  duration register_window = std::chrono::seconds(2);           ///< open group: how long to accept
  duration register_timeout = std::chrono::seconds(30);         ///< closed group: longest wait
  duration announce_interval = std::chrono::milliseconds(250);  ///< between announce cycles
  /// An incomplete receiver silent this long while the sender asks for status is failed.
  duration receiver_timeout = std::chrono::seconds(10);
  /// Receivers that are relays (docs/design-notes.md "Relays"): they are failed after
  /// relay_timeout of silence instead, so that a relay's restart (a host reboot, tens of
  /// seconds) resumes the session for the sites behind it instead of losing it to a catch-up
  /// of the whole session. A dead relay holds the session's end that much longer.
  std::vector<std::string> relays;
  duration relay_timeout = std::chrono::seconds(60);
  /// A signed session's hub (its shell delegates to relays): once every receiver completed,
  /// the END waits while a listed relay that is not a receiver (a relay behind a relay) has no
  /// delegation yet (on_relay_delegated) and another listed relay took part, at most
  /// max(relay_end_wait, 4 GRTT): such a relay asks through the relay in front of it, which may
  /// have held the session whole and completed at once. Zero: no wait (an unsigned session, or
  /// no relays).
  duration relay_end_wait{0};
  /// A relay's downstream of a signed session sends the hub's announces on (their
  /// sender_time_us is the hub's clock): only echoes of the timestamps of this session's own
  /// last marker_stamps markers are round-trip samples.
  bool own_echoes_only = false;
  duration grtt_initial = std::chrono::milliseconds(500);  ///< RFC 5740 default
  duration grtt_min = std::chrono::milliseconds(1);
  duration grtt_max = std::chrono::seconds(15);
  /// Pacing bucket depth, bytes: how far the sender may catch up after waking late (at least
  /// 5 ms of the rate is used), so timer lateness on a busy host costs no rate.
  std::uint64_t burst_bytes = 256 * 1024;
  /// The shell is woken when this much may be sent (capped by 1 ms of the rate and the burst):
  /// one GSO send of 64 KiB per wake-up instead of a timer per datagram.
  std::uint64_t pacing_quantum_bytes = 64 * 1024;
  std::string sender_name;  ///< shown in receivers' logs
  /// The channel this session belongs to (wire::valid_channel_name; empty = unsequenced). With
  /// channel_seq it numbers the channel's sessions, so receivers find the ones they never
  /// completed and report them in REGISTER (docs/design-notes.md "Session sequence numbers").
  std::string channel;
  /// This session's number on `channel`, from 1, one more per sequenced session; 0 =
  /// unsequenced: ad-hoc, resend and catch-up sessions carry 0. Needs a channel.
  std::uint64_t channel_seq = 0;
  /// A catch-up session (channel_seq 0, channel set): the inclusive ranges of the channel's
  /// sequence numbers whose products it carries again; a receiver that completes it stops
  /// reporting them missing. At most wire::max_seq_ranges, ascending, disjoint.
  std::vector<wire::seq_span> catch_up_seqs;
  /// When the session was made, Unix time in ms (session_params.created_unix_ms; the core
  /// reads no clock, so the shell sets it: sender_app takes the wall clock when it is 0). Sites
  /// refuse a signed session without it, too old or from the future (docs/security.md
  /// "Freshness").
  std::uint64_t created_unix_ms = 0;
  /// Start pass 1 right after the first announce cycles instead of waiting a round trip for
  /// every registration; a file every receiver holds is still skipped if registration closes
  /// before the cursor reaches it.
  bool eager_start = true;
  /// Authenticated sessions (common/auth.hpp): a site can check data blocks only once it
  /// holds the session key (from the answer to its key request, on_site_keyed, or its
  /// register_reply), so an eager start waits for the keys (every listed receiver, or two GRTT
  /// after the first) instead of sending pass 1 to sites that must drop it.
  bool start_on_registration = false;
  /// Bytes every data datagram carries after its payload (the authentication tag,
  /// auth::data_trailer_bytes, when the session is signed): counted by the pacer.
  std::uint32_t data_trailer_bytes = 0;
  /// Bytes each announce chunk leaves unused below wire::control_budget for what the shell
  /// adds to its body (auth::sealed_body_overhead in an encrypted session), so a sealed
  /// announce is no larger than a signed one.
  std::uint32_t announce_reserve_bytes = 0;
  /// Source of unicast fallback tokens, 128 bits (the shell passes the kernel's CSPRNG, so one
  /// token does not predict the next); empty: the session's seeded generator (tests,
  /// simulation).
  std::function<fallback_token()> token_source;

  // --- parity repairs (docs/design-notes.md "Parity repairs") ---
  /// Source blocks per FEC block; 0: no parity, NAKs name blocks (common/fec/fec_layout.hpp).
  /// The programs' default is default_fec_k (session_profile); a core made by hand (tests,
  /// the simulator) sends no parity unless asked.
  std::uint32_t fec_k = 0;
  /// Parity indexes per FEC block (fec::valid_shape; over GF(2^16) when fec_k + fec_max_parity
  /// exceeds 255); 0: fec::default_max_parity(fec_k), 255 - fec_k for fec_k <= 254.
  std::uint32_t fec_max_parity = 0;
  /// Interleaving depth: a burst of this many lost datagrams takes at most one block of each
  /// FEC block (1..fec::max_depth).
  std::uint32_t fec_depth = default_fec_depth;
  /// Proactive parity sent in pass 1 after each FEC block's sources, as a fraction of them
  /// (0.03: 3 %, rounded up per FEC block), so most sites need no repair round trip.
  double fec_overhead = 0;
  /// Proactive parity blocks sent in pass 1 when fec_overhead is 0 and the session's sources
  /// make a single FEC block (up to 2 x fec::min_last_sources - 1 blocks: a warning, a few
  /// bulletins). One lets every site repair a lost block without a NAK round, which in a group
  /// with 700 ms sites takes seconds (docs/benchmarks.md "A compressed day"); it costs one
  /// datagram per such session. 0: none.
  std::uint32_t single_fec_block_parity = 1;

  // --- unicast fallback policy (fallback_policy.hpp) ---
  fallback_mode fallback = fallback_mode::automatic;
  /// A receiver whose NAKed blocks exceed this fraction of the data sent is moved to unicast,
  /// so its repairs stop costing everyone else.
  double fallback_nak_ratio = 0.05;
  /// ... but not before this many data datagrams were sent (a fair sample of its loss).
  std::uint64_t fallback_min_sample = 2000;
  /// A receiver still missing data after this many passes is moved to unicast.
  std::uint32_t fallback_after_passes = 10;
  /// The sender's unicast capacity, bit/s, for the small-set cost model; 0 = the multicast rate.
  std::uint64_t unicast_rate_bps = 0;
  /// Go unicast from the start when unicast cost < threshold x multicast cost.
  double unicast_threshold = 1.0;
  /// Every receiver goes unicast at once (manual resend over unicast).
  bool force_unicast = false;
  /// TCP connections a receiver opens (0: automatic, see auto_unicast_connections).
  std::uint32_t tcp_connections = 0;
  /// SCTP associations (over UDP) a receiver opens (0: automatic, two up to 200 ms RTT, else
  /// auto_unicast_connections; fallback_policy::connections).
  std::uint32_t sctp_associations = 0;
  /// Most bit/s sent to one receiver over unicast (--unicast-max-rate; 0 = no cap). The core
  /// reads it for the automatic TCP connection count; the shell hands it to the unicast server,
  /// which paces the connections.
  std::uint64_t unicast_max_rate_bps = 0;
  /// FALLBACK orders sent without the receiver connecting before it is failed.
  std::uint32_t fallback_max_orders = 10;

  // --- silent sessions (docs/design-notes.md "Silent sessions") ---
  /// Passes of a silent session, for one-way links: 0 = a normal session. Otherwise no
  /// registration and no NAK or status is taken (whatever arrives is counted and dropped), pass
  /// 1 sends the sources and the proactive parity (fec_overhead), each later pass
  /// max(1, ceil(fec_overhead x sources)) parity blocks of every FEC block not sent before
  /// (the parity index wraps past fec_max_parity), or every source again without FEC; the
  /// manifest and digests repeat through the session; the session ends silent_linger after
  /// pass silent_passes. Needs no receiver list, no --rate auto and no forced unicast.
  std::uint32_t silent_passes = 0;
  /// Between the last pass of a silent session and its END: the last parity still decodes and
  /// its files finalize at the sites before END tells them what they could not complete.
  duration silent_linger = std::chrono::seconds(1);
  /// Block digests (docs/security.md "Block digests"; silent sessions only, the shell sets it
  /// for a signed one): each pass is planned a window ahead (digest_windows.hpp), and before a
  /// window's first datagram the digests of the next window and of this one are handed to the
  /// shell (pop_digest_window) to hash, sign and multicast; the announce says block_digests, and
  /// the data and parity datagrams are version 3 without a trailer (data_trailer_bytes 0).
  bool block_digests = false;

  // --- a relay's downstream session (relay_gate.hpp, docs/relays-design.md) ---
  /// Which source block may go out now: empty for a sender that holds every file. A relay
  /// sends a block it holds (send), passes over one lost upstream (skip: it stays wanted for a
  /// later pass) and stops the sweep at one still on its way (wait: the sweep goes on after
  /// on_available). Asked once per block picked.
  std::function<gate_answer(std::uint32_t file, std::uint32_t block)> block_gate;
  /// Whether parity of a FEC block may be encoded now (every source held); empty: always.
  /// Parity of a FEC block that may not waits behind the others.
  std::function<bool(std::uint32_t fec_block)> parity_gate;
  /// A session taken up again by a restarted relay, whose sites still hold the run before's
  /// pass and sequence numbers (receivers ignore markers of a pass older than the latest they
  /// saw): passes go on the wire wire_pass_offset higher (markers, adverts; NAKs are read back
  /// the same), and the first sequence number is first_seq + 1. 0, 0: a session's own numbers.
  std::uint32_t wire_pass_offset = 0;
  std::uint32_t first_seq = 0;
  /// The same session: its sites registered with the run before and do not register again. A
  /// NAK or COMPLETE from a receiver it does not know, while registration is open, registers
  /// that receiver first (holding nothing), as a REGISTER would have.
  bool admit_on_feedback = false;
};

/// A receiver the policy moved to unicast: the shell registers its grant with the unicast
/// server before the FALLBACK message reaches the receiver.
struct fallback_order {
  std::string receiver_id;
  transport_kind transport = transport_kind::sctp_udp;
  fallback_token token{};
  std::string reason;
};

/// What the sender knows about one receiver, for the summary.
struct receiver_report {
  /// The receiver's outcome so far: missing (never registered), registered (taking part, the
  /// transfer under way), completed, failed. How its data reached it is `path`.
  enum class state_t { missing, registered, completed, failed };
  std::string id;
  state_t state = state_t::missing;
  endpoint address;
  std::uint32_t files_stored = 0;  ///< from COMPLETE
  std::uint32_t files_held = 0;    ///< skipped: already held
  /// Indexes of the files it held already (a file may appear twice: claim and hold report).
  std::vector<std::uint32_t> held_files;
  std::uint64_t bytes_stored = 0;    ///< from COMPLETE
  std::uint64_t bytes_received = 0;  ///< last progress report (NAK)
  std::uint32_t passes = 0;          ///< passes it needed: 1 + the pass of its last NAK with blocks
  std::uint64_t naks = 0;            ///< NAK datagrams received from it
  std::uint64_t blocks_naked = 0;    ///< blocks it asked for
  /// From its COMPLETE: the session's multicast data and parity datagrams it received and
  /// those it found lost by sequence gaps (at most the datagrams this session multicast).
  std::uint64_t datagrams_received = 0;
  std::uint64_t datagrams_lost = 0;
  duration rtt{};  ///< last RTT sample
  bool rtt_valid = false;
  duration completion_time{};   ///< from session start
  std::string reason;           ///< why it failed
  std::string fallback_reason;  ///< why it was moved to unicast (empty: it was not)
  /// How its data reaches it: multicast, or the unicast transport it was moved to.
  delivery_path path = delivery_path::multicast;
  /// TCP connections or SCTP associations it was told to open (0: not moved to unicast).
  std::uint32_t fallback_connections = 0;
  /// When it was moved, from session start.
  duration fallback_at{};
  std::vector<std::pair<std::uint32_t, std::string>> file_failures;  ///< files it could not store
  /// From its REGISTER in a sequenced session: the highest sequence number of the channel it
  /// completed from this sender key (0 = none, or a site new to the channel).
  std::uint64_t last_seq = 0;
  /// From its REGISTER in a sequenced session: inclusive ranges of the channel's sequence
  /// numbers below this session's that it never completed, ascending; at most
  /// wire::max_seq_ranges (a site with more reports the oldest first).
  std::vector<wire::seq_span> missing_seqs;
};

/// Control datagrams the sender received and multicast, by kind (what feedback costs
/// as the group grows).
struct control_counters {
  std::uint64_t registers = 0;       ///< REGISTER datagrams received
  std::uint64_t naks = 0;            ///< NAK datagrams received that name blocks or FEC lacks
  std::uint64_t status = 0;          ///< NAK datagrams received that name none (status replies)
  std::uint64_t completes = 0;       ///< COMPLETE datagrams received
  std::uint64_t nak_blocks = 0;      ///< blocks those NAKs named (a block named twice: twice)
  std::uint64_t nak_new_blocks = 0;  ///< of those, blocks that were not wanted already
  std::uint64_t adverts = 0;         ///< repair adverts multicast
  std::uint64_t rate_reports = 0;    ///< NAKs carrying a --rate auto report (rate_report set)
  /// --rate auto reports of a receiver's socket buffer overrunning (overrun_bps set)
  std::uint64_t overrun_reports = 0;
  std::uint64_t advertised_blocks = 0;  ///< blocks they carried
  /// Datagrams that reached a silent session (receivers there send none): counted, dropped.
  std::uint64_t silent_refused = 0;
  /// Datagrams received, all kinds above.
  std::uint64_t received() const noexcept { return registers + naks + status + completes; }
};

/// Session totals, for the summary.
struct session_report {
  session_id session{};
  std::string channel;            ///< sender_config::channel (empty: unsequenced)
  std::uint64_t channel_seq = 0;  ///< sender_config::channel_seq (0: unsequenced)
  std::uint32_t files = 0;
  std::uint64_t bytes = 0;  ///< sum of file sizes
  /// Bytes of the files some receiver needed (not held by every one): what was moved.
  std::uint64_t transferred_bytes = 0;
  std::uint32_t passes = 0;
  std::uint64_t data_datagrams = 0;
  std::uint64_t data_bytes = 0;        ///< payload bytes sent, repairs included
  std::uint64_t repair_datagrams = 0;  ///< blocks sent again and parity sent for NAKs
  /// Of the repairs, blocks wanted again because a closed group's site got the session key
  /// after they went out (sender_session::keyed): a cost of starting pass 1 before the far
  /// sites' keys, not of losses.
  std::uint64_t late_key_blocks = 0;
  std::uint64_t parity_datagrams = 0;  ///< parity blocks sent, proactive and for NAKs
  std::uint64_t proactive_parity = 0;  ///< of which proactive (pass 1, fec_overhead; every
                                       ///< parity block of a silent session)
  std::uint64_t source_datagrams = 0;  ///< data datagrams that carried source blocks
  /// sender_config::silent_passes: 0 for a normal session; the summary then has no receivers.
  std::uint32_t silent_passes = 0;
  /// Block digests (sender_config::block_digests): windows planned, chunks sent (both copies)
  /// and their bytes as the pacer counted them (IPv4 and UDP headers included).
  bool block_digests = false;
  std::uint64_t digest_windows = 0;
  std::uint64_t digest_chunks = 0;
  std::uint64_t digest_bytes = 0;
  duration grtt{};
  duration elapsed{};
  /// --rate auto: the rate at the end, the lowest after slow start (0: it never ended), the
  /// ceiling, and the last current limiting receiver (empty: none).
  bool rate_auto = false;
  std::uint64_t rate_bps = 0;
  std::uint64_t rate_lowest_bps = 0;
  std::uint64_t rate_max_bps = 0;
  std::string rate_clr;
  control_counters control;
  std::vector<receiver_report> receivers;
  drop_counters drops;
};

/// One data datagram to send: the shell reads `length` bytes at `offset` of file `file` and
/// writes header + payload. A parity datagram (`parity`) instead carries parity block
/// `parity_index` of FEC block `fec_block` (block_size bytes; file, block and offset unused): the
/// shell encodes it from the FEC block's sources (fec::layout::source, fec::codec::encode).
struct data_send {
  file_index file{};
  block_index block{};
  std::uint32_t seq = 0;
  std::uint64_t offset = 0;  ///< bytes
  std::uint32_t length = 0;  ///< bytes of payload
  bool parity = false;
  std::uint32_t fec_block = 0;
  std::uint32_t parity_index = 0;
};

/// One copy of the block digests of a window of planned datagrams (block_digests sessions;
/// digest_windows.hpp): the shell multicasts it before the data it takes next.
struct digest_window_send {
  std::uint32_t first_seq = 0;  ///< sequence number of the window's first datagram
  std::uint32_t count = 0;      ///< datagrams in the window, 1..block_digests::max_window
  /// The first copy: the shell reads, hashes and signs the window's datagrams (all of them, in
  /// sequence order) and keeps the chunks; the second copy sends those chunks again.
  bool first_copy = true;
  std::vector<data_send> datagrams;  ///< the first copy's datagrams; empty for the second
};

/// A control datagram to send: to the multicast group when `to` is empty.
struct control_send {
  std::optional<endpoint> to;
  std::vector<std::byte> bytes;
  wire::msg_type type{};  ///< the type in `bytes`' header (the shell signs announces apart)
};

/// The sender side of one session.
class sender_session {
 public:
  enum class phase { announcing, transferring, waiting, ending, done };

  /// How long a pass for sites keyed late waits for the keys of their neighbours, whose
  /// requests left on the same announce.
  static constexpr duration late_key_gather = std::chrono::milliseconds(10);
  /// Marker timestamps kept for sender_config::own_echoes_only: a site echoes the newest it
  /// heard, at most a few round trips old (32 kB).
  static constexpr std::size_t marker_stamps = 4096;
  /// A site keyed late gets the blocks sent before its key again when it holds the key within
  /// late_key_window() of the session's start, or while at most this many (or
  /// fallback_nak_ratio of the session's blocks) went out: 358 kB of 1400-byte blocks, a
  /// warning or a few bulletins whole.
  static constexpr std::uint32_t late_key_max_blocks = 256;
  /// The shortest late_key_window(): a geostationary round trip (0.7 s) plus a lost key request
  /// asked again on a later announce (every 250 ms while registration is open), with room.
  static constexpr duration late_key_min_window = std::chrono::seconds(2);

  /// @param cfg       settings; block_size must be within wire::min/max_block_size
  /// @param files     the manifest; digests may be absent (supply them later with on_digest)
  /// @param seed      seeds this session's own random engine (jitter)
  /// @param log       where the session logs; may be null for silence
  /// @throws std::invalid_argument for an invalid configuration (operator error)
  sender_session(sender_config cfg, std::vector<manifest_entry> files, std::uint64_t seed,
                 std::shared_ptr<spdlog::logger> log);
  ~sender_session();

  /// Starts announcing at `now`.
  void start(time_point now);

  /// A unicast datagram arrived from `from`. Malformed input is counted and dropped.
  void on_datagram(std::span<const std::byte> datagram, const endpoint& from, time_point now);
  /// The same, for a datagram whose common header the shell parsed already (`h`, of the
  /// datagram as received; `datagram` is what authentication returned).
  void on_datagram(const wire::header& h, std::span<const std::byte> datagram, const endpoint& from,
                   time_point now);
  /// A datagram the shell refused before the session for a framing reason (its header did
  /// not parse, or its trailer was cut short): counted by `why` (an errc).
  void on_refused(std::error_code why) noexcept;

  /// Runs timers due at `now`.
  void on_timer(time_point now);

  /// The digest of `file` is known (a file announced without one).
  void on_digest(file_index file, const sha256_digest& digest, time_point now);

  /// A relay's session (sender_config::block_gate): the relay holds more blocks than when the
  /// gate last stopped the sweep or left a pass with nothing to send. A sweep stopped at a block
  /// on its way goes on at the next next_data; a session that ended a pass with every wanted
  /// block gated starts the next pass relay_gather later, so a burst of upstream repairs makes
  /// one pass, not one per block.
  void on_available(time_point now);
  /// How long a gated session gathers newly held blocks before its next pass.
  static constexpr duration relay_gather = std::chrono::milliseconds(20);
  /// Whether the sweep is stopped at a block still on its way (sender_config::block_gate).
  bool gate_waiting() const noexcept { return m_gate_waiting; }
  /// Whether the last pass could send nothing of what is wanted and the session waits for
  /// on_available (sender_config::block_gate).
  bool gate_blocked() const noexcept { return m_gate_blocked; }

  /// Fills `out` with data datagrams the pacer allows at `now`, in send order.
  /// @param max_parity  parity datagrams at most (the shell's coding budget): at the next parity
  ///                    datagram past it the call stops, and the parity waits for the next call
  /// @return how many were filled (0 when none is due now)
  std::size_t next_data(time_point now, std::span<data_send> out,
                        std::size_t max_parity = SIZE_MAX);

  /// Takes the next queued control datagram. @return false when none is queued.
  bool pop_control(control_send& out);

  /// Block digest sessions: takes the next window of block digests to multicast; the shell
  /// sends every one queued by a next_data call before that call's datagrams.
  /// @return false when none is queued
  bool pop_digest_window(digest_window_send& out);

  /// The shell's authentication layer gave `receiver_id` the session key in answer to its key
  /// request (auth::sender_keys::take_key_reply), before it registered: for the start of pass
  /// 1 (start_on_registration) it counts as registered. Ids a closed group does not list
  /// are ignored.
  void on_site_keyed(std::string_view receiver_id, time_point now);
  /// The shell's authentication layer delegated the session to relay `relay_id`
  /// (sender_config::relay_end_wait): an END waiting for the relays behind relays goes once
  /// none is left without one.
  void on_relay_delegated(std::string_view relay_id, time_point now);
  /// The owner learned after the start that listed receiver `receiver_id` is down (it did not
  /// register in another session of the channel): from now on it is treated as if it had been
  /// in sender_config::not_awaited, so registration closes as soon as every receiver still
  /// awaited is in, instead of at register_timeout.
  /// @return false (nothing changed) when registration is closed, or the receiver is not
  ///         listed, already registered or not awaited
  bool stop_awaiting(std::string_view receiver_id, time_point now);

  /// Where receivers reach the shell's unicast server, per transport; a transport without an
  /// endpoint is not offered. Call before start().
  void set_unicast_endpoint(transport_kind k, const endpoint& e);
  /// Takes the next receiver moved to unicast. @return false when none is queued.
  bool pop_fallback(fallback_order& out);
  /// The receiver's unicast session started (its connection arrived with the token).
  void on_unicast_started(const std::string& receiver_id, time_point now);
  /// Its unicast session ended before COMPLETE (connection lost, refused, timed out): the
  /// receiver reconnects with the same token; after too many orders it is failed.
  void on_unicast_failed(const std::string& receiver_id, const std::string& why, time_point now);

  /// The earliest time on_timer or next_data has something to do, or nullopt when done.
  std::optional<time_point> next_deadline(time_point now) const;

  phase current_phase() const noexcept { return m_phase; }
  bool done() const noexcept { return m_phase == phase::done; }
  /// True if every receiver completed; for a silent session (no receivers known), true once
  /// it sent its passes without an abort.
  bool succeeded() const noexcept;
  /// A closed group waiting only for registrations: every receiver that registered is done
  /// and registration is still open for listed receivers that have not (until they do, or
  /// register_timeout). Nothing goes out but announces.
  bool lingering() const noexcept;
  /// A silent session (sender_config::silent_passes > 0).
  bool silent() const noexcept { return m_cfg.silent_passes > 0; }
  /// Current pass number, 0 before pass 1.
  std::uint32_t pass() const noexcept { return m_passes.pass(); }
  duration grtt() const noexcept { return m_grtt.estimate(); }
  const std::vector<manifest_entry>& files() const noexcept { return m_files; }
  /// Totals and per-receiver reports as of `now`.
  session_report report(time_point now) const;
  /// Aborts the session (operator interrupt): sends END(aborted) and finishes.
  void abort(time_point now, const std::string& why);
  /// Changes the multicast rate while the session runs (mcdist-feed's strict-priority sharing
  /// of one link between channels). Bytes already paced keep their schedule; the next datagram
  /// leaves at the new rate. In a rate-auto session the rate controller owns the rate and this
  /// is its ceiling (the rate drops to it at once if above). @param rate_bps bit/s incl.
  /// IPv4+UDP headers, 0 = unpaced
  void set_rate(std::uint64_t rate_bps) noexcept;
  /// The multicast rate in force, bit/s (0 = unpaced).
  std::uint64_t rate_bps() const noexcept { return m_pacer.rate_bps(); }
  /// The session's FEC blocks; null when it sends no parity (fec_k 0).
  const fec::layout* fec_layout() const noexcept { return m_fec ? &*m_fec : nullptr; }

 private:
  struct receiver_state;

  void send_announce_chunk(time_point now);
  /// Takes the next datagram of the pass, parity first, without pacing: its sequence number,
  /// counters, and the proactive parity scheduled after a FEC block's last source in pass 1.
  /// @return false when the sweep is over
  bool take_next(data_send& d);
  /// The parity block to send next, past FEC blocks the parity gate holds back (deferred).
  std::optional<parity_pick> next_parity();
  /// The source block to send next, past blocks the block gate skips; nullopt when the pass is
  /// over or the gate waits (m_gate_waiting).
  std::optional<block_pick> next_pick();
  /// Fills `d` with parity block `pp`, taken now.
  void take_parity(const parity_pick& pp, data_send& d);
  /// Fills `d` with source block `pick` of `len` bytes, taken now.
  void take_source(const block_pick& pick, std::uint32_t len, data_send& d);
  /// next_data of a block digest session (sender_session_silent.cpp): planned a window ahead.
  std::size_t next_data_planned(time_point now, std::span<data_send> out);
  void close_registration(time_point now);
  /// Closed group: every awaited listed receiver registered (false when none is awaited).
  bool awaited_all_in() const noexcept;
  // Passes (sender_session_passes.cpp).
  void start_transfer(time_point now);
  void start_pass(time_point now);
  void end_pass(time_point now);
  void send_marker(time_point now, bool pass_end, bool status_request);
  void send_digests(time_point now);
  /// Queues the digests a NAK asks for (`digests_wanted`, bounded by the file count) and sends
  /// them when digests may go out.
  /// After a NAK read into m_nak: when it takes `r` over the NAK ratio (and another receiver
  /// is below it), orders `r`'s unicast fallback; true when `r` is then on unicast and the NAK
  /// is done with (its blocks counted, not scheduled on multicast).
  bool nak_moves_to_unicast(receiver_state& r, const wire::nak& m, time_point now);
  /// Schedules the repairs m_nak asks for (blocks into the pass, parity for FEC lacks, the
  /// repair advert) and counts them. @return blocks named and lacked
  std::uint64_t schedule_repairs(const wire::nak& m, time_point now);
  /// Checks a register_request against the session (receiver id, held files, digests of
  /// files held pending, the sequence report) and reads its missing sequence numbers into
  /// `missing`. @return false when any field is out of bounds
  bool valid_register(const wire::register_request& m, std::vector<wire::seq_span>& missing) const;
  /// Why a receiver that has not registered yet (`known`: it is listed in a closed group)
  /// cannot now: not in the closed group, registration closed; nullopt when it can.
  std::optional<std::string> registration_refusal(bool known) const;
  /// Queues the register_reply to `to`: accepted when `refused` is empty, else refused with it
  /// as the reason (logged as a warning when `log_refusal`).
  void answer_register(const std::string& id, const endpoint& to, const std::string& refused,
                       bool log_refusal = true);
  /// Takes a valid registration: the receiver's state (created unless listed), its held files
  /// and its missing numbers. @return the registered receiver
  receiver_state& admit(const wire::register_request& m, const endpoint& from, receiver_state* r,
                        std::vector<wire::seq_span> missing, time_point now);
  void log_registered(const receiver_state& r, const endpoint& from, bool resumed) const;
  /// Parity repairs from m_cfg.fec_*: the FEC layout and the parity planner.
  /// @throws std::invalid_argument for a shape the codec cannot have
  void configure_fec();
  void queue_digests(const wire::nak& m, time_point now);
  bool digests_sendable() const noexcept;
  void check_done(time_point now);
  void start_ending(time_point now, bool aborted, const std::string& why);
  void fail_receiver(receiver_state& r, std::string why, time_point now);
  /// True for a receiver the waiting phase fails after receiver_timeout of silence.
  bool times_out(const receiver_state& r) const noexcept;
  void queue_multicast(time_point now, std::vector<std::byte> bytes);
  void queue_unicast(const endpoint& to, std::vector<std::byte> bytes);
  void sample_rtt(receiver_state& r, std::uint64_t echo_us, std::uint64_t hold_us, time_point now);
  /// The window receivers draw their NAK delay from (feedback_plan.hpp nak_window).
  duration nak_window() const noexcept;
  /// How long a waiting sender collects NAKs before it starts the next pass: the NAK window
  /// when suppressing, else the spread.
  duration collection_delay() const noexcept;
  /// NAK suppression is worth its delay: more than suppression_threshold receivers in
  /// feedback_group().
  bool suppressing() const noexcept;
  /// The receivers that may still NAK (registered, neither completed nor failed): the group
  /// size of the NAK window (feedback_plan.hpp) and of markers' group_size.
  std::uint32_t feedback_group() const noexcept;
  /// Whether a receiver other than `r` is still on multicast at or below the NAK ratio, so that
  /// moving `r` off spares someone its repairs (fallback_policy::nak_ratio_exceeded). Scans the
  /// receivers at most once per fallback sample (min_sample data datagrams, or after a
  /// fallback), stopping at the second one found: O(receivers) per 2,000 datagrams at most,
  /// and only while some receiver is over the ratio.
  bool another_below_nak_ratio(const receiver_state& r);
  void send_advert(time_point now);
  /// Keeps the silence list and the list of receivers awaiting their unicast connection in
  /// step with `r`'s state; `heard`: it was just heard from (moves to the back).
  void track(receiver_state& r, bool heard);
  /// Fails multicast receivers silent for receiver_timeout (relays: relay_timeout) while the
  /// sender waits.
  void fail_silent(time_point now);
  void fail_silent(time_point now, silence_list& list, duration timeout);
  /// True for a receiver id named in sender_config::relays.
  bool is_relay(const std::string& id) const noexcept;
  /// Authenticated sessions (start_on_registration): pass 1 starts when every listed receiver
  /// holds the session key (on_site_keyed, or registered), or keyed_start_grace() after the
  /// first did.
  bool keyed_start_due(time_point now) const noexcept;
  /// `r` holds the session key (answered key request, or registered). In an authenticated
  /// closed group whose pass 1 is over, the blocks sent before are wanted again (it could not
  /// check them), in a pass late_key_gather later, if `r` holds the key within
  /// late_key_window() of the start or no more than late_key_max_blocks (or
  /// fallback_nak_ratio of the session) went out before; during pass 1 its NAKs ask for them.
  void keyed(receiver_state& r, time_point now);
  /// How long after the session's start a site keyed late counts as one that answered the
  /// first announces: max(late_key_min_window, 2 GRTT).
  duration late_key_window() const noexcept;
  duration keyed_start_grace() const noexcept;
  duration status_interval() const noexcept;
  /// Interval between progress markers during a pass: GRTT / 2, but at least the time
  /// marker_spacing_datagrams data datagrams take at the current rate, within
  /// [min_marker_interval, max_marker_interval].
  duration marker_interval() const noexcept;
  std::uint64_t pacing_quantum() const noexcept;
  void mark_held(receiver_state& r, std::uint32_t file);
  // Silent sessions (sender_session_silent.cpp).
  /// Checks and adjusts the configuration of a silent session. @throws std::invalid_argument
  void configure_silent();
  /// The pass after `m_passes.pass()` of a silent session: schedules its fresh parity (or
  /// every source again without FEC). @return false when the session has sent its passes
  bool plan_silent_pass();
  /// Announce chunks and repeated digests of a silent session while it transfers.
  void silent_announce(time_point now);
  /// Queues the digest of every file that has one (silent sessions repeat them).
  void requeue_digests();
  // --rate auto (sender_session_rate.cpp).
  /// Moves the pacer to the rate controller's rate as of `now`.
  void update_auto_rate(time_point now);
  /// Puts `rate_bps` in force: the session's rate and the pacer's.
  void apply_rate(std::uint64_t rate_bps) noexcept;
  /// The rate fields of a marker (40-44); starts a new feedback round when the last is over.
  void fill_rate_fields(wire::marker& m, time_point now);
  /// A NAK's rate fields, from a receiver on multicast (validated here).
  void handle_rate(receiver_state& r, const wire::nak& m, time_point now);
  /// `r` no longer holds the multicast rate back (unicast, completed, failed).
  void forget_rate(const receiver_state& r, time_point now);

  void order_fallback(receiver_state& r, std::string reason, time_point now);
  /// A session served over unicast from the start (force_unicast): the announce names the
  /// unicast server so sites open their association while they register (one round trip
  /// saved: docs/design-notes.md "Unicast fallback"): the transport and TCP connection count
  /// chosen without an RTT; a FALLBACK order naming others makes the site connect afresh.
  void announce_unicast_start();
  void send_fallback(receiver_state& r, time_point now);
  void handle_register(const wire::register_request& m, const endpoint& from, time_point now);
  /// The receiver `id` a NAK or COMPLETE came from; registered first when the session admits
  /// on feedback (sender_config::admit_on_feedback). Null when unknown.
  receiver_state* admitted(const std::string& id, const endpoint& from, time_point now);
  void handle_nak(const wire::nak& m, const endpoint& from, time_point now);
  void handle_complete(const wire::complete& m, const endpoint& from, time_point now);

  sender_config m_cfg;
  std::vector<manifest_entry> m_files;
  /// Every receiver known: listed in the closed group, or registered.
  receiver_table<receiver_state> m_receivers;
  std::deque<control_send> m_control;
  std::deque<fallback_order> m_fallbacks;
  std::shared_ptr<spdlog::logger> m_log;
  std::uint64_t m_rng_state;
  grtt_estimator m_grtt;
  /// own_echoes_only: the sender_time_us of the last markers sent, ascending.
  std::deque<std::uint64_t> m_stamps;
  pacer m_pacer;
  drop_counters m_drops;
  /// REGISTERs of new receivers refused because max_receivers were registered.
  std::uint64_t m_receivers_refused_full = 0;
  std::vector<std::uint32_t> m_file_blocks;  ///< blocks of each file, by file index
  pass_scheduler m_passes;
  nak_request m_nak;  ///< the NAK being handled (read_nak), kept for its vectors' capacity
  fallback_policy m_fallback;
  announcer m_announce;
  repair_advert m_advert;
  window_control m_window;
  /// Receivers that time out when silent (times_out()), least recently heard first.
  silence_list m_silence;
  silence_list m_relay_silence;  ///< the receivers of m_silence's kind that are relays
  /// Receivers moved to unicast whose connection has not arrived: FALLBACK is repeated to them.
  std::vector<std::uint32_t> m_awaiting_connection;
  control_counters m_counters;
  std::uint32_t m_status_round = 0;  ///< status requests sent, for the slice they ask
  /// Runs a NAK just added to the wanted set (scratch for handle_nak).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> m_added;
  std::optional<fec::layout> m_fec;
  std::optional<parity_planner> m_parity;
  /// The parity a FEC block needs for the whole group, from the first lacks of a pass.
  group_lack m_group_lack;
  /// Block digest sessions: the pass planned a window ahead (digest_windows.hpp).
  std::unique_ptr<digest_windows> m_digests;
  /// --rate auto: the TFMCC controller and its feedback round (marker fields 42-44).
  std::optional<rate_controller> m_rate;
  std::uint32_t m_rate_round = 0;
  time_point m_rate_round_end{};
  std::uint64_t m_rate_round_lowest = 0;
  std::uint64_t m_proactive_parity = 0;
  std::uint64_t m_source_datagrams = 0;
  /// Gated sessions (sender_config::block_gate): the sweep stopped at a block on its way; a
  /// pass ended with nothing sendable (the next one starts at on_available); on_available came
  /// during this pass; what this pass sent and passed over.
  bool m_gate_waiting = false;
  bool m_gate_blocked = false;
  bool m_held_more = false;
  std::uint64_t m_pass_sent = 0;
  std::uint64_t m_pass_gated = 0;
  /// Silent session: END goes out at this time (silent_linger after the last pass).
  std::optional<time_point> m_silent_end_at;
  /// Silent session: announce cycles after which the digests were last queued again.
  std::uint32_t m_silent_digest_cycle = 0;

  phase m_phase = phase::announcing;
  time_point m_start{};
  time_point m_register_deadline{};
  /// When the first receiver held the session key (keyed or registered), for
  /// start_on_registration; m_keyed counts the listed receivers that do (closed groups).
  std::optional<time_point> m_first_keyed;
  std::uint32_t m_keyed = 0;
  bool m_registration_open = true;
  std::uint32_t m_registered = 0;
  /// Closed group: listed receivers awaited (not in sender_config::not_awaited), and those of
  /// them registered.
  std::uint32_t m_awaited = 0;
  std::uint32_t m_awaited_in = 0;
  std::uint32_t m_awaited_keyed = 0;    ///< awaited listed receivers that hold the session key
  std::uint64_t m_late_key_blocks = 0;  ///< session_report::late_key_blocks
  std::uint32_t m_active = 0;           ///< registered, not yet completed or failed
  /// another_below_nak_ratio's last scan: when (data datagrams sent; nullopt: due), how many
  /// multicast receivers were at or below the ratio (counted up to 2), and the one if one.
  std::optional<std::uint64_t> m_below_scan_at;
  std::uint32_t m_below_count = 0;
  const receiver_state* m_below_one = nullptr;

  time_point m_next_marker{};
  time_point m_next_status{};
  time_point m_wait_start{};
  std::optional<time_point> m_next_pass_at;
  time_point m_next_decay{};
  std::uint32_t m_digests_through = 0;
  std::vector<std::uint32_t> m_digest_queue;
  std::uint32_t m_end_repeats = 0;
  time_point m_next_end{};
  time_point m_finished{};
  std::uint64_t m_data_datagrams = 0;
  std::uint64_t m_data_bytes = 0;
  bool m_aborted = false;
  /// Relays delegated so far (on_relay_delegated), and whether the END waits for the others.
  std::vector<std::string> m_delegated;
  bool m_end_waits_for_relays = false;
  /// True while a listed relay that did not register here has no delegation yet.
  bool relays_undelegated() const;
};

}  // namespace mcdist::sender
