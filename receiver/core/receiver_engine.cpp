#include "receiver/core/receiver_engine.hpp"

#include "common/ranges.hpp"
#include "common/fec.hpp"
#include "receiver/core/fec_tracker.hpp"
#include "receiver/core/manifest_assembler.hpp"
#include "receiver/core/nak_builder.hpp"
#include "receiver/core/nak_scheduler.hpp"
#include "receiver/core/session_checkpoint.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/core/register_backoff.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_set>

namespace mcdist::receiver {

namespace {

/// Most failures listed in one COMPLETE; the rest are counted in files_stored's shortfall.
constexpr int max_reported_failures = 32;
/// Pending NAK rounds a session keeps (one per marker, GRTT/2 apart: 32 GRTT, beyond any NAK
/// window, which is at most about 6 GRTT); beyond, the newest takes the next one's blocks.
constexpr std::size_t max_nak_rounds = 64;
/// Most digests asked for in one NAK.
constexpr std::size_t max_digests_wanted = 128;
/// Longest failure reason carried in COMPLETE, bytes.
constexpr std::size_t max_reason_bytes = 200;
/// Unicast attempts (connections) per session before the receiver gives up on it.
constexpr std::uint32_t max_unicast_attempts = 8;
/// Back-off after a lost unicast connection: this times the attempt number, at most 10 s.
constexpr auto unicast_backoff = std::chrono::milliseconds(500);
/// Bytes charged for a session's fixed state besides its tables (the session_rx itself, its
/// map node, strings and the partial-block map's first buckets): a round figure above
/// sizeof(session_rx).
constexpr std::uint64_t session_overhead_bytes = 4096;
/// Bytes of a bitmap of `bits` bits (block_map: whole 64-bit words).
constexpr std::uint64_t bitmap_bytes(std::uint64_t bits) { return (bits + 63) / 64 * 8; }

/// A path from the network made safe to print: control characters and bytes >= 0x7f shown
/// as \xNN, long paths cut.
std::string printable(std::string_view s) {
  std::string out;
  for (const char c : s.substr(0, 300)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '\\') {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  if (s.size() > 300) out += "...";
  return out;
}

bool same_host(const endpoint& a, const endpoint& b) { return a.v6 == b.v6 && a.addr == b.addr; }

template <class Msg>
std::vector<std::byte> encode(wire::msg_type type, session_id session, const Msg& m) {
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  wire::encode_control(out, type, session, m);
  return out;
}

duration from_us(std::uint64_t us) { return std::chrono::microseconds(us); }

}  // namespace

struct receiver_engine::file_rx {
  enum class state_t : std::uint8_t {
    pending = 0,      ///< entry not yet received
    refused,          ///< entry failed validation (terminal)
    held,             ///< already held identically (terminal)
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
  std::uint32_t to_file = 0;   ///< up to the marker: (file_count, 0) at a pass end
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
  std::string seq_channel;             ///< empty: unsequenced
  std::uint64_t seq = 0;               ///< 0: unsequenced
  std::string seq_source;              ///< sequence_book::source_of
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

  /// NAK timing, advertised repairs and the status slice (issue 12).
  nak_scheduler feedback;
  time_point complete_sent{};  ///< when COMPLETE last left
  std::uint32_t digests_through = 0;
  time_point next_register{};
  std::uint32_t register_sends = 0;
  time_point register_sent{};  ///< when the first REGISTER left
  duration register_rtt{};     ///< first REGISTER to its answer; zero if unknown (unicast_order::rtt)
  time_point next_complete{};
  std::uint32_t complete_sends = 0;
  time_point next_checkpoint{};
  bool dirty = false;
  std::uint32_t files_stored = 0;
  std::uint32_t files_held = 0;
  std::uint32_t files_failed = 0;
  std::uint64_t bytes_stored = 0;
  // Unicast fallback.
  bool unicast = false;         ///< the sender moved us to unicast: multicast data is ignored
  bool unicast_active = false;  ///< a unicast client is running
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
  /// FEC blocks with a missing block behind the marker whose other sources pass 1 had not sent
  /// yet: reported once they are all sent (and the FEC block's proactive parity with them).
  std::set<std::uint32_t> fec_deferred;

  std::string name() const {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", id.value);
    return buf;
  }
};

receiver_engine::receiver_engine(receiver_config cfg, receiver_sink& sink, storage_port& store,
                                 std::uint64_t seed, std::shared_ptr<spdlog::logger> log)
    : m_cfg(std::move(cfg)),
      m_sink(sink),
      m_store(store),
      m_log(std::move(log)),
      m_rng_state(seed),
      m_id_hash(nak_scheduler::id_hash(m_cfg.id)),
      m_budget(m_cfg.session_memory_bytes, m_cfg.total_memory_bytes) {}

receiver_engine::~receiver_engine() = default;

std::uint64_t receiver_engine::random() noexcept {
  std::uint64_t z = (m_rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::size_t receiver_engine::active_sessions() const noexcept { return m_sessions.size(); }

std::size_t receiver_engine::active_sessions_on(std::uint32_t channel) const noexcept {
  return static_cast<std::size_t>(std::count_if(
      m_sessions.begin(), m_sessions.end(),
      [channel](const auto& kv) { return kv.second->channel == channel; }));
}

std::optional<std::uint32_t> receiver_engine::channel_of(session_id s) const noexcept {
  const auto it = m_sessions.find(s);
  if (it == m_sessions.end()) return std::nullopt;
  return it->second->channel;
}

bool receiver_engine::manifest_complete(session_id s) const noexcept {
  const auto it = m_sessions.find(s);
  return it != m_sessions.end() && it->second->state != session_rx::state_t::manifest;
}

receiver_engine::session_rx* receiver_engine::find(session_id s) {
  const auto it = m_sessions.find(s);
  return it == m_sessions.end() ? nullptr : it->second.get();
}

duration receiver_engine::retransmit_interval(const session_rx& s) const {
  return std::max(s.grtt * 2, m_cfg.retransmit_min);
}

duration receiver_engine::session_timeout(const session_rx& s) const {
  return std::max(m_cfg.session_timeout, s.grtt * 10);
}

void receiver_engine::add_tombstone(session_id id, time_point until) {
  m_tombstones[id] = until;
  m_tombstone_order.emplace_back(id, until);
  // Forget the oldest past the cap; entries of ids re-added or expired since are skipped.
  while (m_tombstones.size() > m_cfg.max_tombstones && !m_tombstone_order.empty()) {
    const auto [old, at] = m_tombstone_order.front();
    m_tombstone_order.pop_front();
    const auto it = m_tombstones.find(old);
    if (it != m_tombstones.end() && it->second == at) m_tombstones.erase(it);
  }
  // The order list holds at most twice the cap: drop entries that no longer match.
  if (m_tombstone_order.size() > 2 * m_cfg.max_tombstones + 16) {
    std::erase_if(m_tombstone_order, [this](const auto& e) {
      const auto it = m_tombstones.find(e.first);
      return it == m_tombstones.end() || it->second != e.second;
    });
  }
}

void receiver_engine::on_datagram(std::span<const std::byte> datagram, const endpoint& from,
                                  std::uint32_t channel, time_point now) {
  ++m_stats.datagrams;
  // The datagram boundary: an allocation that fails while handling one datagram costs that
  // datagram, never the daemon (budgets make it rare; this makes it harmless).
  try {
    dispatch(datagram, from, channel, now);
  } catch (const std::bad_alloc&) {
    m_stats.drops.add(errc::out_of_memory);
    if (m_log) m_log->error("out of memory while handling a datagram from {}; dropped it",
                            from.address_string());
  } catch (const std::length_error&) {
    m_stats.drops.add(errc::out_of_memory);
  }
}

void receiver_engine::dispatch(std::span<const std::byte> datagram, const endpoint& from,
                               std::uint32_t channel, time_point now) {
  wire::header h;
  if (auto ec = wire::parse_header(datagram, h)) {
    m_stats.drops.add(static_cast<errc>(ec.value()));
    return;
  }
  if (h.type == wire::msg_type::data) {
    handle_data(datagram, from, now);
    return;
  }
  if (h.type == wire::msg_type::parity) {
    handle_parity(datagram, from, now);
    return;
  }
  if (h.type == wire::msg_type::announce) {
    if (channel == control_channel) {
      // Announces come from the channel's group; one sent straight to our reply port is not
      // from a sender on the channel.
      m_stats.drops.add(errc::wrong_socket);
      return;
    }
    wire::announce m;
    if (wire::parse_control(datagram, m)) {
      m_stats.drops.add(errc::bad_protobuf);
      return;
    }
    handle_announce(m, h.session, from, channel, now);
    return;
  }
  session_rx* s = find(h.session);
  if (!s) {
    m_stats.drops.add(m_tombstones.count(h.session) ? errc::stale : errc::unknown_session);
    return;
  }
  if (!same_host(from, s->sender)) {
    m_stats.drops.add(errc::wrong_source);
    return;
  }
  auto parse = [&](auto& msg) {
    if (wire::parse_control(datagram, msg)) {
      m_stats.drops.add(errc::bad_protobuf);
      return false;
    }
    s->last_heard = now;
    return true;
  };
  switch (h.type) {
    case wire::msg_type::marker: {
      wire::marker m;
      if (parse(m)) handle_marker(*s, m, now);
      break;
    }
    case wire::msg_type::digest_list: {
      wire::digest_list m;
      if (parse(m)) handle_digests(*s, m, now);
      break;
    }
    case wire::msg_type::register_reply: {
      wire::register_reply m;
      if (parse(m)) handle_register_reply(*s, m, now);
      break;
    }
    case wire::msg_type::complete_ack: {
      wire::complete_ack m;
      if (parse(m)) {
        if (m.receiver_id() == m_cfg.id) handle_complete_ack(*s, now);
      }
      break;
    }
    case wire::msg_type::session_end: {
      wire::session_end m;
      if (parse(m)) handle_end(*s, m, now);
      break;
    }
    case wire::msg_type::fallback: {
      wire::fallback m;
      if (parse(m)) handle_fallback(*s, m, from, now);
      break;
    }
    case wire::msg_type::repair_advert: {
      wire::repair_advert m;
      if (parse(m)) handle_advert(*s, m, now);
      break;
    }
    default:
      m_stats.drops.add(errc::unknown_type);
      break;
  }
}

bool receiver_engine::new_session(const wire::announce& m, session_id id, const endpoint& from,
                                  std::uint32_t channel, time_point now) {
  const auto& p = m.params();
  if (p.block_size() < wire::min_block_size || p.block_size() > wire::max_block_size ||
      p.manifest_chunks() == 0 ||
      p.manifest_chunks() > std::max<std::uint32_t>(1, p.file_count())) {
    m_stats.drops.add(errc::invalid_field);
    return false;
  }
  // Session numbering: a channel name we can key state by, ranges within the limits.
  std::vector<wire::seq_span> catch_up;
  if (static_cast<std::size_t>(p.catch_up_seqs_size()) > wire::max_seq_ranges ||
      (!p.channel().empty() && !wire::valid_channel_name(p.channel())) ||
      ((p.channel_seq() > 0 || p.catch_up_seqs_size() > 0) && p.channel().empty()) ||
      (p.channel_seq() > 0 && p.catch_up_seqs_size() > 0)) {
    m_stats.drops.add(errc::invalid_field);
    return false;
  }
  for (const auto& r : p.catch_up_seqs()) catch_up.emplace_back(r.first(), r.last());
  if (!wire::valid_seq_ranges(catch_up, std::numeric_limits<std::uint64_t>::max())) {
    m_stats.drops.add(errc::invalid_field);
    return false;
  }
  if (p.only_receivers_size() > 0 &&
      std::find(p.only_receivers().begin(), p.only_receivers().end(), m_cfg.id) ==
          p.only_receivers().end()) {
    add_tombstone(id, now + m_cfg.session_timeout);
    if (m_log) {
      m_log->info("session {} from {}: a resend for other receivers; not taking part",
                  id, from.address_string());
    }
    return false;
  }
  // Totals first, before anything is allocated: the declared files and blocks must fit the
  // limits and the session's memory budget (file table and block maps at their full size).
  const std::uint64_t blocks = p.total_bytes() / p.block_size() + p.file_count();
  const std::uint64_t need = session_overhead_bytes +
                             manifest_assembler::state_bytes(p.manifest_chunks(), p.file_count()) +
                             std::uint64_t{p.file_count()} * sizeof(file_rx) + bitmap_bytes(blocks);
  if (p.file_count() > std::min(m_cfg.max_files, max_files_per_session) ||
      need > m_cfg.session_memory_bytes) {
    m_stats.drops.add(errc::over_budget);
    if (m_log) {
      m_log->warn("session {} from {}: refused: {} files, {} bytes in {}-byte blocks would "
                  "need {} bytes of state, over the session budget of {} (session_memory_bytes) "
                  "or the file limit {}",
                  id, from.address_string(), p.file_count(), p.total_bytes(),
                  p.block_size(), need, m_cfg.session_memory_bytes, m_cfg.max_files);
    }
    return false;
  }
  if (m_sessions.size() >= m_cfg.max_sessions) {
    m_stats.drops.add(errc::too_many_sessions);
    return false;
  }
  const auto from_here = std::count_if(m_sessions.begin(), m_sessions.end(), [&](const auto& kv) {
    return same_host(kv.second->sender, from);
  });
  if (static_cast<std::uint64_t>(from_here) >= m_cfg.max_sessions_per_source) {
    m_stats.drops.add(errc::too_many_sessions);
    return false;
  }
  // What is allocated now: the session and its two manifest bitmaps. The file table grows
  // with the entries, block maps come with the blocks; each is charged as it is allocated.
  const std::uint64_t now_bytes =
      session_overhead_bytes + manifest_assembler::state_bytes(p.manifest_chunks(), p.file_count());
  if (!m_budget.charge(id, now_bytes)) {
    m_stats.drops.add(errc::over_budget);
    return false;
  }
  auto owned = std::make_unique<session_rx>();
  session_rx* s = owned.get();
  s->id = id;
  s->sender = from;
  s->channel = channel;
  s->block_size = p.block_size();
  s->file_count = p.file_count();
  s->chunks = p.manifest_chunks();
  s->total_bytes = p.total_bytes();
  s->sender_name = printable(p.sender_name().substr(0, 64));
  s->seq_channel = p.channel();
  s->seq = p.channel_seq();
  s->catch_up = std::move(catch_up);
  // Parity repairs: a shape the codec cannot have means no FEC here (explicit NAKs still work).
  if (p.fec_k() > 0 && p.fec_max_parity() > 0 && p.fec_k() < fec::max_blocks &&
      p.fec_max_parity() < fec::max_blocks && p.fec_k() + p.fec_max_parity() <= fec::max_blocks &&
      p.fec_depth() >= 1 && p.fec_depth() <= fec::max_depth) {
    s->fec_k = p.fec_k();
    s->fec_max_parity = p.fec_max_parity();
    s->fec_depth = p.fec_depth();
  }
  if (!s->seq_channel.empty()) {
    s->seq_source = sequence_book::source_of(m_sink.sender_key(id), p.sender_name());
  }
  s->manifest = manifest_assembler(p, sizeof(file_rx));
  s->started = now;
  m_sessions.emplace(id, std::move(owned));
  if (m_log) {
    m_log->info("session {} from {} ({}): {} files, {} bytes announced, block {} bytes, rate {} "
                "bit/s",
                s->name(), from.address_string(), s->sender_name, s->file_count, s->total_bytes,
                s->block_size, p.rate_bps());
  }
  return true;
}

bool receiver_engine::ensure_block_map(session_rx& s, std::uint32_t f, time_point now) {
  auto& fr = s.files[f];
  if (fr.blocks == 0 || fr.received.size() == fr.blocks) return true;
  if (!m_budget.charge(s.id, bitmap_bytes(fr.blocks))) {
    fail_file(s, f, errc::over_budget,
              "its block map (" + std::to_string(bitmap_bytes(fr.blocks)) +
                  " bytes) does not fit the memory budget (session_memory_bytes, "
                  "total_memory_bytes)",
              now);
    return false;
  }
  fr.received = block_map(fr.blocks);
  return true;
}

void receiver_engine::fail_file(session_rx& s, std::uint32_t f, std::error_code ec,
                                const std::string& detail, time_point now) {
  auto& fr = s.files[f];
  if (fr.terminal()) return;
  if (fr.state == file_rx::state_t::finalizing) --s.files_finalizing;
  if (fr.begun) m_store.discard_file({s.id, file_index{f}});
  fr.begun = false;
  fr.resume = false;
  fr.state = file_rx::state_t::failed;
  fr.failure = ec.message() + (detail.empty() ? "" : ": " + detail);
  // files_open counts the files left to do from the manifest's completion on.
  if (s.state != session_rx::state_t::manifest) --s.files_open;
  ++s.files_failed;
  ++m_stats.files_failed;
  s.dirty = true;
  if (m_log) {
    m_log->error("session {}: could not store '{}': {}", s.name(), printable(fr.entry.path),
                 fr.failure);
  }
  file_done(s, now);
}

void receiver_engine::handle_announce(const wire::announce& m, session_id id, const endpoint& from,
                                      std::uint32_t channel, time_point now) {
  const auto& p = m.params();
  session_rx* s = find(id);
  if (!s) {
    if (m_tombstones.count(id)) {
      m_stats.drops.add(errc::stale);
      return;
    }
    if (!new_session(m, id, from, channel, now)) return;
    s = find(id);
  } else {
    if (!same_host(from, s->sender)) {
      m_stats.drops.add(errc::wrong_source);
      return;
    }
    if (p.block_size() != s->block_size || p.file_count() != s->file_count ||
        p.manifest_chunks() != s->chunks || p.total_bytes() != s->total_bytes) {
      m_stats.drops.add(errc::invalid_field);
      return;
    }
  }
  s->last_heard = now;
  s->echo_us = m.sender_time_us();
  s->echo_at = now;
  s->grtt = std::min(from_us(p.grtt_us()), m_cfg.max_grtt);
  s->sender.port = from.port;
  if (s->state != session_rx::state_t::manifest) return;
  switch (s->manifest.admit(m, m_budget, s->id)) {
    case manifest_assembler::fit::ignored: return;
    case manifest_assembler::fit::invalid: m_stats.drops.add(errc::invalid_field); return;
    // The chunk is not taken: a later copy may fit once other sessions end.
    case manifest_assembler::fit::over_budget: m_stats.drops.add(errc::over_budget); return;
    case manifest_assembler::fit::admitted: break;
  }
  s->files.reserve(s->manifest.table_capacity());
  s->files.resize(s->manifest.table_size());
  std::vector<taken_entry> taken;
  const auto progress = s->manifest.take(m, m_budget, s->id, taken);
  for (auto& t : taken) {
    auto& fr = s->files[t.index];
    fr.entry = std::move(t.entry);
    if (t.refused != errc::ok) {
      fr.state = file_rx::state_t::refused;
      fr.failure = std::string(to_string(t.refused));
      ++m_stats.files_refused;
      if (m_log) {
        m_log->warn("session {}: refused file {} path '{}': {}", s->name(), t.index,
                    printable(fr.entry.path), make_error_code(t.refused).message());
      }
    } else {
      // Blocks of a file are taken as soon as its entry is known, even before the manifest is
      // complete and registration done: the sender does not wait a round trip for those.
      fr.blocks = t.blocks;
      fr.state = file_rx::state_t::receiving;
    }
  }
  if (progress == manifest_assembler::progress::malformed) {
    if (m_log) {
      m_log->error("session {}: manifest chunks do not cover every file; ignoring the session",
                   s->name());
    }
    m_stats.drops.add(errc::invalid_field);
    close_session(*s, false, "malformed manifest", now);
    return;
  }
  if (progress == manifest_assembler::progress::complete) manifest_complete(*s, now);
}

void receiver_engine::manifest_complete(session_rx& s, time_point now) {
  // Two entries may not name the same file, nor may a file sit where another entry needs a
  // directory: the second of each pair is refused.
  std::unordered_set<std::string_view> paths;
  std::unordered_set<std::string_view> dirs;
  for (std::uint32_t i = 0; i < s.file_count; ++i) {
    auto& fr = s.files[i];
    if (fr.state == file_rx::state_t::refused) continue;
    const std::string_view path = fr.entry.path;
    if (fr.state == file_rx::state_t::failed) {
      // Failed while the manifest was assembled (storage, budget): its path still counts.
      paths.insert(path);
      continue;
    }
    bool conflict = paths.count(path) > 0 || dirs.count(path) > 0;
    for (std::size_t pos = path.find('/'); !conflict && pos != std::string_view::npos;
         pos = path.find('/', pos + 1)) {
      conflict = paths.count(path.substr(0, pos)) > 0;
    }
    if (conflict) {
      if (fr.begun) m_store.discard_file({s.id, file_index{i}});
      fr.begun = false;
      fr.state = file_rx::state_t::refused;
      fr.failure = "path_conflict";
      ++m_stats.files_refused;
      if (m_log) {
        m_log->warn("session {}: refused file {} path '{}': conflicts with another file of the "
                    "manifest",
                    s.name(), i, printable(path));
      }
      continue;
    }
    paths.insert(path);
    for (std::size_t pos = path.find('/'); pos != std::string_view::npos;
         pos = path.find('/', pos + 1)) {
      dirs.insert(path.substr(0, pos));
    }
    ++s.files_open;
  }
  s.state = session_rx::state_t::checking_held;
  std::vector<held_query> q;
  for (std::uint32_t i = 0; i < s.file_count; ++i) {
    const auto& fr = s.files[i];
    if (fr.state != file_rx::state_t::receiving) continue;
    q.push_back({file_index{i}, fr.entry.path, fr.entry.size, fr.entry.mtime_ns});
  }
  if (q.empty()) {
    on_held(s.id, {}, now);
  } else {
    m_store.query_held(s.id, s.channel, std::move(q));
  }
}

void receiver_engine::on_held(session_id id, const std::vector<held_answer>& held,
                              time_point now) {
  session_rx* s = find(id);
  if (!s || s->state != session_rx::state_t::checking_held) return;
  for (const auto& [f, digest] : held) {
    if (f.value >= s->file_count) continue;
    auto& fr = s->files[f.value];
    if (fr.state != file_rx::state_t::receiving) continue;
    if (fr.entry.digest) {
      if (*fr.entry.digest == digest) {
        if (fr.begun) m_store.discard_file({s->id, f});
        fr.begun = false;
        fr.state = file_rx::state_t::held;
        --s->files_open;
        ++s->files_held;
      }
    } else {
      fr.held_digest = digest;
    }
  }
  // Files whose every block arrived while the manifest was being assembled.
  for (std::uint32_t i = 0; i < s->file_count; ++i) {
    auto& fr = s->files[i];
    if (fr.state == file_rx::state_t::receiving && fr.blocks > 0 && fr.all_received()) {
      file_data_complete(*s, i);
    }
  }
  s->state = session_rx::state_t::registering;
  send_register(*s, now);
}

void receiver_engine::send_register(session_rx& s, time_point now) {
  wire::register_request m;
  m.set_receiver_id(m_cfg.id);
  m.set_echo_time_us(s.echo_us);
  m.set_hold_us(static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(now - s.echo_at).count()));
  if (s.seq > 0) {
    if (!s.seq_report) {
      s.seq_report = m_sequences.on_session(s.seq_channel, s.seq_source, s.seq);
      if (s.seq_report->reset && m_log) {
        m_log->warn("session {}: channel {} from {}: session number {} is below {} seen before "
                    "(the sender's numbering was reset); starting this channel's sequence over",
                    s.name(), s.seq_channel, s.seq_source, s.seq, s.seq_report->previous_seen);
      } else if (!s.seq_report->missing.empty() && m_log) {
        std::string ranges;
        for (const auto& [first, last] : s.seq_report->missing) {
          ranges += (ranges.empty() ? "" : ",") + std::to_string(first) +
                    (first == last ? "" : "-" + std::to_string(last));
        }
        m_log->warn("session {}: channel {} session {}: never completed sessions {}; reporting "
                    "them for catch-up",
                    s.name(), s.seq_channel, s.seq, ranges);
      }
    }
    m.set_last_seq(s.seq_report->last_seq);
    for (const auto& [first, last] : s.seq_report->missing) {
      auto* r = m.add_missing_seqs();
      r->set_first(first);
      r->set_last(last);
    }
  }
  std::vector<std::uint32_t> held;
  range_encoder enc(held);
  std::size_t budget = wire::control_budget - wire::header_size - 100;
  // The sequence report goes first; the held-file runs fill what is left of the budget.
  budget -= std::min(budget, m.ByteSizeLong());
  for (std::uint32_t i = 0; i < s.file_count && budget > 40;) {
    if (s.files[i].state != file_rx::state_t::held) {
      ++i;
      continue;
    }
    std::uint32_t j = i;
    while (j < s.file_count && s.files[j].state == file_rx::state_t::held) ++j;
    budget -= std::min(budget, enc.cost(i, j - i));
    enc.add(i, j - i);
    i = j;
  }
  for (const auto v : held) m.add_held_files(v);
  for (std::uint32_t i = 0; i < s.file_count && budget > 40; ++i) {
    const auto& fr = s.files[i];
    if (fr.held_digest && fr.state == file_rx::state_t::receiving) {
      auto* hd = m.add_held_pending();
      hd->set_file(i);
      hd->set_sha256(fr.held_digest->data(), 32);
      budget -= 40;
    }
  }
  const auto bytes = encode(wire::msg_type::register_request, s.id, m);
  m_sink.send(s.sender, bytes);
  // Retransmit soon, then back off to the GRTT: before the sender has measured anyone its
  // GRTT is a 0.5 s guess, and a lost REGISTER should not cost a second. Jittered, so that
  // receivers restarted together do not retry together.
  s.next_register = now + register_retry_delay(s.register_sends, m_cfg.retransmit_min,
                                               retransmit_interval(s), random());
  if (s.register_sends == 0) s.register_sent = now;
  ++s.register_sends;
}

void receiver_engine::note_register_answer(session_rx& s, time_point now) {
  if (s.state == session_rx::state_t::registering && s.register_sends == 1) {
    s.register_rtt = now - s.register_sent;
  }
}

void receiver_engine::handle_register_reply(session_rx& s, const wire::register_reply& m,
                                            time_point now) {
  if (m.receiver_id() != m_cfg.id || s.state != session_rx::state_t::registering) return;
  note_register_answer(s, now);
  if (!m.accepted()) {
    if (m_log) {
      m_log->warn("session {}: sender {} refused our registration: {}", s.name(),
                  s.sender.address_string(), printable(m.reason()));
    }
    close_session(s, false, "registration refused", now);
    return;
  }
  start_receiving(s, now);
}

void receiver_engine::start_receiving(session_rx& s, time_point now) {
  s.state = session_rx::state_t::receiving;
  s.next_checkpoint = now + m_cfg.checkpoint_interval;
  if (m_log) {
    m_log->info("session {}: registered; {} files to receive, {} already held", s.name(),
                s.files_open, s.files_held);
  }
  for (std::uint32_t i = 0; i < s.file_count; ++i) {
    auto& fr = s.files[i];
    if (fr.state != file_rx::state_t::receiving) continue;
    if (fr.blocks == 0) {
      file_data_complete(s, i);
    } else {
      // NAKs and the unicast fallback read every receiving file's block map from here on.
      ensure_block_map(s, i, now);
    }
  }
  file_done(s, now);
}

void receiver_engine::handle_data(std::span<const std::byte> datagram, const endpoint& from,
                                  time_point now) {
  wire::data_header h;
  std::span<const std::byte> payload;
  if (auto ec = wire::parse_data(datagram, h, payload)) {
    m_stats.drops.add(static_cast<errc>(ec.value()));
    return;
  }
  session_rx* s = find(h.session);
  if (!s) {
    m_stats.drops.add(m_tombstones.count(h.session) ? errc::stale : errc::unknown_session);
    return;
  }
  if (!same_host(from, s->sender)) {
    m_stats.drops.add(errc::wrong_source);
    return;
  }
  if (s->state == session_rx::state_t::completing || s->unicast) {
    m_stats.drops.add(errc::duplicate);
    return;
  }
  if (h.file.value >= s->file_count) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  if (h.file.value >= s->files.size()) {
    m_stats.drops.add(errc::stale);  // its entry has not arrived yet
    return;
  }
  auto& fr = s->files[h.file.value];
  if (fr.state != file_rx::state_t::receiving) {
    m_stats.drops.add(fr.terminal() || fr.state == file_rx::state_t::finalizing ||
                              fr.state == file_rx::state_t::awaiting_digest
                          ? errc::duplicate
                          : errc::stale);
    return;
  }
  if (h.block.value >= fr.blocks ||
      payload.size() != block_length(fr.entry.size, s->block_size, h.block.value)) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  s->last_heard = now;
  if (seq_after(h.seq, s->seen_seq)) s->seen_seq = h.seq;
  if (!ensure_block_map(*s, h.file.value, now)) {
    m_stats.drops.add(errc::over_budget);
    return;
  }
  if (fr.received.test(h.block.value)) {
    m_stats.drops.add(errc::duplicate);
    return;
  }
  if (!fr.begun) {
    m_store.begin_file({s->id, h.file}, s->channel, fr.entry, fr.resume);
    fr.begun = true;
  }
  if (!m_store.write({s->id, h.file}, std::uint64_t{h.block.value} * s->block_size, payload)) {
    m_stats.drops.add(errc::storage_full);
    return;
  }
  fr.received.set(h.block.value);
  s->bytes_received += payload.size();
  s->dirty = true;
  ++m_stats.data_blocks;
  m_stats.data_bytes += payload.size();
  if (s->fec) fec_source_added(*s, h.file.value, h.block.value, now);
  // Before the held check, a complete file waits (on_held finalizes it unless it is held).
  if (fr.received.all() && s->state != session_rx::state_t::manifest &&
      s->state != session_rx::state_t::checking_held) {
    file_data_complete(*s, h.file.value);
    file_done(*s, now);
  }
}

void receiver_engine::file_data_complete(session_rx& s, std::uint32_t f) {
  auto& fr = s.files[f];
  if (!fr.entry.digest) {
    fr.state = file_rx::state_t::awaiting_digest;
    return;
  }
  if (!fr.begun) {
    m_store.begin_file({s.id, file_index{f}}, s.channel, fr.entry, fr.resume);
    fr.begun = true;
  }
  fr.state = file_rx::state_t::finalizing;
  ++s.files_finalizing;
  m_store.finalize({s.id, file_index{f}}, *fr.entry.digest);
}

void receiver_engine::handle_digests(session_rx& s, const wire::digest_list& m, time_point now) {
  for (const auto& d : m.digests()) {
    if (d.file() >= s.file_count || d.sha256().size() != 32) {
      m_stats.drops.add(errc::invalid_field);
      continue;
    }
    if (d.file() >= s.files.size()) continue;  // its entry has not arrived yet
    auto& fr = s.files[d.file()];
    if (fr.entry.digest || fr.state == file_rx::state_t::pending ||
        fr.state == file_rx::state_t::refused) {
      continue;
    }
    fr.entry.digest = digest_from_bytes(d.sha256());
    s.dirty = true;
    if (fr.held_digest && *fr.held_digest == *fr.entry.digest &&
        (fr.state == file_rx::state_t::receiving || fr.state == file_rx::state_t::awaiting_digest)) {
      if (fr.begun) m_store.discard_file({s.id, file_index{d.file()}});
      fr.begun = false;
      fr.state = file_rx::state_t::held;
      --s.files_open;
      ++s.files_held;
      continue;
    }
    if (fr.state == file_rx::state_t::awaiting_digest) file_data_complete(s, d.file());
  }
  file_done(s, now);
}

void receiver_engine::handle_marker(session_rx& s, const wire::marker& m, time_point now) {
  s.echo_us = m.sender_time_us();
  s.echo_at = now;
  s.grtt = std::min(from_us(m.grtt_us()), m_cfg.max_grtt);
  s.feedback.on_marker(from_us(std::min<std::uint32_t>(m.nak_backoff_us(), 10'000'000)),
                       m.group_size());
  s.digests_through = std::min(m.digests_through(), s.file_count);
  if (s.state == session_rx::state_t::completing) {
    // Answered until acknowledged, but not again before the last COMPLETE's acknowledgement
    // had time to come back (a status request sent before the sender got it).
    if (m.status_request() && now - s.complete_sent >= s.grtt) send_complete(s, now);
    return;
  }
  if (s.state != session_rx::state_t::receiving && s.state != session_rx::state_t::registering) {
    return;
  }
  if (m.file() > s.file_count || (m.file() == s.file_count && m.block() != 0)) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  const bool newer =
      seq_after(m.pass(), s.marker_pass) ||
      (m.pass() == s.marker_pass &&
       (m.file() > s.marker_file || (m.file() == s.marker_file && m.block() >= s.marker_block)));
  if (!newer) return;
  if (m.pass() != s.marker_pass) {
    // A new pass: NAK from its start again; rounds and hints of the old pass are void.
    s.marker_pass_end = false;
    s.feedback.clear();
    s.rounds.clear();
    s.nak_file = 0;
    s.nak_block = 0;
  }
  s.marker_pass = m.pass();
  s.marker_file = m.file();
  s.marker_block = m.block();
  if (seq_after(m.seq(), s.marker_seq) || s.marker_seq == 0) s.marker_seq = m.seq();
  s.marker_pass_end = s.marker_pass_end || m.pass_end();
  nak_round r;
  // The sender is idle and asking again at the end of a pass we already answered: our NAKs
  // were lost, or its repairs were (or a repair it advertised). NAK everything still missing.
  const bool rescan = m.pass_end() && s.pass_end_answered == m.pass();
  if (rescan) s.feedback.clear();
  if (!rescan && !s.unicast) {
    r.from_file = s.nak_file;
    r.from_block = s.nak_block;
  } else if (s.unicast) {
    // Data comes over unicast; NAK only for digests and, when asked, as a sign of life.
    r.from_file = s.marker_file;
    r.from_block = s.marker_block;
  }
  r.to_file = s.marker_file;
  r.to_block = s.marker_block;
  r.pass_end = s.marker_pass_end;
  r.status = m.status_request();
  r.status_slices = m.status_slices();
  r.status_slice = m.status_slice();
  const bool covers = r.from_file < r.to_file ||
                      (r.from_file == r.to_file && r.from_block < r.to_block);
  s.nak_file = s.marker_file;
  s.nak_block = s.marker_block;
  if (!covers && !r.status && !rescan) return;
  r.due = now + s.feedback.draw_delay(random());
  if (s.rounds.size() >= max_nak_rounds) {
    // Bounded: the newest pending round takes this one's blocks too.
    auto& last = s.rounds.back();
    last.to_file = r.to_file;
    last.to_block = r.to_block;
    last.pass_end = last.pass_end || r.pass_end;
    last.status = last.status || r.status;
  } else {
    s.rounds.push_back(r);
  }
  if (!s.nak_due || r.due < *s.nak_due) s.nak_due = r.due;
}

void receiver_engine::handle_advert(session_rx& s, const wire::repair_advert& m, time_point) {
  if (s.state != session_rx::state_t::receiving || s.unicast) return;
  // Check everything before taking anything (a hint, but from the network).
  for (const auto& fn : m.files()) {
    if (fn.file() >= s.file_count || fn.file() >= s.files.size() ||
        for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                       s.files[fn.file()].blocks, [](std::uint32_t, std::uint32_t) {})) {
      m_stats.drops.add(errc::invalid_field);
      return;
    }
  }
  for (const auto& fn : m.files()) {
    for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                   s.files[fn.file()].blocks, [&](std::uint32_t first, std::uint32_t count) {
                     s.feedback.advertise(m.pass(), s.marker_pass, fn.file(), first, count);
                   });
  }
}

void receiver_engine::handle_parity(std::span<const std::byte> datagram, const endpoint& from,
                                    time_point now) {
  wire::parity_header h;
  std::span<const std::byte> payload;
  if (auto ec = wire::parse_parity(datagram, h, payload)) {
    m_stats.drops.add(static_cast<errc>(ec.value()));
    return;
  }
  session_rx* s = find(h.session);
  if (!s) {
    m_stats.drops.add(m_tombstones.count(h.session) ? errc::stale : errc::unknown_session);
    return;
  }
  if (!same_host(from, s->sender)) {
    m_stats.drops.add(errc::wrong_source);
    return;
  }
  if (s->state == session_rx::state_t::completing || s->unicast) {
    m_stats.drops.add(errc::duplicate);
    return;
  }
  // Parity is used once the manifest is complete; before, or in a session without FEC, it is
  // dropped like a block of an unknown file.
  if (!ensure_fec(*s)) {
    m_stats.drops.add(errc::stale);
    return;
  }
  auto& t = *s->fec;
  if (h.fec_block >= t.layout().fec_blocks() || h.index >= t.max_parity() ||
      payload.size() != s->block_size) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  s->last_heard = now;
  if (seq_after(h.seq, s->seen_seq)) s->seen_seq = h.seq;
  if (!t.add_parity(h.fec_block, h.index)) {
    m_stats.drops.add(errc::duplicate);
    return;
  }
  if (!m_store.write_parity(s->id, h.fec_block, h.index, payload)) {
    // This storage path does not decode (or is full): NAK the FEC block's blocks instead.
    t.set_explicit_only(h.fec_block);
    m_stats.drops.add(errc::storage_full);
    return;
  }
  ++m_stats.parity_blocks;
  if (t.decodable(h.fec_block)) start_recovery(*s, h.fec_block, now);
}

bool receiver_engine::ensure_fec(session_rx& s) {
  if (s.fec) return true;
  // The manifest must be complete (the layout needs every entry); registration need not be:
  // an eager sender's first blocks and parity arrive while the site registers.
  if (s.fec_k == 0 || s.state == session_rx::state_t::manifest || s.files.size() != s.file_count) {
    return false;
  }
  // A storage path that cannot decode: no FEC state at all, missing blocks are NAKed one by
  // one and parity is dropped (as stale).
  if (!m_store.decodes_parity()) {
    s.fec_k = 0;
    return false;
  }
  // The layout is the sender's: every manifest entry's block count, refused ones included.
  std::vector<std::uint32_t> blocks(s.file_count);
  for (std::uint32_t i = 0; i < s.file_count; ++i) {
    const std::uint64_t n = (s.files[i].entry.size + s.block_size - 1) / s.block_size;
    if (n > 0x7fffffffu) {
      s.fec_k = 0;
      return false;
    }
    blocks[i] = static_cast<std::uint32_t>(n);
  }
  try {
    fec::layout l(blocks, s.fec_k, s.fec_depth);
    // 2 bytes per FEC block (fec_tracker.hpp), charged before it is allocated.
    if (!m_budget.charge(s.id, std::uint64_t{l.fec_blocks()} * 2 + sizeof(fec_tracker))) {
      s.fec_k = 0;
      return false;
    }
    s.fec = std::make_unique<fec_tracker>(std::move(l), s.fec_max_parity);
  } catch (const std::invalid_argument&) {
    s.fec_k = 0;
    return false;
  }
  // What this receiver can already read back: received blocks, and held or stored files whole.
  for (std::uint32_t i = 0; i < s.file_count; ++i) {
    const auto& fr = s.files[i];
    const bool whole = fr.state == file_rx::state_t::stored || fr.state == file_rx::state_t::held;
    const bool partial = (fr.state == file_rx::state_t::receiving ||
                          fr.state == file_rx::state_t::awaiting_digest ||
                          fr.state == file_rx::state_t::finalizing) &&
                         fr.received.size() == blocks[i] && blocks[i] > 0;
    if (!whole && !partial) continue;
    for (std::uint32_t b = 0; b < blocks[i]; ++b) {
      if (whole || fr.received.test(b)) s.fec->add_source(s.fec->layout().locate(i, b).fec_block);
    }
  }
  return true;
}

void receiver_engine::fec_source_added(session_rx& s, std::uint32_t f, std::uint32_t b,
                                       time_point now) {
  const std::uint32_t fb = s.fec->layout().locate(f, b).fec_block;
  s.fec->add_source(fb);
  if (s.fec->decodable(fb)) start_recovery(s, fb, now);
}

void receiver_engine::start_recovery(session_rx& s, std::uint32_t fb, time_point now) {
  auto& t = *s.fec;
  recovery_request req;
  req.fec_block = fb;
  req.k = s.fec_k;
  req.max_parity = s.fec_max_parity;
  req.block_size = s.block_size;
  req.parity = t.parity_indexes(fb);
  const std::uint32_t n = t.layout().sources(fb);
  req.sources.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto src = t.layout().source(fb, i);
    auto& fr = s.files[src.file];
    // A file whose blocks have not started arriving gets its block map now, so what the
    // decode recovers for it is recorded (a map that does not fit fails the file).
    if (fr.state == file_rx::state_t::receiving) ensure_block_map(s, src.file, now);
    fec_source fs;
    fs.file = file_index{src.file};
    fs.block = src.block;
    fs.offset = std::uint64_t{src.block} * s.block_size;
    fs.length = block_length(fr.entry.size, s.block_size, src.block);
    const bool has_map = fr.received.size() == fr.blocks && fr.blocks > 0;
    fs.available = fr.state == file_rx::state_t::stored || fr.state == file_rx::state_t::held ||
                   ((fr.state == file_rx::state_t::receiving ||
                     fr.state == file_rx::state_t::awaiting_digest ||
                     fr.state == file_rx::state_t::finalizing) &&
                    has_map && fr.received.test(src.block));
    fs.wanted = !fs.available && fr.state == file_rx::state_t::receiving && has_map;
    if (fs.wanted && !fr.begun) {
      m_store.begin_file({s.id, fs.file}, s.channel, fr.entry, fr.resume);
      fr.begun = true;
    }
    req.sources.push_back(fs);
  }
  t.start_decode(fb);
  m_store.recover(s.id, std::move(req));
}

void receiver_engine::on_recovered(session_id id, std::uint32_t fb, std::error_code ec,
                                   time_point now) {
  session_rx* s = find(id);
  if (!s || !s->fec || fb >= s->fec->layout().fec_blocks() || !s->fec->decoding(fb)) return;
  if (ec) {
    s->fec->set_explicit_only(fb);
    if (m_log) {
      m_log->warn("session {}: decoding FEC block {} failed ({}); asking for its blocks instead",
                  s->name(), fb, ec.message());
    }
    return;
  }
  const std::uint32_t n = s->fec->layout().sources(fb);
  std::vector<std::uint32_t> completed;
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto src = s->fec->layout().source(fb, i);
    auto& fr = s->files[src.file];
    if (fr.state != file_rx::state_t::receiving || fr.received.size() != fr.blocks ||
        fr.blocks == 0 || fr.received.test(src.block)) {
      continue;
    }
    const std::uint32_t len = block_length(fr.entry.size, s->block_size, src.block);
    fr.received.set(src.block);
    s->bytes_received += len;
    s->dirty = true;
    ++m_stats.blocks_recovered;
    m_stats.data_bytes += len;
    if (fr.received.all()) completed.push_back(src.file);
  }
  s->fec->decoded(fb);
  if (s->state == session_rx::state_t::manifest || s->state == session_rx::state_t::checking_held) {
    return;
  }
  for (const auto f : completed) {
    if (s->files[f].state == file_rx::state_t::receiving) file_data_complete(*s, f);
  }
  file_done(*s, now);
}

std::uint32_t receiver_engine::fec_sent(const session_rx& s, std::uint32_t fb) const {
  const auto& l = s.fec->layout();
  // Pass 1 sends every source in sequence order; later passes and the end of pass 1 are past
  // all of them.
  if (s.marker_pass > 1 || s.marker_pass_end || s.marker_file >= s.file_count) return l.sources(fb);
  // The marker stands at the next block to send. Parity goes out ahead of blocks, so once
  // the sweep has sent one block past a FEC block's last source, that FEC block's proactive
  // parity has gone out too: count its sources as sent only then, so the NAK is not for
  // parity already on its way.
  const std::uint64_t g = l.sequence_number(s.marker_file, s.marker_block);
  return l.sources_before(fb, g > 0 ? g - 1 : 0);
}

block_map receiver_engine::fec_mask(session_rx& s, std::uint32_t f, std::uint32_t from,
                                    std::uint32_t end, std::map<std::uint32_t, std::uint32_t>& lacks) {
  auto& t = *s.fec;
  block_map masked = s.files[f].received;
  for (std::uint32_t b = masked.find_clear(from); b < end; b = masked.find_clear(b + 1)) {
    const std::uint32_t fb = t.layout().locate(f, b).fec_block;
    if (t.decoding(fb)) {
      masked.set(b);  // being recovered now
      continue;
    }
    const std::uint32_t sent = fec_sent(s, fb);
    if (sent < t.layout().sources(fb) && !t.explicit_only(fb)) {
      // Pass 1 has more of it to send, then its proactive parity: ask once they went out.
      masked.set(b);
      s.fec_deferred.insert(fb);
      continue;
    }
    const std::uint32_t lack = t.lack(fb, sent);
    if (!t.by_count(fb, lack)) continue;  // NAKed one by one
    masked.set(b);
    if (lack > 0) lacks[fb] = lack;  // 0: enough parity held, the decode follows
  }
  return masked;
}

void receiver_engine::fec_undefer(session_rx& s, nak_builder& naks,
                                  std::map<std::uint32_t, std::uint32_t>& lacks) {
  auto& t = *s.fec;
  for (auto it = s.fec_deferred.begin(); it != s.fec_deferred.end();) {
    const std::uint32_t fb = *it;
    const std::uint32_t n = t.layout().sources(fb);
    if (fec_sent(s, fb) < n) {
      ++it;
      continue;
    }
    it = s.fec_deferred.erase(it);
    if (t.decoding(fb)) continue;
    const std::uint32_t lack = t.lack(fb, n);
    if (lack == 0) continue;
    if (t.by_count(fb, lack)) {
      lacks[fb] = lack;
      continue;
    }
    // Parity cannot make it whole: its missing blocks one by one.
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto src = t.layout().source(fb, i);
      const auto& fr = s.files[src.file];
      if (fr.state != file_rx::state_t::receiving || fr.received.size() != fr.blocks) continue;
      if (s.feedback.advertised(src.file, src.block)) continue;  // nak_scheduler.hpp
      std::uint32_t from = src.block;
      if (!naks.add_missing(src.file, fr.received, from, src.block + 1)) {
        s.fec_deferred.insert(fb);  // the datagram cap: again at the next round
        return;
      }
    }
  }
}

void receiver_engine::send_naks(session_rx& s, time_point now) {
  // The rounds due now, in the order scheduled; the others wait.
  std::vector<nak_round> due;
  s.nak_due.reset();
  for (std::size_t i = 0; i < s.rounds.size();) {
    if (s.rounds[i].due <= now) {
      due.push_back(s.rounds[i]);
      s.rounds.erase(s.rounds.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (!s.nak_due || s.rounds[i].due < *s.nak_due) s.nak_due = s.rounds[i].due;
    ++i;
  }
  for (const auto& r : due) send_round(s, r, now);
}

void receiver_engine::send_round(session_rx& s, const nak_round& r, time_point now) {
  wire::nak header;
  header.set_receiver_id(m_cfg.id);
  header.set_pass(s.marker_pass);
  header.set_seen_seq(seq_after(s.marker_seq, s.seen_seq) ? s.marker_seq : s.seen_seq);
  header.set_echo_time_us(s.echo_us);
  header.set_hold_us(static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(now - s.echo_at).count()));
  header.set_files_finalizing(s.files_finalizing);
  header.set_bytes_received(s.bytes_received);
  nak_builder naks(header, m_cfg.max_nak_datagrams);
  bool stopped = false;
  std::map<std::uint32_t, std::uint32_t> fec_lacks;  // FEC block -> blocks it lacks
  const bool fec = !s.unicast && ensure_fec(s);
  const std::uint32_t last_file = std::min(r.to_file, s.file_count);
  for (std::uint32_t f = r.from_file, b = r.from_block; f <= last_file && f < s.file_count;
       ++f, b = 0) {
    auto& fr = s.files[f];
    if (fr.state != file_rx::state_t::receiving) continue;
    const std::uint32_t end = f == r.to_file ? std::min(r.to_block, fr.blocks) : fr.blocks;
    // Blocks that parity will repair are masked (received) and counted in fec_lacks instead.
    const block_map masked = fec ? fec_mask(s, f, b, end, fec_lacks) : block_map();
    const block_map& have = fec ? masked : fr.received;
    // Blocks the sender advertised as scheduled are left out (nak_scheduler.hpp).
    const bool all_in = s.feedback.for_each_unadvertised(
        f, b, end, [&](std::uint32_t from, std::uint32_t to) {
          if (naks.add_missing(f, have, from, to)) return true;
          b = from;
          return false;
        });
    if (!all_in) {
      // The datagram cap: the rest of this round goes out at the next timer.
      stopped = true;
      nak_round rest = r;
      rest.from_file = f;
      rest.from_block = b;
      rest.status = false;
      rest.due = now;
      s.rounds.insert(s.rounds.begin(), rest);
      s.nak_due = now;
      break;
    }
  }
  if (!stopped && r.pass_end) s.pass_end_answered = s.marker_pass;
  if (fec && !s.fec_deferred.empty()) fec_undefer(s, naks, fec_lacks);
  for (auto it = fec_lacks.begin(); it != fec_lacks.end(); ++it) {
    if (naks.add_fec_lack(it->first, it->second)) continue;
    // The datagram cap: the rest are deferred, so the next round reports them (fec_undefer).
    for (; it != fec_lacks.end(); ++it) s.fec_deferred.insert(it->first);
    break;
  }
  for (std::uint32_t i = 0;
       i < s.digests_through && !naks.full() && naks.digests_wanted() < max_digests_wanted; ++i) {
    const auto& fr = s.files[i];
    if (!fr.entry.digest && (fr.state == file_rx::state_t::awaiting_digest ||
                             fr.state == file_rx::state_t::receiving)) {
      naks.want_digest(i);
    }
  }
  // Sampled status: with nothing to NAK, only the request's slice answers.
  naks.finish(r.status &&
              nak_scheduler::in_status_sample(m_id_hash, r.status_slices, r.status_slice));
  for (const auto& m : naks.datagrams()) {
    m_sink.send(s.sender, encode(wire::msg_type::nak, s.id, m));
    ++m_stats.naks_sent;
  }
}

void receiver_engine::send_complete(session_rx& s, time_point now) {
  wire::complete m;
  m.set_receiver_id(m_cfg.id);
  m.set_echo_time_us(s.echo_us);
  m.set_hold_us(static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(now - s.echo_at).count()));
  m.set_files_stored(s.files_stored);
  m.set_bytes_stored(s.bytes_stored);
  m.set_files_held(s.files_held);
  for (std::uint32_t i = 0; i < s.file_count && m.failures_size() < max_reported_failures; ++i) {
    const auto& fr = s.files[i];
    if (fr.state == file_rx::state_t::failed || fr.state == file_rx::state_t::refused) {
      auto* ff = m.add_failures();
      ff->set_file(i);
      ff->set_reason(fr.failure.substr(0, max_reason_bytes));
    }
  }
  const auto bytes = encode(wire::msg_type::complete, s.id, m);
  m_sink.send(s.sender, bytes);
  ++s.complete_sends;
  s.complete_sent = now;
  s.next_complete = now + retransmit_interval(s);
}

void receiver_engine::file_done(session_rx& s, time_point now) {
  if (s.state != session_rx::state_t::receiving || s.files_open > 0) return;
  s.state = session_rx::state_t::completing;
  // A session counts as completed for its channel's numbering when every file was stored or
  // held; one failed or refused file leaves its number missing, so it is asked for again.
  if (s.files_stored + s.files_held == s.file_count && !s.seq_channel.empty()) {
    if (s.seq > 0) m_sequences.on_completed(s.seq_channel, s.seq_source, s.seq);
    if (!s.catch_up.empty()) m_sequences.on_caught_up(s.seq_channel, s.seq_source, s.catch_up);
  }
  if (m_log) {
    m_log->info("session {}: complete in {:.3f} s: {} files stored ({} bytes), {} held, {} failed, "
                "{} refused",
                s.name(), to_seconds(now - s.started), s.files_stored, s.bytes_stored,
                s.files_held, s.files_failed,
                std::count_if(s.files.begin(), s.files.end(), [](const file_rx& fr) {
                  return fr.state == file_rx::state_t::refused;
                }));
  }
  send_complete(s, now);
}

void receiver_engine::on_file_stored(session_id id, file_index f, std::error_code ec,
                                     const std::string& detail, time_point now) {
  session_rx* s = find(id);
  if (!s) {
    late_file_stored(id, f, ec, detail);
    return;
  }
  if (f.value >= s->files.size()) return;
  auto& fr = s->files[f.value];
  if (fr.state != file_rx::state_t::finalizing) {
    // A storage error before finalize (open, preallocate, disk reserve, quota, write: ENOSPC,
    // EROFS, ...) fails this one file; its blocks are no longer taken, so nothing waits on it.
    if (ec && (fr.state == file_rx::state_t::receiving ||
               fr.state == file_rx::state_t::awaiting_digest)) {
      fail_file(*s, f.value, ec, detail, now);
    }
    return;
  }
  --s->files_finalizing;
  s->dirty = true;
  fr.begun = false;
  fr.resume = false;
  if (!ec) {
    fr.state = file_rx::state_t::stored;
    --s->files_open;
    ++s->files_stored;
    s->bytes_stored += fr.entry.size;
    ++m_stats.files_stored;
    m_sink.file_finished({s->id, s->channel, fr.entry.path, fr.entry.size, true, {},
                          fr.entry.mtime_ns, fr.entry.digest ? &*fr.entry.digest : nullptr});
    if (m_log) {
      m_log->info("session {}: stored '{}' ({} bytes)", s->name(), printable(fr.entry.path),
                  fr.entry.size);
    }
  } else if (ec == errc::digest_mismatch && fr.digest_retries < m_cfg.max_digest_retries) {
    ++fr.digest_retries;
    fr.received.clear_all();
    fr.state = file_rx::state_t::receiving;
    if (s->unicast && !s->unicast_active) s->next_unicast = now;
    if (m_log) {
      m_log->warn("session {}: '{}' failed SHA-256 verification; fetching it again ({} of {})",
                  s->name(), printable(fr.entry.path), fr.digest_retries,
                  m_cfg.max_digest_retries);
    }
  } else {
    fr.state = file_rx::state_t::failed;
    fr.failure = ec.message() + (detail.empty() ? "" : ": " + detail);
    --s->files_open;
    ++s->files_failed;
    ++m_stats.files_failed;
    m_sink.file_finished({s->id, s->channel, fr.entry.path, fr.entry.size, false, fr.failure,
                          fr.entry.mtime_ns, nullptr});
    if (m_log) {
      m_log->error("session {}: could not store '{}': {}", s->name(), printable(fr.entry.path),
                   fr.failure);
    }
  }
  file_done(*s, now);
}

void receiver_engine::late_file_stored(session_id id, file_index f, std::error_code ec,
                                       const std::string& detail) {
  const auto it = m_late_files.find({id.value, f.value});
  if (it == m_late_files.end()) return;
  const late_file lf = std::move(it->second);
  m_late_files.erase(it);
  if (!ec) {
    ++m_stats.files_stored;
    m_sink.file_finished({id, lf.channel, lf.path, lf.size, true, {}, lf.mtime_ns,
                          lf.digest ? &*lf.digest : nullptr});
    if (m_log) {
      m_log->info("session {}: stored '{}' ({} bytes), finalized after the session ended",
                  id, printable(lf.path), lf.size);
    }
    return;
  }
  const std::string failure = ec.message() + (detail.empty() ? "" : ": " + detail);
  ++m_stats.files_failed;
  m_sink.file_finished({id, lf.channel, lf.path, lf.size, false, failure, lf.mtime_ns, nullptr});
  if (m_log) {
    m_log->error("session {}: could not store '{}': {}", id, printable(lf.path), failure);
  }
}

void receiver_engine::handle_fallback(session_rx& s, const wire::fallback& m, const endpoint& from,
                                      time_point now) {
  if (m.receiver_id() != m_cfg.id) return;
  if (s.state != session_rx::state_t::registering && s.state != session_rx::state_t::receiving) {
    return;
  }
  if (!wire::fallback::transport_kind_IsValid(m.transport()) || m.port() == 0 || m.port() > 65535 ||
      (!m.address().empty() && m.address().size() != 4 && m.address().size() != 16) ||
      m.connections() > 64 || m.token().size() != std::tuple_size_v<fallback_token>) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  fallback_token token;
  std::memcpy(token.data(), m.token().data(), token.size());
  if (s.unicast && s.order.token == token && s.unicast_active) return;  // a repeat
  unicast_order o;
  o.transport = m.transport() == wire::fallback::TCP           ? unicast_order::transport_t::tcp
                : m.transport() == wire::fallback::SCTP_KERNEL ? unicast_order::transport_t::sctp_kernel
                                                               : unicast_order::transport_t::sctp_udp;
  o.server = from;
  if (!m.address().empty()) {
    o.server.v6 = m.address().size() == 16;
    o.server.addr = {};
    std::memcpy(o.server.addr.data(), m.address().data(), m.address().size());
  }
  o.server.port = static_cast<std::uint16_t>(m.port());
  o.token = token;
  o.connections = m.connections();
  const bool first = !s.unicast;
  note_register_answer(s, now);
  s.unicast = true;
  s.order = o;
  if (m_log && first) {
    m_log->info("session {}: the sender moves this receiver to unicast ({}) at {}: {}", s.name(),
                o.transport == unicast_order::transport_t::tcp ? "tcp" : "sctp",
                o.server.to_string(), printable(m.reason()));
  }
  if (s.state == session_rx::state_t::registering) start_receiving(s, now);
  if (s.unicast_active) {
    // A new order while connected: the sender lost our session; connect again.
    m_sink.stop_unicast(s.id);
    s.unicast_active = false;
  }
  start_unicast_attempt(s, now);
}

void receiver_engine::start_unicast_attempt(session_rx& s, time_point now) {
  if (s.state != session_rx::state_t::receiving || s.unicast_active) return;
  std::vector<byte_range> wanted;
  for (std::uint32_t f = 0; f < s.file_count; ++f) {
    const auto& fr = s.files[f];
    if (fr.state != file_rx::state_t::receiving) continue;
    for (std::uint32_t b = fr.received.find_clear(0); b < fr.blocks;) {
      std::uint32_t e = fr.received.find_set(b);
      if (e > fr.blocks) e = fr.blocks;
      const std::uint64_t off = std::uint64_t{b} * s.block_size;
      const std::uint64_t end = std::min<std::uint64_t>(std::uint64_t{e} * s.block_size, fr.entry.size);
      wanted.push_back({file_index{f}, off, end - off});
      b = fr.received.find_clear(e);
    }
  }
  // Blocks asked for again arrive whole: forget their pieces.
  s.partial.clear();
  if (wanted.empty()) {
    s.next_unicast = time_point::max();  // nothing to fetch (a failed digest re-arms it)
    return;
  }
  ++s.unicast_attempts;
  s.unicast_active = true;
  s.order.rtt = s.register_rtt;
  m_sink.start_unicast(s.id, s.order, std::move(wanted));
  (void)now;
}

void receiver_engine::mark_block(session_rx& s, std::uint32_t f, std::uint32_t b, time_point now) {
  auto& fr = s.files[f];
  if (!fr.received.set(b)) return;
  const std::uint32_t len = block_length(fr.entry.size, s.block_size, b);
  s.bytes_received += len;
  s.dirty = true;
  ++m_stats.data_blocks;
  m_stats.data_bytes += len;
  if (fr.received.all()) {
    file_data_complete(s, f);
    file_done(s, now);
  }
}

void receiver_engine::on_unicast_data(session_id id, file_index f, std::uint64_t offset,
                                      std::span<const std::byte> data, time_point now) try {
  session_rx* s = find(id);
  if (!s || !s->unicast || f.value >= s->files.size() || data.empty()) return;
  auto& fr = s->files[f.value];
  if (fr.state != file_rx::state_t::receiving || offset + data.size() > fr.entry.size) return;
  s->last_heard = now;
  if (!ensure_block_map(*s, f.value, now)) return;
  if (!fr.begun) {
    m_store.begin_file({s->id, f}, s->channel, fr.entry, fr.resume);
    fr.begun = true;
  }
  if (!m_store.write({s->id, f}, offset, data)) {
    m_stats.drops.add(errc::storage_full);  // asked for again after this attempt
    return;
  }
  const std::uint64_t end = offset + data.size();
  const std::uint32_t first = static_cast<std::uint32_t>(offset / s->block_size);
  const std::uint32_t last = static_cast<std::uint32_t>((end - 1) / s->block_size);
  for (std::uint32_t b = first; b <= last; ++b) {
    if (fr.state != file_rx::state_t::receiving) break;  // completed by an earlier block
    if (fr.received.test(b)) continue;
    const std::uint64_t bs = std::uint64_t{b} * s->block_size;
    const std::uint64_t be = bs + block_length(fr.entry.size, s->block_size, b);
    const auto got = static_cast<std::uint32_t>(std::min(be, end) - std::max(bs, offset));
    if (got == be - bs) {
      mark_block(*s, f.value, b, now);
      continue;
    }
    const std::uint64_t key = std::uint64_t{f.value} << 32 | b;
    auto& have = s->partial[key];
    have += got;
    if (have >= be - bs) {
      s->partial.erase(key);
      mark_block(*s, f.value, b, now);
    }
  }
} catch (const std::bad_alloc&) {
  // Like on_datagram: the bytes are dropped (fetched again), the daemon goes on.
  m_stats.drops.add(errc::out_of_memory);
}

void receiver_engine::on_unicast_closed(session_id id, bool complete, const std::string& why,
                                        time_point now) {
  session_rx* s = find(id);
  if (!s || !s->unicast) return;
  s->unicast_active = false;
  if (s->state != session_rx::state_t::receiving || s->files_open == 0) return;
  bool missing = false;
  for (const auto& fr : s->files) {
    if (fr.state == file_rx::state_t::receiving && !fr.all_received()) missing = true;
  }
  if (!missing) return;  // everything is in; files are being stored
  if (s->unicast_attempts >= max_unicast_attempts) {
    close_session(*s, false, "unicast fallback failed " + std::to_string(s->unicast_attempts) +
                                 " times: " + why,
                  now);
    return;
  }
  if (m_log) {
    m_log->warn("session {}: unicast transfer {} ({}); asking again for what is missing",
                s->name(), complete ? "ended with data missing" : "interrupted", printable(why));
  }
  s->next_unicast = now + std::min<duration>(unicast_backoff * s->unicast_attempts,
                                             std::chrono::seconds(10));
}

void receiver_engine::handle_complete_ack(session_rx& s, time_point now) {
  if (s.state == session_rx::state_t::completing) close_session(s, true, {}, now);
}

void receiver_engine::handle_end(session_rx& s, const wire::session_end& m, time_point now) {
  if (s.state == session_rx::state_t::completing) {
    close_session(s, true, {}, now);
    return;
  }
  close_session(s, false,
                m.reason() == wire::session_end::ABORTED
                    ? "the sender aborted the session"
                    : "the sender ended the session before this receiver completed",
                now);
}

void receiver_engine::close_session(session_rx& s, bool success, const std::string& why,
                                    time_point now) {
  if (success) {
    ++m_stats.sessions_completed;
  } else {
    ++m_stats.sessions_failed;
    if (m_log && !why.empty()) {
      std::uint32_t missing = 0;
      for (const auto& fr : s.files) {
        if (!fr.terminal()) ++missing;
      }
      m_log->warn("session {}: given up: {}; {} of {} files not delivered", s.name(), why, missing,
                  s.file_count);
    }
  }
  if (s.unicast_active) m_sink.stop_unicast(s.id);
  // Files already handed to the finalizer are renamed into place whatever happens to the
  // session now; their outcomes still arrive (on_file_stored) and are reported then.
  for (std::size_t i = 0; i < s.files.size(); ++i) {
    const auto& fr = s.files[i];
    if (fr.state != file_rx::state_t::finalizing) continue;
    m_late_files[{s.id.value, static_cast<std::uint32_t>(i)}] =
        late_file{s.channel, fr.entry.path, fr.entry.size, fr.entry.mtime_ns, fr.entry.digest};
  }
  m_store.close_session(s.id, true);
  m_sink.session_closed(s.id, true);
  const session_id id = s.id;
  add_tombstone(id, now + session_timeout(s));
  m_sessions.erase(id);
  m_budget.release_session(id);
}

void receiver_engine::do_checkpoint(session_rx& s, time_point now) {
  saved_session head;
  head.id = s.id;
  head.sender = s.sender;
  head.channel = s.channel;
  head.block_size = s.block_size;
  head.file_count = s.file_count;
  head.chunks = s.chunks;
  head.total_bytes = s.total_bytes;
  head.sender_name = s.sender_name;
  head.seq_channel = s.seq_channel;
  head.seq = s.seq;
  head.catch_up = s.catch_up;
  head.seq_source = s.seq_source;
  head.seen_seq = s.seen_seq;
  head.bytes_received = s.bytes_received;
  checkpoint_writer w(head);
  for (const auto& fr : s.files) {
    // A file being finalized is saved as fully received: on resume it is finalized again.
    // (No file is pending once the session receives.)
    saved_phase phase = saved_phase::receiving;
    switch (fr.state) {
      case file_rx::state_t::refused: phase = saved_phase::refused; break;
      case file_rx::state_t::held: phase = saved_phase::held; break;
      case file_rx::state_t::stored: phase = saved_phase::stored; break;
      case file_rx::state_t::failed: phase = saved_phase::failed; break;
      case file_rx::state_t::awaiting_digest: phase = saved_phase::awaiting_digest; break;
      case file_rx::state_t::pending:
      case file_rx::state_t::receiving:
      case file_rx::state_t::finalizing: break;
    }
    const bool partial = phase == saved_phase::receiving || phase == saved_phase::awaiting_digest;
    w.add_file(fr.entry, phase, fr.begun || fr.resume, fr.digest_retries, fr.failure,
               partial ? fr.received.words() : std::span<const std::uint64_t>{});
  }
  m_store.checkpoint(s.id, w.finish());
  s.dirty = false;
  s.next_checkpoint = now + m_cfg.checkpoint_interval;
}

void receiver_engine::checkpoint_all(time_point now) {
  for (auto& [id, s] : m_sessions) {
    if (s->state == session_rx::state_t::receiving) do_checkpoint(*s, now);
  }
}

std::error_code receiver_engine::restore(std::string_view blob, time_point now) {
  saved_session saved;
  if (auto ec = read_checkpoint(blob, m_cfg.channel_count, saved)) return ec;
  const session_id id = saved.id;
  if (find(id)) return errc::invalid_field;
  // A restored session is charged like an announced one; what does not fit is not resumed.
  const std::uint64_t table_bytes = std::uint64_t{saved.file_count} * sizeof(file_rx);
  if (!m_budget.charge(id, session_overhead_bytes + table_bytes)) {
    return errc::over_budget;
  }
  struct release_unless_kept {
    memory_budget& budget;
    session_id id;
    bool kept = false;
    ~release_unless_kept() {
      if (!kept) budget.release_session(id);
    }
  } guard{m_budget, id};
  auto owned = std::make_unique<session_rx>();
  auto& s = *owned;
  s.id = id;
  s.sender = saved.sender;
  s.channel = saved.channel;
  s.block_size = saved.block_size;
  s.file_count = saved.file_count;
  s.chunks = saved.chunks;
  s.total_bytes = saved.total_bytes;
  s.sender_name = printable(saved.sender_name);
  s.catch_up = std::move(saved.catch_up);
  s.seq_channel = std::move(saved.seq_channel);
  s.seq = saved.seq;
  s.seq_source = std::move(saved.seq_source);
  s.seen_seq = saved.seen_seq;
  s.bytes_received = saved.bytes_received;
  s.files.resize(s.file_count);
  s.started = now;
  s.last_heard = now;
  for (std::uint32_t i = 0; i < s.file_count; ++i) {
    auto& sf = saved.files[i];
    auto& fr = s.files[i];
    fr.entry = std::move(sf.entry);
    fr.failure = std::move(sf.failure);
    fr.digest_retries = sf.digest_retries;
    fr.blocks = sf.blocks;
    switch (sf.phase) {
      case saved_phase::refused: fr.state = file_rx::state_t::refused; break;
      case saved_phase::held:
        fr.state = file_rx::state_t::held;
        ++s.files_held;
        break;
      case saved_phase::stored:
        fr.state = file_rx::state_t::stored;
        ++s.files_stored;
        s.bytes_stored += fr.entry.size;
        break;
      case saved_phase::failed:
        fr.state = file_rx::state_t::failed;
        ++s.files_failed;
        break;
      case saved_phase::receiving:
      case saved_phase::awaiting_digest:
        // read_checkpoint sized the bitmap by the blob; charged before it is copied again.
        if (!m_budget.charge(id, bitmap_bytes(fr.blocks))) return errc::over_budget;
        fr.received = block_map(fr.blocks);
        fr.received.assign_words(sf.received);
        sf.received = {};
        fr.state = file_rx::state_t::receiving;
        fr.resume = sf.begun;
        ++s.files_open;
        break;
    }
  }
  s.state = session_rx::state_t::receiving;
  s.next_checkpoint = now + m_cfg.checkpoint_interval;
  guard.kept = true;
  session_rx& ref = *owned;
  m_sessions.emplace(s.id, std::move(owned));
  if (m_log) {
    m_log->info("session {}: resumed from checkpoint: {} of {} files to go, {} bytes received "
                "earlier",
                ref.name(), ref.files_open, ref.file_count, ref.bytes_received);
  }
  for (std::uint32_t i = 0; i < ref.file_count; ++i) {
    auto& fr = ref.files[i];
    if (fr.state == file_rx::state_t::receiving && fr.received.all()) file_data_complete(ref, i);
  }
  file_done(ref, now);
  return {};
}

void receiver_engine::on_timer(time_point now) {
  for (auto it = m_tombstones.begin(); it != m_tombstones.end();) {
    it = it->second <= now ? m_tombstones.erase(it) : std::next(it);
  }
  while (!m_tombstone_order.empty() && m_tombstone_order.front().second <= now) {
    m_tombstone_order.pop_front();
  }
  std::vector<session_rx*> list;
  for (auto& [id, s] : m_sessions) list.push_back(s.get());
  for (session_rx* s : list) {
    const duration timeout = session_timeout(*s);
    if (now - s->last_heard >= timeout) {
      close_session(*s, false,
                    "nothing heard from the sender for " +
                        std::to_string(static_cast<int>(to_seconds(timeout))) + " s",
                    now);
      continue;
    }
    switch (s->state) {
      case session_rx::state_t::manifest:
      case session_rx::state_t::checking_held:
        break;
      case session_rx::state_t::registering:
        if (now >= s->next_register) send_register(*s, now);
        if (s->nak_due && now >= *s->nak_due) {
          s->nak_due.reset();
          s->rounds.clear();
        }
        break;
      case session_rx::state_t::receiving:
        if (s->unicast && !s->unicast_active && now >= s->next_unicast) {
          start_unicast_attempt(*s, now);
        }
        if (s->nak_due && now >= *s->nak_due) send_naks(*s, now);
        if (s->dirty && now >= s->next_checkpoint) do_checkpoint(*s, now);
        break;
      case session_rx::state_t::completing:
        if (now >= s->next_complete) {
          if (s->complete_sends >= m_cfg.max_complete_repeats) {
            close_session(*s, true, {}, now);
          } else {
            send_complete(*s, now);
          }
        }
        break;
    }
  }
}

std::optional<time_point> receiver_engine::next_deadline() const {
  std::optional<time_point> t;
  auto consider = [&t](time_point c) {
    if (!t || c < *t) t = c;
  };
  for (const auto& [id, s] : m_sessions) {
    consider(s->last_heard + session_timeout(*s));
    switch (s->state) {
      case session_rx::state_t::registering:
        consider(s->next_register);
        break;
      case session_rx::state_t::receiving:
        if (s->unicast && !s->unicast_active) consider(s->next_unicast);
        if (s->nak_due) consider(*s->nak_due);
        if (s->dirty) consider(s->next_checkpoint);
        break;
      case session_rx::state_t::completing:
        consider(s->next_complete);
        break;
      default:
        break;
    }
  }
  return t;
}

}  // namespace mcdist::receiver
