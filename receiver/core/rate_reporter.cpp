#include "receiver/core/rate_reporter.hpp"

#include "common/packet.hpp"
#include "common/tcp_throughput.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <cmath>
#include <limits>

namespace mcdist::receiver {

rate_reporter::rate_reporter(std::uint32_t block_size) noexcept
    : m_packet_bytes(block_size + static_cast<std::uint32_t>(wire::data_header_size +
                                                             packet::ipv4_udp_overhead)),
      m_loss(m_packet_bytes) {}

rate_reporter::seen rate_reporter::on_datagram(std::uint32_t seq, time_point arrival, duration rtt,
                                               bool overrun) noexcept {
  const std::uint64_t events = m_loss.loss_events();
  const std::uint64_t overrun_lost = m_loss.overrun_lost();
  const std::uint64_t lost = m_loss.lost();
  m_loss.on_datagram(seq, arrival, rtt, overrun);
  return {m_loss.overrun_lost() - overrun_lost, m_loss.lost() - lost,
          m_loss.loss_events() != events};
}

double rate_reporter::on_loss_event(time_point now, time_point arrival, duration rtt) noexcept {
  const bool first = m_loss.loss_events() == 1;
  const double bits = m_packet_bytes * 8.0;
  const double got_bps =
      std::max(m_loss.receive_rate_pps(), m_loss.recent_rate_pps(arrival)) * bits;
  if (!first && got_bps > 0) {
    // What got through up to this loss is the path's rate for this session now: a report
    // asking for more would keep the bottleneck's queue full (docs/design-notes.md "Rate
    // auto", "A loss event caps the report").
    m_cap_bps = loss_estimator::first_rate_share * got_bps;
    m_cap_until = now + loss_estimator::event_span_rtts * rtt;
  }
  const double rate = own_rate_bps(now, rtt);
  m_feedback.on_loss_event(first, rate, rtt, now);
  return rate;
}

double rate_reporter::own_rate_bps(time_point now, duration rtt) const noexcept {
  if (m_loss.has_loss()) {
    const double x = tcp_friendly_rate_bps(m_packet_bytes, rtt, m_loss.loss_event_rate());
    // The cap holds two RTTs, then until the open interval reaches the mean one (1/p): until
    // then the loss history has not shown that more gets through.
    const bool capped =
        m_cap_bps > 0 &&
        (now < m_cap_until ||
         static_cast<double>(m_loss.open_interval()) * m_loss.loss_event_rate() < 1);
    return capped ? std::min(x, m_cap_bps) : x;
  }
  if (!m_slow_start) return std::numeric_limits<double>::infinity();
  // X_recv of RFC 4654 section 3.4: the sender's slow start goes no higher than twice it.
  return m_loss.slow_start_rate_pps(now) * m_packet_bytes * 8;
}

void rate_reporter::on_marker(const wire::marker& m, bool is_clr, std::uint64_t random,
                              duration rtt, time_point now) noexcept {
  m_overrun_assumed_bps = 0;
  m_slow_start = m.rate_slow_start();
  double own = own_rate_bps(now, rtt);
  // No receive rate measured yet: nothing to report, as without a loss event.
  if (own <= 0) own = std::numeric_limits<double>::infinity();
  const double u = static_cast<double>((random >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  m_feedback.on_marker(
      m.rate_bps(), is_clr, m.rate_round(),
      std::chrono::microseconds(std::min<std::uint32_t>(m.rate_round_us(), 10'000'000)),
      m.rate_lowest_bps(), own, rtt, u, now, m_slow_start && !m_loss.has_loss(),
      !m.rate_clr().empty());
}

bool rate_reporter::fire(time_point now, duration rtt) noexcept {
  double own = own_rate_bps(now, rtt);
  if (own <= 0) own = std::numeric_limits<double>::infinity();
  return m_feedback.fire(now, own);
}

void rate_reporter::fill(wire::nak& m, time_point now, duration rtt) const noexcept {
  // Only in --rate auto sessions: a fixed-rate session's NAKs stay as they were.
  if (!m_feedback.enabled()) return;
  const auto rtt_us = static_cast<std::uint32_t>(std::min<std::int64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(rtt).count(), UINT32_MAX));
  if (!m_loss.has_loss()) {
    const double recv = m_slow_start ? own_rate_bps(now, rtt) : 0;
    if (recv < 1) return;
    m.set_receive_bps(static_cast<std::uint64_t>(std::min(recv, 1e15)));
    m.set_rtt_us(rtt_us);
    return;
  }
  const double p = m_loss.loss_event_rate();
  const double own = own_rate_bps(now, rtt);
  m.set_rate_bps(static_cast<std::uint64_t>(std::clamp(own, 1.0, 1e15)));
  m.set_loss_ppb(static_cast<std::uint32_t>(std::clamp(p * 1e9, 1.0, 1e9)));
  m.set_rtt_us(rtt_us);
}

std::optional<double> rate_reporter::take_overrun(time_point now, duration rtt) noexcept {
  if (!m_feedback.enabled()) return std::nullopt;
  const double pps = m_loss.sustained_rate_pps(now);
  if (pps <= 0) return std::nullopt;  // no window measured yet: no rate to report
  const double bps = pps * m_packet_bytes * 8;
  // Bounded like the loss reports: at most one per RTT; and after the first, none while the
  // sender's rate is under overrun_report_fraction of this rate. A group of overrunning sites
  // then costs the sender a report or two each per cut (one more per stale marker), not one
  // per RTT while their buffers drain.
  if (m_overrun_reported && now - *m_overrun_reported < rtt) return std::nullopt;
  double sender = static_cast<double>(m_feedback.sender_bps());
  if (m_overrun_assumed_bps > 0) sender = std::min(sender, m_overrun_assumed_bps);
  if (m_overrun_reported && sender < overrun_report_fraction * bps) return std::nullopt;
  m_overrun_reported = now;
  m_overrun_assumed_bps = wire::overrun_cap_share * bps;
  return bps;
}

}  // namespace mcdist::receiver
