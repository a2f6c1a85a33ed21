#include "tests/linkem/core/loss_model.hpp"

#include <string>

#include "tests/linkem/core/rng.hpp"
#include "tests/linkem/core/units.hpp"

namespace mcdist::linkem {

gilbert_elliott_loss::parameters gilbert_elliott_loss::from_rate_and_burst(double loss_rate,
                                                                           double mean_burst) {
  if (!(loss_rate >= 0 && loss_rate < 1)) {
    throw config_error("burst loss needs a loss rate in [0, 1), got " + std::to_string(loss_rate));
  }
  if (!(mean_burst >= 1)) {
    throw config_error("mean burst length must be >= 1 packet, got " + std::to_string(mean_burst));
  }
  parameters params;
  params.r = 1.0 / mean_burst;
  // Stationary P(Bad) = p / (p + r) = loss_rate  =>  p = r * loss / (1 - loss).
  params.p = params.r * loss_rate / (1.0 - loss_rate);
  if (params.p > 1) {
    throw config_error("loss rate " + std::to_string(loss_rate) + " with mean burst " +
                       std::to_string(mean_burst) +
                       " is infeasible for the Gilbert model (needs loss <= burst/(burst+1))");
  }
  params.loss_in_good = 0;
  params.loss_in_bad = 1;
  return params;
}

gilbert_elliott_loss::gilbert_elliott_loss(const parameters& params, std::mt19937_64& rng)
    : m_params(params) {
  const double denom = params.p + params.r;
  const double p_bad = denom > 0 ? params.p / denom : 0;
  m_bad = bernoulli(rng, p_bad);
}

bool gilbert_elliott_loss::lose(std::mt19937_64& rng) noexcept {
  if (m_bad) {
    if (bernoulli(rng, m_params.r)) {
      m_bad = false;
    }
  } else if (bernoulli(rng, m_params.p)) {
    m_bad = true;
  }
  return bernoulli(rng, m_bad ? m_params.loss_in_bad : m_params.loss_in_good);
}

double gilbert_elliott_loss::stationary_loss_rate() const noexcept {
  const double denom = m_params.p + m_params.r;
  const double p_bad = denom > 0 ? m_params.p / denom : 0;
  return p_bad * m_params.loss_in_bad + (1 - p_bad) * m_params.loss_in_good;
}

loss_process::loss_process(double rate)
    : m_kind(rate > 0 ? kind::bernoulli : kind::none), m_rate(rate) {}

loss_process::loss_process(const gilbert_elliott_loss::parameters& params, std::mt19937_64& rng)
    : m_kind(kind::gilbert_elliott), m_ge(params, rng) {
  m_rate = m_ge.stationary_loss_rate();
  if (m_rate == 0) {
    m_kind = kind::none;
  }
}

bool loss_process::lose(std::mt19937_64& rng) noexcept {
  switch (m_kind) {
    case kind::none: return false;
    case kind::bernoulli: return bernoulli(rng, m_rate);
    case kind::gilbert_elliott: return m_ge.lose(rng);
  }
  return false;
}

double loss_process::mean_loss_rate() const noexcept { return m_rate; }

}  // namespace mcdist::linkem
