// The receiver engine's session state and helpers, shared by the .cpp files that implement
// receiver_engine (receiver_engine.cpp: dispatch, data, markers, timers, session close;
// receiver_engine_session.cpp: announces, manifest, registration; receiver_engine_files.cpp:
// digests and a file's end; receiver_engine_fec.cpp: parity; receiver_engine_naks.cpp: NAK
// rounds and COMPLETE; receiver_engine_unicast.cpp: the fallback;
// receiver_engine_checkpoint.cpp: resume state; receiver_engine_rate.cpp: rate reports;
// receiver_engine_silent.cpp: silent sessions).
// Not part of the engine's interface: include it only from those files.
#pragma once

#include "receiver/core/receiver_engine.hpp"

#include "common/fec.hpp"
#include "common/path_check.hpp"
#include "common/ranges.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/core/fec_tracker.hpp"
#include "receiver/core/loss_estimator.hpp"
#include "receiver/core/manifest_assembler.hpp"
#include "receiver/core/nak_builder.hpp"
#include "receiver/core/nak_scheduler.hpp"
#include "receiver/core/rate_feedback.hpp"
#include "receiver/core/register_backoff.hpp"
#include "receiver/core/session_checkpoint.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <unordered_set>

namespace mcdist::receiver::engine_detail {

/// Most failures listed in one COMPLETE; the rest are counted in files_stored's shortfall.
inline constexpr int max_reported_failures = 32;
/// Pending NAK rounds a session keeps (one per marker, GRTT/2 apart: 32 GRTT, beyond any NAK
/// window, which is at most about 6 GRTT); beyond, the newest takes the next one's blocks.
inline constexpr std::size_t max_nak_rounds = 64;
/// Most digests asked for in one NAK.
inline constexpr std::size_t max_digests_wanted = 128;
/// Longest failure reason carried in COMPLETE, bytes.
inline constexpr std::size_t max_reason_bytes = 200;
/// Unicast attempts (connections) per session before the receiver gives up on it.
inline constexpr std::uint32_t max_unicast_attempts = 8;
/// Most TCP connections a FALLBACK order or an announce may ask a site to open; the unicast
/// framing itself allows 16 per session (unicast::max_connections, whose client clamps).
inline constexpr std::uint32_t max_fallback_connections = 64;
/// Back-off after a lost unicast connection: this times the attempt number, at most 10 s.
inline constexpr auto unicast_backoff = std::chrono::milliseconds(500);
/// Bytes charged for a session's fixed state besides its tables (the session_rx itself, its
/// map node, strings and the partial-block map's first buckets): a round figure above
/// sizeof(session_rx).
inline constexpr std::uint64_t session_overhead_bytes = 4096;
/// Bytes of a bitmap of `bits` bits (block_map: whole 64-bit words).
constexpr std::uint64_t bitmap_bytes(std::uint64_t bits) { return (bits + 63) / 64 * 8; }

inline bool same_host(const endpoint& a, const endpoint& b) {
  return a.v6 == b.v6 && a.addr == b.addr;
}

template <class Msg>
std::vector<std::byte> encode(wire::msg_type type, session_id session, const Msg& m) {
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  wire::encode_control(out, type, session, m);
  return out;
}

inline duration from_us(std::uint64_t us) { return std::chrono::microseconds(us); }

}  // namespace mcdist::receiver::engine_detail

namespace mcdist::receiver {

struct receiver_engine::file_rx {
  enum class state_t : std::uint8_t {
    pending = 0,  ///< entry not yet received
    refused,      ///< entry failed validation (terminal)
    held,         ///< already held identically (terminal)
    receiving,
    awaiting_digest,  ///< all data in, digest not yet known
    finalizing,       ///< storage is verifying and delivering
    stored,           ///< delivered (terminal)
    failed,           ///< could not be stored (terminal)
  };
  manifest_entry entry;
  state_t state = state_t::pending;
  bool begun = false;
  bool resume = false;
  std::uint32_t blocks = 0;
  std::uint32_t digest_retries = 0;
  /// Allocated lazily (ensure_block_map): on the file's first block, or when the session
  /// starts receiving; until then size() == 0 and it must not be read.
  block_map received;
  std::optional<sha256_digest> held_digest;  ///< our copy's digest, for pending-digest files
  std::string failure;

  /// Every block is in (false while the block map is not allocated, unless there are none).
  bool all_received() const noexcept {
    return blocks == 0 || (received.size() == blocks && received.all());
  }
  bool terminal() const noexcept {
    return state == state_t::refused || state == state_t::held || state == state_t::stored ||
           state == state_t::failed;
  }
};

/// One NAK round: what was missing between two markers, NAKed at a time drawn when the later
/// marker arrived. Every receiver that lost a block detects it at the same marker and times its
/// NAK from it, so the first one's repair (or the sender's advert) reaches the others before
/// their timers fire (nak_scheduler.hpp); each block is NAKed once per pass, by its round.
struct receiver_engine::nak_round {
  time_point due{};
  std::uint32_t from_file = 0;
  std::uint32_t from_block = 0;
  std::uint32_t to_file = 0;  ///< up to the marker: (file_count, 0) at a pass end
  std::uint32_t to_block = 0;
  bool pass_end = false;  ///< covers the pass's end: answering it answers the pass end
  bool status = false;    ///< answers a status request: a status reply even with nothing missing
  std::uint32_t status_slices = 0;
  std::uint32_t status_slice = 0;
};

struct receiver_engine::session_rx {
  enum class state_t { manifest, checking_held, registering, receiving, completing };
  session_id id{};
  endpoint sender;
  std::uint32_t channel = 0;
  state_t state = state_t::manifest;
  std::uint32_t block_size = 0;
  std::uint32_t file_count = 0;
  std::uint32_t chunks = 0;
  std::uint64_t total_bytes = 0;
  std::string sender_name;
  // Session numbering (session_params.channel / channel_seq / catch_up_seqs).
  std::string seq_channel;  ///< empty: unsequenced
  std::uint64_t seq = 0;    ///< 0: unsequenced
  std::string seq_source;   ///< sequence_book::source_of
  std::vector<wire::seq_span> catch_up;
  std::optional<sequence_report> seq_report;  ///< what REGISTER carries, fixed at the first send
  /// The chunks and entries taken while state is manifest (default: a restored session).
  manifest_assembler manifest;
  /// Indexed by file; grows (as `manifest` admits chunks, charged) as manifest entries arrive,
  /// so a forged announce declaring 10^6 files costs nothing until entries come. Holds
  /// file_count entries once the manifest is complete.
  std::vector<file_rx> files;
  std::uint32_t files_open = 0;  ///< not in a terminal state
  std::uint32_t files_finalizing = 0;
  std::uint64_t bytes_received = 0;
  std::uint32_t seen_seq = 0;
  duration grtt = std::chrono::milliseconds(500);
  std::uint64_t echo_us = 0;
  time_point echo_at{};
  time_point last_heard{};
  time_point started{};
  // The sender's progress as of the latest marker.
  std::uint32_t marker_pass = 0;
  std::uint32_t marker_file = 0;
  std::uint32_t marker_block = 0;
  std::uint32_t marker_seq = 0;
  bool marker_pass_end = false;
  // How far NAK rounds of pass marker_pass are scheduled: each newer marker schedules a round
  // for the blocks between the previous marker and itself (nak_round).
  std::uint32_t nak_file = 0;
  std::uint32_t nak_block = 0;
  std::uint32_t pass_end_answered = 0;
  /// Pending NAK rounds, in the order scheduled; each fires at its own time.
  std::vector<nak_round> rounds;
  /// The earliest due time of `rounds`.
  std::optional<time_point> nak_due;

  /// NAK timing, advertised repairs and the status slice.
  nak_scheduler feedback;
  time_point complete_sent{};  ///< when COMPLETE last left
  std::uint32_t digests_through = 0;
  time_point next_register{};
  std::uint32_t register_sends = 0;
  time_point register_sent{};  ///< when the first REGISTER left
  duration register_rtt{};  ///< first REGISTER to its answer; zero if unknown (unicast_order::rtt)
  time_point next_complete{};
  std::uint32_t complete_sends = 0;
  time_point next_checkpoint{};
  bool dirty = false;
  std::uint32_t files_stored = 0;
  std::uint32_t files_held = 0;
  std::uint32_t files_failed = 0;
  std::uint64_t bytes_stored = 0;
  /// Parity repairs of this session, for its summary line: parity blocks kept and refused by
  /// storage, FEC blocks decoded, source blocks recovered, decodes failed.
  struct {
    std::uint32_t kept = 0, refused = 0, fec_blocks = 0, blocks = 0, failures = 0;
  } parity;
  // Unicast fallback.
  /// How the session's data reaches us: multicast until the sender moves us to unicast
  /// (handle_fallback), from then on the order's transport, and multicast data is ignored.
  delivery_path path = delivery_path::multicast;
  bool unicast_active = false;  ///< a unicast client is running
  /// The announce's session_params.unicast_start (token zero): opened with the first REGISTER.
  std::optional<unicast_order> unicast_start;
  /// The shell holds a transport opened for this session before its FALLBACK order
  /// (receiver_sink::prepare_unicast) until start_unicast takes it or the session closes.
  bool unicast_prepared = false;
  unicast_order order;
  std::uint32_t unicast_attempts = 0;
  time_point next_unicast{};
  /// Bytes received of blocks that arrived in pieces over unicast, by (file << 32 | block).
  std::unordered_map<std::uint64_t, std::uint32_t> partial;
  // Parity repairs (session_params.fec_*; fec_k 0: none).
  std::uint32_t fec_k = 0;
  std::uint32_t fec_max_parity = 0;
  std::uint32_t fec_depth = 1;
  std::unique_ptr<fec_tracker> fec;  ///< built when the session receives (ensure_fec)
  /// FEC blocks whose report the NAK datagram cap pushed out of a round: the next round
  /// reports them. (A FEC block pass 1 has not finished is reported by the round drawn at the
  /// marker that finishes it, receiver_engine::fec_report.)
  std::set<std::uint32_t> fec_deferred;
  /// Of those FEC blocks whose missing blocks are named one by one, the source index where the
  /// cap stopped the naming: the next round goes on from there rather than name the first
  /// part again (one entry per deferred FEC block at most).
  std::map<std::uint32_t, std::uint32_t> fec_name_resume;
  // --rate auto (receiver_engine_rate.cpp): loss event rate of the multicast datagrams and
  // the rate-report timing.
  loss_estimator loss;
  rate_feedback rate;
  /// The latest marker said the sender is in slow start (its receive-rate reports wanted).
  bool rate_slow_start = false;
  /// After a loss event other than the first: the rate reports ask for at most this, bit/s
  /// (loss_estimator::first_rate_share of the rate that got through up to the event), until
  /// loss_cap_until (two RTTs) and then while the open loss interval is shorter than the mean
  /// one (docs/design-notes.md "Rate auto", "A loss event caps the report"). 0: no cap.
  double loss_cap_bps = 0;
  time_point loss_cap_until{};
  /// When this session last reported an overrun (report_overrun), and the rate the sender
  /// holds below after it (wire::overrun_cap_share of what it reported) until the next marker
  /// tells the sender's rate itself; 0: take the marker's.
  std::optional<time_point> overrun_reported;
  double overrun_assumed_bps = 0;
  /// Silent here (docs/design-notes.md "Silent sessions"): the announce carried silent_passes
  /// (its value, 0 otherwise) or the channel is configured silent. Nothing is ever sent for it.
  bool silent = false;
  std::uint32_t silent_passes = 0;

  std::string name() const { return fmt::format("{}", id); }
};

namespace engine_detail {

/// Sets the timestamp echo that every feedback message (REGISTER, NAK, COMPLETE) carries: the
/// sender's timestamp of the latest marker of session `s` (µs) and how long this receiver has
/// held it (µs, to `now`), from which the sender measures its GRTT (docs/design-notes.md).
template <class Msg, class Session>
void set_echo(Msg& m, const Session& s, time_point now) {
  m.set_echo_time_us(s.echo_us);
  m.set_hold_us(static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(now - s.echo_at).count()));
}

/// A NAK of session `s` from `receiver_id` with the fields every NAK carries (pass, the
/// sequence seen, the timestamp echo, progress) and nothing NAKed yet.
template <class Session>
wire::nak nak_header(const Session& s, const std::string& receiver_id, time_point now) {
  wire::nak m;
  m.set_receiver_id(receiver_id);
  m.set_pass(s.marker_pass);
  m.set_seen_seq(seq_after(s.marker_seq, s.seen_seq) ? s.marker_seq : s.seen_seq);
  set_echo(m, s, now);
  m.set_files_finalizing(s.files_finalizing);
  m.set_bytes_received(s.bytes_received);
  return m;
}

}  // namespace engine_detail

}  // namespace mcdist::receiver
