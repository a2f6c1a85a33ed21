#include "sender/core/rate_controller.hpp"

#include <catch2/catch.hpp>

using mcdist::duration;
using mcdist::time_point;
using mcdist::sender::rate_controller;
using mcdist::sender::rate_controller_config;
using namespace std::chrono_literals;

namespace {

rate_controller_config config() {
  rate_controller_config c;
  c.rate_max_bps = 1'000'000'000;
  c.initial_bps = 10'000'000;
  c.packet_bytes = 1448;
  c.min_rtt = 1ms;
  return c;
}

constexpr duration grtt = 10ms;
const time_point t0{std::chrono::seconds(100)};

/// A controller whose slow start reached the ceiling by t0 (no loss reported yet).
rate_controller at_ceiling() {
  rate_controller rc(config());
  rc.start(t0 - 1s);
  REQUIRE(rc.update(t0 - 1ms, grtt) == 1'000'000'000);
  return rc;
}

}  // namespace

TEST_CASE("slow start doubles the rate once per GRTT up to the ceiling", "[unit][sender]") {
  rate_controller rc(config());
  REQUIRE(rc.update(t0, grtt) == 10'000'000);  // not started: the initial rate
  rc.start(t0);
  REQUIRE(rc.slow_start());
  REQUIRE(rc.update(t0 + 9ms, grtt) == 10'000'000);
  REQUIRE(rc.update(t0 + 10ms, grtt) == 20'000'000);
  REQUIRE(rc.update(t0 + 35ms, grtt) == 80'000'000);
  REQUIRE(rc.update(t0 + 10s, grtt) == 1'000'000'000);  // capped
  REQUIRE(rc.slow_start());
}

TEST_CASE("the rate falls at once when a receiver reports loss, and slow start ends",
          "[unit][sender]") {
  rate_controller rc(config());
  rc.start(t0);
  REQUIRE(rc.update(t0 + 30ms, grtt) == 80'000'000);
  rc.on_feedback("a", 200'000'000, 5ms, false, t0 + 31ms);  // no loss event: limits nothing
  REQUIRE(rc.slow_start());
  REQUIRE(rc.clr().empty());
  rc.on_feedback("a", 30'000'000, 5ms, true, t0 + 32ms);
  REQUIRE_FALSE(rc.slow_start());
  REQUIRE(rc.clr() == "a");
  REQUIRE(rc.rate_bps() == 30'000'000);
  REQUIRE(rc.update(t0 + 1s, grtt) == 30'000'000);  // the CLR's rate is the goal: no doubling
  REQUIRE(rc.lowest_bps() == 30'000'000);
}

TEST_CASE("the rate rises towards the CLR's rate by at most one packet per RTT per RTT",
          "[unit][sender]") {
  rate_controller rc = at_ceiling();
  rc.on_feedback("a", 30'000'000, 10ms, true, t0);
  REQUIRE(rc.rate_bps() == 30'000'000);
  rc.on_feedback("a", 100'000'000, 10ms, true, t0 + 1ms);  // its loss got rarer
  REQUIRE(rc.clr() == "a");
  REQUIRE(rc.rate_bps() == 30'000'000);  // increases are not immediate
  // s / R^2 = 1448 bytes x 8 / (10 ms)^2 = 115.84 Mbit/s per second, counted from the last
  // decrease (t0): 11.7 Mbit/s in 101 ms.
  const double step = 1448.0 * 8 / (0.01 * 0.01);
  const auto r1 = rc.update(t0 + 101ms, grtt);
  REQUIRE(static_cast<double>(r1) <= 30e6 + step * 0.101 + 1);
  REQUIRE(r1 > 30'000'000);
  // Steps add up the same whatever the update cadence, and stop at the CLR's rate.
  for (int i = 2; i <= 10; ++i) rc.update(t0 + 1ms + 100ms * i, grtt);
  REQUIRE(static_cast<double>(rc.rate_bps()) <= 30e6 + step * 1.001 + 1);
  REQUIRE(rc.update(t0 + 60s, grtt) == 100'000'000);
}

TEST_CASE("a receiver reporting a lower rate becomes the CLR; a higher one does not",
          "[unit][sender]") {
  rate_controller rc = at_ceiling();
  rc.on_feedback("a", 50'000'000, 10ms, true, t0);
  rc.on_feedback("b", 70'000'000, 10ms, true, t0 + 1ms);
  REQUIRE(rc.clr() == "a");
  REQUIRE(rc.rate_bps() == 50'000'000);
  rc.on_feedback("b", 20'000'000, 10ms, true, t0 + 2ms);
  REQUIRE(rc.clr() == "b");
  REQUIRE(rc.rate_bps() == 20'000'000);
  // The CLR's own rate rises above another's: the other becomes the CLR.
  rc.on_feedback("b", 90'000'000, 10ms, true, t0 + 3ms);
  REQUIRE(rc.clr() == "a");
  REQUIRE(rc.clr_rate_bps() == 50'000'000);
  REQUIRE(rc.rate_bps() == 20'000'000);  // and the rate climbs from 20 by the increase rule
}

TEST_CASE("a receiver moved to unicast no longer holds the rate back", "[unit][sender]") {
  rate_controller rc = at_ceiling();
  rc.on_feedback("slow", 5'000'000, 10ms, true, t0);
  rc.on_feedback("fast", 300'000'000, 10ms, true, t0 + 1ms);
  REQUIRE(rc.clr() == "slow");
  REQUIRE(rc.rate_bps() == 5'000'000);
  rc.forget("slow", t0 + 2ms);
  REQUIRE(rc.clr() == "fast");
  REQUIRE(rc.candidates() == 1);
  REQUIRE(rc.update(t0 + 60s, grtt) == 300'000'000);
  rc.forget("fast", t0 + 61s);
  REQUIRE(rc.clr().empty());
  REQUIRE(rc.update(t0 + 600s, grtt) == 1'000'000'000);  // no CLR: up to the ceiling
}

TEST_CASE("the rate stays within its floor and ceiling", "[unit][sender]") {
  rate_controller rc = at_ceiling();
  rc.on_feedback("a", 1, 10ms, true, t0);
  REQUIRE(rc.rate_bps() == config().rate_min_bps);
  rc.on_feedback("a", 50'000'000'000, 10ms, true, t0 + 1ms);
  REQUIRE(rc.update(t0 + 3600s, grtt) == 1'000'000'000);
}

TEST_CASE("a receiver's overrun ends slow start and caps the rate below its receive rate",
          "[unit][sender]") {
  rate_controller rc(config());
  rc.start(t0);
  REQUIRE(rc.update(t0 + 50ms, grtt) == 320'000'000);
  rc.on_overrun("a", 200'000'000, 2ms, t0 + 51ms);
  REQUIRE_FALSE(rc.slow_start());
  REQUIRE(rc.overrun_receiver() == "a");
  // overrun_factor (0.85) of the rate it takes datagrams in: its queue drains.
  REQUIRE(rc.overrun_cap_bps() == 170'000'000);
  REQUIRE(rc.rate_bps() == 170'000'000);
  REQUIRE(rc.clr().empty());  // an overrun is no loss report: no CLR
  // A report of a higher receive rate does not raise the cap; a lower one lowers it.
  rc.on_overrun("a", 300'000'000, 2ms, t0 + 52ms);
  REQUIRE(rc.overrun_cap_bps() < 171'000'000);
  rc.on_overrun("b", 100'000'000, 2ms, t0 + 52ms);
  REQUIRE(rc.overrun_cap_bps() == 85'000'000);
  REQUIRE(rc.overrun_receiver() == "b");
  REQUIRE(rc.rate_bps() == 85'000'000);
}

TEST_CASE("the overrun cap rises by one packet per RTT per RTT and lifts at the ceiling",
          "[unit][sender]") {
  rate_controller rc = at_ceiling();
  rc.on_overrun("a", 100'000'000, 10ms, t0);
  REQUIRE(rc.rate_bps() == 85'000'000);
  // s / R^2 with the reporter's RTT: 115.84 Mbit/s per second; the rate follows the cap.
  const double step = 1448.0 * 8 / (0.01 * 0.01);
  const auto r1 = rc.update(t0 + 100ms, grtt);
  REQUIRE(static_cast<double>(r1) <= 85e6 + step * 0.1 + 1);
  REQUIRE(static_cast<double>(r1) >= 85e6 + step * 0.1 * 0.99);
  REQUIRE(rc.overrun_cap_bps() >= r1);
  // (1000 - 85) / 115.84 = 7.9 s to the ceiling, where the cap is gone.
  for (int i = 1; i <= 90; ++i) rc.update(t0 + 100ms + 100ms * i, grtt);
  REQUIRE(rc.overrun_cap_bps() == 0);
  REQUIRE(rc.overrun_receiver().empty());
  REQUIRE(rc.rate_bps() == 1'000'000'000);
}

TEST_CASE("the overrun cap rises with its receiver's base RTT, not one its own queue inflated",
          "[unit][sender]") {
  rate_controller rc(config());
  rc.start(t0);
  // Slow start: the sender's echo samples of "a" at 2 ms, its receive-rate reports at 4 ms
  // (a registration RTT measured while pass 1 began), and of "b" at 30 ms.
  rc.on_rtt_sample("a", 2ms);
  rc.on_receive_rate("a", 100'000'000, 4ms, t0 + 5ms);
  rc.on_rtt_sample("b", 30ms);
  REQUIRE(rc.base_rtt("a") == 2ms);
  REQUIRE(rc.base_rtt("b") == 30ms);
  REQUIRE(rc.update(t0 + 30ms, grtt) == 80'000'000);
  // "a" overruns, its socket's queue now in every RTT it shows: 20 ms reported.
  rc.on_rtt_sample("a", 20ms);
  rc.on_overrun("a", 100'000'000, 20ms, t0 + 31ms);
  REQUIRE(rc.overrun_cap_bps() == 85'000'000);
  REQUIRE(rc.overrun_cap_rtt() == 2ms);
  REQUIRE(rc.rate_bps() == 80'000'000);  // below the cap already
  // s / R^2 with 2 ms: 2896 Mbit/s per second (with the 20 ms reported, 29), for the cap and
  // the rate under it.
  const double step = 1448.0 * 8 / (0.002 * 0.002);
  const auto r1 = rc.update(t0 + 41ms, grtt);
  const auto cap = static_cast<double>(rc.overrun_cap_bps());
  REQUIRE(cap >= 85e6 + step * 0.01 * 0.99);
  REQUIRE(cap <= 85e6 + step * 0.01 + 1);
  REQUIRE(static_cast<double>(r1) >= 80e6 + step * 0.01 * 0.99);
  REQUIRE(static_cast<double>(r1) <= cap);
  // A smaller RTT later moves the cap's down (floored at min_rtt); another receiver's does not.
  rc.on_rtt_sample("b", 500us);
  REQUIRE(rc.overrun_cap_rtt() == 2ms);
  rc.on_rtt_sample("a", 500us);
  REQUIRE(rc.base_rtt("a") == 500us);
  REQUIRE(rc.overrun_cap_rtt() == 1ms);
  // A receiver that leaves is forgotten.
  rc.forget("b", t0 + 42ms);
  REQUIRE(rc.base_rtt("b") == duration{});
}

TEST_CASE("the overrun cap leaves with its receiver; a loss report still limits the rate",
          "[unit][sender]") {
  rate_controller rc = at_ceiling();
  rc.on_overrun("a", 100'000'000, 1ms, t0);
  rc.on_feedback("b", 400'000'000, 5ms, true, t0);
  REQUIRE(rc.rate_bps() == 85'000'000);  // the lower of the cap and the CLR's rate
  rc.forget("a", t0 + 1ms);              // moved to unicast
  REQUIRE(rc.overrun_cap_bps() == 0);
  REQUIRE(rc.clr() == "b");
  // It rises towards the CLR's rate by the CLR's increase limit (5 ms: 463 Mbit/s per s).
  REQUIRE(rc.update(t0 + 10s, grtt) == 400'000'000);
}

TEST_CASE("slow start doubles no higher than twice the lowest receive rate reported",
          "[unit][sender]") {
  // RFC 4654 section 3.4: each doubling waits for a report that the last one got through.
  rate_controller rc(config());
  rc.start(t0);
  REQUIRE(rc.update(t0 + 10ms, grtt) == 20'000'000);  // no report yet: it doubles unchecked
  rc.on_receive_rate("a", 10'000'000, 5ms, t0 + 12ms);
  REQUIRE(rc.clr() == "a");
  REQUIRE(rc.receive_limit_bps() == 20'000'000);
  REQUIRE(rc.rate_bps() == 20'000'000);               // a limit never lowers the rate
  REQUIRE(rc.update(t0 + 20ms, grtt) == 20'000'000);  // the doubling waits ...
  REQUIRE(rc.update(t0 + 40ms, grtt) == 20'000'000);  // ... however long
  rc.on_receive_rate("a", 20'000'000, 5ms, t0 + 41ms);
  REQUIRE(rc.rate_bps() == 40'000'000);  // ... until the last doubling is seen to get through
  // A lower receive rate of another receiver holds the next doubling back, not the rate.
  rc.on_receive_rate("b", 15'000'000, 5ms, t0 + 42ms);
  REQUIRE(rc.clr() == "b");
  REQUIRE(rc.rate_bps() == 40'000'000);
  REQUIRE(rc.update(t0 + 60ms, grtt) == 40'000'000);
  // A bottleneck: the receive rate stays below the rate sent, and slow start stays at twice it.
  rc.on_receive_rate("b", 30'000'000, 5ms, t0 + 61ms);
  rc.on_receive_rate("a", 40'000'000, 5ms, t0 + 61ms);
  REQUIRE(rc.update(t0 + 70ms, grtt) == 60'000'000);
  REQUIRE(rc.update(t0 + 200ms, grtt) == 60'000'000);
  // The receiver leaves multicast: the other's limit is 80.
  rc.forget("b", t0 + 201ms);
  REQUIRE(rc.clr() == "a");
  REQUIRE(rc.rate_bps() == 80'000'000);
  REQUIRE(rc.slow_start());
}

TEST_CASE("a stale receive rate limits nothing, and slow start's end forgets them all",
          "[unit][sender]") {
  rate_controller rc(config());
  rc.start(t0);
  rc.on_receive_rate("a", 5'000'000, 5ms, t0 + 1ms);
  REQUIRE(rc.update(t0 + 10ms, grtt) == 10'000'000);
  REQUIRE(rc.update(t0 + 1s, grtt) == 10'000'000);
  REQUIRE(rc.update(t0 + 2s, grtt) == 10'000'000);
  // Older than report_lifetime (2 s): the doubling goes on, one per GRTT (none banked while
  // it was held back).
  REQUIRE(rc.update(t0 + 2s + 10ms, grtt) == 20'000'000);
  REQUIRE(rc.update(t0 + 2s + 20ms, grtt) == 40'000'000);
  REQUIRE(rc.receive_limit_bps() == 0);
  rc.on_receive_rate("a", 20'000'000, 5ms, t0 + 3s);
  REQUIRE(rc.receive_limit_bps() == 40'000'000);
  rc.on_feedback("b", 25'000'000, 5ms, true, t0 + 3s + 1ms);
  REQUIRE_FALSE(rc.slow_start());
  REQUIRE(rc.clr() == "b");
  REQUIRE(rc.receive_limit_bps() == 0);
  REQUIRE(rc.rate_bps() == 25'000'000);
  rc.on_receive_rate("a", 1'000'000, 5ms, t0 + 3s + 2ms);  // after slow start: ignored
  REQUIRE(rc.receive_limit_bps() == 0);
  REQUIRE(rc.rate_bps() == 25'000'000);
}
