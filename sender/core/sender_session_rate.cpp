// sender_session: --rate auto (TFMCC, RFC 4654; docs/design-notes.md "Rate auto"): the marker's
// rate fields, the receivers' rate reports, and the pacer following rate_controller.
#include "sender/core/sender_session_parts.hpp"

namespace mcdist::sender {

using namespace session_detail;

namespace {

/// Feedback rounds last this many GRTT (RFC 4654 section 3.6 uses a feedback delay of a few
/// RTTs so that the earliest reports suppress the rest) ...
inline constexpr int rate_round_grtts = 4;
/// ... and at least this long: markers, which carry the round, leave at most every 5 ms.
inline constexpr duration min_rate_round = std::chrono::milliseconds(20);
/// Reported RTTs are clamped to this (a forged RTT must not freeze the increase).
inline constexpr duration max_reported_rtt = std::chrono::seconds(15);

std::uint32_t to_us32(duration d) {
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(d).count(), 0, UINT32_MAX));
}

}  // namespace

void sender_session::update_auto_rate(time_point now) {
  if (!m_rate) return;
  const std::uint64_t r = m_rate->update(now, m_grtt.estimate());
  if (r == m_pacer.rate_bps()) return;
  if (m_log && m_rate->slow_start()) {
    m_log->debug("session {}: slow start: rate {:.1f} Mbit/s", m_cfg.session,
                 static_cast<double>(r) / 1e6);
  }
  apply_rate(r);
  // The bucket holds auto_catch_up_ms of the current rate, not of the ceiling (nor
  // burst_bytes): a burst of the ceiling's 5 ms at the start of pass 1 overflows a slow
  // bottleneck's queue, and the loss it causes is then read as the path's rate.
  const std::uint64_t datagram =
      m_cfg.block_size + wire::data_header_size + ip_udp_overhead + m_cfg.data_trailer_bytes;
  m_pacer.set_burst(std::max(4 * datagram, r / 8 / 1000 * auto_catch_up_ms));
}

void sender_session::fill_rate_fields(wire::marker& m, time_point now) {
  if (!m_rate) return;
  update_auto_rate(now);
  if (now >= m_rate_round_end) {
    ++m_rate_round;
    m_rate_round_lowest = 0;
    m_rate_round_end =
        now + std::max<duration>(m_grtt.estimate() * rate_round_grtts, min_rate_round);
  }
  m.set_rate_bps(m_pacer.rate_bps());
  m.set_rate_clr(m_rate->clr());
  m.set_rate_round(m_rate_round);
  m.set_rate_round_us(
      to_us32(std::max<duration>(m_grtt.estimate() * rate_round_grtts, min_rate_round)));
  m.set_rate_lowest_bps(m_rate_round_lowest);
  m.set_rate_slow_start(m_rate->slow_start());
}

void sender_session::handle_rate(receiver_state& r, const wire::nak& m, time_point now) {
  if (m.rate_report()) ++m_counters.rate_reports;
  if (m_rate && m.overrun_bps() > 0) {
    // The receiver's own socket buffer overruns (docs/design-notes.md "Receiver overrun").
    ++m_counters.overrun_reports;
    const duration rtt =
        std::min<duration>(std::chrono::microseconds(m.rtt_us()), max_reported_rtt);
    const bool in_slow_start = m_rate->slow_start();
    m_rate->on_overrun(r.rep.id, m.overrun_bps(), rtt, now);
    update_auto_rate(now);
    if (m_log && m_counters.overrun_reports == 1) {
      // The session's first: at info, so an operator sees which site cannot keep up.
      m_log->info(
          "session {}: receiver '{}' overruns its socket buffer at {:.1f} Mbit/s: {}rate {:.1f} "
          "Mbit/s, held below it",
          m_cfg.session, r.rep.id, static_cast<double>(m.overrun_bps()) / 1e6,
          in_slow_start ? "slow start ends, " : "", static_cast<double>(m_pacer.rate_bps()) / 1e6);
    }
    if (m_log) {
      m_log->debug(
          "session {}: receiver '{}' overruns at {:.1f} Mbit/s: cap {:.1f} (rising with RTT "
          "{:.2f} ms), rate {:.1f}",
          m_cfg.session, r.rep.id, static_cast<double>(m.overrun_bps()) / 1e6,
          static_cast<double>(m_rate->overrun_cap_bps()) / 1e6, to_ms(m_rate->overrun_cap_rtt()),
          static_cast<double>(m_pacer.rate_bps()) / 1e6);
    }
  }
  if (m_rate && m.receive_bps() > 0 && m.loss_ppb() == 0 && m.rate_bps() == 0) {
    // A receive rate in slow start (RFC 4654 section 3.4): slow start stays under twice the
    // lowest; it echoes in the round's lowest, for the other receivers' suppression.
    const duration rtt =
        std::min<duration>(std::chrono::microseconds(m.rtt_us()), max_reported_rtt);
    if (m_rate->slow_start() &&
        (m_rate_round_lowest == 0 || m.receive_bps() < m_rate_round_lowest)) {
      m_rate_round_lowest = m.receive_bps();
    }
    m_rate->on_receive_rate(r.rep.id, m.receive_bps(), rtt, now);
    update_auto_rate(now);
    if (m_log && m_rate->slow_start()) {
      m_log->debug(
          "session {}: receive rate from '{}': {:.1f} Mbit/s (RTT {:.2f} ms, base {:.2f}); slow "
          "start rate {:.1f} Mbit/s",
          m_cfg.session, r.rep.id, static_cast<double>(m.receive_bps()) / 1e6, to_ms(rtt),
          to_ms(m_rate->base_rtt(r.rep.id)), static_cast<double>(m_pacer.rate_bps()) / 1e6);
    }
    return;
  }
  if (!m_rate || (m.loss_ppb() == 0 && m.rate_bps() == 0)) return;
  if (m.loss_ppb() > 1'000'000'000 || m.rate_bps() == 0) {
    m_drops.add(errc::invalid_field);
    return;
  }
  const duration rtt = std::min<duration>(std::chrono::microseconds(m.rtt_us()), max_reported_rtt);
  if (m_rate_round_lowest == 0 || m.rate_bps() < m_rate_round_lowest) {
    m_rate_round_lowest = m.rate_bps();
  }
  const std::string before = m_rate->clr();
  const bool was_slow_start = m_rate->slow_start();
  const std::uint64_t rate_before = m_pacer.rate_bps();
  m_rate->on_feedback(r.rep.id, m.rate_bps(), rtt, true, now);
  update_auto_rate(now);
  // At info: slow start's end (its CLR may be the same receiver), a new CLR, a halving.
  if (m_log && (m_rate->clr() != before || was_slow_start != m_rate->slow_start() ||
                m_pacer.rate_bps() < rate_before / 2)) {
    m_log->info(
        "session {}: rate {:.1f} Mbit/s, limited by '{}' (reports {:.1f} Mbit/s, loss "
        "event rate {:.2e}, RTT {:.2f} ms)",
        m_cfg.session, static_cast<double>(m_pacer.rate_bps()) / 1e6, m_rate->clr(),
        static_cast<double>(m_rate->clr_rate_bps()) / 1e6, static_cast<double>(m.loss_ppb()) / 1e9,
        to_ms(rtt));
  } else if (m_log) {
    m_log->debug(
        "session {}: rate report from '{}': {:.1f} Mbit/s, loss event rate {:.2e}, RTT {:.2f} "
        "ms; rate {:.1f} -> {:.1f} Mbit/s",
        m_cfg.session, r.rep.id, static_cast<double>(m.rate_bps()) / 1e6,
        static_cast<double>(m.loss_ppb()) / 1e9, to_ms(rtt), static_cast<double>(rate_before) / 1e6,
        static_cast<double>(m_pacer.rate_bps()) / 1e6);
  }
}

void sender_session::forget_rate(const receiver_state& r, time_point now) {
  if (!m_rate) return;
  m_rate->forget(r.rep.id, now);
  update_auto_rate(now);
}

}  // namespace mcdist::sender
