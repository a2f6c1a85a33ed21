// The receiver engine's session state and helpers, shared by the .cpp files that implement
// receiver_engine (receiver_engine.cpp: dispatch, data, markers, timers, session close;
// receiver_engine_session.cpp: announces, manifest, registration; receiver_engine_files.cpp:
// digests and a file's end; receiver_engine_fec.cpp: parity; receiver_engine_naks.cpp: NAK
// rounds and COMPLETE; receiver_engine_unicast.cpp: the fallback;
// receiver_engine_checkpoint.cpp: resume state; receiver_engine_rate.cpp: rate reports;
// receiver_engine_silent.cpp: silent sessions). What has a job of its own is a component the
// session holds and the engine routes between (docs/architecture.md "Inside the cores"): its
// files (file_table), NAK rounds (nak_planner), unicast fallback (unicast_fetch), parity
// repairs (parity_repair) and rate reports (rate_reporter); the engine holds the sessions in a
// session_table. Not part of the engine's interface: include it only from those files.
#pragma once

#include "receiver/core/receiver_engine.hpp"

#include "common/fec/fec.hpp"
#include "common/path_check.hpp"
#include "common/ranges.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/core/fec_tracker.hpp"
#include "receiver/core/manifest_assembler.hpp"
#include "receiver/core/nak_planner.hpp"
#include "receiver/core/parity_repair.hpp"
#include "receiver/core/rate_reporter.hpp"
#include "receiver/core/register_backoff.hpp"
#include "receiver/core/session_checkpoint.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

namespace mcdist::receiver::engine_detail {

/// Most failures listed in one COMPLETE; the rest are counted in files_stored's shortfall.
inline constexpr int max_reported_failures = 32;
/// Longest failure reason carried in COMPLETE, bytes.
inline constexpr std::size_t max_reason_bytes = 200;
/// Bytes charged for a session's fixed state besides its tables (the session_rx itself, its
/// map node, strings and the partial-block map's first buckets): a round figure above
/// sizeof(session_rx).
inline constexpr std::uint64_t session_overhead_bytes = 4096;

template <class Msg>
std::vector<std::byte> encode(wire::msg_type type, session_id session, const Msg& m) {
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  wire::encode_control(out, type, session, m);
  return out;
}

inline duration from_us(std::uint64_t us) { return std::chrono::microseconds(us); }

}  // namespace mcdist::receiver::engine_detail

namespace mcdist::receiver {

struct receiver_engine::session_rx {
  enum class state_t { manifest, checking_held, registering, receiving, completing };
  /// @param block_bytes                the session's block size
  /// @param max_nak_datagrams, id_hash  the NAK planner's (receiver_config, nak_scheduler)
  session_rx(std::uint32_t block_bytes, std::uint32_t max_nak_datagrams, std::uint64_t id_hash)
      : block_size(block_bytes), naks(max_nak_datagrams, id_hash), rate(block_bytes) {}
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
  /// file_count entries once the manifest is complete. Counts the files by outcome.
  file_table files;
  std::uint64_t bytes_received = 0;
  std::uint32_t seen_seq = 0;
  duration grtt = std::chrono::milliseconds(500);
  std::uint64_t echo_us = 0;
  time_point echo_at{};
  time_point last_heard{};
  time_point started{};
  /// The NAK rounds: the sender's progress, the gaps behind it, their timing (nak_planner.hpp).
  nak_planner naks;
  time_point complete_sent{};  ///< when COMPLETE last left
  time_point next_register{};
  std::uint32_t register_sends = 0;
  time_point register_sent{};  ///< when the first REGISTER left
  duration register_rtt{};  ///< first REGISTER to its answer; zero if unknown (unicast_order::rtt)
  time_point next_complete{};
  std::uint32_t complete_sends = 0;
  time_point next_checkpoint{};
  bool dirty = false;
  /// The unicast fallback: the order, attempts, blocks in pieces (unicast_fetch.hpp).
  unicast_fetch unicast;
  /// Parity repairs (session_params.fec_*): the FEC tracker, built when the manifest is
  /// complete (ensure_fec), decode requests and their outcome (parity_repair.hpp).
  parity_repair parity;
  /// --rate auto: the loss history of the multicast datagrams and the rate reports. Its
  /// count of datagrams lost goes in COMPLETE with `sequenced_received` in every session.
  rate_reporter rate;
  /// Multicast data and parity datagrams of the session received (note_seq).
  std::uint64_t sequenced_received = 0;
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
  const auto& p = s.naks.progress();
  m.set_pass(p.pass);
  m.set_seen_seq(seq_after(p.seq, s.seen_seq) ? p.seq : s.seen_seq);
  set_echo(m, s, now);
  m.set_files_finalizing(s.files.finalizing());
  m.set_bytes_received(s.bytes_received);
  return m;
}

}  // namespace engine_detail

}  // namespace mcdist::receiver
