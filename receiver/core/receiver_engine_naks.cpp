// receiver_engine: NAK rounds and COMPLETE.
#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

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
  if (s.silent) {
    ++m_stats.silent_suppressed;
    return;
  }
  wire::nak header = nak_header(s, m_cfg.id, now);
  fill_rate(s, header, now);
  header.set_blocks_missing(blocks_missing(s, r));
  nak_builder naks(header, m_cfg.max_nak_datagrams);
  bool stopped = false;
  std::map<std::uint32_t, std::uint32_t> fec_lacks;  // FEC block -> blocks it lacks
  const bool fec = !is_unicast(s.path) && ensure_fec(s);
  const std::uint32_t last_file = std::min(r.to_file, s.file_count);
  for (std::uint32_t f = r.from_file, b = r.from_block; f <= last_file && f < s.file_count;
       ++f, b = 0) {
    auto& fr = s.files[f];
    if (fr.state != file_rx::state_t::receiving) continue;
    const std::uint32_t end = f == r.to_file ? std::min(r.to_block, fr.blocks) : fr.blocks;
    // Blocks that parity will repair are masked (received) and counted in fec_lacks instead.
    const block_map masked = fec ? fec_mask(s, r, f, b, end, fec_lacks) : block_map();
    const block_map& have = fec ? masked : fr.received;
    // Blocks the sender advertised as scheduled are left out (nak_scheduler.hpp).
    const bool all_in =
        s.feedback.for_each_unadvertised(f, b, end, [&](std::uint32_t from, std::uint32_t to) {
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
  // FEC blocks this round reports besides those fec_mask found: what the cap pushed out of the
  // last round, and in pass 1 the FEC blocks finished between this round's two markers. The
  // round drawn at the marker that finishes a FEC block is the one that reports it, so its
  // backoff starts there; rounds drawn at later markers, whose timers may fire first, do not
  // (every site would NAK at once).
  std::set<std::uint32_t> fec_due;
  if (fec) fec_due.swap(s.fec_deferred);
  if (fec && s.marker_pass <= 1) {
    const auto& l = s.fec->layout();
    const std::uint64_t from = l.sequence_number(r.from_file, r.from_block);
    const std::uint64_t to = l.sequence_number(r.to_file, r.to_block);
    // As fec_sent counts: a FEC block is complete once the marker is one block past its last
    // source, and every one is at the end of the sweep.
    const std::uint64_t to_done =
        r.pass_end || r.to_file >= s.file_count ? l.total_blocks() : (to > 0 ? to - 1 : 0);
    for (const auto fb : l.completed_in(from > 0 ? from - 1 : 0, to_done)) fec_due.insert(fb);
  }
  if (!fec_due.empty()) fec_report(s, r, fec_due, naks, fec_lacks);
  for (auto it = fec_lacks.begin(); it != fec_lacks.end(); ++it) {
    // Reported already this pass, or covered by parity the sender advertised (nak_scheduler.hpp
    // "Parity coverage"): the parity on its way makes it whole.
    const std::uint64_t need = std::uint64_t{it->second} + s.fec->parity_held(it->first);
    if (s.feedback.parity_covered(it->first, need)) {
      ++m_stats.fec_lacks_covered;
      continue;
    }
    if (naks.add_fec_lack(it->first, it->second)) {
      s.feedback.cover_parity(s.marker_pass, s.marker_pass, it->first, need);
      continue;
    }
    // The datagram cap: the rest are deferred, so the next round reports them (fec_report).
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

std::uint64_t receiver_engine::blocks_missing(const session_rx& s, const nak_round& r) const {
  std::uint64_t missing = 0;
  const std::uint32_t last = std::min(r.to_file, s.file_count);
  for (std::uint32_t f = 0; f <= last && f < s.file_count; ++f) {
    const auto& fr = s.files[f];
    if (fr.state != file_rx::state_t::receiving) continue;
    const std::uint32_t behind = f == r.to_file ? std::min(r.to_block, fr.blocks) : fr.blocks;
    const std::uint32_t have = fr.received.size() == fr.blocks ? fr.received.count() : 0;
    missing += behind - std::min(behind, have);
  }
  return missing;
}

void receiver_engine::send_complete(session_rx& s, time_point now) {
  if (s.silent) {
    ++m_stats.silent_suppressed;
    return;
  }
  wire::complete m;
  m.set_receiver_id(m_cfg.id);
  set_echo(m, s, now);
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

}  // namespace mcdist::receiver
