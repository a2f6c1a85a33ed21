#include "receiver/core/nak_scheduler.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

using mcdist::duration;
using mcdist::receiver::nak_scheduler;
using namespace std::chrono_literals;

namespace {

std::vector<std::pair<std::uint32_t, std::uint32_t>> pieces(const nak_scheduler& s,
                                                            std::uint32_t file, std::uint32_t from,
                                                            std::uint32_t to) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  s.for_each_unadvertised(file, from, to, [&](std::uint32_t a, std::uint32_t b) {
    out.emplace_back(a, b);
    return true;
  });
  return out;
}

}  // namespace

TEST_CASE("the NAK delay stays inside the window and is uniform without a group size",
          "[unit][receiver]") {
  nak_scheduler s;
  REQUIRE(s.draw_delay(12345) == duration::zero());  // no window yet
  s.on_marker(100ms, 0);
  std::mt19937_64 rng(1);
  double sum = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const auto d = s.draw_delay(rng());
    REQUIRE(d >= duration::zero());
    REQUIRE(d < 100ms);
    sum += mcdist::to_seconds(d);
  }
  REQUIRE(sum / n == Approx(0.05).margin(0.002));
  REQUIRE(s.draw_delay(0) == duration::zero());
  REQUIRE(s.draw_delay(~std::uint64_t{0}) < 100ms);
}

TEST_CASE("with a group size the delay follows the truncated exponential: few early, most late",
          "[unit][receiver]") {
  nak_scheduler s;
  s.on_marker(1s, 1000);
  std::mt19937_64 rng(2);
  const int n = 100000;
  int early = 0;  // in the first tenth of the window
  int late = 0;   // in the last tenth
  for (int i = 0; i < n; ++i) {
    const double t = mcdist::to_seconds(s.draw_delay(rng()));
    REQUIRE(t >= 0);
    REQUIRE(t < 1.0);
    early += t < 0.1;
    late += t >= 0.9;
  }
  // CDF F(t) = (e^(lambda t / T) - 1) / (e^lambda - 1), lambda = ln 1000 + 1 = 7.91:
  // F(0.1 T) = 1.2e-4, 1 - F(0.9 T) = 0.547.
  const double lambda = std::log(1000.0) + 1;
  const double f01 = std::expm1(lambda * 0.1) / std::expm1(lambda);
  const double f09 = std::expm1(lambda * 0.9) / std::expm1(lambda);
  REQUIRE(static_cast<double>(early) / n == Approx(f01).margin(0.0005));
  REQUIRE(static_cast<double>(late) / n == Approx(1 - f09).margin(0.01));
  // The earliest of 1000 draws (the whole group sharing a loss) comes early in the window:
  // the expected minimum is about T / lambda x ln(1 + (e^lambda - 1) / 1000) ~ 0.17 T.
  double min_sum = 0;
  for (int round = 0; round < 200; ++round) {
    double m = 1;
    for (int i = 0; i < 1000; ++i) m = std::min(m, mcdist::to_seconds(s.draw_delay(rng())));
    min_sum += m;
  }
  REQUIRE(min_sum / 200 < 0.25);
}

TEST_CASE("advertised blocks are left out of the pieces a receiver NAKs", "[unit][receiver]") {
  nak_scheduler s;
  REQUIRE(pieces(s, 0, 0, 100) == std::vector<std::pair<std::uint32_t, std::uint32_t>>{{0, 100}});
  s.advertise(3, 3, 0, 10, 5);   // [10, 15)
  s.advertise(3, 3, 0, 15, 5);   // touches: [10, 20)
  s.advertise(3, 3, 0, 40, 10);  // [40, 50)
  s.advertise(3, 3, 1, 0, 5);    // another file
  s.advertise(2, 3, 0, 60, 5);   // another pass: ignored
  REQUIRE(s.runs() == 3);
  REQUIRE(s.advertised(0, 10));
  REQUIRE(s.advertised(0, 19));
  REQUIRE_FALSE(s.advertised(0, 20));
  REQUIRE_FALSE(s.advertised(0, 60));
  REQUIRE(s.advertised(1, 4));
  using v = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
  REQUIRE(pieces(s, 0, 0, 100) == v{{0, 10}, {20, 40}, {50, 100}});
  REQUIRE(pieces(s, 0, 12, 45) == v{{20, 40}});
  REQUIRE(pieces(s, 0, 12, 18).empty());
  REQUIRE(pieces(s, 0, 45, 60) == v{{50, 60}});
  REQUIRE(pieces(s, 1, 0, 10) == v{{5, 10}});
  REQUIRE(pieces(s, 2, 0, 10) == v{{0, 10}});
  // Overlapping adverts merge into one run.
  s.advertise(3, 3, 0, 5, 50);
  REQUIRE(pieces(s, 0, 0, 100) == v{{0, 5}, {55, 100}});
  // Stopping early.
  int calls = 0;
  REQUIRE_FALSE(s.for_each_unadvertised(0, 0, 100, [&](std::uint32_t, std::uint32_t) {
    ++calls;
    return false;
  }));
  REQUIRE(calls == 1);
  // A rescan or a new pass forgets every hint.
  s.clear();
  REQUIRE(pieces(s, 0, 0, 100) == v{{0, 100}});
}

TEST_CASE("the advertised runs a receiver keeps are bounded", "[unit][receiver]") {
  nak_scheduler s;
  for (std::uint32_t i = 0; i < 3 * nak_scheduler::max_runs; ++i) s.advertise(1, 1, 0, 2 * i, 1);
  REQUIRE(s.runs() == nak_scheduler::max_runs);
  // A run that merges with one held is still taken.
  s.advertise(1, 1, 0, 1, 1);
  REQUIRE(s.advertised(0, 1));
  REQUIRE(s.runs() == nak_scheduler::max_runs - 1);
}

TEST_CASE("status slices partition the group", "[unit][receiver]") {
  const std::uint32_t slices = 7;
  std::vector<int> per_slice(slices);
  for (int i = 0; i < 7000; ++i) {
    const auto h = nak_scheduler::id_hash("site-" + std::to_string(i));
    int in = 0;
    for (std::uint32_t k = 0; k < slices; ++k) {
      if (nak_scheduler::in_status_sample(h, slices, k)) {
        ++in;
        ++per_slice[k];
      }
    }
    REQUIRE(in == 1);  // every receiver in exactly one slice
    REQUIRE(nak_scheduler::in_status_sample(h, 1, 0));
    REQUIRE(nak_scheduler::in_status_sample(h, 0, 5));
  }
  for (const int c : per_slice) REQUIRE(c > 800);  // about 1000 each
  // Stable: the same id always hashes the same (sender and receiver agree).
  REQUIRE(nak_scheduler::id_hash("dwd-offenbach") == nak_scheduler::id_hash("dwd-offenbach"));
  REQUIRE(nak_scheduler::id_hash("a") != nak_scheduler::id_hash("b"));
}

TEST_CASE("a FEC block's lack is covered once reported, or by the parity advertised pending",
          "[unit][receiver][fec]") {
  nak_scheduler s;
  // Nothing covers a FEC block before it is reported or advertised.
  REQUIRE_FALSE(s.parity_covered(3, 1));
  // Reported with 5 parity blocks needed in all: covered up to 5, not beyond (a lost source
  // or parity block that raises the need is reported again).
  s.cover_parity(1, 1, 3, 5);
  REQUIRE(s.parity_covered(3, 5));
  REQUIRE(s.parity_covered(3, 4));
  REQUIRE_FALSE(s.parity_covered(3, 6));
  // An advert of more pending parity raises it; one of less never lowers it.
  s.cover_parity(1, 1, 3, 9);
  REQUIRE(s.parity_covered(3, 9));
  s.cover_parity(1, 1, 3, 2);
  REQUIRE(s.parity_covered(3, 9));
  // Hints of another pass are ignored, and a new pass or a rescan forgets them.
  s.cover_parity(2, 1, 4, 9);
  REQUIRE_FALSE(s.parity_covered(4, 1));
  s.clear();
  REQUIRE_FALSE(s.parity_covered(3, 1));
}

TEST_CASE("the parity coverage a receiver keeps is bounded", "[unit][receiver][fec]") {
  nak_scheduler s;
  for (std::uint32_t fb = 0; fb < nak_scheduler::max_covered_fec_blocks + 10; ++fb) {
    s.cover_parity(1, 1, fb, 1);
  }
  REQUIRE(s.parity_covered(0, 1));
  REQUIRE_FALSE(s.parity_covered(nak_scheduler::max_covered_fec_blocks, 1));  // not kept
  // One held is still raised.
  s.cover_parity(1, 1, 0, 7);
  REQUIRE(s.parity_covered(0, 7));
}
