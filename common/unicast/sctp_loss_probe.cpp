#include "common/unicast/sctp_loss_probe.hpp"

#include "common/unicast/sctp_packet.hpp"

#include <algorithm>

namespace mcdist::unicast {

using sctp_wire::tsn_before;

namespace {

/// a <= b in serial arithmetic.
bool tsn_at_most(std::uint32_t a, std::uint32_t b) noexcept { return !tsn_before(b, a); }

}  // namespace

void sctp_loss_probe::on_sent(std::span<const std::byte> packet, time_point now) {
  sctp_wire::packet_summary p;
  // usrsctp's packets read whole; one that does not is not repaired from here.
  if (!sctp_wire::summarize(packet, p)) return;
  if (p.init) {
    // Our INIT or INIT ACK: the tag the peer's packets must carry (RFC 9260 section 8.5).
    m_local_tag = p.initiate_tag;
    m_have_tag = true;
  }
  if (!p.data) return;
  // TSNs at or below the highest sent: a retransmission by SCTP, of whole packets or of
  // chunks bundled with new data. The packets that held them count as sent again now.
  if (m_any_sent && tsn_at_most(p.first_tsn, m_high)) {
    const std::uint32_t old_last = tsn_before(p.last_tsn, m_high) ? p.last_tsn : m_high;
    for (auto& e : m_packets) {
      if (tsn_before(old_last, e.first_tsn)) break;
      if (tsn_before(e.last_tsn, p.first_tsn)) continue;
      e.last_sent = now;
      ++e.sends;
    }
  }
  if (m_any_sent && tsn_at_most(p.last_tsn, m_high)) return;
  const std::uint32_t first =
      m_any_sent && tsn_at_most(p.first_tsn, m_high) ? m_high + 1 : p.first_tsn;
  m_any_sent = true;
  m_high = p.last_tsn;
  if (m_packets.size() >= max_packets) return;
  sent_packet e;
  e.first_tsn = first;
  e.last_tsn = p.last_tsn;
  e.last_sent = now;
  if (!m_spare.empty()) {  // a buffer of an acknowledged copy: no allocation per packet
    e.bytes = std::move(m_spare.back());
    m_spare.pop_back();
  }
  e.bytes.assign(packet.begin(), packet.end());
  m_in_flight += e.bytes.size();
  m_packets.push_back(std::move(e));
}

void sctp_loss_probe::on_received(std::span<const std::byte> packet, time_point now) {
  sctp_wire::packet_summary p;
  // A packet that does not read whole is dropped by usrsctp too (its CRC32c cannot match a
  // packet the peer's SCTP built), and so is one without our tag (RFC 9260 section 8.5: an
  // off-path sender cannot guess the 32 bits): nothing of either is believed. This runs before
  // usrsctp checks the packet, so a forged SACK must not steer the repairs.
  if (!sctp_wire::summarize(packet, p) || !p.sack || !m_any_sent) return;
  if (!m_have_tag || p.verification_tag != m_local_tag) return;
  // An ack of a TSN never sent is not from our peer's SCTP (usrsctp drops it too): ignored.
  if (tsn_before(m_high, p.cum_tsn)) return;
  m_last_sack = now;
  if (!m_any_acked || tsn_before(m_cum, p.cum_tsn)) {
    m_cum = p.cum_tsn;
    if (!m_any_acked || tsn_before(m_high_acked, m_cum)) m_high_acked = m_cum;
    m_any_acked = true;
  }
  // The RTT sample: the newest packet this SACK acknowledges for the first time (cumulatively
  // or in a gap block) that was sent only once (Karn's rule; RFC 9260 section 6.3.1 C5). A
  // packet gap-acked before and now passed by the cumulative ack gives none: it arrived long
  // ago.
  bool sampled = false;
  time_point sample_sent{};
  auto candidate = [&](const sent_packet& e) {
    if (e.sends != 1 || e.ever_sacked) return;
    if (!sampled || sample_sent < e.last_sent) sample_sent = e.last_sent;
    sampled = true;
  };
  // Acknowledged cumulatively: dropped.
  while (!m_packets.empty() && tsn_at_most(m_packets.front().last_tsn, m_cum)) {
    candidate(m_packets.front());
    const sent_packet& e = m_packets.front();
    if (!e.sacked) m_in_flight -= e.bytes.size();
    if (!e.ever_sacked) m_delivered += e.bytes.size();
    if (m_spare.size() < max_spare) m_spare.push_back(std::move(m_packets.front().bytes));
    m_packets.pop_front();
  }
  if (p.gap_count != 0 || m_any_sacked) {
    // Gap blocks: each SACK reports all of them (RFC 9260 section 3.3.4), so `sacked` is set
    // afresh. A block beyond the highest TSN sent is ignored like a bad cumulative ack.
    m_any_sacked = false;
    for (auto& e : m_packets) {
      if (e.sacked) m_in_flight += e.bytes.size();
      e.sacked = false;
    }
    // The blocks ascend and are disjoint (sctp_wire::summarize), the copies ascend: one merge
    // pass, whatever a forged SACK holds. Blocks beyond the highest TSN sent end the list.
    std::size_t gaps = 0;
    while (gaps < p.gap_count && !tsn_before(m_high, p.gaps[gaps].last)) ++gaps;
    if (gaps != 0 && tsn_before(m_high_acked, p.gaps[gaps - 1].last))
      m_high_acked = p.gaps[gaps - 1].last;
    std::size_t g = 0;
    for (auto& e : m_packets) {
      while (g < gaps && tsn_before(p.gaps[g].last, e.first_tsn)) ++g;
      if (g == gaps) break;
      if (tsn_at_most(p.gaps[g].first, e.first_tsn) && tsn_at_most(e.last_tsn, p.gaps[g].last)) {
        candidate(e);
        if (!e.ever_sacked) m_delivered += e.bytes.size();
        m_in_flight -= e.bytes.size();
        e.sacked = true;
        e.ever_sacked = true;
        m_any_sacked = true;
      }
    }
  }
  if (sampled) sample_rtt(now - sample_sent);
}

void sctp_loss_probe::sample_rtt(duration r) noexcept {
  if (r < duration::zero()) return;
  m_latest_rtt = r;
  ++m_rtt_samples;
  // RFC 6298 section 2: SRTT = R at first, then 7/8 SRTT + 1/8 R.
  m_srtt = m_srtt == duration::zero() ? r : m_srtt - m_srtt / 8 + r / 8;
}

sctp_loss_probe::duration sctp_loss_probe::wait_for(const sent_packet& p,
                                                    duration base) const noexcept {
  return base * (1u << p.repeats);
}

std::vector<std::span<const std::byte>> sctp_loss_probe::due(time_point now) {
  std::vector<std::span<const std::byte>> out;
  if (m_srtt == duration::zero() || m_packets.empty()) return out;
  const duration window = std::max(m_srtt / 4, min_window);
  auto send_again = [&](sent_packet& e) {
    e.last_sent = now;
    ++e.sends;
    ++e.repeats;
    ++m_repairs;
    out.emplace_back(e.bytes);
  };
  if (m_any_acked && !tsn_before(m_high_acked, m_high)) {
    // Holes: everything sent is acknowledged or missing below an acknowledged TSN, so no SACK
    // is on its way to make SCTP's third miss indication.
    for (auto& e : m_packets) {
      if (out.size() >= max_repairs_per_call) break;
      if (e.sacked || e.repeats >= max_repeats) continue;
      if (now - e.last_sent >= wait_for(e, m_srtt + window)) send_again(e);
    }
    return out;
  }
  // Tail: the newest packet is unacknowledged long after it left and the SACKs have stopped.
  sent_packet& last = m_packets.back();
  if (last.last_tsn != m_high || last.sacked || last.repeats >= max_repeats) return out;
  if (now - last.last_sent >= wait_for(last, std::max(2 * m_srtt, min_window)) &&
      now - m_last_sack >= m_srtt) {
    send_again(last);
    ++m_tail_probes;
  }
  return out;
}

}  // namespace mcdist::unicast
