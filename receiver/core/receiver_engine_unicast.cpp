// receiver_engine: the unicast fallback (FALLBACK orders, attempts, unicast data), routed to
// the session's unicast_fetch.
#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

void receiver_engine::handle_fallback(session_rx& s, const wire::fallback& m, const endpoint& from,
                                      time_point now) {
  if (m.receiver_id() != m_cfg.id) return;
  if (s.silent) {
    // A silent site never connects anywhere: an order (forged, or a sender's mistake) is void.
    ++m_stats.silent_suppressed;
    return;
  }
  if (s.state != session_rx::state_t::registering && s.state != session_rx::state_t::receiving) {
    return;
  }
  const auto o = unicast_fetch::read_order(m, from);
  if (!o) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  if (s.unicast.repeats(*o)) return;
  const bool first = !s.unicast.moved();
  note_register_answer(s, now);
  const bool running = s.unicast.take_order(*o);
  if (m_log && first) {
    m_log->info("session {}: the sender moves this receiver to unicast ({}) at {}: {}", s.name(),
                to_string(o->transport), o->server.to_string(), printable(m.reason()));
  }
  if (s.state == session_rx::state_t::registering) start_receiving(s, now);
  // A new order while connected: the sender lost our session; connect again.
  if (running) m_sink.stop_unicast(s.id);
  start_unicast_attempt(s, now);
}

void receiver_engine::note_unicast_start(session_rx& s, const wire::session_params& p,
                                         const endpoint& from) {
  // A silent site never connects anywhere (as for a FALLBACK order).
  if (s.silent) return;
  std::optional<unicast_order> o;
  if (unicast_fetch::read_start(p.unicast_start(), from, o)) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  if (!o) return;
  s.unicast.set_start(*o);
  if (m_log) {
    m_log->debug("session {}: served over unicast from the start: {} at {}", s.name(),
                 to_string(o->transport), o->server.to_string());
  }
}

void receiver_engine::start_unicast_attempt(session_rx& s, time_point) {
  if (s.state != session_rx::state_t::receiving || s.unicast.active()) return;
  auto wanted = unicast_fetch::wanted(s.files, s.block_size);
  if (wanted.empty()) {
    if (s.unicast.nothing_wanted()) m_sink.stop_unicast(s.id);
    return;
  }
  m_sink.start_unicast(s.id, s.unicast.begin_attempt(s.register_rtt), std::move(wanted));
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
  if (!s || !s->unicast.moved() || f.value >= s->files.size() || data.empty()) return;
  auto& fr = s->files[f.value];
  if (fr.state != file_rx::state_t::receiving || offset + data.size() > fr.entry.size) return;
  s->last_heard = now;
  if (!ensure_block_map(*s, f.value, now)) return;
  begin_file(*s, f.value);
  if (!m_store.write({s->id, f}, offset, data)) {
    m_stats.drops.add(errc::storage_full);  // asked for again after this attempt
    return;
  }
  s->unicast.on_bytes(f.value, fr, offset, data.size(), s->block_size,
                      [&](std::uint32_t b) { mark_block(*s, f.value, b, now); });
} catch (const std::bad_alloc&) {
  // Like on_datagram: the bytes are dropped (fetched again), the daemon goes on.
  m_stats.drops.add(errc::out_of_memory);
}

void receiver_engine::on_unicast_closed(session_id id, bool complete, const std::string& why,
                                        time_point now) {
  session_rx* s = find(id);
  if (!s || !s->unicast.moved()) return;
  s->unicast.on_closed();
  if (s->state != session_rx::state_t::receiving || s->files.open() == 0) return;
  const bool missing = std::any_of(s->files.begin(), s->files.end(), [](const file_rx& fr) {
    return fr.state == file_rx::state_t::receiving && !fr.all_received();
  });
  if (!missing) return;  // everything is in; files are being stored
  if (!s->unicast.schedule_retry(now)) {
    close_session(
        *s, false,
        "unicast fallback failed " + std::to_string(s->unicast.attempts()) + " times: " + why, now);
    return;
  }
  if (m_log) {
    m_log->warn("session {}: unicast transfer {} ({}); asking again for what is missing", s->name(),
                complete ? "ended with data missing" : "interrupted", printable(why));
  }
}

}  // namespace mcdist::receiver
