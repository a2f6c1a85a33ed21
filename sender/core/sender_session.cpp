#include "sender/core/sender_session.hpp"

#include "sender/core/sender_session_parts.hpp"

#include <algorithm>

namespace mcdist::sender {

using namespace session_detail;

namespace {

/// The settings a session cannot start with. @throws std::invalid_argument saying which
void check_settings(const sender_config& cfg, std::size_t file_count) {
  if (cfg.block_size < wire::min_block_size || cfg.block_size > wire::max_block_size) {
    throw std::invalid_argument("block size " + std::to_string(cfg.block_size) + " is outside " +
                                std::to_string(wire::min_block_size) + ".." +
                                std::to_string(wire::max_block_size) + " bytes");
  }
  if (file_count > max_files_per_session) {
    throw std::invalid_argument("too many files in one session: " + std::to_string(file_count) +
                                " (limit " + std::to_string(max_files_per_session) + ")");
  }
  if (cfg.max_passes == 0) throw std::invalid_argument("max passes must be at least 1");
  if (!cfg.channel.empty() && !wire::valid_channel_name(cfg.channel)) {
    throw std::invalid_argument("channel name '" + cfg.channel +
                                "' is not 1 to 64 letters, digits or - _ . : @ /");
  }
  if ((cfg.channel_seq > 0 || !cfg.catch_up_seqs.empty()) && cfg.channel.empty()) {
    throw std::invalid_argument("a channel sequence number or catch-up ranges need a channel name");
  }
  if (!cfg.catch_up_seqs.empty() &&
      (cfg.channel_seq > 0 ||
       !wire::valid_seq_ranges(cfg.catch_up_seqs, std::numeric_limits<std::uint64_t>::max()))) {
    throw std::invalid_argument("catch-up ranges must be at most " +
                                std::to_string(wire::max_seq_ranges) +
                                " ascending disjoint ranges from 1, in an unsequenced session");
  }
  for (const auto& id : cfg.receivers) {
    if (!wire::valid_receiver_id(id))
      throw std::invalid_argument("invalid receiver id '" + id + "'");
  }
  for (const auto& id : cfg.only_receivers) {
    if (!wire::valid_receiver_id(id))
      throw std::invalid_argument("invalid receiver id '" + id + "'");
  }
}

}  // namespace

sender_session::sender_session(sender_config cfg, std::vector<manifest_entry> files,
                               std::uint64_t seed, std::shared_ptr<spdlog::logger> log)
    : m_cfg(std::move(cfg)), m_files(std::move(files)), m_log(std::move(log)), m_rng_state(seed),
      m_grtt(m_cfg.grtt_initial, m_cfg.grtt_min, m_cfg.grtt_max),
      m_pacer(m_cfg.rate_bps,
              std::max(
                  {m_cfg.burst_bytes,
                   (m_cfg.rate_auto ? m_cfg.rate_max_bps : m_cfg.rate_bps) / 8 / 1000 * catch_up_ms,
                   std::uint64_t{m_cfg.block_size + wire::data_header_size + ip_udp_overhead +
                                 m_cfg.data_trailer_bytes}})),
      m_passes(std::vector<std::uint32_t>{}), m_fallback(fallback_settings_of(m_cfg)) {
  check_settings(m_cfg, m_files.size());
  m_file_blocks.resize(m_files.size());
  for (std::size_t i = 0; i < m_files.size(); ++i) {
    if (m_files[i].size > max_file_size) {
      throw std::invalid_argument("file too large: " + m_files[i].path);
    }
    m_file_blocks[i] = block_count(m_files[i].size, m_cfg.block_size);
  }
  m_passes = pass_scheduler(m_file_blocks);
  m_passes.start_seq_after(m_cfg.first_seq);
  if (m_cfg.rate_auto) {
    if (m_cfg.rate_max_bps == 0) throw std::invalid_argument("--rate auto needs a --rate-max");
    rate_controller_config rc;
    rc.rate_max_bps = m_cfg.rate_max_bps;
    rc.initial_bps = std::min(m_cfg.rate_auto_initial_bps, m_cfg.rate_max_bps);
    rc.packet_bytes =
        static_cast<std::uint32_t>(m_cfg.block_size + wire::data_header_size + ip_udp_overhead);
    rc.min_rtt = m_cfg.grtt_min;
    m_rate.emplace(rc);
    m_pacer.set_rate(0);  // update_auto_rate sets the rate and the bucket
    update_auto_rate(time_point{});
  }
  if (m_cfg.fec_k > 0) configure_fec();
  while (m_digests_through < m_files.size() && m_files[m_digests_through].digest) {
    ++m_digests_through;
  }
  if (m_cfg.silent_passes > 0) configure_silent();
  if (m_cfg.block_digests && !silent()) {
    throw std::invalid_argument(
        "block digests are for silent sessions: an ordinary signed session checks its blocks "
        "with the session key");
  }
  // A resend to named receivers is a closed group of exactly those.
  if (m_cfg.receivers.empty()) m_cfg.receivers = m_cfg.only_receivers;
  // Deciding for unicast from the start needs the registrations (count, RTT): do not start
  // pass 1 before them when that decision is possible.
  if (m_fallback.decides_at_registration()) m_cfg.eager_start = false;
  for (const auto& id : m_cfg.receivers) {
    auto& r = m_receivers.emplace(id).first;
    r.rep.id = id;
    r.relay = is_relay(id);
    r.awaited = std::find(m_cfg.not_awaited.begin(), m_cfg.not_awaited.end(), id) ==
                m_cfg.not_awaited.end();
    if (r.awaited) ++m_awaited;
  }
  m_announce =
      announcer(announce_settings_of(m_cfg, m_pacer.rate_bps()), m_files,
                m_cfg.announce_interval * (silent() ? silent_announce_interval_factor : 1));
}

sender_session::~sender_session() = default;

void sender_session::configure_fec() {
  if (m_cfg.fec_max_parity == 0) m_cfg.fec_max_parity = fec::default_max_parity(m_cfg.fec_k);
  if (!fec::valid_shape(m_cfg.fec_k, m_cfg.fec_max_parity) || m_cfg.fec_overhead < 0 ||
      m_cfg.fec_overhead > 1) {
    throw std::invalid_argument("FEC blocks of " + std::to_string(m_cfg.fec_k) + " sources and " +
                                std::to_string(m_cfg.fec_max_parity) + " parity blocks: at most " +
                                std::to_string(fec::max_k) + " sources and " +
                                std::to_string(fec::max_blocks_gf16) +
                                " blocks in all, overhead 0..100 %");
  }
  if (fec::field_for(m_cfg.fec_k, m_cfg.fec_max_parity) == fec::field::gf16 &&
      m_cfg.block_size % 2 != 0) {
    throw std::invalid_argument("FEC blocks of more than " + std::to_string(fec::max_blocks_gf8) +
                                " blocks are coded over GF(2^16) in 16-bit words: the block size "
                                "must be even, not " +
                                std::to_string(m_cfg.block_size));
  }
  m_fec.emplace(m_file_blocks, m_cfg.fec_k, m_cfg.fec_depth);  // throws for a bad depth
  m_parity.emplace(m_fec->fec_blocks(), m_cfg.fec_max_parity);
}

void sender_session::start(time_point now) {
  m_start = now;
  m_phase = phase::announcing;
  if (m_cfg.force_unicast && !silent()) announce_unicast_start();
  m_announce.start(now);
  m_register_deadline = now + (m_cfg.receivers.empty() || m_awaited == 0 ? m_cfg.register_window
                                                                         : m_cfg.register_timeout);
  m_next_decay = now + std::chrono::seconds(1);
  // A silent session takes no registrations: it announces and sends its passes.
  if (silent()) m_registration_open = false;
  if (m_log) {
    std::uint64_t total = 0;
    for (const auto& f : m_files) total += f.size;
    if (silent()) {
      m_log->info(
          "session {}: silent session: announcing {} files, {} bytes in {} announce chunks; "
          "{} passes, no registration, no NAKs",
          m_cfg.session, m_files.size(), total, m_announce.chunks(), m_cfg.silent_passes);
    } else if (m_cfg.receivers.empty()) {
      m_log->info(
          "session {}: announcing {} files, {} bytes in {} announce chunks; open group, "
          "registration window {:.1f} s",
          m_cfg.session, m_files.size(), total, m_announce.chunks(),
          to_seconds(m_cfg.register_window));
    } else {
      m_log->info(
          "session {}: announcing {} files, {} bytes in {} announce chunks to a closed "
          "group of {} receivers",
          m_cfg.session, m_files.size(), total, m_announce.chunks(), m_cfg.receivers.size());
    }
  }
}

namespace {

wire::msg_type type_of(std::span<const std::byte> own) {
  wire::header h;
  (void)wire::parse_header(own, h);  // this session wrote it: it parses
  return h.type;
}

}  // namespace

void sender_session::queue_multicast(time_point now, std::vector<std::byte> bytes) {
  m_pacer.consume(now, bytes.size() + ip_udp_overhead);
  const auto type = type_of(bytes);
  m_control.push_back({std::nullopt, std::move(bytes), type});
}

void sender_session::queue_unicast(const endpoint& to, std::vector<std::byte> bytes) {
  const auto type = type_of(bytes);
  m_control.push_back({to, std::move(bytes), type});
}

bool sender_session::pop_control(control_send& out) {
  if (m_control.empty()) return false;
  out = std::move(m_control.front());
  m_control.pop_front();
  return true;
}

void sender_session::send_announce_chunk(time_point now) {
  queue_multicast(now, m_announce.send_next(now, m_cfg.session, m_grtt.estimate(),
                                            [this] { return splitmix64(m_rng_state); }));
}

void sender_session::fail_silent(time_point now) {
  fail_silent(now, m_silence, m_cfg.receiver_timeout);
  fail_silent(now, m_relay_silence, m_cfg.relay_timeout);
}

void sender_session::fail_silent(time_point now, silence_list& list, duration timeout) {
  while (!list.empty()) {
    receiver_state& r = m_receivers[list.front()];
    if (!times_out(r)) {
      list.remove(r.index);
      continue;
    }
    const time_point since = std::max(r.last_heard, m_wait_start);
    if (now - since < timeout) break;  // the least recently heard is not due
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
  const std::uint64_t per_ms = m_pacer.rate_bps() / 8 / 1000;
  return std::max(datagram, std::min({m_cfg.pacing_quantum_bytes, per_ms}));
}

duration sender_session::status_interval() const noexcept {
  return std::max<duration>(m_grtt.estimate() * 3 / 2 + nak_window(),
                            std::chrono::milliseconds(10));
}

duration sender_session::marker_interval() const noexcept {
  duration interval = m_grtt.estimate() / 2;
  if (const std::uint64_t rate = m_pacer.rate_bps(); rate > 0) {
    const double datagram_bits = 8.0 * (m_cfg.block_size + wire::data_header_size +
                                        ip_udp_overhead + m_cfg.data_trailer_bytes);
    const auto spacing = std::chrono::nanoseconds(static_cast<std::int64_t>(
        marker_spacing_datagrams * datagram_bits * 1e9 / static_cast<double>(rate)));
    interval = std::max<duration>(interval, std::chrono::duration_cast<duration>(spacing));
  }
  return std::clamp<duration>(interval, min_marker_interval, max_marker_interval);
}

void sender_session::on_timer(time_point now) {
  if (now >= m_next_decay) {
    m_grtt.decay();
    m_next_decay = now + std::max<duration>(m_grtt.estimate() * 2, std::chrono::seconds(1));
  }
  if (m_registration_open) {
    if (awaited_all_in() || (now >= m_register_deadline && m_announce.cycles() > 0)) {
      close_registration(now);
    } else {
      const std::uint64_t chunk_bytes = wire::control_budget + ip_udp_overhead;
      while (m_announce.due(now) && m_pacer.allowance(now) >= chunk_bytes) {
        send_announce_chunk(now);
      }
    }
  } else if (silent()) {
    silent_announce(now);
  }
  // FALLBACK orders not yet answered by a connection: only those receivers, not all of them.
  for (std::size_t i = 0; i < m_awaiting_connection.size();) {
    receiver_state& r = m_receivers[m_awaiting_connection[i]];
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
      if (silent()) {
        // Nothing to wait for but the linger: no receiver reports to a silent session.
        if (m_silent_end_at && now >= *m_silent_end_at) start_ending(now, false, {});
        break;
      }
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
        // A silent session's sites never acknowledge: END goes out every time.
        const std::uint32_t repeats = succeeded() && !silent() ? 1 : end_repeats;
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
    case phase::done: break;
  }
  if (!m_digest_queue.empty() && digests_sendable()) send_digests(now);
}

void sender_session::close_registration(time_point now) {
  m_registration_open = false;
  const bool early = now < m_register_deadline;
  for (auto& r : m_receivers) {
    if (r->rep.state == receiver_report::state_t::missing) {
      fail_receiver(
          *r,
          early && !r->awaited
              ? std::string("did not register before every awaited receiver did (not "
                            "awaited: it missed the channel's previous session)")
              : "did not register within " +
                    std::to_string(static_cast<int>(to_seconds(
                        m_awaited == 0 ? m_cfg.register_window : m_cfg.register_timeout))) +
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
  // A pass that started while registration was open scheduled its next marker by the initial
  // GRTT (0.5 s): now that registrations measured it, markers (and --rate auto's feedback
  // rounds) follow the measured one.
  m_next_marker = std::min(m_next_marker, now + marker_interval());
  m_passes.group_known(m_registered);
  if (m_fallback.transport()) {
    double bytes = 0;
    for (const auto& f : m_files) bytes += static_cast<double>(f.size);
    if (const auto why = m_fallback.unicast_from_start(bytes, m_registered, m_grtt.estimate(),
                                                       m_pacer.rate_bps())) {
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

void sender_session::mark_held(receiver_state& r, std::uint32_t file) {
  m_passes.mark_held(file);
  ++r.rep.files_held;
  r.rep.held_files.push_back(file);
}

void sender_session::sample_rtt(receiver_state& r, std::uint64_t echo_us, std::uint64_t hold_us,
                                time_point now) {
  const std::uint64_t now_us = to_wire_us(now);
  if (echo_us == 0 || echo_us > now_us || now_us - echo_us < hold_us) return;
  if (m_cfg.own_echoes_only && !std::binary_search(m_stamps.begin(), m_stamps.end(), echo_us)) {
    return;
  }
  const duration rtt = std::chrono::microseconds(now_us - echo_us - hold_us);
  r.rep.rtt = rtt;
  r.rep.rtt_valid = true;
  m_grtt.add_sample(rtt);
  if (m_rate) m_rate->on_rtt_sample(r.rep.id, rtt);  // the overrun cap's base RTT
}

void sender_session::on_datagram(std::span<const std::byte> datagram, const endpoint& from,
                                 time_point now) {
  wire::header h;
  if (auto ec = wire::parse_header(datagram, h)) {
    on_refused(ec);
    return;
  }
  on_datagram(h, datagram, from, now);
}

void sender_session::on_refused(std::error_code why) noexcept {
  if (silent()) {
    ++m_counters.silent_refused;
    return;
  }
  const bool ours = why.category() == error_category() && why.value() > 0 &&
                    why.value() < static_cast<int>(errc::count_);
  m_drops.add(ours ? static_cast<errc>(why.value()) : errc::unauthenticated);
}

void sender_session::on_datagram(const wire::header& h, std::span<const std::byte> datagram,
                                 const endpoint& from, time_point now) {
  if (silent()) {
    // Sites of a silent session never transmit: whatever arrives is counted, never read.
    ++m_counters.silent_refused;
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

void sender_session::check_done(time_point now) {
  // A silent session ends by its pass count (end_pass), not by its receivers.
  if (silent()) return;
  if (m_registration_open || m_phase == phase::announcing || m_phase == phase::ending ||
      m_phase == phase::done) {
    return;
  }
  if (m_active == 0) start_ending(now, false, {});
}

bool sender_session::relays_undelegated() const {
  const auto took_part = [this](const std::string& id) {
    const auto* r = m_receivers.find(id);
    return r && r->rep.state != receiver_report::state_t::missing;
  };
  // A relay behind a relay is reached through one that took part: with none, nothing to wait
  // for (the relays are down, or this session is not theirs).
  if (std::none_of(m_cfg.relays.begin(), m_cfg.relays.end(), took_part)) return false;
  return std::any_of(m_cfg.relays.begin(), m_cfg.relays.end(), [&](const std::string& id) {
    return !took_part(id) &&
           std::find(m_delegated.begin(), m_delegated.end(), id) == m_delegated.end();
  });
}

void sender_session::on_relay_delegated(std::string_view relay_id, time_point now) {
  if (std::find(m_delegated.begin(), m_delegated.end(), relay_id) == m_delegated.end() &&
      m_delegated.size() < m_cfg.relays.size()) {
    m_delegated.emplace_back(relay_id);
  }
  if (m_end_waits_for_relays && m_phase == phase::ending && !relays_undelegated()) {
    m_end_waits_for_relays = false;
    m_next_end = std::min(m_next_end, now);
  }
}

void sender_session::start_ending(time_point now, bool aborted, const std::string& why) {
  if (m_phase == phase::ending || m_phase == phase::done) return;
  m_aborted = aborted;
  m_phase = phase::ending;
  m_end_repeats = 0;
  m_next_end = now;
  m_finished = now;
  if (!aborted && m_cfg.relay_end_wait > duration::zero() && relays_undelegated()) {
    // A relay behind a relay asks for its delegation through one that may have completed at
    // once (it held the session whole): the hub still answers until the END.
    m_end_waits_for_relays = true;
    m_next_end = now + std::max(m_cfg.relay_end_wait, 4 * grtt());
    if (m_log) {
      m_log->debug(
          "session {}: END waits up to {:.3f} s for the delegation requests of relays "
          "behind relays",
          m_cfg.session, to_seconds(m_next_end - now));
    }
  }
  if (m_log) {
    if (aborted) {
      m_log->warn("session {}: ending early: {}", m_cfg.session, why);
    } else if (silent()) {
      m_log->info("session {}: silent session sent its {} passes in {:.3f} s", m_cfg.session,
                  m_passes.pass(), to_seconds(now - m_start));
    } else {
      m_log->info("session {}: every receiver is done after {} passes, {:.3f} s", m_cfg.session,
                  m_passes.pass(), to_seconds(now - m_start));
    }
  }
}

void sender_session::abort(time_point now, const std::string& why) {
  for (auto& r : m_receivers) {
    if (r->rep.state == receiver_report::state_t::registered ||
        r->rep.state == receiver_report::state_t::missing) {
      fail_receiver(*r, "session aborted: " + why, now);
    }
  }
  start_ending(now, true, why);
}

void sender_session::set_rate(std::uint64_t rate_bps) noexcept {
  if (m_rate) {
    // Rate auto: the controller owns the rate; what the shell gives is its ceiling.
    m_rate->set_ceiling(rate_bps);
    if (m_pacer.rate_bps() > m_rate->ceiling()) apply_rate(m_rate->ceiling());
    return;
  }
  apply_rate(rate_bps);
}

void sender_session::apply_rate(std::uint64_t rate_bps) noexcept { m_pacer.set_rate(rate_bps); }

bool sender_session::succeeded() const noexcept {
  if (silent()) return !m_aborted && (m_phase == phase::ending || m_phase == phase::done);
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
  } else if (silent() && m_phase != phase::ending && m_phase != phase::done) {
    if (m_announce.due(now)) {
      consider(m_pacer.ready_at(now, wire::control_budget + ip_udp_overhead));
    } else {
      consider(m_announce.next_cycle());
    }
  }
  switch (m_phase) {
    case phase::announcing:
      if (m_cfg.start_on_registration && m_first_keyed) {
        // Every listed site may hold the key already (answered between announce chunks,
        // inside the shell's flush): pass 1 is due as soon as the initial cycles are out.
        const bool due =
            m_cfg.eager_start && m_announce.initial_cycles_sent() && keyed_start_due(now);
        consider(due ? now : *m_first_keyed + keyed_start_grace());
      }
      break;
    case phase::transferring:
      consider(m_next_marker);
      // A sweep stopped by the gate goes on at on_available, not when the pacer allows.
      if (!m_gate_waiting) consider(m_pacer.ready_at(now, pacing_quantum()));
      break;
    case phase::waiting:
      consider(m_next_status);
      if (m_next_pass_at) consider(*m_next_pass_at);
      // The least recently heard receiver times out first (a receiver that no longer times out
      // may still be at the front: an early wake-up, on_timer takes it out).
      if (!m_silence.empty()) {
        const auto& r = m_receivers[m_silence.front()];
        consider(std::max(r.last_heard, m_wait_start) + m_cfg.receiver_timeout);
      }
      if (!m_relay_silence.empty()) {
        const auto& r = m_receivers[m_relay_silence.front()];
        consider(std::max(r.last_heard, m_wait_start) + m_cfg.relay_timeout);
      }
      break;
    case phase::ending: consider(m_next_end); break;
    case phase::done: return std::nullopt;
  }
  for (const auto i : m_awaiting_connection) {
    const auto& r = m_receivers[i];
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
  rep.late_key_blocks = std::min(m_late_key_blocks, rep.repair_datagrams);
  rep.source_datagrams = m_source_datagrams;
  rep.silent_passes = m_cfg.silent_passes;
  if (m_digests) {
    rep.block_digests = true;
    rep.digest_windows = m_digests->windows();
    rep.digest_chunks = m_digests->chunks_sent();
    rep.digest_bytes = m_digests->bytes_sent();
  }
  rep.grtt = m_grtt.estimate();
  rep.elapsed = (m_phase == phase::done || m_phase == phase::ending ? m_finished : now) - m_start;
  rep.drops = m_drops;
  rep.control = m_counters;
  if (m_rate) {
    rep.rate_auto = true;
    rep.rate_bps = m_pacer.rate_bps();
    rep.rate_lowest_bps = m_rate->lowest_bps();
    rep.rate_max_bps = m_rate->ceiling();
    rep.rate_clr = m_rate->clr();
  } else {
    rep.rate_bps = m_pacer.rate_bps();
  }
  for (const auto& r : m_receivers) rep.receivers.push_back(r->rep);
  return rep;
}

}  // namespace mcdist::sender
