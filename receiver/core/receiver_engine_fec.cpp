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
    ++s->parity.refused;
    return;
  }
  ++m_stats.parity_blocks;
  ++s->parity.kept;
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
    const bool partial =
        (fr.state == file_rx::state_t::receiving || fr.state == file_rx::state_t::awaiting_digest ||
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
  req.channel = s.channel;
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
    if (fs.available) fs.path = fr.entry.path;
    if (fs.wanted) begin_file(s, src.file);
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
    ++s->parity.failures;
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
    ++s->parity.blocks;
    m_stats.data_bytes += len;
    if (fr.received.all()) completed.push_back(src.file);
  }
  s->fec->decoded(fb);
  ++s->parity.fec_blocks;
  if (s->state == session_rx::state_t::manifest || s->state == session_rx::state_t::checking_held) {
    return;
  }
  for (const auto f : completed) {
    if (s->files[f].state == file_rx::state_t::receiving) file_data_complete(*s, f);
  }
  file_done(*s, now);
}

}  // namespace mcdist::receiver
