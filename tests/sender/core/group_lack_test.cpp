#include "sender/core/group_lack.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using mcdist::sender::group_lack;

namespace {

/// P(X > q) for X Poisson with mean m, summed directly.
double tail(double m, std::uint32_t q) {
  double cdf = 0;
  double term = std::exp(-m);
  for (std::uint32_t i = 0; i <= q; ++i) {
    cdf += term;
    term *= m / (i + 1);
  }
  return 1 - cdf;
}

}  // namespace

TEST_CASE("the group quantile is the smallest count whose tail is at most 1 / N",
          "[unit][sender][fec]") {
  for (const double mean : {0.5, 2.0, 28.6, 41.0}) {
    for (const std::uint32_t n : {64u, 1000u, 10000u}) {
      const auto q = group_lack::quantile(mean, n, 100000);
      INFO("mean " << mean << " group " << n << " quantile " << q);
      REQUIRE(tail(mean, q) <= 1.0 / n);
      REQUIRE(q > 0);
      REQUIRE(tail(mean, q - 1) > 1.0 / n);
    }
  }
  // 10,000 receivers lacking 28.6 on average (2,860 blocks at 1e-2): about 50, the largest
  // single receiver's loss in the simulation (docs/benchmarks.md "Scale: parity repairs").
  const auto q = group_lack::quantile(28.6, 10000, 2860);
  REQUIRE(q >= 45);
  REQUIRE(q <= 55);
  // Capped at the FEC block's sources.
  REQUIRE(group_lack::quantile(28.6, 10000, 30) == 30);
  REQUIRE(group_lack::quantile(0, 10000, 30) == 0);
}

TEST_CASE("a large group's parity is raised to the expected largest lack from the first NAKs",
          "[unit][sender][fec]") {
  group_lack g;
  // No estimate before a rate sample, nor for a small group.
  REQUIRE(g.target(1, 2860, 10000, 0) == 0);
  g.on_nak(30, 1, 2860);
  REQUIRE(g.target(0, 200, group_lack::min_group - 1, 0) == 0);
  // 10,000 receivers: the first NAK already asks for the group's expected maximum, on top of
  // the parity sent of the FEC block when its first lack came (3 proactive parity blocks).
  // (A mean lack of 30 is 30 after the zero truncation's correction, to a millionth.)
  const auto q30 = group_lack::quantile(group_lack::untruncated_mean(30), 10000, 2860);
  REQUIRE(g.target(1, 2860, 10000, 3) == 3 + q30);
  REQUIRE(q30 > 30);
  // The rate is pooled over FEC blocks: a FEC block of half the size gets half the mean.
  REQUIRE(g.target(2, 1430, 10000, 0) ==
          group_lack::quantile(group_lack::untruncated_mean(30) / 2, 10000, 1430));
  // A lossy receiver among the first three does not set the rate (the median does), and
  // parity sent since does not move the base.
  g.on_nak(4000, 1, 2860);
  REQUIRE(g.target(1, 2860, 10000, 20) == 3 + q30);
  g.on_nak(26 * 3, 3, 2860 * 3);
  REQUIRE(g.target(1, 2860, 10000, 40) == 3 + q30);
  // The fourth NAK no longer moves it.
  g.on_nak(30, 1, 2860);
  REQUIRE(g.target(1, 2860, 10000, 50) == 3 + q30);
  // Never more than the FEC block's sources beyond the base.
  REQUIRE(g.target(3, 40, 10000, 0) <= 40);
  // A new pass starts over, from the parity sent by then.
  g.new_pass();
  REQUIRE(g.target(1, 2860, 10000, 80) == 0);
  g.on_nak(2, 1, 2860);
  const double lambda = group_lack::untruncated_mean(2);
  REQUIRE(g.target(1, 2860, 10000, 80) == 80 + group_lack::quantile(lambda, 10000, 2860));
}

TEST_CASE("the lacks a NAK reports are read as a zero-truncated Poisson sample",
          "[unit][sender][fec]") {
  // A NAK leaves out FEC blocks lacking nothing: its mean lack m is lambda / (1 - e^-lambda).
  for (const double lambda : {0.1, 0.5, 1.0, 2.0, 5.0, 30.0}) {
    const double truncated = lambda / -std::expm1(-lambda);
    INFO("lambda " << lambda << " truncated mean " << truncated);
    REQUIRE(std::abs(group_lack::untruncated_mean(truncated) - lambda) < 1e-6 * (1 + lambda));
  }
  REQUIRE(group_lack::untruncated_mean(1.0) == 0);
  REQUIRE(group_lack::untruncated_mean(0.5) == 0);
  // Every reported lack 1 (mean 1): no estimate beyond each lack itself.
  group_lack g;
  g.on_nak(5, 5, 1000);
  REQUIRE(g.target(0, 200, 10000, 0) == 0);
}
