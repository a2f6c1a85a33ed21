// The in-flight cap of a site's SCTP associations (sctp_flight_cap.hpp): its delivery-rate and
// round-trip estimates, fed as usrsctp_stack feeds them.

#include "common/unicast/sctp_flight_cap.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>

using namespace mcdist::unicast;
using namespace std::chrono_literals;
// Virtual time: a fixed start, moved by the tests.
using clock_type = std::chrono::steady_clock;

namespace {

/// Deliveries of `bytes_per_ms` every millisecond from `from` for `ms` milliseconds, the cap
/// binding or not. @return the time after the last one
clock_type::time_point deliver(sctp_flight_cap& c, clock_type::time_point from, int ms,
                               std::uint64_t bytes_per_ms, bool bound) {
  for (int i = 0; i < ms; ++i) c.on_delivered(bytes_per_ms, bound, from + i * 1ms);
  return from + ms * 1ms;
}

}  // namespace

TEST_CASE("the flight cap is twice the measured bandwidth-delay product",
          "[unit][unicast][sctp_flight_cap]") {
  sctp_flight_cap c;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  REQUIRE(c.cap() == sctp_flight_cap::no_cap);  // nothing measured: no cap
  c.on_rtt(70ms, t0);
  REQUIRE(c.cap() == sctp_flight_cap::no_cap);
  // 125 bytes per ms = 1 Mbit/s for three rounds of 70 ms.
  deliver(c, t0, 3 * 70 + 5, 125, true);
  REQUIRE(c.bottleneck_bandwidth() == Approx(125'000.0).epsilon(0.02));
  REQUIRE(c.rtprop() == 70ms);
  // 2 x 125 kB/s x 70 ms = 17.5 kB.
  REQUIRE(static_cast<double>(c.cap()) == Approx(17'500.0).epsilon(0.02));
}

TEST_CASE("the flight cap never falls below its floor and uses at least the timer's round",
          "[unit][unicast][sctp_flight_cap]") {
  sctp_flight_cap c;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  c.on_rtt(100us, t0);           // loopback: the round is min_round, not 100 us
  deliver(c, t0, 50, 10, true);  // 10 kB/s
  REQUIRE(c.cap() == sctp_flight_cap::min_cap_bytes);
  // 100 MB/s over a 10 ms round: 2 MB, not 2 x 100 MB/s x 100 us = 20 kB.
  sctp_flight_cap fast;
  fast.on_rtt(100us, t0);
  deliver(fast, t0, 50, 100'000, true);
  REQUIRE(static_cast<double>(fast.cap()) == Approx(2'000'000.0).epsilon(0.05));
}

TEST_CASE("rounds the cap did not limit raise the estimate but never lower it",
          "[unit][unicast][sctp_flight_cap]") {
  sctp_flight_cap c;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  c.on_rtt(20ms, t0);
  auto t = deliver(c, t0, 100, 1000, true);  // 1 MB/s, the cap binding
  REQUIRE(c.bottleneck_bandwidth() == Approx(1e6).epsilon(0.06));
  // Little offered for a long time (app-limited): the estimate stays.
  t = deliver(c, t + 1ms, 400, 10, false);
  REQUIRE(c.bottleneck_bandwidth() == Approx(1e6).epsilon(0.06));
  // More offered without the cap binding: the estimate rises.
  t = deliver(c, t + 1ms, 100, 3000, false);
  REQUIRE(c.bottleneck_bandwidth() == Approx(3e6).epsilon(0.06));
  // The path slows while the cap binds: after bw_window_rounds rounds the old maximum is gone.
  t = deliver(c, t + 1ms, 20 * static_cast<int>(sctp_flight_cap::bw_window_rounds) + 40, 500, true);
  REQUIRE(c.bottleneck_bandwidth() == Approx(5e5).epsilon(0.06));
}

TEST_CASE("the round-trip floor follows the lowest sample and expires after its window",
          "[unit][unicast][sctp_flight_cap]") {
  sctp_flight_cap c;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  c.on_rtt(80ms, t0);
  c.on_rtt(70ms, t0 + 1s);
  c.on_rtt(200ms, t0 + 2s);  // a queue builds: the floor stays
  REQUIRE(c.rtprop() == 70ms);
  c.on_rtt(150ms, t0 + 1s + sctp_flight_cap::rtprop_window + 1ms);  // the 70 ms sample expired
  REQUIRE(c.rtprop() == 150ms);
  c.on_rtt(-5ms, t0 + sctp_flight_cap::rtprop_window * 2);  // nonsense is ignored
  REQUIRE(c.rtprop() == 150ms);
}

TEST_CASE("a path longer than max_rtprop gets no cap", "[unit][unicast][sctp_flight_cap]") {
  sctp_flight_cap c;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  c.on_rtt(590ms, t0);
  deliver(c, t0, 3 * 590 + 5, 192, true);  // Allman et al.'s 1.536 Mbit/s
  REQUIRE(c.bottleneck_bandwidth() > 0);
  REQUIRE(c.cap() == sctp_flight_cap::no_cap);
}
