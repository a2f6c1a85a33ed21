#include "sender/core/sender_session.hpp"

#include "common/fec.hpp"
#include "common/log_limit.hpp"
#include "common/ranges.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "sender/core/feedback_plan.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace mcdist::sender {

namespace {

/// IPv4 (20) + UDP (8) header bytes, counted against the rate: the rate is what the link
/// carries, which is what an operator provisions.
constexpr std::uint32_t ip_udp_overhead = 28;
/// The pacing bucket holds at least this many milliseconds of the rate, so a sender thread
/// that wakes late on a busy machine catches up instead of losing rate; bursts stay bounded by
/// it (5 ms at 1 Gbit/s is 625 kB, far inside a receiver's socket buffer).
constexpr std::uint64_t catch_up_ms = 5;
/// END is multicast this many times, end_spacing apart, so a receiver that loses
/// one still learns the session is over.
constexpr std::uint32_t end_repeats = 3;
constexpr duration end_spacing = std::chrono::milliseconds(20);
/// Floor and ceiling of the interval between progress markers during a pass.
constexpr duration min_marker_interval = std::chrono::milliseconds(5);
constexpr duration max_marker_interval = std::chrono::seconds(1);
/// Repair adverts leave at most once per this fraction of the GRTT (coalescing the NAKs of one
/// reaction time), clamped to [1 ms, 100 ms].
constexpr int advert_interval_grtt_divisor = 4;
constexpr duration min_advert_interval = std::chrono::milliseconds(1);
constexpr duration max_advert_interval = std::chrono::milliseconds(100);

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class Msg>
std::vector<std::byte> encode(wire::msg_type type, session_id session, const Msg& m) {
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  wire::encode_control(out, type, session, m);
  return out;
}

fallback_settings fallback_settings_of(const sender_config& c) {
  return {.mode = c.fallback,
          .nak_ratio = c.fallback_nak_ratio,
          .min_sample = c.fallback_min_sample,
          .after_passes = c.fallback_after_passes,
          .unicast_rate_bps = c.unicast_rate_bps,
          .unicast_threshold = c.unicast_threshold,
          .force_unicast = c.force_unicast,
          .tcp_connections = c.tcp_connections,
          .unicast_max_rate_bps = c.unicast_max_rate_bps};
}

announce_settings announce_settings_of(const sender_config& c) {
  return {.block_size = c.block_size,
          .rate_bps = c.rate_bps,
          .max_passes = c.max_passes,
          .closed_group = !c.receivers.empty(),
          .sender_name = c.sender_name,
          .only_receivers = c.only_receivers,
          .channel = c.channel,
          .channel_seq = c.channel_seq,
          .catch_up_seqs = c.catch_up_seqs,
          .fec_k = c.fec_k,
          .fec_max_parity = c.fec_max_parity,
          .fec_depth = c.fec_depth,
          .reserve_bytes = c.announce_reserve_bytes};
}

}  // namespace

struct sender_session::receiver_state {
  receiver_report rep;
  std::uint32_t index = 0;  ///< in m_receivers
  bool awaiting_listed = false;  ///< in m_awaiting_connection
  time_point last_heard{};
  // Unicast fallback (rep.fallback_transport: its transport once ordered).
  fallback_token token{};
  std::uint32_t fallback_orders = 0;   ///< FALLBACK messages sent
  std::uint32_t unicast_failures = 0;  ///< unicast sessions that ended before COMPLETE
  bool unicast_started = false;
  time_point next_fallback{};
  std::uint32_t last_nak_pass = 0;  ///< sender's pass when its last NAK with blocks arrived
  /// Pending-digest claims from REGISTER: file -> the receiver's digest of its copy.
  std::vector<std::pair<std::uint32_t, sha256_digest>> pending_claims;
  bool keyed = false;  ///< holds the session key (on_site_keyed or registered)

  /// Taking part over multicast: NAKs ask for blocks.
  bool on_multicast() const noexcept {
    return rep.state == receiver_report::state_t::registered && !rep.fallback_transport;
  }
  /// Moved to unicast, its transfer under way.
  bool on_unicast() const noexcept {
    return rep.state == receiver_report::state_t::registered && rep.fallback_transport.has_value();
  }
};

sender_session::sender_session(sender_config cfg, std::vector<manifest_entry> files,
                               std::uint64_t seed, std::shared_ptr<spdlog::logger> log)
    : m_cfg(std::move(cfg)),
      m_files(std::move(files)),
      m_log(std::move(log)),
      m_rng_state(seed),
      m_grtt(m_cfg.grtt_initial, m_cfg.grtt_min, m_cfg.grtt_max),
      m_pacer(m_cfg.rate_bps,
              std::max({m_cfg.burst_bytes, m_cfg.rate_bps / 8 / 1000 * catch_up_ms,
                        std::uint64_t{m_cfg.block_size + wire::data_header_size + ip_udp_overhead +
                                      m_cfg.data_trailer_bytes}})),
      m_passes(std::vector<std::uint32_t>{}),
      m_fallback(fallback_settings_of(m_cfg)) {
  if (m_cfg.block_size < wire::min_block_size || m_cfg.block_size > wire::max_block_size) {
    throw std::invalid_argument("block size " + std::to_string(m_cfg.block_size) +
                                " is outside " + std::to_string(wire::min_block_size) + ".." +
                                std::to_string(wire::max_block_size) + " bytes");
  }
  if (m_files.size() > max_files_per_session) {
    throw std::invalid_argument("too many files in one session: " +
                                std::to_string(m_files.size()) + " (limit " +
                                std::to_string(max_files_per_session) + ")");
  }
  if (m_cfg.max_passes == 0) throw std::invalid_argument("max passes must be at least 1");
  if (!m_cfg.channel.empty() && !wire::valid_channel_name(m_cfg.channel)) {
    throw std::invalid_argument("channel name '" + m_cfg.channel +
                                "' is not 1 to 64 letters, digits or - _ . : @ /");
  }
  if ((m_cfg.channel_seq > 0 || !m_cfg.catch_up_seqs.empty()) && m_cfg.channel.empty()) {
    throw std::invalid_argument("a channel sequence number or catch-up ranges need a channel name");
  }
  if (!m_cfg.catch_up_seqs.empty() &&
      (m_cfg.channel_seq > 0 ||
       !wire::valid_seq_ranges(m_cfg.catch_up_seqs, std::numeric_limits<std::uint64_t>::max()))) {
    throw std::invalid_argument("catch-up ranges must be at most " +
                                std::to_string(wire::max_seq_ranges) +
                                " ascending disjoint ranges from 1, in an unsequenced session");
  }
  for (const auto& id : m_cfg.receivers) {
    if (!wire::valid_receiver_id(id)) throw std::invalid_argument("invalid receiver id '" + id + "'");
  }
  for (const auto& id : m_cfg.only_receivers) {
    if (!wire::valid_receiver_id(id)) throw std::invalid_argument("invalid receiver id '" + id + "'");
  }
  std::vector<std::uint32_t> blocks(m_files.size());
  for (std::size_t i = 0; i < m_files.size(); ++i) {
    if (m_files[i].size > max_file_size) {
      throw std::invalid_argument("file too large: " + m_files[i].path);
    }
    blocks[i] = block_count(m_files[i].size, m_cfg.block_size);
  }
  m_passes = pass_scheduler(blocks);
  if (m_cfg.fec_k > 0) {
    if (m_cfg.fec_max_parity == 0 && m_cfg.fec_k < fec::max_blocks) {
      m_cfg.fec_max_parity = fec::max_blocks - m_cfg.fec_k;
    }
    if (m_cfg.fec_k >= fec::max_blocks || m_cfg.fec_max_parity == 0 ||
        m_cfg.fec_k + m_cfg.fec_max_parity > fec::max_blocks || m_cfg.fec_overhead < 0 ||
        m_cfg.fec_overhead > 1) {
      throw std::invalid_argument("FEC blocks of " + std::to_string(m_cfg.fec_k) + " sources and " +
                                  std::to_string(m_cfg.fec_max_parity) +
                                  " parity blocks: at most " + std::to_string(fec::max_blocks) +
                                  " in all, overhead 0..100 %");
    }
    m_fec.emplace(blocks, m_cfg.fec_k, m_cfg.fec_depth);  // throws for a bad depth
    m_parity.emplace(m_fec->fec_blocks(), m_cfg.fec_max_parity);
  }
  while (m_digests_through < m_files.size() && m_files[m_digests_through].digest) {
    ++m_digests_through;
  }
  // A resend to named receivers is a closed group of exactly those.
  if (m_cfg.receivers.empty()) m_cfg.receivers = m_cfg.only_receivers;
  // Deciding for unicast from the start needs the registrations (count, RTT): do not start
  // pass 1 before them when that decision is possible.
  if (m_fallback.decides_at_registration()) m_cfg.eager_start = false;
  for (const auto& id : m_cfg.receivers) {
    if (m_by_id.count(id)) continue;
    auto r = std::make_unique<receiver_state>();
    r->rep.id = id;
    r->index = static_cast<std::uint32_t>(m_receivers.size());
    m_by_id[id] = r.get();
    m_receivers.push_back(std::move(r));
  }
  m_announce = announcer(announce_settings_of(m_cfg), m_files, m_cfg.announce_interval);
}

sender_session::~sender_session() = default;

void sender_session::start(time_point now) {
  m_start = now;
  m_phase = phase::announcing;
  m_announce.start(now);
  m_register_deadline =
      now + (m_cfg.receivers.empty() ? m_cfg.register_window : m_cfg.register_timeout);
  m_next_decay = now + std::chrono::seconds(1);
  if (m_log) {
    std::uint64_t total = 0;
    for (const auto& f : m_files) total += f.size;
    if (m_cfg.receivers.empty()) {
      m_log->info("session {}: announcing {} files, {} bytes in {} announce chunks; open group, "
                  "registration window {:.1f} s",
                  m_cfg.session, m_files.size(), total, m_announce.chunks(),
                  to_seconds(m_cfg.register_window));
    } else {
      m_log->info("session {}: announcing {} files, {} bytes in {} announce chunks to a closed "
                  "group of {} receivers",
                  m_cfg.session, m_files.size(), total, m_announce.chunks(),
                  m_cfg.receivers.size());
    }
  }
}

void sender_session::queue_multicast(time_point now, std::vector<std::byte> bytes) {
  m_pacer.consume(now, bytes.size() + ip_udp_overhead);
  m_control.push_back({std::nullopt, std::move(bytes)});
}

void sender_session::queue_unicast(const endpoint& to, std::vector<std::byte> bytes) {
  m_control.push_back({to, std::move(bytes)});
}

bool sender_session::pop_control(control_send& out) {
  if (m_control.empty()) return false;
  out = std::move(m_control.front());
  m_control.pop_front();
  return true;
}

void sender_session::set_unicast_endpoint(transport_kind k, const endpoint& e) {
  m_fallback.set_endpoint(k, e);
}

bool sender_session::pop_fallback(fallback_order& out) {
  if (m_fallbacks.empty()) return false;
  out = std::move(m_fallbacks.front());
  m_fallbacks.pop_front();
  return true;
}

void sender_session::order_fallback(receiver_state& r, std::string reason, time_point now) {
  if (!r.on_multicast()) return;
  const auto t = m_fallback.transport(r.rep.rtt_valid ? std::optional(r.rep.rtt) : std::nullopt);
  if (!t) return;
  r.rep.fallback_transport = *t;
  if (m_cfg.token_source) {
    r.token = m_cfg.token_source();
  } else {
    for (std::size_t i = 0; i < r.token.size(); i += 8) {
      const std::uint64_t v = splitmix64(m_rng_state);
      for (std::size_t k = 0; k < 8; ++k) r.token[i + k] = static_cast<std::uint8_t>(v >> (8 * k));
    }
  }
  r.token.back() |= 1;  // never all zero
  r.rep.fallback_reason = reason;
  r.rep.fallback_at = now - m_start;
  if (*t == transport_kind::tcp) {
    r.rep.fallback_connections =
        m_fallback.tcp_connections(m_cfg.rate_bps, r.rep.rtt_valid ? r.rep.rtt : m_grtt.estimate());
  }
  m_fallbacks.push_back({r.rep.id, *t, r.token, reason});
  track(r, false);
  if (m_log) {
    const auto n = r.rep.fallback_connections;
    m_log->info("session {}: receiver '{}' goes unicast over {}{}: {}", m_cfg.session,
                r.rep.id, *t,
                n ? fmt::format(" ({} connection{}{})", n, n == 1 ? "" : "s",
                                m_cfg.tcp_connections ? "" : ", automatic")
                  : std::string(),
                reason);
  }
  send_fallback(r, now);
}

void sender_session::send_fallback(receiver_state& r, time_point now) {
  if (r.fallback_orders >= m_cfg.fallback_max_orders) {
    fail_receiver(r, "did not connect for its unicast fallback after " +
                         std::to_string(r.fallback_orders) + " orders",
                  now);
    check_done(now);
    return;
  }
  const transport_kind t = *r.rep.fallback_transport;
  const auto& ep = *m_fallback.endpoint_of(t);
  wire::fallback m;
  m.set_receiver_id(r.rep.id);
  m.set_transport(t == transport_kind::tcp           ? wire::fallback::TCP
                  : t == transport_kind::sctp_kernel ? wire::fallback::SCTP_KERNEL
                                                     : wire::fallback::SCTP_UDP);
  // An unspecified address (0.0.0.0) means "where my control datagrams come from".
  const bool unspecified = std::all_of(ep.addr.begin(), ep.addr.begin() + (ep.v6 ? 16 : 4),
                                       [](std::uint8_t b) { return b == 0; });
  if (!unspecified) m.set_address(ep.addr.data(), ep.v6 ? 16 : 4);
  m.set_port(ep.port);
  m.set_token(r.token.data(), r.token.size());
  m.set_connections(r.rep.fallback_connections);
  m.set_reason(r.rep.fallback_reason.substr(0, 200));
  queue_unicast(r.rep.address, encode(wire::msg_type::fallback, m_cfg.session, m));
  ++r.fallback_orders;
  r.next_fallback = now + std::max<duration>(status_interval(), std::chrono::milliseconds(200));
}

void sender_session::on_unicast_started(const std::string& receiver_id, time_point now) {
  receiver_state* r = find_receiver(receiver_id);
  if (!r || !r->on_unicast()) return;
  r->unicast_started = true;
  r->fallback_orders = 0;  // it connected: the order limit counts unanswered orders only
  r->last_heard = now;
  track(*r, true);
}

void sender_session::on_unicast_failed(const std::string& receiver_id, const std::string& why,
                                       time_point now) {
  receiver_state* r = find_receiver(receiver_id);
  if (!r || !r->on_unicast()) return;
  r->unicast_started = false;
  track(*r, false);
  if (++r->unicast_failures > m_cfg.fallback_max_orders) {
    fail_receiver(*r, "unicast fallback failed: " + why, now);
    check_done(now);
    return;
  }
  if (m_log) {
    m_log->warn("session {}: unicast session of '{}' ended early ({}); it may reconnect",
                m_cfg.session, receiver_id, why);
  }
  r->next_fallback = now;  // order it again: the receiver reconnects and asks for what it lacks
}

void sender_session::send_announce_chunk(time_point now) {
  queue_multicast(now, m_announce.send_next(now, m_cfg.session, m_grtt.estimate(),
                                            [this] { return splitmix64(m_rng_state); }));
}

duration sender_session::nak_window() const noexcept {
  return sender::nak_window(m_registered, m_grtt.estimate(), m_window.scale());
}

duration sender_session::collection_delay() const noexcept {
  // The NAKs one status request brings come back over the receivers' whole window: a pass
  // started at the first of them would end before the rest arrive, and every new pass makes
  // the receivers draw their timers again.
  return suppressing() ? nak_window() : nak_spread(m_registered, m_grtt.estimate());
}

bool sender_session::suppressing() const noexcept {
  return m_registered > suppression_threshold;
}

void sender_session::track(receiver_state& r, bool heard) {
  if (times_out(r)) {
    if (heard || !m_silence.contains(r.index)) m_silence.touch(r.index);
  } else {
    m_silence.remove(r.index);
  }
  if (r.on_unicast() && !r.unicast_started && !r.awaiting_listed) {
    r.awaiting_listed = true;
    m_awaiting_connection.push_back(r.index);
  }
}

void sender_session::send_advert(time_point now) {
  wire::repair_advert m;
  m.set_pass(m_passes.pass());
  const std::uint64_t blocks = m_advert.take(
      m, [this](std::uint32_t file, std::uint32_t first, std::uint32_t end, auto&& emit) {
        const auto& w = m_passes.wanted_blocks(file);
        for (std::uint32_t b = first; b < end;) {
          const std::uint32_t a = w.find_set(b);
          if (a >= end) return;
          const std::uint32_t e = std::min(end, w.find_clear(a));
          if (!emit(a, e)) return;
          b = e;
        }
      });
  m_advert.sent(now, std::clamp<duration>(m_grtt.estimate() / advert_interval_grtt_divisor,
                                          min_advert_interval, max_advert_interval));
  if (blocks == 0) return;  // every block named has left already: its repair is the hint
  ++m_counters.adverts;
  m_counters.advertised_blocks += blocks;
  queue_multicast(now, encode(wire::msg_type::repair_advert, m_cfg.session, m));
}

void sender_session::fail_silent(time_point now) {
  while (!m_silence.empty()) {
    receiver_state& r = *m_receivers[m_silence.front()];
    if (!times_out(r)) {
      m_silence.remove(r.index);
      continue;
    }
    const time_point since = std::max(r.last_heard, m_wait_start);
    if (now - since < m_cfg.receiver_timeout) break;  // the least recently heard is not due
    fail_receiver(r,
                  "silent for " + std::to_string(to_seconds(now - since)).substr(0, 4) +
                      " s while the sender waited for its " +
                      (r.on_multicast() ? "NAKs or COMPLETE"
                                        : "COMPLETE over unicast (it answers status requests too)"),
                  now);
  }
}

std::uint64_t sender_session::pacing_quantum() const noexcept {
  const std::uint64_t datagram =
      m_cfg.block_size + wire::data_header_size + ip_udp_overhead + m_cfg.data_trailer_bytes;
  // At most 1 ms worth of the rate, so slow links see datagrams spread out, not bursts.
  const std::uint64_t per_ms = m_cfg.rate_bps / 8 / 1000;
  return std::max(datagram, std::min({m_cfg.pacing_quantum_bytes, per_ms}));
}

duration sender_session::keyed_start_grace() const noexcept {
  // Two GRTT: the other sites' REGISTERs, sent on the same announce, arrive within about one
  // round trip of the first; their register_replies then reach them before the first blocks.
  return m_grtt.estimate() * 2;
}

bool sender_session::keyed_start_due(time_point now) const noexcept {
  if (!m_first_keyed) return false;
  const bool all_in = !m_cfg.receivers.empty() && m_keyed == m_cfg.receivers.size();
  return all_in || now >= *m_first_keyed + keyed_start_grace();
}

void sender_session::on_site_keyed(std::string_view receiver_id, time_point now) {
  if (m_cfg.receivers.empty()) {
    if (!m_first_keyed) m_first_keyed = now;
    return;
  }
  const auto it = m_by_id.find(std::string(receiver_id));
  if (it == m_by_id.end() || it->second->keyed) return;
  it->second->keyed = true;
  ++m_keyed;
  if (!m_first_keyed) m_first_keyed = now;
  if (m_log) {
    m_log->debug("session {}: receiver '{}' holds the session key ({} of {})",
                 m_cfg.session, receiver_id, m_keyed, m_cfg.receivers.size());
  }
}

duration sender_session::status_interval() const noexcept {
  return std::max<duration>(m_grtt.estimate() * 3 / 2 + nak_window(),
                            std::chrono::milliseconds(10));
}

void sender_session::on_timer(time_point now) {
  if (now >= m_next_decay) {
    m_grtt.decay();
    m_next_decay = now + std::max<duration>(m_grtt.estimate() * 2, std::chrono::seconds(1));
  }
  if (m_registration_open) {
    const bool all_in = !m_cfg.receivers.empty() && m_registered == m_cfg.receivers.size();
    if (all_in || (now >= m_register_deadline && m_announce.cycles() > 0)) {
      close_registration(now);
    } else {
      const std::uint64_t chunk_bytes = wire::control_budget + ip_udp_overhead;
      while (m_announce.due(now) && m_pacer.allowance(now) >= chunk_bytes) {
        send_announce_chunk(now);
      }
    }
  }
  // FALLBACK orders not yet answered by a connection: only those receivers, not all of them.
  for (std::size_t i = 0; i < m_awaiting_connection.size();) {
    receiver_state& r = *m_receivers[m_awaiting_connection[i]];
    if (!r.on_unicast() || r.unicast_started) {
      r.awaiting_listed = false;
      m_awaiting_connection[i] = m_awaiting_connection.back();
      m_awaiting_connection.pop_back();
      continue;
    }
    if (now >= r.next_fallback) send_fallback(r, now);
    ++i;
  }
  if (m_advert.due(now) && digests_sendable()) send_advert(now);
  switch (m_phase) {
    case phase::announcing:
      // Eager start: data follows the first announce cycles without waiting a round trip for
      // the registrations; receivers take blocks as soon as they know the file.
      if (m_cfg.eager_start && m_announce.initial_cycles_sent() &&
          (!m_cfg.start_on_registration || keyed_start_due(now))) {
        start_transfer(now);
      }
      break;
    case phase::transferring:
      if (now >= m_next_marker) send_marker(now, false, false);
      break;
    case phase::waiting: {
      if (m_next_pass_at && now >= *m_next_pass_at) {
        start_pass(now);
        break;
      }
      if (now >= m_next_status) {
        send_marker(now, true, true);
        m_next_status = now + status_interval();
      }
      fail_silent(now);
      check_done(now);
      break;
    }
    case phase::ending:
      if (now >= m_next_end) {
        // Completed receivers have their COMPLETE acknowledged; END only matters to the others,
        // so it is repeated only when some receiver did not complete.
        const std::uint32_t repeats = succeeded() ? 1 : end_repeats;
        if (m_end_repeats >= repeats) {
          m_phase = phase::done;
          break;
        }
        wire::session_end end;
        end.set_reason(m_aborted ? wire::session_end::ABORTED : wire::session_end::DONE);
        queue_multicast(now, encode(wire::msg_type::session_end, m_cfg.session, end));
        ++m_end_repeats;
        m_next_end = now + end_spacing;
        // Done with the last one: the shell sends it before it looks at done().
        if (m_end_repeats >= repeats) m_phase = phase::done;
      }
      break;
    case phase::done:
      break;
  }
  if (!m_digest_queue.empty() && digests_sendable()) send_digests(now);
}

bool sender_session::digests_sendable() const noexcept {
  return m_phase == phase::transferring || m_phase == phase::waiting;
}

void sender_session::close_registration(time_point now) {
  m_registration_open = false;
  for (auto& r : m_receivers) {
    if (r->rep.state == receiver_report::state_t::missing) {
      fail_receiver(*r, "did not register within " + std::to_string(static_cast<int>(
                                                          to_seconds(m_cfg.register_timeout))) +
                            " s",
                    now);
    }
  }
  if (m_log) {
    m_log->info("session {}: registration closed, {} receivers registered, GRTT {:.1f} ms",
                m_cfg.session, m_registered, to_ms(m_grtt.estimate()));
  }
  if (m_registered == 0) {
    start_ending(now, true, "no receiver registered");
    return;
  }
  m_passes.group_known(m_registered);
  if (m_fallback.transport()) {
    double bytes = 0;
    for (const auto& f : m_files) bytes += static_cast<double>(f.size);
    if (const auto why =
            m_fallback.unicast_from_start(bytes, m_registered, m_grtt.estimate(), m_cfg.rate_bps)) {
      for (auto& r : m_receivers) order_fallback(*r, *why, now);
    }
  }
  if (m_phase == phase::announcing) {
    const bool any_multicast = std::any_of(m_receivers.begin(), m_receivers.end(),
                                           [](const auto& r) { return r->on_multicast(); });
    if (any_multicast) {
      start_transfer(now);
    } else {
      // Everyone is served over unicast: no pass at all.
      m_phase = phase::waiting;
      m_wait_start = now;
      m_next_status = now + status_interval();
    }
  }
  check_done(now);
}

void sender_session::start_transfer(time_point now) {
  m_passes.want_all();
  start_pass(now);
}

void sender_session::start_pass(time_point now) {
  m_passes.start_pass();
  m_advert.clear();  // the new sweep sends every wanted block; receivers drop old hints
  m_phase = phase::transferring;
  m_next_pass_at.reset();
  m_next_marker = now + std::clamp<duration>(m_grtt.estimate() / 2, min_marker_interval,
                                             max_marker_interval);
  if (m_log) {
    if (m_registration_open) {
      m_log->info("session {}: pass {} starts while registration is open: {} blocks",
                  m_cfg.session, m_passes.pass(), m_passes.wanted());
    } else {
      m_log->info("session {}: pass {} starts: {} blocks, {} receivers active",
                  m_cfg.session, m_passes.pass(), m_passes.wanted(), m_active);
    }
  }
}

std::size_t sender_session::next_data(time_point now, std::span<data_send> out) {
  if (m_phase != phase::transferring) return 0;
  std::uint64_t allowance = m_pacer.allowance(now);
  std::size_t n = 0;
  while (n < out.size()) {
    // Parity first, like prompt repairs: it answers NAKs, or completes a FEC block of pass 1.
    if (const auto pp = m_parity ? m_parity->peek() : std::nullopt) {
      const std::uint64_t wire_bytes =
          m_cfg.block_size + wire::data_header_size + ip_udp_overhead + m_cfg.data_trailer_bytes;
      if (wire_bytes > allowance) break;
      allowance -= wire_bytes;
      m_pacer.consume(now, wire_bytes);
      auto& d = out[n++];
      d = data_send{};
      d.parity = true;
      d.fec_block = pp->fec_block;
      d.parity_index = pp->index;
      d.length = m_cfg.block_size;
      d.seq = m_passes.take_seq();
      m_parity->take(*pp, d.seq);
      ++m_data_datagrams;
      m_data_bytes += m_cfg.block_size;
      continue;
    }
    // Blocks NAKed behind the cursor go out first, while the pass still runs (DESIGN.md: repair
    // starts while data still flows), so a receiver's holes close within a round trip and its
    // in-order hashing does not stall until the next pass.
    const auto pick = m_passes.peek();
    if (!pick) {
      end_pass(now);
      break;
    }
    const std::uint32_t len = block_length(m_files[pick->file].size, m_cfg.block_size, pick->block);
    const std::uint64_t wire_bytes =
        len + wire::data_header_size + ip_udp_overhead + m_cfg.data_trailer_bytes;
    if (wire_bytes > allowance) break;
    allowance -= wire_bytes;
    m_pacer.consume(now, wire_bytes);
    auto& d = out[n++];
    d = data_send{};
    d.file = file_index{pick->file};
    d.block = block_index{pick->block};
    d.seq = m_passes.take(*pick);
    if (m_fec && m_cfg.fec_overhead > 0 && m_passes.pass() == 1 && !pick->prompt) {
      // The FEC block's last source went out in pass 1: its proactive parity follows.
      const auto pos = m_fec->locate(pick->file, pick->block);
      const std::uint32_t n_src = m_fec->sources(pos.fec_block);
      if (pos.index + 1 == n_src) {
        const auto count = static_cast<std::uint32_t>(
            std::ceil(m_cfg.fec_overhead * static_cast<double>(n_src) - 1e-9));
        m_parity->add(pos.fec_block, std::min(count, m_cfg.fec_max_parity));
        m_proactive_parity += std::min(count, m_cfg.fec_max_parity);
      }
    }
    d.offset = std::uint64_t{pick->block} * m_cfg.block_size;
    d.length = len;
    ++m_data_datagrams;
    m_data_bytes += len;
  }
  return n;
}

void sender_session::end_pass(time_point now) {
  if (m_log) {
    m_log->info("session {}: pass {} done at {:.3f} s; {} blocks NAKed for the next pass",
                m_cfg.session, m_passes.pass(), to_seconds(now - m_start), m_passes.wanted());
  }
  send_marker(now, true, true);
  if (const auto why = m_fallback.after_passes(m_passes.pass())) {
    for (auto& r : m_receivers) {
      if (r->on_multicast() && r->last_nak_pass == m_passes.pass()) order_fallback(*r, *why, now);
    }
  }
  if ((m_passes.wanted() > 0 || (m_parity && m_parity->scheduled() > 0)) &&
      m_passes.pass() < m_cfg.max_passes) {
    start_pass(now);
    return;
  }
  m_phase = phase::waiting;
  m_wait_start = now;
  m_next_status = now + status_interval();
  check_done(now);
}

void sender_session::send_marker(time_point now, bool pass_end, bool status_request) {
  m_window.update();
  wire::marker m;
  m.set_pass(m_passes.pass());
  m.set_file(pass_end ? static_cast<std::uint32_t>(m_files.size()) : m_passes.cursor_file());
  m.set_block(pass_end ? 0 : m_passes.cursor_block());
  m.set_pass_end(pass_end);
  m.set_sender_time_us(to_wire_us(now));
  m.set_grtt_us(static_cast<std::uint32_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(m_grtt.estimate()).count()));
  m.set_seq(m_passes.seq());
  m.set_digests_through(m_digests_through);
  m.set_nak_backoff_us(static_cast<std::uint32_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(nak_window()).count()));
  m.set_status_request(status_request);
  m.set_group_size(m_registered);
  if (status_request) {
    const std::uint32_t slices =
        status_slices(m_active, status_interval(), m_cfg.receiver_timeout);
    if (slices > 1) {
      m.set_status_slices(slices);
      m.set_status_slice(m_status_round % slices);
    }
    ++m_status_round;
  }
  queue_multicast(now, encode(wire::msg_type::marker, m_cfg.session, m));
  m_next_marker =
      now + std::clamp<duration>(m_grtt.estimate() / 2, min_marker_interval, max_marker_interval);
}

void sender_session::send_digests(time_point now) {
  // 32-byte digest + file index + framing: about 40 bytes an entry.
  constexpr std::size_t per_datagram = (wire::control_budget - wire::header_size) / 40;
  std::sort(m_digest_queue.begin(), m_digest_queue.end());
  m_digest_queue.erase(std::unique(m_digest_queue.begin(), m_digest_queue.end()),
                       m_digest_queue.end());
  wire::digest_list list;
  for (std::size_t i = 0; i < m_digest_queue.size(); ++i) {
    const auto f = m_digest_queue[i];
    auto* d = list.add_digests();
    d->set_file(f);
    d->set_sha256(m_files[f].digest->data(), 32);
    if (list.digests_size() == static_cast<int>(per_datagram) || i + 1 == m_digest_queue.size()) {
      queue_multicast(now, encode(wire::msg_type::digest_list, m_cfg.session, list));
      list.Clear();
    }
  }
  m_digest_queue.clear();
}

void sender_session::on_digest(file_index file, const sha256_digest& digest, time_point now) {
  if (file.value >= m_files.size()) return;
  auto& f = m_files[file.value];
  if (f.digest) return;
  f.digest = digest;
  while (m_digests_through < m_files.size() && m_files[m_digests_through].digest) {
    ++m_digests_through;
  }
  for (auto& r : m_receivers) {
    for (const auto& [claimed_file, claimed] : r->pending_claims) {
      if (claimed_file == file.value && claimed == digest) mark_held(*r, file.value);
    }
  }
  m_digest_queue.push_back(file.value);
  if (digests_sendable()) send_digests(now);
}

void sender_session::mark_held(receiver_state& r, std::uint32_t file) {
  m_passes.mark_held(file);
  ++r.rep.files_held;
  r.rep.held_files.push_back(file);
}

void sender_session::sample_rtt(receiver_state& r, std::uint64_t echo_us, std::uint64_t hold_us,
                                time_point now) {
  const std::uint64_t now_us = to_wire_us(now);
  if (echo_us == 0 || echo_us > now_us || now_us - echo_us < hold_us) return;
  const duration rtt = std::chrono::microseconds(now_us - echo_us - hold_us);
  r.rep.rtt = rtt;
  r.rep.rtt_valid = true;
  m_grtt.add_sample(rtt);
}

sender_session::receiver_state* sender_session::find_receiver(const std::string& id) {
  const auto it = m_by_id.find(id);
  return it == m_by_id.end() ? nullptr : it->second;
}

void sender_session::on_datagram(std::span<const std::byte> datagram, const endpoint& from,
                                 time_point now) {
  wire::header h;
  if (auto ec = wire::parse_header(datagram, h)) {
    m_drops.add(static_cast<errc>(ec.value()));
    return;
  }
  if (h.session != m_cfg.session) {
    m_drops.add(errc::unknown_session);
    return;
  }
  switch (h.type) {
    case wire::msg_type::register_request: {
      wire::register_request m;
      if (wire::parse_control(datagram, m)) {
        m_drops.add(errc::bad_protobuf);
        return;
      }
      ++m_counters.registers;
      handle_register(m, from, now);
      break;
    }
    case wire::msg_type::nak: {
      wire::nak m;
      if (wire::parse_control(datagram, m)) {
        m_drops.add(errc::bad_protobuf);
        return;
      }
      handle_nak(m, from, now);
      break;
    }
    case wire::msg_type::complete: {
      wire::complete m;
      if (wire::parse_control(datagram, m)) {
        m_drops.add(errc::bad_protobuf);
        return;
      }
      ++m_counters.completes;
      handle_complete(m, from, now);
      break;
    }
    default:
      // Our own multicast looped back, or something a sender never accepts.
      m_drops.add(errc::unknown_type);
      break;
  }
}

void sender_session::handle_register(const wire::register_request& m, const endpoint& from,
                                     time_point now) {
  if (!wire::valid_receiver_id(m.receiver_id())) {
    m_drops.add(errc::invalid_field);
    return;
  }
  const std::uint32_t file_count = static_cast<std::uint32_t>(m_files.size());
  // Validate everything before changing any state.
  if (for_each_range(std::span(m.held_files().data(), static_cast<std::size_t>(m.held_files_size())),
                     file_count, [](std::uint32_t, std::uint32_t) {})) {
    m_drops.add(errc::invalid_field);
    return;
  }
  for (const auto& hd : m.held_pending()) {
    if (hd.file() >= file_count || hd.sha256().size() != 32) {
      m_drops.add(errc::invalid_field);
      return;
    }
  }
  // Sequence report: only in a sequenced session, bounded, ranges below this session's number.
  if (static_cast<std::size_t>(m.missing_seqs_size()) > wire::max_seq_ranges ||
      (m_cfg.channel_seq == 0 && (m.missing_seqs_size() > 0 || m.last_seq() != 0))) {
    m_drops.add(errc::invalid_field);
    return;
  }
  std::vector<wire::seq_span> missing;
  missing.reserve(static_cast<std::size_t>(m.missing_seqs_size()));
  for (const auto& r : m.missing_seqs()) missing.emplace_back(r.first(), r.last());
  if (!wire::valid_seq_ranges(missing, m_cfg.channel_seq)) {
    m_drops.add(errc::invalid_field);
    return;
  }
  wire::register_reply reply;
  reply.set_receiver_id(m.receiver_id());
  auto refuse = [&](const std::string& why) {
    reply.set_accepted(false);
    reply.set_reason(why);
    queue_unicast(from, encode(wire::msg_type::register_reply, m_cfg.session, reply));
    if (m_log) {
      m_log->warn("session {}: refused registration of '{}' from {}: {}", m_cfg.session,
                  m.receiver_id(), from.to_string(), why);
    }
  };
  if (!m_cfg.only_receivers.empty() &&
      std::find(m_cfg.only_receivers.begin(), m_cfg.only_receivers.end(), m.receiver_id()) ==
          m_cfg.only_receivers.end()) {
    refuse("this session is a resend to other receivers");
    return;
  }
  receiver_state* r = find_receiver(m.receiver_id());
  if (r && r->rep.state != receiver_report::state_t::missing) {
    // A repeat (our reply was lost) or a restarted receiver: same answer again.
    sample_rtt(*r, m.echo_time_us(), m.hold_us(), now);
    r->last_heard = now;
    track(*r, true);
    r->rep.address = from;
    if (r->rep.state == receiver_report::state_t::failed) {
      refuse("this receiver was failed in the session: " + r->rep.reason);
      return;
    }
    reply.set_accepted(true);
    queue_unicast(from, encode(wire::msg_type::register_reply, m_cfg.session, reply));
    return;
  }
  if (!r && !m_cfg.receivers.empty()) {
    refuse("not a member of the closed group");
    return;
  }
  if (!m_registration_open) {
    refuse("registration closed");
    return;
  }
  if (!r && m_receivers.size() >= m_cfg.max_receivers) {
    ++m_receivers_refused_full;
    // One line per refusal could be a flood: log the first, then rarely (log_limit.hpp).
    if (worth_logging(m_receivers_refused_full) && m_log) {
      m_log->warn("session {}: registration of '{}' from {} refused: the session has its "
                  "maximum of {} receivers ({} refused so far)",
                  m_cfg.session, m.receiver_id(), from.to_string(),
                  m_cfg.max_receivers, m_receivers_refused_full);
    }
    reply.set_accepted(false);
    reply.set_reason("the session has its maximum number of receivers");
    queue_unicast(from, encode(wire::msg_type::register_reply, m_cfg.session, reply));
    return;
  }
  if (!r) {
    auto owned = std::make_unique<receiver_state>();
    owned->rep.id = m.receiver_id();
    owned->index = static_cast<std::uint32_t>(m_receivers.size());
    r = owned.get();
    m_by_id[r->rep.id] = r;
    m_receivers.push_back(std::move(owned));
  }
  r->rep.state = receiver_report::state_t::registered;
  r->rep.address = from;
  r->rep.last_seq = m.last_seq();
  r->rep.missing_seqs = std::move(missing);
  r->last_heard = now;
  track(*r, true);
  ++m_registered;
  if (!r->keyed) {
    r->keyed = true;
    ++m_keyed;
  }
  if (!m_first_keyed) m_first_keyed = now;
  ++m_active;
  sample_rtt(*r, m.echo_time_us(), m.hold_us(), now);
  for_each_range(std::span(m.held_files().data(), static_cast<std::size_t>(m.held_files_size())),
                 file_count, [&](std::uint32_t first, std::uint32_t count) {
                   for (std::uint32_t f = first; f < first + count; ++f) mark_held(*r, f);
                 });
  for (const auto& hd : m.held_pending()) {
    const auto claimed = *digest_from_bytes(hd.sha256());
    const auto& known = m_files[hd.file()].digest;
    if (known) {
      if (*known == claimed) mark_held(*r, hd.file());
    } else {
      r->pending_claims.emplace_back(hd.file(), claimed);
    }
  }
  reply.set_accepted(true);
  queue_unicast(from, encode(wire::msg_type::register_reply, m_cfg.session, reply));
  if (m_log) {
    m_log->info("session {}: receiver '{}' registered from {}{}, RTT {:.2f} ms, holds {} files",
                m_cfg.session, r->rep.id, from.to_string(), m.resumed() ? " (resumed)" : "",
                to_ms(r->rep.rtt), r->rep.files_held);
    if (!r->rep.missing_seqs.empty()) {
      std::string ranges;
      for (const auto& [first, last] : r->rep.missing_seqs) {
        ranges += (ranges.empty() ? "" : ",") + std::to_string(first) +
                  (first == last ? "" : "-" + std::to_string(last));
      }
      m_log->warn("session {}: receiver '{}' never completed sessions {} of channel {} "
                  "(its last completed: {})",
                  m_cfg.session, r->rep.id, ranges, m_cfg.channel, r->rep.last_seq);
    }
  }
  if (!m_cfg.receivers.empty() && m_registered == m_cfg.receivers.size()) {
    close_registration(now);
  }
}

void sender_session::handle_nak(const wire::nak& m, const endpoint& from, time_point now) {
  receiver_state* r = find_receiver(m.receiver_id());
  if (!r || r->rep.state == receiver_report::state_t::missing) {
    m_drops.add(errc::not_registered);
    return;
  }
  const std::uint32_t file_count = static_cast<std::uint32_t>(m_files.size());
  if (r->on_unicast()) {
    // Its data comes over unicast; its NAKs only ask for digests and show it is alive. A NAK
    // with blocks means it lost its unicast state (a restart): order it again.
    r->last_heard = now;
    r->rep.address = from;  // a restarted receiver answers from a new port
    if (m.files_size() > 0 && r->unicast_started) {
      r->unicast_started = false;
      r->next_fallback = now;
    }
    ++(m.files_size() > 0 ? m_counters.naks : m_counters.status);
    track(*r, true);
    for (const auto f : m.digests_wanted()) {
      if (f < file_count && m_files[f].digest) m_digest_queue.push_back(f);
    }
    if (!m_digest_queue.empty() && digests_sendable()) send_digests(now);
    return;
  }
  ++(m.files_size() > 0 || m.fec_lacks_size() > 0 ? m_counters.naks : m_counters.status);
  if (!r->on_multicast()) {
    m_drops.add(errc::stale);  // completed or failed already
    return;
  }
  // FEC lacks: (gap, lack) pairs over ascending FEC blocks, each lack at most its sources.
  if (m.fec_lacks_size() > 0) {
    if (!m_fec || m.fec_lacks_size() % 2 != 0) {
      m_drops.add(errc::invalid_field);
      return;
    }
    std::uint64_t fb = 0;
    for (int i = 0; i < m.fec_lacks_size(); i += 2) {
      if (i > 0 && m.fec_lacks(i) == 0) fb = m_fec->fec_blocks();  // not ascending
      fb += m.fec_lacks(i);
      if (fb >= m_fec->fec_blocks() || m.fec_lacks(i + 1) == 0 ||
          m.fec_lacks(i + 1) > m_fec->sources(static_cast<std::uint32_t>(fb))) {
        m_drops.add(errc::invalid_field);
        return;
      }
    }
  }
  for (const auto& fn : m.files()) {
    if (fn.file() >= file_count ||
        for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                       m_passes.blocks(fn.file()), [](std::uint32_t, std::uint32_t) {})) {
      m_drops.add(errc::invalid_field);
      return;
    }
  }
  r->last_heard = now;
  track(*r, true);
  r->rep.address = from;
  r->rep.bytes_received = m.bytes_received();
  ++r->rep.naks;
  sample_rtt(*r, m.echo_time_us(), m.hold_us(), now);
  std::uint64_t naked = 0;
  const bool advertise = suppressing();
  const bool advert_was_pending = m_advert.pending();
  std::uint64_t fresh = 0;
  for (const auto& fn : m.files()) {
    for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                   m_passes.blocks(fn.file()), [&](std::uint32_t first, std::uint32_t count) {
                     naked += count;
                     m_added.clear();
                     fresh += m_passes.nak(fn.file(), first, count, m.seen_seq(),
                                           m_phase == phase::transferring,
                                           advertise ? &m_added : nullptr);
                     for (const auto& [a, b] : m_added) m_advert.scheduled(fn.file(), a, b - a);
                   });
  }
  // FEC lacks (validated above): new parity, counted with the blocks named for the window.
  for (std::uint32_t i = 0, fb = 0; i + 1 < static_cast<std::uint32_t>(m.fec_lacks_size()); i += 2) {
    fb += m.fec_lacks(static_cast<int>(i));
    const std::uint32_t lack = m.fec_lacks(static_cast<int>(i + 1));
    naked += lack;
    fresh += m_parity->nak(fb, lack, m.seen_seq());
  }
  m_counters.nak_blocks += naked;
  m_counters.nak_new_blocks += fresh;
  m_window.on_nak(naked, fresh);
  // The first advert after a quiet spell leaves a moment after the NAK, once the prompt
  // repairs of this wake-up have left: it then names only blocks still waiting.
  if (!advert_was_pending && m_advert.pending()) m_advert.hold_until(now + min_advert_interval);
  r->rep.blocks_naked += naked;
  // Blocks asked for now go out in the next pass at the latest.
  if (naked > 0) r->last_nak_pass = m_passes.pass();
  if (const auto why = m_fallback.nak_ratio_exceeded(r->rep.blocks_naked, m_data_datagrams)) {
    order_fallback(*r, *why, now);
  }
  for (const auto f : m.digests_wanted()) {
    if (f < file_count && m_files[f].digest) m_digest_queue.push_back(f);
  }
  if (!m_digest_queue.empty() && digests_sendable()) send_digests(now);
  if (m_phase == phase::waiting && naked > 0 && r->on_multicast()) {
    if (const auto why = m_fallback.after_passes(m_passes.pass())) {
      order_fallback(*r, *why, now);
      return;
    }
    if (m_passes.pass() >= m_cfg.max_passes) {
      fail_receiver(*r,
                    "still missing " + std::to_string(naked) + " blocks after " +
                        std::to_string(m_cfg.max_passes) + " passes",
                    now);
      return;
    }
    if ((m_passes.wanted() > 0 || (m_parity && m_parity->scheduled() > 0)) && !m_next_pass_at) {
      m_next_pass_at = now + collection_delay();
    }
  }
}

void sender_session::handle_complete(const wire::complete& m, const endpoint& from,
                                     time_point now) {
  receiver_state* r = find_receiver(m.receiver_id());
  if (!r || r->rep.state == receiver_report::state_t::missing) {
    m_drops.add(errc::not_registered);
    return;
  }
  wire::complete_ack ack;
  ack.set_receiver_id(m.receiver_id());
  queue_unicast(from, encode(wire::msg_type::complete_ack, m_cfg.session, ack));
  r->last_heard = now;
  if (r->rep.state != receiver_report::state_t::registered) return;  // a repeat
  const bool via_unicast = r->rep.fallback_transport.has_value();
  sample_rtt(*r, m.echo_time_us(), m.hold_us(), now);
  r->rep.state = receiver_report::state_t::completed;
  r->rep.files_stored = m.files_stored();
  r->rep.bytes_stored = m.bytes_stored();
  r->rep.files_held = std::max(r->rep.files_held, m.files_held());
  // The pass that brought its last missing block: one after the pass of its last NAK.
  r->rep.passes = via_unicast ? r->last_nak_pass : std::min(m_passes.pass(), r->last_nak_pass + 1);
  r->rep.completion_time = now - m_start;
  for (const auto& f : m.failures()) {
    r->rep.file_failures.emplace_back(f.file(), f.reason().substr(0, 256));
  }
  if (!r->rep.file_failures.empty()) {
    r->rep.state = receiver_report::state_t::failed;
    r->rep.reason = std::to_string(r->rep.file_failures.size()) + " files could not be stored";
  }
  --m_active;
  track(*r, false);
  if (m_log) {
    if (r->rep.state != receiver_report::state_t::failed) {
      m_log->info("session {}: receiver '{}' completed {} in {:.3f} s: {} files stored, {} "
                  "held, {} bytes",
                  m_cfg.session, r->rep.id,
                  via_unicast ? fmt::format("over {}", *r->rep.fallback_transport)
                              : "after pass " + std::to_string(m_passes.pass()),
                  to_seconds(r->rep.completion_time), r->rep.files_stored, r->rep.files_held,
                  r->rep.bytes_stored);
    } else {
      m_log->warn("session {}: receiver '{}' finished with {} files it could not store "
                  "(first: file {}: {})",
                  m_cfg.session, r->rep.id, r->rep.file_failures.size(),
                  r->rep.file_failures.front().first, r->rep.file_failures.front().second);
    }
  }
  check_done(now);
}

bool sender_session::times_out(const receiver_state& r) const noexcept {
  // Every receiver the session waits for is answered by it within receiver_timeout while the
  // sender asks for status: registered ones by NAK or COMPLETE, unicast ones (connected) by a
  // NAK as a sign of life or COMPLETE. One that stops (a full disk, a crash) is failed, so the
  // session always ends. Unconnected unicast receivers are bounded by fallback_max_orders.
  return r.on_multicast() || (r.on_unicast() && r.unicast_started);
}

void sender_session::fail_receiver(receiver_state& r, std::string why, time_point now) {
  const bool was_active = r.rep.state == receiver_report::state_t::registered;
  r.rep.state = receiver_report::state_t::failed;
  r.rep.reason = std::move(why);
  r.rep.passes = m_passes.pass();
  r.rep.completion_time = now - m_start;
  if (was_active) --m_active;
  track(r, false);
  if (m_log) {
    m_log->warn("session {}: receiver '{}' failed: {}", m_cfg.session, r.rep.id,
                r.rep.reason);
  }
}

void sender_session::check_done(time_point now) {
  if (m_registration_open || m_phase == phase::announcing || m_phase == phase::ending ||
      m_phase == phase::done) {
    return;
  }
  if (m_active == 0) start_ending(now, false, {});
}

void sender_session::start_ending(time_point now, bool aborted, const std::string& why) {
  if (m_phase == phase::ending || m_phase == phase::done) return;
  m_aborted = aborted;
  m_phase = phase::ending;
  m_end_repeats = 0;
  m_next_end = now;
  m_finished = now;
  if (m_log) {
    if (aborted) {
      m_log->warn("session {}: ending early: {}", m_cfg.session, why);
    } else {
      m_log->info("session {}: every receiver is done after {} passes, {:.3f} s",
                  m_cfg.session, m_passes.pass(), to_seconds(now - m_start));
    }
  }
}

void sender_session::abort(time_point now, std::string why) {
  for (auto& r : m_receivers) {
    if (r->rep.state == receiver_report::state_t::registered ||
        r->rep.state == receiver_report::state_t::missing) {
      fail_receiver(*r, "session aborted: " + why, now);
    }
  }
  start_ending(now, true, why);
}

void sender_session::set_rate(std::uint64_t rate_bps) noexcept {
  m_cfg.rate_bps = rate_bps;
  m_pacer.set_rate(rate_bps);
}

bool sender_session::succeeded() const noexcept {
  if (m_aborted || m_receivers.empty()) return false;
  return std::all_of(m_receivers.begin(), m_receivers.end(), [](const auto& r) {
    return r->rep.state == receiver_report::state_t::completed;
  });
}

std::optional<time_point> sender_session::next_deadline(time_point now) const {
  time_point t = m_next_decay;
  auto consider = [&t](time_point c) { t = std::min(t, c); };
  if (m_registration_open) {
    consider(m_register_deadline);
    if (m_announce.due(now)) {
      consider(m_pacer.ready_at(now, wire::control_budget + ip_udp_overhead));
    } else {
      consider(m_announce.next_cycle());
    }
  }
  switch (m_phase) {
    case phase::announcing:
      if (m_cfg.start_on_registration && m_first_keyed) {
        consider(*m_first_keyed + keyed_start_grace());
      }
      break;
    case phase::transferring:
      consider(m_next_marker);
      consider(m_pacer.ready_at(now, pacing_quantum()));
      break;
    case phase::waiting:
      consider(m_next_status);
      if (m_next_pass_at) consider(*m_next_pass_at);
      // The least recently heard receiver times out first (a receiver that no longer times out
      // may still be at the front: an early wake-up, on_timer takes it out).
      if (!m_silence.empty()) {
        const auto& r = *m_receivers[m_silence.front()];
        consider(std::max(r.last_heard, m_wait_start) + m_cfg.receiver_timeout);
      }
      break;
    case phase::ending:
      consider(m_next_end);
      break;
    case phase::done:
      return std::nullopt;
  }
  for (const auto i : m_awaiting_connection) {
    const auto& r = *m_receivers[i];
    if (r.on_unicast() && !r.unicast_started) consider(r.next_fallback);
  }
  if (!m_digest_queue.empty() && digests_sendable()) consider(now);
  if (m_advert.pending() && digests_sendable()) consider(m_advert.due_at());
  return t;
}

session_report sender_session::report(time_point now) const {
  session_report rep;
  rep.session = m_cfg.session;
  rep.channel = m_cfg.channel;
  rep.channel_seq = m_cfg.channel_seq;
  rep.files = static_cast<std::uint32_t>(m_files.size());
  for (std::size_t i = 0; i < m_files.size(); ++i) {
    rep.bytes += m_files[i].size;
    if (m_registered == 0 || m_passes.held_by(static_cast<std::uint32_t>(i)) < m_registered) {
      rep.transferred_bytes += m_files[i].size;
    }
  }
  rep.passes = m_passes.pass();
  rep.data_datagrams = m_data_datagrams;
  rep.data_bytes = m_data_bytes;
  const std::uint64_t parity = m_parity ? m_parity->sent() : 0;
  rep.repair_datagrams = m_passes.repairs() + (parity - std::min(parity, m_proactive_parity));
  rep.parity_datagrams = parity;
  rep.proactive_parity = std::min(parity, m_proactive_parity);
  rep.grtt = m_grtt.estimate();
  rep.elapsed = (m_phase == phase::done || m_phase == phase::ending ? m_finished : now) - m_start;
  rep.drops = m_drops;
  rep.control = m_counters;
  for (const auto& r : m_receivers) rep.receivers.push_back(r->rep);
  return rep;
}

}  // namespace mcdist::sender
