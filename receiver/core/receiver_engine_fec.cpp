// receiver_engine: parity repairs (FEC blocks, lacks, decode requests).
#include "receiver/core/receiver_engine_parts.hpp"

#include <algorithm>

namespace mcdist::receiver {

using namespace engine_detail;

void receiver_engine::handle_parity(std::span<const std::byte> datagram, const endpoint& from,
                                    time_point now, time_point arrival) {
  wire::parity_header h;
  std::span<const std::byte> payload;
  if (auto ec = wire::parse_parity(datagram, h, payload)) {
    m_stats.drops.add(static_cast<errc>(ec.value()));
    return;
  }
  session_rx* s = receiving_session(h.session, from);
  if (!s) return;
  note_seq(*s, h.seq, now, arrival);
  // Parity is used once the manifest is complete; before, or in a session without FEC, it is
  // dropped like a block of an unknown file.
  if (!ensure_fec(*s)) {
    m_stats.drops.add(errc::stale);
    return;
  }
  auto& t = *s->parity.tracker();
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
    s->parity.parity_refused(h.fec_block);
    m_stats.drops.add(errc::storage_full);
    return;
  }
  ++m_stats.parity_blocks;
  s->parity.parity_kept();
  if (t.decodable(h.fec_block)) start_recovery(*s, h.fec_block, now);
}

bool receiver_engine::ensure_fec(session_rx& s) {
  if (s.parity.tracker()) return true;
  // The manifest must be complete (the layout needs every entry); registration need not be:
  // an eager sender's first blocks and parity arrive while the site registers.
  if (s.parity.k() == 0 || s.state == session_rx::state_t::manifest ||
      s.files.size() != s.file_count) {
    return false;
  }
  return s.parity.build(s.files, s.block_size, m_store.decodes_parity(), m_budget, s.id);
}

bool receiver_engine::start_recovery(session_rx& s, std::uint32_t fb, time_point now) {
  const session_id id = s.id;
  const auto& l = s.parity.tracker()->layout();
  // A file whose blocks have not started arriving gets its block map now, so what the decode
  // recovers for it is recorded (a map that does not fit fails the file).
  for (std::uint32_t i = 0, n = l.sources(fb); i < n; ++i) {
    const auto src = l.source(fb, i);
    if (s.files[src.file].state == file_rx::state_t::receiving &&
        !ensure_block_map(s, src.file, now) && find(id) != &s) {
      // Failing the file ended a silent session (its last open file): nothing of it is left.
      return false;
    }
  }
  auto req = s.parity.request(fb, s.files, s.channel, s.block_size);
  for (const auto& fs : req.sources) {
    if (fs.wanted) begin_file(s, fs.file.value);
  }
  m_store.recover(s.id, std::move(req));
  return true;
}

void receiver_engine::on_recovered(session_id id, std::uint32_t fb, std::error_code ec,
                                   time_point now) {
  session_rx* s = find(id);
  if (!s || !s->parity.decoding(fb)) return;
  if (ec) {
    s->parity.decode_failed(fb);
    if (m_log) {
      m_log->warn("session {}: decoding FEC block {} failed ({}); asking for its blocks instead",
                  s->name(), fb, ec.message());
    }
    return;
  }
  std::vector<std::uint32_t> completed;
  for (const auto [f, b] : s->parity.decoded(fb, s->files)) {
    auto& fr = s->files[f];
    const std::uint32_t len = block_length(fr.entry.size, s->block_size, b);
    fr.received.set(b);
    s->bytes_received += len;
    s->dirty = true;
    ++m_stats.blocks_recovered;
    m_stats.data_bytes += len;
    if (fr.received.all()) completed.push_back(f);
  }
  if (s->state == session_rx::state_t::manifest || s->state == session_rx::state_t::checking_held) {
    return;
  }
  for (const auto f : completed) {
    if (s->files[f].state == file_rx::state_t::receiving) file_data_complete(*s, f);
  }
  file_done(*s, now);
}

}  // namespace mcdist::receiver
