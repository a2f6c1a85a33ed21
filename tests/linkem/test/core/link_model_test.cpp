#include "tests/linkem/core/link_model.hpp"

#include <cmath>

#include <catch2/catch.hpp>

#include "tests/linkem/core/units.hpp"

using namespace mcdist::linkem;
using namespace std::chrono_literals;
using verdict = admission::verdict;

namespace {

link_params rate_limited(double bps, std::uint32_t queue_packets) {
  link_params p;
  p.rate_bps = bps;
  p.queue.packets = queue_packets;
  return p;
}

}  // namespace

TEST_CASE("a transparent direction delivers at arrival time", "[link]") {
  link_direction d(link_params{}, 1);
  CHECK(d.is_transparent());
  const auto a = d.admit(5ms, 1500);
  CHECK(a.result == verdict::deliver);
  CHECK(a.due == 5ms);
  CHECK(d.counters().get(link_counter::packets_in) == 1);
  CHECK(d.counters().get(link_counter::bytes_in) == 1500);
}

TEST_CASE("delay is added to every packet", "[link]") {
  link_params p;
  p.delay = 350ms;
  link_direction d(p, 1);
  CHECK(d.admit(0ms, 100).due == 350ms);
  CHECK(d.admit(1ms, 100).due == 351ms);
}

TEST_CASE("the rate limiter serialises back-to-back packets (dummynet pipe)", "[link][rate]") {
  // 1500 bytes at 12 Mbit/s take exactly 1 ms.
  auto p = rate_limited(12e6, 50);
  p.delay = 10ms;
  link_direction d(p, 1);
  for (int i = 0; i < 5; ++i) {
    const auto a = d.admit(0ms, 1500);
    REQUIRE(a.result == verdict::deliver);
    CHECK(a.due == std::chrono::milliseconds(10 + i + 1));
  }
  // An idle link starts transmitting at the arrival time.
  CHECK(d.admit(100ms, 1500).due == 111ms);
}

TEST_CASE("the drop-tail queue refuses packets beyond its length", "[link][rate]") {
  link_direction d(rate_limited(12e6, 5), 1);
  int delivered = 0;
  int dropped = 0;
  for (int i = 0; i < 10; ++i) {
    const auto a = d.admit(0ms, 1500);
    delivered += a.result == verdict::deliver ? 1 : 0;
    dropped += a.result == verdict::drop_queue ? 1 : 0;
  }
  CHECK(delivered == 5);
  CHECK(dropped == 5);
  CHECK(d.counters().get(link_counter::dropped_queue) == 5);
  // At 2.5 ms two packets have left (ends at 1 and 2 ms), three remain.
  CHECK(d.queue_length(2500us) == 3);
  // A new arrival then fits and leaves after the queued ones (5 ms) + 1 ms.
  const auto a = d.admit(2500us, 1500);
  CHECK(a.result == verdict::deliver);
  CHECK(a.due == 6ms);
}

TEST_CASE("packets arriving at the link rate never queue", "[link][rate]") {
  link_direction d(rate_limited(12e6, 1), 1);
  for (int i = 0; i < 1000; ++i) {
    const auto a = d.admit(std::chrono::milliseconds(i), 1500);
    REQUIRE(a.result == verdict::deliver);
    REQUIRE(a.due == std::chrono::milliseconds(i + 1));
  }
}

TEST_CASE("a byte-limited queue counts bytes", "[link][rate]") {
  link_params p = rate_limited(12e6, 0);
  p.queue.bytes = 4000;
  link_direction d(p, 1);
  CHECK(d.admit(0ms, 1500).result == verdict::deliver);
  CHECK(d.admit(0ms, 1500).result == verdict::deliver);
  CHECK(d.admit(0ms, 1500).result == verdict::drop_queue);  // 4500 > 4000
  CHECK(d.admit(0ms, 900).result == verdict::deliver);      // 3900 <= 4000
}

TEST_CASE("throughput of a saturated rate limiter equals its rate", "[link][rate]") {
  // Offer 2x the rate for 1 s of virtual time; what is admitted leaves at the link rate.
  const double rate = 100e6;
  link_direction d(rate_limited(rate, 50), 1);
  std::uint64_t bytes = 0;
  std::chrono::nanoseconds last{0};
  for (std::int64_t t = 0; t < 1'000'000'000; t += 60'000) {  // 1500 B per 60 us = 200 Mbit/s
    const auto a = d.admit(std::chrono::nanoseconds(t), 1500);
    if (a.result == verdict::deliver) {
      bytes += 1500;
      last = a.due;
    }
  }
  const double achieved =
      static_cast<double>(bytes) * 8 / (static_cast<double>(last.count()) / 1e9);
  CHECK(achieved == Approx(rate).epsilon(1e-3));
  CHECK(d.counters().get(link_counter::dropped_queue) > 8000);
}

TEST_CASE("lost packets still use the link (loss after queue and delay)", "[link][rate]") {
  link_params p = rate_limited(12e6, 2);
  p.loss_rate = 1.0;
  link_direction d(p, 1);
  CHECK(d.admit(0ms, 1500).result == verdict::drop_loss);
  CHECK(d.admit(0ms, 1500).result == verdict::drop_loss);
  // Both occupy the queue: the third is refused by the queue, not lost.
  CHECK(d.admit(0ms, 1500).result == verdict::drop_queue);
  CHECK(d.counters().get(link_counter::dropped_loss) == 2);
  CHECK(d.counters().get(link_counter::dropped_queue) == 1);
}

TEST_CASE("loss rate over a million packets is within its binomial interval", "[link][loss]") {
  for (const double rate : {1e-2, 1e-3}) {
    link_params p;
    p.loss_rate = rate;
    link_direction d(p, 7);
    const int n = 1'000'000;
    for (int i = 0; i < n; ++i) {
      d.admit(std::chrono::microseconds(i), 100);
    }
    const double lost = static_cast<double>(d.counters().get(link_counter::dropped_loss));
    INFO("rate " << rate << " lost " << lost);
    CHECK(std::abs(lost - n * rate) <= 4.5 * std::sqrt(n * rate * (1 - rate)));
  }
}

TEST_CASE("reordered packets are held back by the reorder delay", "[link]") {
  link_params p;
  p.delay = 5ms;
  p.reorder_rate = 1.0;
  p.reorder_delay = 2ms;
  link_direction d(p, 1);
  const auto a = d.admit(0ms, 100);
  CHECK(a.reordered);
  CHECK(a.due == 7ms);
  CHECK(d.counters().get(link_counter::reordered) == 1);
}

TEST_CASE("duplication marks the packet for a second copy", "[link]") {
  link_params p;
  p.duplicate_rate = 1.0;
  link_direction d(p, 1);
  const auto a = d.admit(0ms, 100);
  CHECK(a.duplicate);
  CHECK(d.counters().get(link_counter::duplicated) == 1);
}

TEST_CASE("enabling duplication does not change which packets are lost", "[link]") {
  link_params lossy;
  lossy.loss_rate = 0.1;
  link_params lossy_dup = lossy;
  lossy_dup.duplicate_rate = 0.3;
  link_direction a(lossy, 42);
  link_direction b(lossy_dup, 42);
  for (int i = 0; i < 10000; ++i) {
    const auto x = a.admit(std::chrono::microseconds(i), 100);
    const auto y = b.admit(std::chrono::microseconds(i), 100);
    REQUIRE((x.result == verdict::drop_loss) == (y.result == verdict::drop_loss));
  }
}

TEST_CASE("arrivals out of order are treated as simultaneous", "[link][rate]") {
  link_direction d(rate_limited(12e6, 50), 1);
  CHECK(d.admit(10ms, 1500).due == 11ms);
  // 5 us earlier than the last arrival: clamped, queued behind it.
  CHECK(d.admit(std::chrono::nanoseconds(9'995'000), 1500).due == 12ms);
}

TEST_CASE("parameters are validated", "[link]") {
  link_params p;
  p.loss_rate = 1.5;
  CHECK_THROWS_AS(p.validate(), config_error);
  p = link_params{};
  p.rate_bps = 1e6;
  p.queue = queue_limit{0, 100};
  CHECK_THROWS_AS(p.validate(), config_error);
  p = link_params{};
  p.loss_rate = 0.9;
  p.mean_burst = 1;
  CHECK_THROWS_AS(p.validate(), config_error);
  p = link_params{};
  p.delay = 350ms;
  p.loss_rate = 1e-3;
  CHECK_NOTHROW(p.validate());
  CHECK(p.describe() == "delay=350ms loss=0.001");
}
