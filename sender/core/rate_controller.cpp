#include "sender/core/rate_controller.hpp"

#include <algorithm>
#include <cmath>

namespace mcdist::sender {

rate_controller::rate_controller(rate_controller_config cfg) noexcept
    : m_cfg(cfg), m_rate(static_cast<double>(cfg.initial_bps)) {
  m_cfg.rate_min_bps = std::max<std::uint64_t>(m_cfg.rate_min_bps, 1);
  m_cfg.rate_max_bps = std::max(m_cfg.rate_max_bps, m_cfg.rate_min_bps);
  set_rate(m_rate);
  m_ss_step = m_rate;
}

void rate_controller::end_slow_start(time_point now) {
  m_slow_start = false;
  m_last = now;
  m_recv.clear();
  m_ss_clr.clear();
  m_ss_limit = 0;
}

void rate_controller::apply_receive_limit(time_point now) {
  m_ss_clr.clear();
  m_ss_limit = 0;
  for (auto it = m_recv.begin(); it != m_recv.end();) {
    if (now - it->second.second > m_cfg.report_lifetime) {
      it = m_recv.erase(it);
      continue;
    }
    if (m_ss_clr.empty() || 2 * it->second.first < m_ss_limit) {
      m_ss_clr = it->first;
      m_ss_limit = 2 * it->second.first;
    }
    ++it;
  }
  raise_to_limit();
}

void rate_controller::raise_to_limit() noexcept {
  // The limit holds the next doubling back; it never lowers the rate (a decrease is a loss
  // report's or an overrun's).
  const double allowed = m_ss_limit > 0 ? std::min(m_ss_step, m_ss_limit) : m_ss_step;
  if (allowed > m_rate) set_rate(allowed);
}

duration rate_controller::on_rtt_sample(std::string_view id, duration rtt) {
  auto it = m_base_rtt.find(id);
  if (it == m_base_rtt.end()) {
    it = m_base_rtt.emplace(std::string(id), rtt).first;
  } else if (rtt < it->second) {
    it->second = rtt;
  }
  if (m_cap > 0 && m_cap_owner == id) m_cap_rtt = std::max(it->second, m_cfg.min_rtt);
  return it->second;
}

duration rate_controller::base_rtt(std::string_view id) const noexcept {
  const auto it = m_base_rtt.find(id);
  return it == m_base_rtt.end() ? duration{} : it->second;
}

void rate_controller::on_receive_rate(std::string_view id, std::uint64_t recv_bps, duration rtt,
                                      time_point now) {
  if (!m_slow_start || recv_bps == 0) return;
  on_rtt_sample(id, rtt);
  auto it = m_recv.find(id);
  if (it == m_recv.end())
    it = m_recv.emplace(std::string(id), std::pair<double, time_point>{}).first;
  it->second = {static_cast<double>(recv_bps), now};
  if (m_ss_clr.empty() || m_ss_clr == id) {
    apply_receive_limit(now);  // the lowest may have risen: look at them all
  } else if (2 * it->second.first < m_ss_limit) {
    // A new lowest: no need to walk a large group's reports for each one (stale ones are
    // dropped at the next doubling's walk).
    m_ss_clr = it->first;
    m_ss_limit = 2 * it->second.first;
    raise_to_limit();
  }
}

void rate_controller::set_rate(double r) noexcept {
  m_rate = std::clamp(r, static_cast<double>(m_cfg.rate_min_bps),
                      static_cast<double>(m_cfg.rate_max_bps));
  if (!m_slow_start && (m_lowest == 0 || m_rate < m_lowest)) m_lowest = m_rate;
}

void rate_controller::start(time_point now) noexcept {
  if (m_started) return;
  m_started = true;
  m_last = now;
}

std::uint64_t rate_controller::clr_rate_bps() const noexcept {
  if (m_clr.empty()) return m_cfg.rate_max_bps;
  return static_cast<std::uint64_t>(m_reports.find(m_clr)->second.rate_bps);
}

double rate_controller::target() const noexcept {
  const auto clr = static_cast<double>(clr_rate_bps());
  return m_cap > 0 ? std::min(clr, m_cap) : clr;
}

void rate_controller::choose_clr(time_point now) {
  m_clr.clear();
  double lowest = 0;
  for (auto it = m_reports.begin(); it != m_reports.end();) {
    if (now - it->second.at > m_cfg.report_lifetime) {
      it = m_reports.erase(it);
      continue;
    }
    if (m_clr.empty() || it->second.rate_bps < lowest) {
      m_clr = it->first;
      lowest = it->second.rate_bps;
    }
    ++it;
  }
}

void rate_controller::on_feedback(std::string_view id, std::uint64_t rate_bps, duration rtt,
                                  bool has_loss, time_point now) {
  on_rtt_sample(id, rtt);
  if (!has_loss) return;  // no loss event: this receiver limits nothing yet
  // Slow start ends at the first loss report (RFC 4654 section 3.4).
  if (m_slow_start) end_slow_start(now);
  auto it = m_reports.find(id);
  if (it == m_reports.end()) it = m_reports.emplace(std::string(id), report{}).first;
  const bool was_clr = m_clr == id;
  const double old_target = target();
  it->second = {static_cast<double>(rate_bps), std::max(rtt, m_cfg.min_rtt), now};
  if (m_clr.empty() || static_cast<double>(rate_bps) < old_target) {
    m_clr = it->first;
  } else if (was_clr) {
    choose_clr(now);  // the CLR's rate rose: another receiver may now be the lowest
  }
  // Decreases are immediate (RFC 4654 section 3.5); increases go through update().
  if (target() < m_rate) {
    set_rate(target());
    m_last = now;
  }
}

void rate_controller::on_overrun(std::string_view id, std::uint64_t recv_bps, duration rtt,
                                 time_point now) {
  const double cap = std::max(m_cfg.overrun_factor * static_cast<double>(recv_bps),
                              static_cast<double>(m_cfg.rate_min_bps));
  if (m_slow_start) end_slow_start(now);
  // The cap rises with the reporter's base RTT: the RTT it reports now holds its own queue.
  const duration base = on_rtt_sample(id, rtt);
  if (m_cap > 0 && cap >= m_cap) return;
  m_cap = cap;
  m_cap_rtt = std::max(base, m_cfg.min_rtt);
  m_cap_owner = std::string(id);
  if (m_cap < m_rate) {
    set_rate(m_cap);
    m_last = now;
  }
}

void rate_controller::forget(std::string_view id, time_point now) {
  if (const auto b = m_base_rtt.find(id); b != m_base_rtt.end()) m_base_rtt.erase(b);
  if (const auto r = m_recv.find(id); r != m_recv.end()) {
    m_recv.erase(r);
    apply_receive_limit(now);
  }
  if (m_cap > 0 && m_cap_owner == id) {
    m_cap = 0;
    m_cap_owner.clear();
  }
  const auto it = m_reports.find(id);
  if (it == m_reports.end()) return;
  m_reports.erase(it);
  if (m_clr != id) return;
  choose_clr(now);
  if (target() < m_rate) {
    set_rate(target());
    m_last = now;
  }
}

void rate_controller::set_ceiling(std::uint64_t rate_max_bps) noexcept {
  m_cfg.rate_max_bps = std::max(rate_max_bps, m_cfg.rate_min_bps);
  m_rate = std::min(m_rate, static_cast<double>(m_cfg.rate_max_bps));
}

std::uint64_t rate_controller::update(time_point now, duration grtt) noexcept {
  if (!m_started || now <= m_last) return rate_bps();
  if (m_slow_start) {
    // Double once per RTT (RFC 4654 section 3.4), never past the ceiling, nor past twice the
    // lowest receive rate reported: a doubling not yet shown to get through waits for it.
    const duration r = std::max(grtt, m_cfg.min_rtt);
    for (int i = 0; i < 64 && now - m_last >= r && m_rate < static_cast<double>(m_cfg.rate_max_bps);
         ++i) {
      m_ss_step = 2 * m_rate;
      m_last += r;
      apply_receive_limit(now);
      if (m_rate < m_ss_step) {
        // Held back: the next doubling is a period after this one, not banked meanwhile.
        m_last = now;
        break;
      }
    }
    if (m_rate >= static_cast<double>(m_cfg.rate_max_bps)) m_last = now;
    return rate_bps();
  }
  if (m_cap > 0) {
    // The overrun cap rises by the increase limit with its reporter's RTT, and is gone once
    // it reaches the ceiling.
    const double r = std::chrono::duration<double>(m_cap_rtt).count();
    const double dt = std::chrono::duration<double>(now - m_last).count();
    m_cap += dt * m_cfg.packet_bytes * 8 / (r * r);
    if (m_cap >= static_cast<double>(m_cfg.rate_max_bps)) {
      m_cap = 0;
      m_cap_owner.clear();
    }
  }
  const double goal = target();
  if (m_rate < goal) {
    // At most one packet per RTT more per RTT: s / R^2 (bytes/s per second), in bit/s.
    // The overrun cap, when it binds, rises with its reporter's RTT; the path's rate with the
    // CLR's (or the GRTT's without one).
    const bool capped = m_cap > 0 && m_cap <= static_cast<double>(clr_rate_bps());
    const duration r_clr = capped          ? m_cap_rtt
                           : m_clr.empty() ? std::max(grtt, m_cfg.min_rtt)
                                           : m_reports.find(m_clr)->second.rtt;
    const double r = std::chrono::duration<double>(r_clr).count();
    const double dt = std::chrono::duration<double>(now - m_last).count();
    set_rate(std::min(goal, m_rate + dt * m_cfg.packet_bytes * 8 / (r * r)));
  }
  m_last = now;
  return rate_bps();
}

}  // namespace mcdist::sender
