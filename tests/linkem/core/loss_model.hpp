// Packet loss processes: independent (Bernoulli) loss and the two-state Gilbert–Elliott
// burst-loss model.
#pragma once

#include <cstdint>
#include <random>

namespace mcdist::linkem {

/// Two-state Markov loss model after E. N. Gilbert, "Capacity of a burst-noise channel",
/// Bell Syst. Tech. J. 39 (1960) and E. O. Elliott, "Estimates of error rates for codes on
/// burst-noise channels", BSTJ 42 (1963); parameterised as in Linux netem's "gemodel"
/// (Salsano et al., "Definition of a general and intuitive loss model for packet networks
/// and its implementation in the Netem module", 2012).
///
/// Per packet the chain first moves (Good→Bad with probability p, Bad→Good with
/// probability r), then the packet is lost with probability loss_in_good (1-k in netem's
/// notation) or loss_in_bad (1-h) of the new state. With loss_in_good = 0 and
/// loss_in_bad = 1 (the simple Gilbert model) losses come in bursts whose length is
/// geometric with mean 1/r packets, and the stationary loss rate is p / (p + r).
class gilbert_elliott_loss {
 public:
  struct parameters {
    double p = 0;             ///< P(Good→Bad) per packet, in [0, 1]
    double r = 1;             ///< P(Bad→Good) per packet, in (0, 1]
    double loss_in_good = 0;  ///< loss probability in Good, in [0, 1]
    double loss_in_bad = 1;   ///< loss probability in Bad, in [0, 1]
  };

  /// Simple Gilbert model from the two numbers an operator thinks in.
  /// @param loss_rate long-run fraction of packets lost, in [0, 1)
  /// @param mean_burst mean number of consecutive packets lost per burst, >= 1
  /// @throws config_error if the pair is infeasible (p = r·loss/(1-loss) must be <= 1,
  ///         i.e. loss_rate <= 1/(1 + 1/mean_burst)).
  static parameters from_rate_and_burst(double loss_rate, double mean_burst);

  /// A chain that never leaves Good and never loses (p = 0, loss_in_good = 0).
  gilbert_elliott_loss() = default;

  /// @param rng draws for the initial state, which is taken from the stationary
  ///        distribution so that the first packets are not biased towards Good.
  gilbert_elliott_loss(const parameters& params, std::mt19937_64& rng);

  /// Advances the chain by one packet; true if that packet is lost. Two draws.
  bool lose(std::mt19937_64& rng) noexcept;

  /// Long-run loss fraction of these parameters.
  [[nodiscard]] double stationary_loss_rate() const noexcept;

  [[nodiscard]] bool in_bad_state() const noexcept { return m_bad; }
  [[nodiscard]] const parameters& params() const noexcept { return m_params; }

 private:
  parameters m_params;
  bool m_bad = false;
};

/// The loss process of one link direction: none, independent (Bernoulli) or
/// Gilbert–Elliott. A value type holding its own state; randomness comes from the
/// caller's engine.
class loss_process {
 public:
  /// No loss.
  loss_process() = default;
  /// Independent loss with probability rate per packet.
  explicit loss_process(double rate);
  /// Burst loss.
  loss_process(const gilbert_elliott_loss::parameters& params, std::mt19937_64& rng);

  /// True if the next packet is lost. Draws nothing when the process is lossless, so a
  /// lossless link consumes no randomness.
  bool lose(std::mt19937_64& rng) noexcept;

  [[nodiscard]] bool is_lossless() const noexcept { return m_kind == kind::none; }
  [[nodiscard]] double mean_loss_rate() const noexcept;

 private:
  enum class kind : std::uint8_t { none, bernoulli, gilbert_elliott };
  kind m_kind = kind::none;
  double m_rate = 0;
  gilbert_elliott_loss m_ge;
};

}  // namespace mcdist::linkem
