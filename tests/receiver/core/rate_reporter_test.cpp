#include "receiver/core/rate_reporter.hpp"

#include "common/packet.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

constexpr duration rtt = 10ms;
const time_point t0{std::chrono::seconds(50)};

wire::marker rate_marker(std::uint64_t sender_bps, bool slow_start = false) {
  wire::marker m;
  m.set_rate_bps(sender_bps);
  m.set_rate_round(1);
  m.set_rate_round_us(100'000);
  m.set_rate_slow_start(slow_start);
  return m;
}

/// Feeds sequence numbers [from, to), ten per millisecond, from `t`; counts the loss events
/// seen and takes each (on_loss_event). @return the time after the last
time_point feed(rate_reporter& r, std::uint32_t from, std::uint32_t to, time_point t,
                int* events = nullptr) {
  for (std::uint32_t s = from; s != to; ++s) {
    const auto seen = r.on_datagram(s, t, rtt, false);
    if (seen.loss_event) {
      if (events) ++*events;
      r.on_loss_event(t, t, rtt);
    }
    if (s % 10 == 9) t += 1ms;
  }
  return t;
}

}  // namespace

TEST_CASE("rates are computed with the registration's RTT, else the GRTT, at least 1 ms",
          "[unit][receiver][rate_reporter]") {
  CHECK(rate_reporter::rtt_of(30ms, 500ms) == 30ms);
  CHECK(rate_reporter::rtt_of(duration::zero(), 500ms) == 500ms);
  CHECK(rate_reporter::rtt_of(duration::zero(), 100us) == rate_reporter::min_rtt);
  const rate_reporter r(1400);
  CHECK(r.packet_bytes() == 1400 + wire::data_header_size + packet::ipv4_udp_overhead);
}

TEST_CASE("a fixed-rate session reports nothing", "[unit][receiver][rate_reporter]") {
  rate_reporter r(1400);
  const time_point t = feed(r, 1, 2000, t0);
  r.on_marker(rate_marker(0), false, 0, rtt, t);
  CHECK_FALSE(r.enabled());
  CHECK_FALSE(r.due());
  wire::nak m;
  r.fill(m, t, rtt);
  CHECK(m.rate_bps() == 0);
  CHECK(m.receive_bps() == 0);
  CHECK_FALSE(r.take_overrun(t, rtt));
  CHECK(std::isinf(r.own_rate_bps(t, rtt)));
}

TEST_CASE("after a loss event the reports carry the TCP-friendly rate and the loss event rate",
          "[unit][receiver][rate_reporter]") {
  rate_reporter r(1400);
  r.on_marker(rate_marker(1'000'000'000), false, 0, rtt, t0);
  REQUIRE(r.enabled());
  int events = 0;
  time_point t = feed(r, 1, 3000, t0, &events);
  CHECK(events == 0);
  // Five datagrams lost, then the flow goes on: one loss event (after its settle time).
  t = feed(r, 3005, 6000, t, &events);
  CHECK(events == 1);
  CHECK(r.loss().lost() == 5);
  const double own = r.own_rate_bps(t, rtt);
  CHECK(std::isfinite(own));
  CHECK(own > 0);
  wire::nak m;
  r.fill(m, t, rtt);
  CHECK(m.rate_bps() == static_cast<std::uint64_t>(own));
  CHECK(m.loss_ppb() > 0);
  CHECK(m.rtt_us() == 10'000);
  // The first loss event is reported at once (it ends slow start).
  REQUIRE(r.due());
  CHECK(*r.due() <= t);
  CHECK(r.fire(t, rtt));
}

TEST_CASE("in slow start without loss the reports carry the receive rate",
          "[unit][receiver][rate_reporter]") {
  rate_reporter r(1400);
  const time_point t = feed(r, 1, 3000, t0);
  r.on_marker(rate_marker(1'000'000'000, true), false, 0, rtt, t);
  wire::nak m;
  r.fill(m, t, rtt);
  CHECK(m.rate_bps() == 0);
  // Ten datagrams a millisecond of 1448 bytes: about 116 Mbit/s.
  CHECK(m.receive_bps() > 100'000'000);
  CHECK(m.receive_bps() < 130'000'000);
  CHECK(m.rtt_us() == 10'000);
}

TEST_CASE("overrun reports: at most one per RTT, none while the sender's cut holds",
          "[unit][receiver][rate_reporter]") {
  rate_reporter r(1400);
  r.on_marker(rate_marker(1'000'000'000), false, 0, rtt, t0);
  CHECK_FALSE(r.take_overrun(t0, rtt));  // no receive rate measured yet
  time_point t = feed(r, 1, 3000, t0);
  const auto first = r.take_overrun(t, rtt);
  REQUIRE(first);
  CHECK(*first > 100e6);
  CHECK(*first < 130e6);
  CHECK_FALSE(r.take_overrun(t + 5ms, rtt));  // within an RTT
  // An RTT later the sender is taken to hold below the share of the report it got: no more.
  CHECK_FALSE(r.take_overrun(t + 20ms, rtt));
  // A marker says the sender is still at 1 Gbit/s: report again.
  r.on_marker(rate_marker(1'000'000'000), false, 0, rtt, t + 20ms);
  CHECK(r.take_overrun(t + 20ms, rtt));
}
