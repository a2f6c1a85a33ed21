// receiver_engine: the unicast fallback (FALLBACK orders, attempts, unicast data).
#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

namespace {

/// The transport a FALLBACK order or an announce's unicast_start names (validated).
transport_kind transport_of(wire::fallback::transport_kind t) noexcept {
  return t == wire::fallback::TCP           ? transport_kind::tcp
         : t == wire::fallback::SCTP_KERNEL ? transport_kind::sctp_kernel
                                            : transport_kind::sctp_udp;
}

}  // namespace

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
  if (!wire::fallback::transport_kind_IsValid(m.transport()) || m.port() == 0 || m.port() > 65535 ||
      (!m.address().empty() && m.address().size() != 4 && m.address().size() != 16) ||
      m.connections() > max_fallback_connections ||
      m.token().size() != std::tuple_size_v<fallback_token>) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  fallback_token token;
  std::memcpy(token.data(), m.token().data(), token.size());
  if (is_unicast(s.path) && s.order.token == token && s.unicast_active) return;  // a repeat
  unicast_order o;
  o.transport = transport_of(m.transport());
  o.server = from;
  if (!m.address().empty()) {
    o.server.v6 = m.address().size() == 16;
    o.server.addr = {};
    std::memcpy(o.server.addr.data(), m.address().data(), m.address().size());
  }
  o.server.port = static_cast<std::uint16_t>(m.port());
  o.token = token;
  o.connections = m.connections();
  const bool first = !is_unicast(s.path);
  note_register_answer(s, now);
  s.path = unicast_path(o.transport);
  s.order = o;
  if (m_log && first) {
    m_log->info("session {}: the sender moves this receiver to unicast ({}) at {}: {}", s.name(),
                to_string(o.transport), o.server.to_string(), printable(m.reason()));
  }
  if (s.state == session_rx::state_t::registering) start_receiving(s, now);
  if (s.unicast_active) {
    // A new order while connected: the sender lost our session; connect again.
    m_sink.stop_unicast(s.id);
    s.unicast_active = false;
  }
  start_unicast_attempt(s, now);
}

void receiver_engine::note_unicast_start(session_rx& s, const wire::session_params& p,
                                         const endpoint& from) {
  const auto& u = p.unicast_start();
  // A silent site never connects anywhere (as for a FALLBACK order).
  if (s.silent) return;
  if (!wire::fallback::transport_kind_IsValid(u.transport()) || u.port() == 0 || u.port() > 65535 ||
      u.connections() > max_fallback_connections ||
      (!u.address().empty() && u.address().size() != (from.v6 ? 16u : 4u))) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  // Only ever the host the announce came from, which the site registers with anyway: an
  // announce cannot point the connections of a whole group at a third host (docs/security.md
  // "Unicast fallback"). A server elsewhere is reached when the FALLBACK order names it.
  if (!u.address().empty() &&
      std::memcmp(u.address().data(), from.addr.data(), u.address().size()) != 0)
    return;
  unicast_order o;
  o.transport = transport_of(u.transport());
  o.server = from;
  o.server.port = static_cast<std::uint16_t>(u.port());
  o.connections = u.connections();
  s.unicast_start = o;
  if (m_log) {
    m_log->debug("session {}: served over unicast from the start: {} at {}", s.name(),
                 to_string(o.transport), o.server.to_string());
  }
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
      const std::uint64_t end =
          std::min<std::uint64_t>(std::uint64_t{e} * s.block_size, fr.entry.size);
      wanted.push_back({file_index{f}, off, end - off});
      b = fr.received.find_clear(e);
    }
  }
  // Blocks asked for again arrive whole: forget their pieces.
  s.partial.clear();
  if (wanted.empty()) {
    s.next_unicast = time_point::max();  // nothing to fetch (a failed digest re-arms it)
    if (s.unicast_prepared) m_sink.stop_unicast(s.id);
    s.unicast_prepared = false;
    return;
  }
  ++s.unicast_attempts;
  s.unicast_active = true;
  s.unicast_prepared = false;  // the shell takes the prepared transport, or drops it
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
  if (!s || !is_unicast(s->path) || f.value >= s->files.size() || data.empty()) return;
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
  if (!s || !is_unicast(s->path)) return;
  s->unicast_active = false;
  if (s->state != session_rx::state_t::receiving || s->files_open == 0) return;
  bool missing = false;
  for (const auto& fr : s->files) {
    if (fr.state == file_rx::state_t::receiving && !fr.all_received()) missing = true;
  }
  if (!missing) return;  // everything is in; files are being stored
  if (s->unicast_attempts >= max_unicast_attempts) {
    close_session(
        *s, false,
        "unicast fallback failed " + std::to_string(s->unicast_attempts) + " times: " + why, now);
    return;
  }
  if (m_log) {
    m_log->warn("session {}: unicast transfer {} ({}); asking again for what is missing", s->name(),
                complete ? "ended with data missing" : "interrupted", printable(why));
  }
  s->next_unicast =
      now + std::min<duration>(unicast_backoff * s->unicast_attempts, std::chrono::seconds(10));
}

}  // namespace mcdist::receiver
