#include "tests/linkem/core/loss_model.hpp"

#include <cmath>

#include <catch2/catch.hpp>

#include "tests/linkem/core/units.hpp"

using namespace mcdist::linkem;

namespace {

/// Half-width of a 4.5-sigma normal interval around the expected loss count: wide enough
/// that a correct model fails with probability ~1e-5 for any seed, narrow enough to
/// catch a rate off by a few percent at these sample sizes.
double tolerance(double n, double p) { return 4.5 * std::sqrt(n * p * (1 - p)); }

}  // namespace

TEST_CASE("Bernoulli loss matches its rate over a million packets", "[loss]") {
  for (const double p : {1e-2, 1e-3, 1e-4}) {
    std::mt19937_64 rng(12345);
    loss_process loss(p);
    const int n = 1'000'000;
    int lost = 0;
    for (int i = 0; i < n; ++i) {
      lost += loss.lose(rng) ? 1 : 0;
    }
    INFO("p = " << p << " lost = " << lost);
    CHECK(std::abs(lost - n * p) <= tolerance(n, p));
  }
}

TEST_CASE("lossless and certain loss processes are exact", "[loss]") {
  std::mt19937_64 rng(1);
  loss_process none;
  loss_process all(1.0);
  const auto before = rng;
  for (int i = 0; i < 1000; ++i) {
    REQUIRE_FALSE(none.lose(rng));
  }
  CHECK(rng == before);  // a lossless link consumes no randomness
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(all.lose(rng));
  }
}

TEST_CASE("the same seed gives the same loss pattern", "[loss]") {
  std::mt19937_64 a(99);
  std::mt19937_64 b(99);
  loss_process la(0.05);
  loss_process lb(0.05);
  for (int i = 0; i < 10000; ++i) {
    REQUIRE(la.lose(a) == lb.lose(b));
  }
}

TEST_CASE("Gilbert parameters follow from loss rate and mean burst", "[loss][gilbert]") {
  const auto p = gilbert_elliott_loss::from_rate_and_burst(0.01, 4);
  CHECK(p.r == Approx(0.25));
  CHECK(p.p == Approx(0.25 * 0.01 / 0.99));
  CHECK(p.loss_in_bad == 1.0);
  CHECK(p.loss_in_good == 0.0);
  CHECK_THROWS_AS(gilbert_elliott_loss::from_rate_and_burst(0.6, 1), config_error);
  CHECK_THROWS_AS(gilbert_elliott_loss::from_rate_and_burst(0.01, 0.5), config_error);
  CHECK_THROWS_AS(gilbert_elliott_loss::from_rate_and_burst(1.0, 4), config_error);
}

TEST_CASE("Gilbert–Elliott reproduces loss rate and mean burst length", "[loss][gilbert]") {
  const double rate = 0.01;
  const double burst = 5;
  std::mt19937_64 rng(2024);
  gilbert_elliott_loss ge(gilbert_elliott_loss::from_rate_and_burst(rate, burst), rng);
  CHECK(ge.stationary_loss_rate() == Approx(rate));
  const int n = 2'000'000;
  int lost = 0;
  int bursts = 0;
  bool prev = false;
  for (int i = 0; i < n; ++i) {
    const bool l = ge.lose(rng);
    lost += l ? 1 : 0;
    bursts += (l && !prev) ? 1 : 0;
    prev = l;
  }
  // Losses are correlated: the variance of the loss count is the binomial one times
  // (1 + rho) / (1 - rho) with rho = 1 - p - r the chain's lag-one correlation.
  const auto params = ge.params();
  const double rho = 1 - params.p - params.r;
  const double tol = tolerance(n, rate) * std::sqrt((1 + rho) / (1 - rho));
  INFO("lost " << lost << " bursts " << bursts);
  CHECK(std::abs(lost - n * rate) <= tol);
  // ~4000 bursts, geometric lengths with sd sqrt(1-r)/r ≈ 4.5: standard error ≈ 0.07.
  const double mean_burst = static_cast<double>(lost) / bursts;
  CHECK(mean_burst == Approx(burst).margin(0.35));
}

TEST_CASE("a loss process of Gilbert type with zero rate is lossless", "[loss][gilbert]") {
  std::mt19937_64 rng(5);
  loss_process lp(gilbert_elliott_loss::from_rate_and_burst(0.0, 3), rng);
  CHECK(lp.is_lossless());
  CHECK_FALSE(lp.lose(rng));
}
