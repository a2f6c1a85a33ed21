#pragma once
/// @file
/// How much parity a FEC block needs for the whole group, estimated from the first NAKs the
/// sender hears in a pass (docs/design-notes.md "Feedback bounded by distinct
/// losses"). A repair of a FEC block must reach the largest lack among the N receivers. Raised
/// one NAK at a time, each receiver whose lack beats every lack heard before it (a record) must
/// NAK, and in a random order there are about ln N of those per FEC block (the harmonic
/// number), each one a NAK and an advert's round trip. Instead the sender schedules, from the
/// first NAKs, the expected maximum of N: receivers with independent losses lack about the same
/// binomial count, and the largest of N such counts lies near the 1 - 1/N quantile. The advert
/// then covers nearly every receiver at once (nak_scheduler.hpp "Parity coverage"), and only
/// those above it, a lossier few, NAK. Extra parity over the true maximum is what the quantile
/// overshoots by, a few blocks per FEC block.
///
/// The estimate: each of the pass's first NAKs gives a loss rate, its lacks over the sources of
/// the FEC blocks they are for (one NAK often reports several FEC blocks: a rate pooled over
/// them). A NAK leaves out the FEC blocks its receiver lacks nothing of, so the lacks it
/// carries are a zero-truncated Poisson sample: the rate is taken from the mean lambda whose
/// truncated mean lambda / (1 - e^-lambda) is the NAK's mean lack (without it, a mean lack of
/// 2 reads as 2.3 and every FEC block got one parity block too many at 1,000 receivers). The
/// median of the first three rates (so one lossy receiver among them does not set it) times a
/// FEC block's sources is the mean of a Poisson count (a binomial with a small loss rate), whose
/// 1 - 1/N quantile is what that FEC block gets on top of the parity sent of it when its first
/// lack of the pass came. Groups of fewer than min_group receivers get no
/// estimate: there are few records to save. Pure; memory: a map entry per FEC block with lacks
/// this pass, at most max_fec_blocks.

#include <array>
#include <cstdint>
#include <unordered_map>

namespace mcdist::sender {

/// The group-wide parity estimate of a session's FEC blocks for the current pass.
class group_lack {
 public:
  /// Receivers below which the estimate is not used (each lack is answered on its own).
  static constexpr std::uint32_t min_group = 64;
  /// NAKs whose loss rates the estimate is taken from.
  static constexpr std::size_t samples = 3;
  /// FEC blocks tracked per pass; beyond, lacks are answered on their own (never less parity).
  static constexpr std::size_t max_fec_blocks = 65536;

  /// A NAK of this pass reports `lacks` blocks lacking in all, over `fec_blocks` FEC blocks
  /// (each lacking at least one) of `sources` sources in all: one loss rate sample (the first
  /// `samples` of a pass are kept).
  void on_nak(std::uint64_t lacks, std::uint64_t fec_blocks, std::uint64_t sources) noexcept;

  /// The Poisson mean lambda whose zero-truncated mean lambda / (1 - e^-lambda) is `mean`
  /// (>= 1; 0 for a mean of 1 or less, where every reported count is 1).
  static double untruncated_mean(double mean) noexcept;

  /// The parity of FEC block `fb` (of `sources` sources) the group needs sent in all, with
  /// `group` receivers still waiting and `sent` parity blocks of it sent so far
  /// (parity_planner::sent_of): the parity sent when the pass's first lack of `fb` came plus
  /// the expected largest lack (at most `sources`). 0 for a group under min_group or before
  /// any rate sample.
  std::uint64_t target(std::uint32_t fb, std::uint32_t sources, std::uint32_t group,
                       std::uint32_t sent);

  /// A new pass: lacks of the last one no longer describe what receivers miss.
  void new_pass() noexcept {
    m_fec.clear();
    m_rates = 0;
    m_version = 0;
  }

  /// The smallest q with P(X > q) <= 1 / group for X Poisson with mean `mean`: about the
  /// expected largest of `group` such counts. Capped at `cap`.
  static std::uint32_t quantile(double mean, std::uint32_t group, std::uint32_t cap) noexcept;

 private:
  struct fec_state {
    std::uint32_t sent_before = 0;  ///< parity sent of it when the pass's first lack came
    std::uint32_t estimate = 0;     ///< quantile for the median rate of version `version`
    std::uint32_t version = 0;
  };
  /// The median of the rates held (the lower one of two).
  double median_rate() const noexcept;

  std::array<double, samples> m_rate{};  ///< ascending
  std::uint32_t m_rates = 0;
  std::uint32_t m_version = 0;  ///< bumped with each rate sample: estimates to recompute
  std::unordered_map<std::uint32_t, fec_state> m_fec;
};

}  // namespace mcdist::sender
