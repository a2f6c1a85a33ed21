// receiver_engine: --rate auto (TFMCC, RFC 4654; docs/design-notes.md "Rate auto"): routes
// sequence numbers, markers and timers to the session's rate_reporter and sends the reports it
// asks for.
#include "common/tcp_throughput.hpp"
#include "receiver/core/receiver_engine_parts.hpp"

#include <spdlog/spdlog.h>

namespace mcdist::receiver {

using namespace engine_detail;

duration receiver_engine::rate_rtt(const session_rx& s) const {
  return rate_reporter::rtt_of(s.register_rtt, s.grtt);
}

void receiver_engine::note_seq(session_rx& s, std::uint32_t seq, time_point now,
                               time_point arrival) {
  const duration rtt = rate_rtt(s);
  // The first sequenced datagram after the kernel's drops is the one whose gap they made: a
  // marker, announce or digest read in between must not take the flag away from it.
  ++s.sequenced_received;
  const bool overrun = m_drops_channel == s.channel;
  if (overrun) m_drops_channel.reset();
  const auto seen = s.rate.on_datagram(seq, arrival, rtt, overrun);
  if (seen.overrun_lost > 0) {
    m_stats.overrun_lost += seen.overrun_lost;
    report_overrun(s, now);
  }
  if (!seen.loss_event) return;
  const double rate = s.rate.on_loss_event(now, arrival, rtt);
  if (m_log && s.rate.enabled() && m_log->should_log(spdlog::level::debug)) {
    // What --rate auto's loss history saw (docs/design-notes.md "Rate auto"), for a rate that
    // went where it should not have; the receive rates (this datagram counted) are what the
    // first interval is synthesised from and what caps a later event's report.
    const auto& loss = s.rate.loss();
    const double bits = s.rate.packet_bytes() * 8.0;
    m_log->debug(
        "session {}: loss event {}: {} datagrams lost before sequence {}; loss event rate "
        "{:.2e}, rate {:.1f} Mbit/s (equation {:.1f}; receive rate {:.1f} Mbit/s over the RTT "
        "window, {:.1f} over the last milliseconds)",
        s.name(), loss.loss_events(), seen.lost, seq, loss.loss_event_rate(), rate / 1e6,
        tcp_friendly_rate_bps(s.rate.packet_bytes(), rtt, loss.loss_event_rate()) / 1e6,
        loss.receive_rate_pps() * bits / 1e6, loss.recent_rate_pps(arrival) * bits / 1e6);
  }
}

void receiver_engine::on_rate_marker(session_rx& s, const wire::marker& m, time_point now) {
  if (s.state != session_rx::state_t::receiving || s.unicast.moved()) return;
  s.rate.on_marker(m, !m.rate_clr().empty() && m.rate_clr() == m_cfg.id, random(), rate_rtt(s),
                   now);
}

void receiver_engine::fill_rate(const session_rx& s, wire::nak& m, time_point now) const {
  if (!s.unicast.moved()) s.rate.fill(m, now, rate_rtt(s));
}

void receiver_engine::send_rate_report(session_rx& s, time_point now) {
  if (s.rate.fire(now, rate_rtt(s))) send_rate_nak(s, 0, now);
}

void receiver_engine::send_rate_nak(session_rx& s, double overrun_bps, time_point now) {
  if (s.silent) {
    ++m_stats.silent_suppressed;
    return;
  }
  wire::nak m = nak_header(s, m_cfg.id, now);
  m.set_rate_report(true);
  fill_rate(s, m, now);
  if (overrun_bps > 0) {
    m.set_overrun_bps(static_cast<std::uint64_t>(std::clamp(overrun_bps, 1.0, 1e15)));
    ++m_stats.overrun_reports;
  }
  m_sink.send(s.sender, encode(wire::msg_type::nak, s.id, m));
  ++m_stats.naks_sent;
}

void receiver_engine::on_socket_backlog(std::uint32_t channel, double fill, time_point now) {
  if (!(fill >= backlog_report_fill)) return;
  for (auto& [id, s] : m_sessions) {
    if (s->channel == channel) report_overrun(*s, now);
  }
}

void receiver_engine::report_overrun(session_rx& s, time_point now) {
  if (s.state != session_rx::state_t::receiving || s.unicast.moved()) return;
  if (const auto bps = s.rate.take_overrun(now, rate_rtt(s))) send_rate_nak(s, *bps, now);
}

}  // namespace mcdist::receiver
