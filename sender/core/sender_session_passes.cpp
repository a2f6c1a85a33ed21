// The passes of a session: pass 1's start, the data each wake-up sends, the end of a pass and
// what follows it (the status marker, the next pass, the digests of files whose blocks have all
// gone). Part of sender_session (sender_session.hpp); split by concern like the other
// sender_session_*.cpp files.
#include "sender/core/sender_session.hpp"

#include "sender/core/sender_session_parts.hpp"

namespace mcdist::sender {

using namespace session_detail;

bool sender_session::digests_sendable() const noexcept {
  return m_phase == phase::transferring || m_phase == phase::waiting;
}

void sender_session::start_transfer(time_point now) {
  if (m_rate) m_rate->start(now);
  m_passes.want_all();
  start_pass(now);
}

void sender_session::start_pass(time_point now) {
  m_passes.start_pass();
  if (m_digests) m_digests->start_pass();
  m_advert.clear();  // the new sweep sends every wanted block; receivers drop old hints
  m_group_lack.new_pass();
  m_phase = phase::transferring;
  m_next_pass_at.reset();
  m_gate_waiting = false;
  m_gate_blocked = false;
  m_pass_sent = 0;
  m_pass_gated = 0;
  m_held_more = false;
  m_next_marker = now + marker_interval();
  if (m_log) {
    if (silent()) {
      m_log->info("session {}: silent pass {} of {} starts: {} blocks, {} parity blocks",
                  m_cfg.session, m_passes.pass(), m_cfg.silent_passes, m_passes.wanted(),
                  m_parity ? m_parity->scheduled() : 0);
    } else if (m_registration_open) {
      m_log->info("session {}: pass {} starts while registration is open: {} blocks", m_cfg.session,
                  m_passes.pass(), m_passes.wanted());
    } else {
      m_log->info("session {}: pass {} starts: {} blocks, {} receivers active", m_cfg.session,
                  m_passes.pass(), m_passes.wanted(), m_active);
    }
  }
}

std::size_t sender_session::next_data(time_point now, std::span<data_send> out,
                                      std::size_t max_parity) {
  if (m_phase != phase::transferring) return 0;
  if (m_digests) return next_data_planned(now, out);
  update_auto_rate(now);
  std::uint64_t allowance = m_pacer.allowance(now);
  std::size_t n = 0;
  std::size_t parity = 0;
  while (n < out.size()) {
    // Parity first, like prompt repairs: it answers NAKs, or completes a FEC block of pass 1.
    if (const auto pp = next_parity()) {
      if (parity == max_parity) break;
      const std::uint64_t wire_bytes =
          m_cfg.block_size + wire::data_header_size + ip_udp_overhead + m_cfg.data_trailer_bytes;
      if (wire_bytes > allowance) break;
      allowance -= wire_bytes;
      m_pacer.consume(now, wire_bytes);
      take_parity(*pp, out[n++]);
      ++parity;
      continue;
    }
    // Blocks NAKed behind the cursor go out first, while the pass still runs (repair starts
    // while data still flows), so a receiver's holes close within a round trip and its
    // in-order hashing does not stall until the next pass.
    const auto pick = next_pick();
    if (m_gate_waiting) break;
    if (!pick) {
      end_pass(now);
      break;
    }
    const std::uint32_t len = block_length(m_files[pick->file].size, m_cfg.block_size, pick->block);
    const std::uint64_t wire_bytes =
        len + wire::data_header_size + ip_udp_overhead + m_cfg.data_trailer_bytes;
    if (wire_bytes > allowance) break;
    allowance -= wire_bytes;
    m_pacer.consume(now, wire_bytes);
    take_source(*pick, len, out[n++]);
  }
  return n;
}

std::optional<parity_pick> sender_session::next_parity() {
  if (!m_parity) return std::nullopt;
  auto pp = m_parity->peek();
  if (!pp || !m_cfg.parity_gate) return pp;
  // Once round the queue at most: FEC blocks the relay cannot encode yet wait behind the others.
  for (std::size_t tries = m_parity->queued(); tries > 0; --tries) {
    if (m_cfg.parity_gate(pp->fec_block)) return pp;
    ++m_pass_gated;
    m_parity->defer();
    pp = m_parity->peek();
  }
  return std::nullopt;
}

std::optional<block_pick> sender_session::next_pick() {
  auto pick = m_passes.peek();
  if (!m_cfg.block_gate) return pick;
  m_gate_waiting = false;
  while (pick) {
    const gate_answer a = m_cfg.block_gate(pick->file, pick->block);
    if (a == gate_answer::send) return pick;
    // A prompt repair is behind the sweep, so a block it names that is not held was lost
    // upstream: it waits for a later pass like a skipped one.
    if (a == gate_answer::wait && !pick->prompt) {
      m_gate_waiting = true;
      return std::nullopt;
    }
    ++m_pass_gated;
    m_passes.skip(*pick);
    pick = m_passes.peek();
  }
  return pick;
}

void sender_session::on_available(time_point now) {
  m_gate_waiting = false;
  m_held_more = true;
  if (m_gate_blocked && m_phase == phase::waiting && !m_next_pass_at) {
    m_gate_blocked = false;
    m_next_pass_at = now + relay_gather;
  }
}

void sender_session::take_parity(const parity_pick& pp, data_send& d) {
  d = data_send{};
  d.parity = true;
  d.fec_block = pp.fec_block;
  d.parity_index = pp.index;
  d.length = m_cfg.block_size;
  d.seq = m_passes.take_seq();
  m_parity->take(pp, d.seq);
  ++m_pass_sent;
  ++m_data_datagrams;
  m_data_bytes += m_cfg.block_size;
}

void sender_session::take_source(const block_pick& pick, std::uint32_t len, data_send& d) {
  d = data_send{};
  d.file = file_index{pick.file};
  d.block = block_index{pick.block};
  d.seq = m_passes.take(pick);
  ++m_pass_sent;
  ++m_source_datagrams;
  const bool single = m_fec && m_cfg.fec_overhead == 0 && m_cfg.single_fec_block_parity > 0 &&
                      m_fec->fec_blocks() == 1;
  if (m_fec && (m_cfg.fec_overhead > 0 || single) && m_passes.pass() == 1 && !pick.prompt) {
    // The FEC block's last source went out in pass 1: its proactive parity follows.
    const auto pos = m_fec->locate(pick.file, pick.block);
    const std::uint32_t n_src = m_fec->sources(pos.fec_block);
    if (pos.index + 1 == n_src) {
      const auto count = single ? m_cfg.single_fec_block_parity
                                : static_cast<std::uint32_t>(std::ceil(
                                      m_cfg.fec_overhead * static_cast<double>(n_src) - 1e-9));
      m_parity->add(pos.fec_block, std::min(count, m_cfg.fec_max_parity));
      m_proactive_parity += std::min(count, m_cfg.fec_max_parity);
    }
  }
  d.offset = std::uint64_t{pick.block} * m_cfg.block_size;
  d.length = len;
  ++m_data_datagrams;
  m_data_bytes += len;
}

bool sender_session::take_next(data_send& d) {
  if (const auto pp = m_parity ? m_parity->peek() : std::nullopt) {
    take_parity(*pp, d);
    return true;
  }
  const auto pick = m_passes.peek();
  if (!pick) return false;
  take_source(*pick, block_length(m_files[pick->file].size, m_cfg.block_size, pick->block), d);
  return true;
}

void sender_session::end_pass(time_point now) {
  if (silent()) {
    if (m_log) {
      m_log->info("session {}: silent pass {} of {} done at {:.3f} s", m_cfg.session,
                  m_passes.pass(), m_cfg.silent_passes, to_seconds(now - m_start));
    }
    send_marker(now, true, false);
    if (plan_silent_pass()) {
      start_pass(now);
      return;
    }
    m_phase = phase::waiting;
    m_wait_start = now;
    m_silent_end_at = now + m_cfg.silent_linger;
    m_next_status = *m_silent_end_at;
    return;
  }
  if (m_log) {
    // NAKs still on their way after the pass-end marker can start another pass even when this
    // count is 0 (the pass-end marker asks every receiver for its status).
    m_log->info("session {}: pass {} done at {:.3f} s; {} blocks NAKed so far", m_cfg.session,
                m_passes.pass(), to_seconds(now - m_start), m_passes.wanted());
  }
  const bool more = m_passes.wanted() > 0 || (m_parity && m_parity->scheduled() > 0);
  // A relay's pass that passed over blocks it does not hold (lost upstream, their repair not
  // here yet) while it came to hold nothing new: the next pass would pass over them again, so
  // it waits for on_available instead of sweeping in vain. A pass that sent nothing asks no
  // status: no receiver has anything new to report.
  const bool gated = more && m_pass_gated > 0 && !m_held_more;
  send_marker(now, true, m_pass_sent > 0 || !gated);
  if (const auto why = m_fallback.after_passes(m_passes.pass())) {
    for (auto& r : m_receivers) {
      if (r->on_multicast() && r->last_nak_pass == m_passes.pass()) order_fallback(*r, *why, now);
    }
  }
  if (more && !gated && m_passes.pass() < m_cfg.max_passes) {
    start_pass(now);
    return;
  }
  m_gate_blocked = gated;
  m_phase = phase::waiting;
  m_wait_start = now;
  m_next_status = now + status_interval();
  check_done(now);
}

void sender_session::send_marker(time_point now, bool pass_end, bool status_request) {
  m_window.update();
  if (silent()) status_request = false;  // nobody answers a silent session
  wire::marker m;
  m.set_pass(m_passes.pass() + m_cfg.wire_pass_offset);
  m.set_file(pass_end ? static_cast<std::uint32_t>(m_files.size()) : m_passes.cursor_file());
  m.set_block(pass_end ? 0 : m_passes.cursor_block());
  m.set_pass_end(pass_end);
  m.set_sender_time_us(to_wire_us(now));
  if (m_cfg.own_echoes_only && (m_stamps.empty() || m_stamps.back() <= m.sender_time_us())) {
    if (m_stamps.size() == marker_stamps) m_stamps.pop_front();
    m_stamps.push_back(m.sender_time_us());
  }
  m.set_grtt_us(static_cast<std::uint32_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(m_grtt.estimate()).count()));
  m.set_seq(m_passes.seq());
  m.set_digests_through(m_digests_through);
  m.set_nak_backoff_us(static_cast<std::uint32_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(nak_window()).count()));
  m.set_status_request(status_request);
  m.set_group_size(feedback_group());
  fill_rate_fields(m, now);
  if (status_request) {
    const std::uint32_t slices = status_slices(m_active, status_interval(), m_cfg.receiver_timeout);
    if (slices > 1) {
      m.set_status_slices(slices);
      m.set_status_slice(m_status_round % slices);
    }
    ++m_status_round;
  }
  queue_multicast(now, encode(wire::msg_type::marker, m_cfg.session, m));
  m_next_marker = now + marker_interval();
}

void sender_session::send_digests(time_point now) {
  // 32-byte digest + file index + framing: about 40 bytes an entry.
  constexpr std::size_t per_datagram = (wire::control_budget - wire::header_size) / 40;
  std::sort(m_digest_queue.begin(), m_digest_queue.end());
  m_digest_queue.erase(std::unique(m_digest_queue.begin(), m_digest_queue.end()),
                       m_digest_queue.end());
  wire::digest_list list;
  for (std::size_t i = 0; i < m_digest_queue.size(); ++i) {
    const auto f = m_digest_queue[i];
    auto* d = list.add_digests();
    d->set_file(f);
    d->set_sha256(m_files[f].digest->data(), 32);
    if (list.digests_size() == static_cast<int>(per_datagram) || i + 1 == m_digest_queue.size()) {
      queue_multicast(now, encode(wire::msg_type::digest_list, m_cfg.session, list));
      list.Clear();
    }
  }
  m_digest_queue.clear();
}

void sender_session::on_digest(file_index file, const sha256_digest& digest, time_point now) {
  if (file.value >= m_files.size()) return;
  auto& f = m_files[file.value];
  if (f.digest) return;
  f.digest = digest;
  while (m_digests_through < m_files.size() && m_files[m_digests_through].digest) {
    ++m_digests_through;
  }
  for (auto& r : m_receivers) {
    for (const auto& [claimed_file, claimed] : r->pending_claims) {
      if (claimed_file == file.value && claimed == digest) mark_held(*r, file.value);
    }
  }
  m_digest_queue.push_back(file.value);
  if (digests_sendable()) send_digests(now);
}

}  // namespace mcdist::sender
