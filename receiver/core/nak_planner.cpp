#include "receiver/core/nak_planner.hpp"

#include "common/fec/fec_layout.hpp"
#include "common/ranges.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/core/fec_tracker.hpp"
#include "receiver/core/nak_builder.hpp"

#include <algorithm>

namespace mcdist::receiver {

void nak_planner::on_marker_params(const wire::marker& m, std::uint32_t file_count) noexcept {
  const auto window_us = std::min<std::uint64_t>(
      m.nak_backoff_us(),
      static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(max_window).count()));
  m_feedback.on_marker(std::chrono::microseconds(window_us), m.group_size());
  m_digests_through = std::min(m.digests_through(), file_count);
}

std::optional<nak_round> nak_planner::advance(const wire::marker& m, bool unicast, bool silent) {
  auto& p = m_progress;
  const bool newer =
      seq_after(m.pass(), p.pass) ||
      (m.pass() == p.pass && (m.file() > p.file || (m.file() == p.file && m.block() >= p.block)));
  if (!newer) return std::nullopt;
  if (m.pass() != p.pass) {
    // A new pass: NAK from its start again; rounds and hints of the old pass are void.
    p.pass_end = false;
    m_feedback.clear();
    m_rounds.clear();
    m_scan_file = 0;
    m_scan_block = 0;
  }
  p.pass = m.pass();
  p.file = m.file();
  p.block = m.block();
  if (seq_after(m.seq(), p.seq) || p.seq == 0) p.seq = m.seq();
  p.pass_end = p.pass_end || m.pass_end();
  // A silent site keeps the sender's progress (FEC blocks whose sources are all sent) and
  // schedules no NAK round.
  if (silent) return std::nullopt;
  nak_round r;
  // The sender is idle and asking again at the end of a pass we already answered: our NAKs
  // were lost, or its repairs were (or a repair it advertised). NAK everything still missing.
  const bool rescan = m.pass_end() && m_pass_end_answered == m.pass();
  if (rescan) m_feedback.clear();
  if (!rescan && !unicast) {
    r.from_file = m_scan_file;
    r.from_block = m_scan_block;
  } else if (unicast) {
    // Data comes over unicast; NAK only for digests and, when asked, as a sign of life.
    r.from_file = p.file;
    r.from_block = p.block;
  }
  r.to_file = p.file;
  r.to_block = p.block;
  r.pass_end = p.pass_end;
  r.status = m.status_request();
  r.status_slices = m.status_slices();
  r.status_slice = m.status_slice();
  const bool covers =
      r.from_file < r.to_file || (r.from_file == r.to_file && r.from_block < r.to_block);
  m_scan_file = p.file;
  m_scan_block = p.block;
  if (!covers && !r.status && !rescan) return std::nullopt;
  return r;
}

void nak_planner::schedule(const nak_round& r) {
  if (m_rounds.size() >= max_rounds) {
    // Bounded: the newest pending round takes this one's blocks too.
    auto& last = m_rounds.back();
    last.to_file = r.to_file;
    last.to_block = r.to_block;
    last.pass_end = last.pass_end || r.pass_end;
    last.status = last.status || r.status;
  } else {
    m_rounds.push_back(r);
  }
  if (!m_due || r.due < *m_due) m_due = r.due;
}

std::vector<nak_round> nak_planner::take_due(time_point now) {
  std::vector<nak_round> due;
  m_due.reset();
  for (std::size_t i = 0; i < m_rounds.size();) {
    if (m_rounds[i].due <= now) {
      due.push_back(m_rounds[i]);
      m_rounds.erase(m_rounds.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (!m_due || m_rounds[i].due < *m_due) m_due = m_rounds[i].due;
    ++i;
  }
  return due;
}

std::uint64_t nak_planner::blocks_missing(std::span<const file_rx> files, const nak_round& r) {
  std::uint64_t missing = 0;
  const auto file_count = static_cast<std::uint32_t>(files.size());
  const std::uint32_t last = std::min(r.to_file, file_count);
  for (std::uint32_t f = 0; f <= last && f < file_count; ++f) {
    const auto& fr = files[f];
    if (fr.state != file_rx::state_t::receiving) continue;
    const std::uint32_t behind = f == r.to_file ? std::min(r.to_block, fr.blocks) : fr.blocks;
    const std::uint32_t have = fr.received.size() == fr.blocks ? fr.received.count() : 0;
    missing += behind - std::min(behind, have);
  }
  return missing;
}

nak_round_out nak_planner::build_round(const nak_round& r, wire::nak header,
                                       std::span<const file_rx> files, const fec_tracker* fec,
                                       time_point now) {
  const auto file_count = static_cast<std::uint32_t>(files.size());
  header.set_blocks_missing(blocks_missing(files, r));
  nak_builder naks(header, m_max_datagrams);
  std::map<std::uint32_t, std::uint32_t> lacks;  // FEC block -> blocks it lacks
  const bool stopped = !add_missing(r, files, fec, naks, lacks, now);
  if (!stopped && r.pass_end) m_pass_end_answered = m_progress.pass;
  nak_round_out out;
  if (fec) {
    const auto due = fec_due(*fec, r, file_count);
    if (!due.empty()) fec_report(*fec, r, files, due, naks, lacks);
    out.lacks_covered = add_lacks(*fec, lacks, naks);
  }
  want_digests(files, naks);
  // Sampled status: with nothing to NAK, only the request's slice answers.
  naks.finish(r.status &&
              nak_scheduler::in_status_sample(m_id_hash, r.status_slices, r.status_slice));
  out.datagrams = std::move(naks.datagrams());
  return out;
}

bool nak_planner::add_missing(const nak_round& r, std::span<const file_rx> files,
                              const fec_tracker* fec, nak_builder& naks,
                              std::map<std::uint32_t, std::uint32_t>& lacks, time_point now) {
  const auto file_count = static_cast<std::uint32_t>(files.size());
  const std::uint32_t last_file = std::min(r.to_file, file_count);
  for (std::uint32_t f = r.from_file, b = r.from_block; f <= last_file && f < file_count;
       ++f, b = 0) {
    const auto& fr = files[f];
    if (fr.state != file_rx::state_t::receiving) continue;
    const std::uint32_t end = f == r.to_file ? std::min(r.to_block, fr.blocks) : fr.blocks;
    // Blocks that parity will repair are masked (received) and counted in `lacks` instead.
    const block_map masked = fec ? fec_mask(*fec, r, files, f, b, end, lacks) : block_map();
    const block_map& have = fec ? masked : fr.received;
    // Blocks the sender advertised as scheduled are left out (nak_scheduler.hpp).
    const bool all_in =
        m_feedback.for_each_unadvertised(f, b, end, [&](std::uint32_t from, std::uint32_t to) {
          if (naks.add_missing(f, have, from, to)) return true;
          b = from;
          return false;
        });
    if (!all_in) {
      // The datagram cap: the rest of this round goes out at the next timer.
      nak_round rest = r;
      rest.from_file = f;
      rest.from_block = b;
      rest.status = false;
      rest.due = now;
      m_rounds.insert(m_rounds.begin(), rest);
      m_due = now;
      return false;
    }
  }
  return true;
}

std::set<std::uint32_t> nak_planner::fec_due(const fec_tracker& t, const nak_round& r,
                                             std::uint32_t file_count) {
  // The round drawn at the marker that finishes a FEC block is the one that reports it, so its
  // backoff starts there; rounds drawn at later markers, whose timers may fire first, do not
  // (every site would NAK at once).
  std::set<std::uint32_t> due;
  due.swap(m_fec_deferred);
  if (m_progress.pass <= 1) {
    const auto& l = t.layout();
    const std::uint64_t from = l.sequence_number(r.from_file, r.from_block);
    const std::uint64_t to = l.sequence_number(r.to_file, r.to_block);
    // As fec_sent counts: a FEC block is complete once the marker is one block past its last
    // source, and every one is at the end of the sweep.
    const std::uint64_t to_done =
        r.pass_end || r.to_file >= file_count ? l.total_blocks() : (to > 0 ? to - 1 : 0);
    for (const auto fb : l.completed_in(from > 0 ? from - 1 : 0, to_done)) due.insert(fb);
  }
  return due;
}

std::uint64_t nak_planner::add_lacks(const fec_tracker& t,
                                     const std::map<std::uint32_t, std::uint32_t>& lacks,
                                     nak_builder& naks) {
  std::uint64_t covered = 0;
  for (auto it = lacks.begin(); it != lacks.end(); ++it) {
    // Reported already this pass, or covered by parity the sender advertised (nak_scheduler.hpp
    // "Parity coverage"): the parity on its way makes it whole.
    const std::uint64_t need = std::uint64_t{it->second} + t.parity_held(it->first);
    if (m_feedback.parity_covered(it->first, need)) {
      ++covered;
      continue;
    }
    if (naks.add_fec_lack(it->first, it->second)) {
      m_feedback.cover_parity(m_progress.pass, m_progress.pass, it->first, need);
      continue;
    }
    // The datagram cap: the rest are deferred, so the next round reports them (fec_report).
    for (; it != lacks.end(); ++it) m_fec_deferred.insert(it->first);
    break;
  }
  return covered;
}

void nak_planner::want_digests(std::span<const file_rx> files, nak_builder& naks) const {
  for (std::uint32_t i = 0;
       i < m_digests_through && !naks.full() && naks.digests_wanted() < max_digests_wanted; ++i) {
    const auto& fr = files[i];
    if (!fr.entry.digest && (fr.state == file_rx::state_t::awaiting_digest ||
                             fr.state == file_rx::state_t::receiving)) {
      naks.want_digest(i);
    }
  }
}

std::uint32_t nak_planner::fec_sent(const fec_tracker& t, std::uint32_t fb, const nak_round& r,
                                    std::uint32_t file_count) const {
  const auto& l = t.layout();
  // Pass 1 sends every source in sequence order; later passes and the end of pass 1 are past
  // all of them.
  if (m_progress.pass > 1 || r.pass_end || r.to_file >= file_count) return l.sources(fb);
  // The marker stands at the next block to send. Parity goes out ahead of blocks, so once
  // the sweep has sent one block past a FEC block's last source, that FEC block's proactive
  // parity has gone out too: count its sources as sent only then, so the NAK is not for
  // parity already on its way.
  const std::uint64_t g = l.sequence_number(r.to_file, r.to_block);
  return l.sources_before(fb, g > 0 ? g - 1 : 0);
}

block_map nak_planner::fec_mask(const fec_tracker& t, const nak_round& r,
                                std::span<const file_rx> files, std::uint32_t f, std::uint32_t from,
                                std::uint32_t end,
                                std::map<std::uint32_t, std::uint32_t>& lacks) const {
  const auto file_count = static_cast<std::uint32_t>(files.size());
  block_map masked = files[f].received;
  for (std::uint32_t b = masked.find_clear(from); b < end; b = masked.find_clear(b + 1)) {
    const std::uint32_t fb = t.layout().locate(f, b).fec_block;
    if (t.decoding(fb)) {
      masked.set(b);  // being recovered now
      continue;
    }
    const std::uint32_t sent = fec_sent(t, fb, r, file_count);
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

void nak_planner::fec_report(const fec_tracker& t, const nak_round& r,
                             std::span<const file_rx> files, const std::set<std::uint32_t>& due,
                             nak_builder& naks, std::map<std::uint32_t, std::uint32_t>& lacks) {
  const auto file_count = static_cast<std::uint32_t>(files.size());
  // Blocks of FEC blocks parity cannot make whole, to name one by one: gathered per file over
  // every such FEC block first, so that each file's go in one file_nak as runs (the FEC blocks
  // of one interleaved stripe together are contiguous).
  std::map<std::uint32_t, std::vector<std::uint32_t>> named;  // file -> blocks
  const std::uint64_t seg_from = t.layout().sequence_number(r.from_file, r.from_block);
  const std::uint64_t seg_to = t.layout().sequence_number(r.to_file, r.to_block);
  for (const std::uint32_t fb : due) {
    // Where the last round's datagram cap stopped naming this FEC block's blocks, if it did.
    std::uint32_t first = 0;
    if (const auto it = m_fec_name_resume.find(fb); it != m_fec_name_resume.end()) {
      first = it->second;
      m_fec_name_resume.erase(it);
    }
    const std::uint32_t n = t.layout().sources(fb);
    if (fec_sent(t, fb, r, file_count) < n || t.decoding(fb)) continue;
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
      const auto& fr = files[src.file];
      if (fr.state != file_rx::state_t::receiving || fr.received.size() != fr.blocks) continue;
      if (fr.received.test(src.block)) continue;
      if (m_feedback.advertised(src.file, src.block)) continue;  // nak_scheduler.hpp
      named[src.file].push_back(src.block);
    }
  }
  name_blocks(t, named, naks);
}

void nak_planner::name_blocks(const fec_tracker& t,
                              std::map<std::uint32_t, std::vector<std::uint32_t>>& named,
                              nak_builder& naks) {
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
        m_fec_deferred.insert(pos.fec_block);
        const auto [at, fresh] = m_fec_name_resume.emplace(pos.fec_block, pos.index);
        if (!fresh) at->second = std::min(at->second, pos.index);
      }
    }
    return;
  }
}

bool nak_planner::advert_files_valid(const wire::repair_advert& m,
                                     std::span<const file_rx> files) noexcept {
  for (const auto& fn : m.files()) {
    if (fn.file() >= files.size() ||
        for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                       files[fn.file()].blocks, [](std::uint32_t, std::uint32_t) {})) {
      return false;
    }
  }
  return true;
}

bool nak_planner::take_advert(const wire::repair_advert& m, std::span<const file_rx> files,
                              const fec_tracker* fec) {
  const std::uint32_t pass = m_progress.pass;
  // Parity pending per FEC block: (gap, pending) pairs, ascending, as nak.fec_lacks.
  if (m.fec_parity_size() > 0 && fec) {
    bool ok = m.fec_parity_size() % 2 == 0;
    std::uint64_t fb = 0;
    for (int i = 0; ok && i < m.fec_parity_size(); i += 2) {
      if (i > 0 && m.fec_parity(i) == 0) ok = false;  // not ascending
      fb += m.fec_parity(i);
      ok = ok && fb < fec->layout().fec_blocks() && m.fec_parity(i + 1) > 0;
    }
    if (!ok) return false;
    fb = 0;
    for (int i = 0; i < m.fec_parity_size(); i += 2) {
      fb += m.fec_parity(i);
      const auto f = static_cast<std::uint32_t>(fb);
      m_feedback.cover_parity(m.pass(), pass, f,
                              std::uint64_t{fec->parity_held(f)} + m.fec_parity(i + 1));
    }
  }
  for (const auto& fn : m.files()) {
    for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                   files[fn.file()].blocks, [&](std::uint32_t first, std::uint32_t count) {
                     m_feedback.advertise(m.pass(), pass, fn.file(), first, count);
                   });
  }
  return true;
}

}  // namespace mcdist::receiver
