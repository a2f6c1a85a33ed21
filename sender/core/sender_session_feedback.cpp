// sender_session: NAK feedback (the NAK window, suppression, repair adverts, NAK handling).
#include "sender/core/sender_session_parts.hpp"

namespace mcdist::sender {

using namespace session_detail;

duration sender_session::nak_window() const noexcept {
  return sender::nak_window(feedback_group(), m_grtt.estimate(), m_window.scale());
}

duration sender_session::collection_delay() const noexcept {
  // The NAKs one status request brings come back over the receivers' whole window: a pass
  // started at the first of them would end before the rest arrive, and every new pass makes
  // the receivers draw their timers again.
  return suppressing() ? nak_window() : nak_spread(feedback_group(), m_grtt.estimate());
}

bool sender_session::suppressing() const noexcept {
  return feedback_group() > suppression_threshold;
}

std::uint32_t sender_session::feedback_group() const noexcept {
  // Completed and failed receivers never NAK again: a loss can only be shared among the
  // receivers still active, so the backoff is drawn for them alone. Otherwise the last far
  // site of a closed group waits out a window sized for the whole group (lambda = ln 17 + 1
  // at 700 ms GRTT: 1.3 s) for each round, with nobody to suppress.
  return m_active;
}

void sender_session::track(receiver_state& r, bool heard) {
  auto& silence = r.relay ? m_relay_silence : m_silence;
  if (times_out(r)) {
    if (heard || !silence.contains(r.index)) silence.touch(r.index);
  } else {
    silence.remove(r.index);
  }
  if (r.on_unicast() && !r.unicast_started && !r.awaiting_listed) {
    r.awaiting_listed = true;
    m_awaiting_connection.push_back(r.index);
  }
}

void sender_session::send_advert(time_point now) {
  wire::repair_advert m;
  m.set_pass(m_passes.pass() + m_cfg.wire_pass_offset);
  const std::uint64_t blocks = m_advert.take(
      m, [this](std::uint32_t file, std::uint32_t first, std::uint32_t end, auto&& emit) {
        const auto& w = m_passes.wanted_blocks(file);
        for (std::uint32_t b = first; b < end;) {
          const std::uint32_t a = w.find_set(b);
          if (a >= end) return;
          const std::uint32_t e = std::min(end, w.find_clear(a));
          if (!emit(a, e)) return;
          b = e;
        }
      });
  const std::uint64_t fec_blocks =
      m_parity
          ? m_advert.take_parity(m, [this](std::uint32_t fb) { return m_parity->pending_of(fb); })
          : 0;
  m_advert.sent(now, std::clamp<duration>(m_grtt.estimate() / advert_interval_grtt_divisor,
                                          min_advert_interval, max_advert_interval));
  // Every block named and every parity block raised has left already: the repairs are the hint.
  if (blocks == 0 && fec_blocks == 0) return;
  ++m_counters.adverts;
  m_counters.advertised_blocks += blocks;
  queue_multicast(now, encode(wire::msg_type::repair_advert, m_cfg.session, m));
}

void sender_session::queue_digests(const wire::nak& m, time_point now) {
  for (const auto f : m.digests_wanted()) {
    if (f < m_files.size() && m_files[f].digest) m_digest_queue.push_back(f);
  }
  if (!m_digest_queue.empty() && digests_sendable()) send_digests(now);
}

void sender_session::handle_nak(const wire::nak& m, const endpoint& from, time_point now) {
  receiver_state* r = admitted(m.receiver_id(), from, now);
  if (!r || r->rep.state == receiver_report::state_t::missing) {
    m_drops.add(errc::not_registered);
    return;
  }
  if (r->on_unicast()) {
    // Its data comes over unicast; its NAKs only ask for digests and show it is alive. A NAK
    // with blocks means it lost its unicast state (a restart): order it again.
    r->last_heard = now;
    r->rep.address = from;  // a restarted receiver answers from a new port
    if (m.files_size() > 0 && r->unicast_started) {
      r->unicast_started = false;
      r->next_fallback = now;
    }
    ++(m.files_size() > 0 ? m_counters.naks : m_counters.status);
    track(*r, true);
    queue_digests(m, now);
    return;
  }
  ++(m.files_size() > 0 || m.fec_lacks_size() > 0 ? m_counters.naks : m_counters.status);
  if (!r->on_multicast()) {
    m_drops.add(errc::stale);  // completed or failed already
    return;
  }
  if (auto ec = read_nak(m, m_file_blocks, fec_layout(), m_nak)) {
    m_drops.add(static_cast<errc>(ec.value()));
    return;
  }
  r->last_heard = now;
  track(*r, true);
  r->rep.address = from;
  r->rep.bytes_received = m.bytes_received();
  ++r->rep.naks;
  sample_rtt(*r, m.echo_time_us(), m.hold_us(), now);
  handle_rate(*r, m, now);
  if (nak_moves_to_unicast(*r, m, now)) return;
  const std::uint64_t fresh_before = m_counters.nak_new_blocks;
  const std::uint64_t naked = schedule_repairs(m, now);
  r->rep.blocks_naked += naked;
  // Blocks asked for now go out in the next pass at the latest.
  if (naked > 0) r->last_nak_pass = m_passes.pass();
  queue_digests(m, now);
  if (m_phase == phase::waiting && naked > 0 && r->on_multicast()) {
    if (const auto why = m_fallback.after_passes(m_passes.pass())) {
      order_fallback(*r, *why, now);
      return;
    }
    if (m_passes.pass() >= m_cfg.max_passes) {
      fail_receiver(*r,
                    "still missing " + std::to_string(naked) + " blocks after " +
                        std::to_string(m_cfg.max_passes) + " passes",
                    now);
      return;
    }
    // A relay waiting for upstream repairs (m_gate_blocked) sweeps again for blocks newly
    // wanted, not for those it passed over already: they wait for on_available.
    const bool fresh = m_counters.nak_new_blocks > fresh_before;
    if ((m_passes.wanted() > 0 || (m_parity && m_parity->scheduled() > 0)) && !m_next_pass_at &&
        (fresh || !m_gate_blocked)) {
      m_next_pass_at = now + collection_delay();
    }
  }
}

bool sender_session::nak_moves_to_unicast(receiver_state& r, const wire::nak& m, time_point now) {
  // A NAK that takes its receiver over the NAK ratio moves it to unicast, which then carries
  // what it names: scheduled on multicast as well, those blocks would go to every site again.
  // (At 10,000 sites a site that missed the opening announce cycles names most of the set at
  // the end of pass 1: docs/benchmarks.md "Scale: parity repairs".) Only while some other
  // receiver on multicast is below the ratio: otherwise no one is spared its repairs.
  // Its whole need counts at its first NAK datagram (nak.blocks_missing, at most what was
  // sent): a round that names thousands of blocks over several datagrams would otherwise have
  // the first ones scheduled for everyone before the ratio is crossed.
  const std::uint64_t asked = m_nak.asked();
  const std::uint64_t naked_so_far =
      std::max(r.rep.blocks_naked + asked, std::min(m.blocks_missing(), m_data_datagrams));
  if (!m_fallback.over_nak_ratio(naked_so_far, m_data_datagrams)) return false;
  const auto why =
      m_fallback.nak_ratio_exceeded(naked_so_far, m_data_datagrams, another_below_nak_ratio(r));
  if (!why) return false;
  order_fallback(r, *why, now);
  if (!r.on_unicast()) return false;
  r.rep.blocks_naked += asked;
  m_counters.nak_blocks += asked;
  queue_digests(m, now);
  return true;
}

std::uint64_t sender_session::schedule_repairs(const wire::nak& m, time_point now) {
  std::uint64_t naked = 0;
  const bool advertise = suppressing();
  const bool advert_was_pending = m_advert.pending();
  std::uint64_t fresh = 0;
  for (const auto& run : m_nak.runs) {
    naked += run.count;
    m_added.clear();
    fresh += m_passes.nak(run.file, run.first, run.count, m.seen_seq(),
                          m_phase == phase::transferring, advertise ? &m_added : nullptr);
    for (const auto& [a, b] : m_added) m_advert.scheduled(run.file, a, b - a);
  }
  // The window is judged by blocks named only: one parity block serves every site's lack, so
  // lacks are shared by nature and always gain from suppression (and the group estimate below
  // makes the first lack schedule most of the parity, which would read as unshared losses).
  m_window.on_nak(naked, fresh);
  // FEC lacks: new parity. A NAK of this pass is a loss rate sample for the group estimate
  // (group_lack.hpp): a NAK of the last pass arriving now counts parity this pass has already
  // sent as missing.
  const bool this_pass = m.pass() == m_passes.pass() + m_cfg.wire_pass_offset;
  if (this_pass && !m_nak.lacks.empty()) {
    m_group_lack.on_nak(m_nak.lacked_blocks, m_nak.lacks.size(), m_nak.lacked_sources);
  }
  for (const auto& l : m_nak.lacks) {
    naked += l.lack;
    // This receiver's lack, against the parity on its way to it; and what the whole group is
    // expected to lack this pass, so that one advert covers nearly everyone.
    std::uint32_t more = m_parity->nak(l.fec_block, l.lack, m.seen_seq());
    if (this_pass) {
      more += m_parity->raise_sent_to(
          l.fec_block,
          m_group_lack.target(l.fec_block, l.sources, m_active, m_parity->sent_of(l.fec_block)));
    }
    fresh += more;
    if (more > 0 && advertise) m_advert.scheduled_parity(l.fec_block);
  }
  m_counters.nak_blocks += naked;
  m_counters.nak_new_blocks += fresh;
  // The first advert after a quiet spell leaves a moment after the NAK, once the prompt
  // repairs of this wake-up have left: it then names only blocks still waiting.
  if (!advert_was_pending && m_advert.pending()) m_advert.hold_until(now + min_advert_interval);
  return naked;
}

bool sender_session::another_below_nak_ratio(const receiver_state& r) {
  if (!m_below_scan_at || m_data_datagrams >= *m_below_scan_at + m_cfg.fallback_min_sample) {
    m_below_scan_at = m_data_datagrams;
    m_below_count = 0;
    m_below_one = nullptr;
    for (const auto& o : m_receivers) {
      if (!o->on_multicast() || m_fallback.over_nak_ratio(o->rep.blocks_naked, m_data_datagrams)) {
        continue;
      }
      m_below_one = o.get();
      if (++m_below_count == 2) break;
    }
  }
  return m_below_count >= 2 || (m_below_count == 1 && m_below_one != &r);
}

}  // namespace mcdist::sender
