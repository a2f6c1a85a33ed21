// receiver_engine: --rate auto (TFMCC, RFC 4654; docs/design-notes.md "Rate auto"): the loss
// event rate of the multicast datagrams, this receiver's TCP-friendly rate, and its reports.
#include "common/tcp_throughput.hpp"
#include "receiver/core/receiver_engine_parts.hpp"

#include <spdlog/spdlog.h>

#include <limits>

namespace mcdist::receiver {

using namespace engine_detail;

namespace {

/// RTTs below this count as this in the rate equation (the sender's GRTT floor, grtt_min).
inline constexpr duration min_rate_rtt = std::chrono::milliseconds(1);

/// The RTT the rate is computed with: the registration's round trip when measured, else the
/// sender's GRTT (the group's largest: a conservative stand-in).
duration rate_rtt(duration register_rtt, duration grtt) {
  return std::max(register_rtt > duration::zero() ? register_rtt : grtt, min_rate_rtt);
}

/// A whole IP packet of a full block, bytes: what --rate counts.
std::uint32_t packet_bytes(std::uint32_t block_size) {
  return block_size +
         static_cast<std::uint32_t>(wire::data_header_size + packet::ipv4_udp_overhead);
}

}  // namespace

void receiver_engine::note_seq(session_rx& s, std::uint32_t seq, time_point now,
                               time_point arrival) {
  s.loss.set_packet_bytes(packet_bytes(s.block_size));
  const std::uint64_t events = s.loss.loss_events();
  const duration rtt = rate_rtt(s.register_rtt, s.grtt);
  // The first sequenced datagram after the kernel's drops is the one whose gap they made: a
  // marker, announce or digest read in between must not take the flag away from it.
  const bool overrun = m_drops_channel == s.channel;
  if (overrun) m_drops_channel.reset();
  const std::uint64_t overrun_lost = s.loss.overrun_lost();
  const std::uint64_t lost = s.loss.lost();
  s.loss.on_datagram(seq, arrival, rtt, overrun);
  if (s.loss.overrun_lost() != overrun_lost) {
    m_stats.overrun_lost += s.loss.overrun_lost() - overrun_lost;
    report_overrun(s, now);
  }
  if (s.loss.loss_events() != events) {
    const bool first = s.loss.loss_events() == 1;
    const double bits = packet_bytes(s.block_size) * 8.0;
    const double got_bps =
        std::max(s.loss.receive_rate_pps(), s.loss.recent_rate_pps(arrival)) * bits;
    if (!first && got_bps > 0) {
      // What got through up to this loss is the path's rate for this session now: a report
      // asking for more would keep the bottleneck's queue full (docs/design-notes.md "Rate
      // auto", "A loss event caps the report").
      s.loss_cap_bps = loss_estimator::first_rate_share * got_bps;
      s.loss_cap_until = now + loss_estimator::event_span_rtts * rtt;
    }
    const double rate = own_rate_bps(s, now);
    if (m_log && s.rate.enabled() && m_log->should_log(spdlog::level::debug)) {
      // What --rate auto's loss history saw (docs/design-notes.md "Rate auto"), for a rate that
      // went where it should not have; the receive rates (this datagram counted) are what the
      // first interval is synthesised from and what caps a later event's report.
      m_log->debug(
          "session {}: loss event {}: {} datagrams lost before sequence {}; loss event rate "
          "{:.2e}, rate {:.1f} Mbit/s (equation {:.1f}; receive rate {:.1f} Mbit/s over the RTT "
          "window, {:.1f} over the last milliseconds)",
          s.name(), s.loss.loss_events(), s.loss.lost() - lost, seq, s.loss.loss_event_rate(),
          rate / 1e6,
          tcp_friendly_rate_bps(packet_bytes(s.block_size), rtt, s.loss.loss_event_rate()) / 1e6,
          s.loss.receive_rate_pps() * bits / 1e6, s.loss.recent_rate_pps(arrival) * bits / 1e6);
    }
    s.rate.on_loss_event(first, rate, rtt, now);
  }
}

double receiver_engine::own_rate_bps(const session_rx& s, time_point now) const {
  const duration rtt = rate_rtt(s.register_rtt, s.grtt);
  if (s.loss.has_loss()) {
    const double x =
        tcp_friendly_rate_bps(packet_bytes(s.block_size), rtt, s.loss.loss_event_rate());
    // The cap holds two RTTs, then until the open interval reaches the mean one (1/p): until
    // then the loss history has not shown that more gets through.
    const bool capped =
        s.loss_cap_bps > 0 &&
        (now < s.loss_cap_until ||
         static_cast<double>(s.loss.open_interval()) * s.loss.loss_event_rate() < 1);
    return capped ? std::min(x, s.loss_cap_bps) : x;
  }
  if (!s.rate_slow_start) return std::numeric_limits<double>::infinity();
  // X_recv of RFC 4654 section 3.4: the sender's slow start goes no higher than twice it.
  return s.loss.slow_start_rate_pps(now) * packet_bytes(s.block_size) * 8;
}

void receiver_engine::on_rate_marker(session_rx& s, const wire::marker& m, time_point now) {
  if (s.state != session_rx::state_t::receiving || is_unicast(s.path)) return;
  s.overrun_assumed_bps = 0;
  s.rate_slow_start = m.rate_slow_start();
  const duration rtt = rate_rtt(s.register_rtt, s.grtt);
  double own = own_rate_bps(s, now);
  // No receive rate measured yet: nothing to report, as without a loss event.
  if (own <= 0) own = std::numeric_limits<double>::infinity();
  const double u = static_cast<double>((random() >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  s.rate.on_marker(
      m.rate_bps(), !m.rate_clr().empty() && m.rate_clr() == m_cfg.id, m.rate_round(),
      std::chrono::microseconds(std::min<std::uint32_t>(m.rate_round_us(), 10'000'000)),
      m.rate_lowest_bps(), own, rtt, u, now, s.rate_slow_start && !s.loss.has_loss(),
      !m.rate_clr().empty());
}

void receiver_engine::fill_rate(const session_rx& s, wire::nak& m, time_point now) const {
  // Only in --rate auto sessions: a fixed-rate session's NAKs stay as they were.
  if (!s.rate.enabled() || is_unicast(s.path)) return;
  const duration rtt = rate_rtt(s.register_rtt, s.grtt);
  if (!s.loss.has_loss()) {
    const double recv = s.rate_slow_start ? own_rate_bps(s, now) : 0;
    if (recv < 1) return;
    m.set_receive_bps(static_cast<std::uint64_t>(std::min(recv, 1e15)));
    m.set_rtt_us(static_cast<std::uint32_t>(std::min<std::int64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(rtt).count(), UINT32_MAX)));
    return;
  }
  const double p = s.loss.loss_event_rate();
  const double own = own_rate_bps(s, now);
  m.set_rate_bps(static_cast<std::uint64_t>(std::clamp(own, 1.0, 1e15)));
  m.set_loss_ppb(static_cast<std::uint32_t>(std::clamp(p * 1e9, 1.0, 1e9)));
  m.set_rtt_us(static_cast<std::uint32_t>(std::min<std::int64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(rtt).count(), UINT32_MAX)));
}

void receiver_engine::send_rate_report(session_rx& s, time_point now) {
  double own = own_rate_bps(s, now);
  if (own <= 0) own = std::numeric_limits<double>::infinity();
  if (!s.rate.fire(now, own)) return;
  send_rate_nak(s, 0, now);
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
  if (s.state != session_rx::state_t::receiving || is_unicast(s.path) || !s.rate.enabled()) return;
  const double pps = s.loss.sustained_rate_pps(now);
  if (pps <= 0) return;  // no window measured yet: no rate to report
  const double bps = pps * packet_bytes(s.block_size) * 8;
  // Bounded like the loss reports: at most one per RTT; and after the first, none while the
  // sender's rate (the latest marker's, or below wire::overrun_cap_share of the last report
  // until a marker says more) is under overrun_report_fraction of this rate: its cap holds and
  // the queue is draining. A group of overrunning sites then costs the sender a report or two
  // each per cut (one more per stale marker), not one per RTT while their buffers drain.
  const duration rtt = rate_rtt(s.register_rtt, s.grtt);
  if (s.overrun_reported && now - *s.overrun_reported < rtt) return;
  double sender = static_cast<double>(s.rate.sender_bps());
  if (s.overrun_assumed_bps > 0) sender = std::min(sender, s.overrun_assumed_bps);
  if (s.overrun_reported && sender < overrun_report_fraction * bps) return;
  s.overrun_reported = now;
  s.overrun_assumed_bps = wire::overrun_cap_share * bps;
  send_rate_nak(s, bps, now);
}

}  // namespace mcdist::receiver
