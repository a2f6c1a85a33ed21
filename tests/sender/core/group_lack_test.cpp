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

TEST_CASE("a large group's parity is raised to the expected largest lack at the first lacks",
          "[unit][sender][fec]") {
  group_lack g;
  // Small groups: no estimate, each lack is answered on its own.
  REQUIRE(g.on_lack(0, 7, 200, group_lack::min_group - 1, 0) == 0);
  // 10,000 receivers: the first lack already asks for the group's expected maximum, on top of
  // the parity sent before it (3 proactive parity blocks here).
  const auto q30 = group_lack::quantile(30, 10000, 2860);
  REQUIRE(g.on_lack(1, 30, 2860, 10000, 3) == 3 + q30);
  REQUIRE(q30 > 30);
  // A lossy receiver among the first three does not set the estimate (the median does), and
  // parity sent since does not move the base.
  REQUIRE(g.on_lack(1, 400, 2860, 10000, 20) == 3 + q30);
  REQUIRE(g.on_lack(1, 26, 2860, 10000, 40) == 3 + q30);
  // The fourth lack no longer moves it.
  REQUIRE(g.on_lack(1, 2, 2860, 10000, 50) == 3 + q30);
  // Never more than the FEC block's sources beyond the base.
  REQUIRE(g.on_lack(2, 90, 100, 10000, 0) == 100);
  // A new pass starts over, from the parity sent by then.
  g.new_pass();
  REQUIRE(g.on_lack(1, 1, 2860, 10000, 80) == 80 + group_lack::quantile(1, 10000, 2860));
}
