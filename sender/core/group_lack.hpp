#pragma once
/// @file
/// How much parity a FEC block needs for the whole group, estimated from the first lacks the
/// sender hears in a pass (issue 12 item 2; docs/design-notes.md "Feedback bounded by distinct
/// losses"). A repair of a FEC block must reach the largest lack among the N receivers. Raised
/// one NAK at a time, each receiver whose lack beats every lack heard before it (a record) must
/// NAK, and in a random order there are about ln N of those per FEC block (the harmonic
/// number), each one a NAK and an advert's round trip. Instead the sender schedules, from the
/// first lacks, the expected maximum of N: receivers with independent losses lack about the
/// same binomial count, and the largest of N such counts lies near the 1 - 1/N quantile. The
/// advert then covers nearly every receiver at once (nak_scheduler.hpp "Parity coverage"), and
/// only those above it, a lossier few, NAK. Extra parity over the true maximum is what the
/// quantile overshoots by, a few blocks per FEC block.
///
/// The estimate: the median of the first lacks (up to three, so one lossy receiver among them
/// does not set it), taken as the mean of a Poisson count (a binomial over k sources with a
/// small loss rate), and its 1 - 1/N quantile. Groups of fewer than min_group receivers get
/// the lacks themselves: there are few records to save. Pure; memory: a map entry per FEC
/// block with lacks this pass, at most max_fec_blocks.

#include <array>
#include <cstdint>
#include <unordered_map>

namespace mcdist::sender {

/// The group-wide parity estimate of a session's FEC blocks for the current pass.
class group_lack {
 public:
  /// Receivers below which the estimate is not used (the lack itself is scheduled).
  static constexpr std::uint32_t min_group = 64;
  /// Lacks a FEC block's estimate is taken from.
  static constexpr std::size_t samples = 3;
  /// FEC blocks tracked per pass; beyond, lacks are scheduled as they come (never less parity).
  static constexpr std::size_t max_fec_blocks = 65536;

  /// A NAK reported that a receiver lacks `lack` blocks of FEC block `fb` (of `sources`
  /// sources), with `group` receivers still waiting and `sent` parity blocks of `fb` sent so
  /// far (parity_planner::sent_of).
  /// @return the parity of `fb` the group needs sent in all: the parity sent when the pass's
  ///         first lack of `fb` arrived plus the expected largest lack (at most `sources`); 0
  ///         for a group under min_group (each lack is answered on its own)
  std::uint64_t on_lack(std::uint32_t fb, std::uint32_t lack, std::uint32_t sources,
                        std::uint32_t group, std::uint32_t sent);
  /// A new pass: lacks of the last one no longer describe what receivers miss.
  void new_pass() noexcept { m_fec.clear(); }

  /// The smallest q with P(X > q) <= 1 / group for X Poisson with mean `mean`: about the
  /// expected largest of `group` such counts. Capped at `cap`.
  static std::uint32_t quantile(double mean, std::uint32_t group, std::uint32_t cap) noexcept;

 private:
  struct sample_set {
    std::array<std::uint32_t, samples> lack{};
    std::uint32_t count = 0;
    std::uint32_t estimate = 0;     ///< quantile of the median, recomputed while samples come
    std::uint32_t sent_before = 0;  ///< parity sent of it when the pass's first lack came
  };
  std::unordered_map<std::uint32_t, sample_set> m_fec;
};

}  // namespace mcdist::sender
