#pragma once
/// @file
/// Group round-trip time estimation (docs/architecture.md "Vocabulary"; RFC 5740 section 5.5.2,
/// NORM): the largest recent RTT among receivers. Increases take effect at once (a slow receiver
/// must not be NAK-timed-out); decreases are smoothed, so one fast sample does not shrink every
/// timer.

#include "common/time.hpp"

#include <algorithm>

namespace mcdist {

/// GRTT estimator. Feed RTT samples from timestamp echoes; read estimate().
class grtt_estimator {
 public:
  /// @param initial  estimate before any sample (NORM's default is 0.5 s)
  /// @param min, max clamps: timers built on GRTT stay sane on loopback and on broken paths
  grtt_estimator(duration initial, duration min, duration max) noexcept
      : m_estimate(std::clamp(initial, min, max)), m_min(min), m_max(max) {}

  /// Adds one RTT sample. Samples above the estimate raise it immediately; the peak of the
  /// samples since the last decay() is kept for it.
  void add_sample(duration rtt) noexcept {
    rtt = std::clamp(rtt, m_min, m_max);
    m_has_sample = true;
    m_peak = std::max(m_peak, rtt);
    if (rtt > m_estimate || !m_sampled) m_estimate = rtt;
    m_sampled = true;
  }

  /// Called once per probing interval: if every sample since the last call was below the
  /// estimate, move the estimate a quarter of the way down to their peak (the NORM decrease
  /// rule, 0.75 old + 0.25 new).
  void decay() noexcept {
    if (m_has_sample && m_peak < m_estimate) {
      m_estimate = std::max(m_min, (m_estimate * 3 + m_peak) / 4);
    }
    m_has_sample = false;
    m_peak = duration::zero();
  }

  duration estimate() const noexcept { return m_estimate; }
  /// True once any sample arrived.
  bool sampled() const noexcept { return m_sampled; }

 private:
  duration m_estimate;
  duration m_min;
  duration m_max;
  duration m_peak{};
  bool m_has_sample = false;
  bool m_sampled = false;
};

}  // namespace mcdist
