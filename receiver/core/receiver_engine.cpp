#include "receiver/core/receiver_engine.hpp"

#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

receiver_engine::receiver_engine(receiver_config cfg, receiver_sink& sink, storage_port& store,
                                 std::uint64_t seed, std::shared_ptr<spdlog::logger> log)
    : m_cfg(std::move(cfg)), m_sink(sink), m_store(store), m_log(std::move(log)), m_rng_state(seed),
      m_id_hash(nak_scheduler::id_hash(m_cfg.id)), m_sessions(m_cfg.max_tombstones),
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
  return m_sessions.on_channel(channel);
}

std::optional<std::uint32_t> receiver_engine::channel_of(session_id s) const noexcept {
  const session_rx* rx = m_sessions.find(s);
  if (!rx) return std::nullopt;
  return rx->channel;
}

bool receiver_engine::manifest_complete(session_id s) const noexcept {
  const session_rx* rx = m_sessions.find(s);
  return rx && rx->state != session_rx::state_t::manifest;
}

std::vector<manifest_entry> receiver_engine::manifest_of(session_id s) const {
  std::vector<manifest_entry> out;
  const session_rx* rx = m_sessions.find(s);
  if (!rx || rx->state == session_rx::state_t::manifest) return out;
  out.reserve(rx->files.size());
  for (std::uint32_t f = 0; f < rx->files.size(); ++f) out.push_back(rx->files[f].entry);
  return out;
}

duration receiver_engine::retransmit_interval(const session_rx& s) const {
  return std::max(s.grtt * 2, m_cfg.retransmit_min);
}

duration receiver_engine::session_timeout(const session_rx& s) const {
  return std::max(m_cfg.session_timeout, s.grtt * 10);
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
  dispatch_control(h, datagram, from, now);
}

void receiver_engine::dispatch_control(const wire::header& h, std::span<const std::byte> datagram,
                                       const endpoint& from, time_point now) {
  session_rx* s = find(h.session);
  if (!s) {
    m_stats.drops.add(m_sessions.untracked_reason(h.session));
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
    case wire::msg_type::marker:
      if (wire::marker m; parse(m)) handle_marker(*s, m, now);
      break;
    case wire::msg_type::digest_list:
      if (wire::digest_list m; parse(m)) handle_digests(*s, m, now);
      break;
    case wire::msg_type::register_reply:
      if (wire::register_reply m; parse(m)) handle_register_reply(*s, m, now);
      break;
    case wire::msg_type::complete_ack:
      if (wire::complete_ack m; parse(m) && m.receiver_id() == m_cfg.id) {
        handle_complete_ack(*s, now);
      }
      break;
    case wire::msg_type::session_end:
      if (wire::session_end m; parse(m)) handle_end(*s, m, now);
      break;
    case wire::msg_type::fallback:
      if (wire::fallback m; parse(m)) handle_fallback(*s, m, from, now);
      break;
    case wire::msg_type::repair_advert:
      if (wire::repair_advert m; parse(m)) handle_advert(*s, m, now);
      break;
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
    m_stats.drops.add(m_sessions.untracked_reason(id));
    return nullptr;
  }
  if (!same_host(from, s->sender)) {
    m_stats.drops.add(errc::wrong_source);
    return nullptr;
  }
  if (s->state == session_rx::state_t::completing || s->unicast.moved()) {
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
  take_block(*s, h.file.value, h.block.value, payload, now);
}

void receiver_engine::take_block(session_rx& s, std::uint32_t f, std::uint32_t b,
                                 std::span<const std::byte> payload, time_point now) {
  auto& fr = s.files[f];
  if (!ensure_block_map(s, f, now)) {
    m_stats.drops.add(errc::over_budget);
    return;
  }
  if (fr.received.test(b)) {
    m_stats.drops.add(errc::duplicate);
    return;
  }
  begin_file(s, f);
  if (!m_store.write({s.id, file_index{f}}, std::uint64_t{b} * s.block_size, payload)) {
    m_stats.drops.add(errc::storage_full);
    return;
  }
  fr.received.set(b);
  s.bytes_received += payload.size();
  s.dirty = true;
  ++m_stats.data_blocks;
  m_stats.data_bytes += payload.size();
  if (std::uint32_t fb = 0; s.parity.tracker() && s.parity.source_added(f, b, fb)) {
    if (!start_recovery(s, fb, now)) return;
  }
  // Before the held check, a complete file waits (on_held finalizes it unless it is held).
  if (fr.received.all() && s.state != session_rx::state_t::manifest &&
      s.state != session_rx::state_t::checking_held) {
    file_data_complete(s, f);
    file_done(s, now);
  }
}

void receiver_engine::handle_marker(session_rx& s, const wire::marker& m, time_point now) {
  s.echo_us = m.sender_time_us();
  s.echo_at = now;
  s.grtt = std::min(from_us(m.grtt_us()), m_cfg.max_grtt);
  s.naks.on_marker_params(m, s.file_count);
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
  s.naks.on_marker(m, s.unicast.moved(), s.silent, now, [this] { return random(); });
}

void receiver_engine::handle_advert(session_rx& s, const wire::repair_advert& m, time_point) {
  if (s.state != session_rx::state_t::receiving || s.unicast.moved()) return;
  // Check everything before taking anything (a hint, but from the network).
  if (!nak_planner::advert_files_valid(m, s.files)) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  const fec_tracker* fec = m.fec_parity_size() > 0 && ensure_fec(s) ? s.parity.tracker() : nullptr;
  if (!s.naks.take_advert(m, s.files, fec)) m_stats.drops.add(errc::invalid_field);
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
  if (s.unicast.holds_transport()) m_sink.stop_unicast(s.id);
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
  m_sessions.retire(id, now + session_timeout(s));
  m_budget.release_session(id);
}

void receiver_engine::on_timer(time_point now) {
  m_sessions.expire(now);
  for (session_rx* s : m_sessions.snapshot()) {
    const duration timeout = session_timeout(*s);
    if (now - s->last_heard >= timeout) {
      if (s->silent && s->state == session_rx::state_t::completing) {
        close_session(*s, true, {}, now);  // relayed until the sender fell silent: complete
        continue;
      }
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
        if (const auto due = s->naks.due(); due && now >= *due) s->naks.discard_rounds();
        break;
      case session_rx::state_t::receiving:
        if (const auto at = s->unicast.next_attempt(); at && now >= *at) {
          start_unicast_attempt(*s, now);
        }
        if (const auto due = s->naks.due(); due && now >= *due) send_naks(*s, now);
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
        if (const auto at = s->unicast.next_attempt()) consider(*at);
        if (const auto due = s->naks.due()) consider(*due);
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
