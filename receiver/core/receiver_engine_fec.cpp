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

std::uint32_t receiver_engine::fec_sent(const session_rx& s, std::uint32_t fb,
                                        const nak_round& r) const {
  const auto& l = s.fec->layout();
  // Pass 1 sends every source in sequence order; later passes and the end of pass 1 are past
  // all of them.
  if (s.marker_pass > 1 || r.pass_end || r.to_file >= s.file_count) return l.sources(fb);
  // The marker stands at the next block to send. Parity goes out ahead of blocks, so once
  // the sweep has sent one block past a FEC block's last source, that FEC block's proactive
  // parity has gone out too: count its sources as sent only then, so the NAK is not for
  // parity already on its way.
  const std::uint64_t g = l.sequence_number(r.to_file, r.to_block);
  return l.sources_before(fb, g > 0 ? g - 1 : 0);
}

block_map receiver_engine::fec_mask(session_rx& s, const nak_round& r, std::uint32_t f,
                                    std::uint32_t from, std::uint32_t end,
                                    std::map<std::uint32_t, std::uint32_t>& lacks) {
  auto& t = *s.fec;
  block_map masked = s.files[f].received;
  for (std::uint32_t b = masked.find_clear(from); b < end; b = masked.find_clear(b + 1)) {
    const std::uint32_t fb = t.layout().locate(f, b).fec_block;
    if (t.decoding(fb)) {
      masked.set(b);  // being recovered now
      continue;
    }
    const std::uint32_t sent = fec_sent(s, fb, r);
    if (sent < t.layout().sources(fb) && !t.explicit_only(fb)) {
      // Pass 1 has more of it to send, then its proactive parity: the round drawn at the
      // marker that finishes it asks (fec_report).
      masked.set(b);
      continue;
    }
    const std::uint32_t lack = t.lack(fb, sent);
    if (!t.by_count(fb, lack)) continue;  // NAKed one by one
    masked.set(b);
    if (lack > 0) lacks[fb] = lack;  // 0: enough parity held, the decode follows
  }
  return masked;
}

void receiver_engine::fec_report(session_rx& s, const nak_round& r,
                                 const std::set<std::uint32_t>& due, nak_builder& naks,
                                 std::map<std::uint32_t, std::uint32_t>& lacks) {
  auto& t = *s.fec;
  // Blocks of FEC blocks parity cannot make whole, to name one by one: gathered per file over
  // every such FEC block first, so that each file's go in one file_nak as runs (the FEC blocks
  // of one interleaved stripe together are contiguous).
  std::map<std::uint32_t, std::vector<std::uint32_t>> named;  // file -> blocks
  const std::uint64_t seg_from = t.layout().sequence_number(r.from_file, r.from_block);
  const std::uint64_t seg_to = t.layout().sequence_number(r.to_file, r.to_block);
  for (const std::uint32_t fb : due) {
    // Where the last round's datagram cap stopped naming this FEC block's blocks, if it did.
    std::uint32_t first = 0;
    if (const auto it = s.fec_name_resume.find(fb); it != s.fec_name_resume.end()) {
      first = it->second;
      s.fec_name_resume.erase(it);
    }
    const std::uint32_t n = t.layout().sources(fb);
    if (fec_sent(s, fb, r) < n || t.decoding(fb)) continue;
    const std::uint32_t lack = t.lack(fb, n);
    if (lack == 0) continue;
    if (t.by_count(fb, lack)) {
      lacks[fb] = lack;
      continue;
    }
    // Parity cannot make it whole: its missing blocks one by one, but for those of this round's
    // own segment, which fec_mask judged already.
    for (std::uint32_t i = first; i < n; ++i) {
      const auto src = t.layout().source(fb, i);
      const std::uint64_t g = t.layout().sequence_number(src.file, src.block);
      if (g >= seg_from && g < seg_to) continue;
      const auto& fr = s.files[src.file];
      if (fr.state != file_rx::state_t::receiving || fr.received.size() != fr.blocks) continue;
      if (fr.received.test(src.block)) continue;
      if (s.feedback.advertised(src.file, src.block)) continue;  // nak_scheduler.hpp
      named[src.file].push_back(src.block);
    }
  }
  for (auto it = named.begin(); it != named.end(); ++it) {
    auto& blocks = it->second;
    std::sort(blocks.begin(), blocks.end());
    std::size_t done = 0;
    if (naks.add_blocks(it->first, blocks, done)) continue;
    // The datagram cap: the FEC blocks of the blocks left out report again at the next round,
    // from the first block left out. Blocks go out in (file, block) order, which is each FEC
    // block's source order, so what was named of a FEC block is a prefix of its sources.
    for (; it != named.end(); ++it, done = 0) {
      for (std::size_t j = done; j < it->second.size(); ++j) {
        const auto pos = t.layout().locate(it->first, it->second[j]);
        s.fec_deferred.insert(pos.fec_block);
        const auto [at, fresh] = s.fec_name_resume.emplace(pos.fec_block, pos.index);
        if (!fresh) at->second = std::min(at->second, pos.index);
      }
    }
    return;
  }
}

}  // namespace mcdist::receiver
