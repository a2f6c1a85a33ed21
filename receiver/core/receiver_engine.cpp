#include "receiver/core/receiver_engine.hpp"

#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

receiver_engine::receiver_engine(receiver_config cfg, receiver_sink& sink, storage_port& store,
                                 std::uint64_t seed, std::shared_ptr<spdlog::logger> log)
    : m_cfg(std::move(cfg)), m_sink(sink), m_store(store), m_log(std::move(log)), m_rng_state(seed),
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
  return static_cast<std::size_t>(
      std::count_if(m_sessions.begin(), m_sessions.end(),
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
                                  std::uint32_t channel, time_point now,
                                  std::optional<time_point> arrival) {
  wire::header h;
  if (auto ec = wire::parse_header(datagram, h)) {
    on_refused(ec);
    return;
  }
  on_datagram(h, datagram, from, channel, now, arrival);
}

void receiver_engine::on_refused(std::error_code why) noexcept {
  ++m_stats.datagrams;
  const bool ours = why.category() == error_category() && why.value() > 0 &&
                    why.value() < static_cast<int>(errc::count_);
  m_stats.drops.add(ours ? static_cast<errc>(why.value()) : errc::unauthenticated);
}

void receiver_engine::on_datagram(const wire::header& h, std::span<const std::byte> datagram,
                                  const endpoint& from, std::uint32_t channel, time_point now,
                                  std::optional<time_point> arrival) {
  ++m_stats.datagrams;
  // The datagram boundary: an allocation that fails while handling one datagram costs that
  // datagram, never the daemon (budgets make it rare; this makes it harmless).
  try {
    dispatch(h, datagram, from, channel, now, arrival ? std::min(*arrival, now) : now);
  } catch (const std::bad_alloc&) {
    m_stats.drops.add(errc::out_of_memory);
    if (m_log)
      m_log->error("out of memory while handling a datagram from {}; dropped it",
                   from.address_string());
  } catch (const std::length_error&) {
    m_stats.drops.add(errc::out_of_memory);
  }
}

void receiver_engine::dispatch(const wire::header& h, std::span<const std::byte> datagram,
                               const endpoint& from, std::uint32_t channel, time_point now,
                               time_point arrival) {
  if (h.type == wire::msg_type::data) {
    handle_data(datagram, from, now, arrival);
    return;
  }
  if (h.type == wire::msg_type::parity) {
    handle_parity(datagram, from, now, arrival);
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
    default: m_stats.drops.add(errc::unknown_type); break;
  }
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

receiver_engine::session_rx* receiver_engine::receiving_session(session_id id,
                                                                const endpoint& from) {
  session_rx* s = find(id);
  if (!s) {
    m_stats.drops.add(m_tombstones.count(id) ? errc::stale : errc::unknown_session);
    return nullptr;
  }
  if (!same_host(from, s->sender)) {
    m_stats.drops.add(errc::wrong_source);
    return nullptr;
  }
  if (s->state == session_rx::state_t::completing || is_unicast(s->path)) {
    m_stats.drops.add(errc::duplicate);
    return nullptr;
  }
  return s;
}

void receiver_engine::handle_data(std::span<const std::byte> datagram, const endpoint& from,
                                  time_point now, time_point arrival) {
  wire::data_header h;
  std::span<const std::byte> payload;
  if (auto ec = wire::parse_data(datagram, h, payload)) {
    m_stats.drops.add(static_cast<errc>(ec.value()));
    return;
  }
  session_rx* s = receiving_session(h.session, from);
  if (!s) return;
  // Every datagram of the session counts for the loss event rate, wanted or not (a repair
  // for another receiver is not a loss here).
  note_seq(*s, h.seq, now, arrival);
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
  if (!s.silent) on_rate_marker(s, m, now);
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
  // A silent site keeps the sender's progress (FEC blocks whose sources are all sent) and
  // schedules no NAK round.
  if (s.silent) return;
  nak_round r;
  // The sender is idle and asking again at the end of a pass we already answered: our NAKs
  // were lost, or its repairs were (or a repair it advertised). NAK everything still missing.
  const bool rescan = m.pass_end() && s.pass_end_answered == m.pass();
  if (rescan) s.feedback.clear();
  if (!rescan && !is_unicast(s.path)) {
    r.from_file = s.nak_file;
    r.from_block = s.nak_block;
  } else if (is_unicast(s.path)) {
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
  const bool covers =
      r.from_file < r.to_file || (r.from_file == r.to_file && r.from_block < r.to_block);
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
  if (s.state != session_rx::state_t::receiving || is_unicast(s.path)) return;
  // Check everything before taking anything (a hint, but from the network).
  for (const auto& fn : m.files()) {
    if (fn.file() >= s.file_count || fn.file() >= s.files.size() ||
        for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                       s.files[fn.file()].blocks, [](std::uint32_t, std::uint32_t) {})) {
      m_stats.drops.add(errc::invalid_field);
      return;
    }
  }
  // Parity pending per FEC block: (gap, pending) pairs, ascending, as nak.fec_lacks.
  if (m.fec_parity_size() > 0 && ensure_fec(s)) {
    const auto& t = *s.fec;
    bool ok = m.fec_parity_size() % 2 == 0;
    std::uint64_t fb = 0;
    for (int i = 0; ok && i < m.fec_parity_size(); i += 2) {
      if (i > 0 && m.fec_parity(i) == 0) ok = false;  // not ascending
      fb += m.fec_parity(i);
      ok = ok && fb < t.layout().fec_blocks() && m.fec_parity(i + 1) > 0;
    }
    if (!ok) {
      m_stats.drops.add(errc::invalid_field);
      return;
    }
    fb = 0;
    for (int i = 0; i < m.fec_parity_size(); i += 2) {
      fb += m.fec_parity(i);
      const auto f = static_cast<std::uint32_t>(fb);
      s.feedback.cover_parity(m.pass(), s.marker_pass, f,
                              std::uint64_t{t.parity_held(f)} + m.fec_parity(i + 1));
    }
  }
  for (const auto& fn : m.files()) {
    for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                   s.files[fn.file()].blocks, [&](std::uint32_t first, std::uint32_t count) {
                     s.feedback.advertise(m.pass(), s.marker_pass, fn.file(), first, count);
                   });
  }
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
    if (s.silent) record_incomplete(s, why);
    if (m_log && !why.empty()) {
      std::uint32_t missing = 0;
      for (const auto& fr : s.files) {
        if (!fr.terminal()) ++missing;
      }
      m_log->warn("session {}: given up: {}; {} of {} files not delivered", s.name(), why, missing,
                  s.file_count);
    }
  }
  if (s.unicast_active || s.unicast_prepared) m_sink.stop_unicast(s.id);
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
      case session_rx::state_t::checking_held: break;
      case session_rx::state_t::registering:
        if (now >= s->next_register) send_register(*s, now);
        if (s->nak_due && now >= *s->nak_due) {
          s->nak_due.reset();
          s->rounds.clear();
        }
        break;
      case session_rx::state_t::receiving:
        if (is_unicast(s->path) && !s->unicast_active && now >= s->next_unicast) {
          start_unicast_attempt(*s, now);
        }
        if (s->nak_due && now >= *s->nak_due) send_naks(*s, now);
        if (s->rate.due() && now >= *s->rate.due()) send_rate_report(*s, now);
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
      case session_rx::state_t::registering: consider(s->next_register); break;
      case session_rx::state_t::receiving:
        if (is_unicast(s->path) && !s->unicast_active) consider(s->next_unicast);
        if (s->nak_due) consider(*s->nak_due);
        if (s->rate.due()) consider(*s->rate.due());
        if (s->dirty) consider(s->next_checkpoint);
        break;
      case session_rx::state_t::completing: consider(s->next_complete); break;
      default: break;
    }
  }
  return t;
}

}  // namespace mcdist::receiver
