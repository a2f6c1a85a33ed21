#include "receiver/core/loss_estimator.hpp"

#include "common/tcp_throughput.hpp"
#include "receiver/core/rate_feedback.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

using mcdist::duration;
using mcdist::time_point;
using mcdist::receiver::loss_estimator;
using mcdist::receiver::rate_feedback;
using namespace std::chrono_literals;

namespace {

constexpr duration rtt = 10ms;

/// Feeds numbers [from, to) one millisecond apart, starting at `t`; returns the next time.
time_point feed(loss_estimator& e, std::uint32_t from, std::uint32_t to, time_point t) {
  for (std::uint32_t s = from; s != to; ++s) {
    e.on_datagram(s, t, rtt);
    t += 1ms;
  }
  return t;
}

/// An estimator that makes the first loss event at once (RFC 5348's timing), for the tests of
/// the loss history itself; the default waits loss_estimator::first_loss_settle.
loss_estimator at_once() {
  loss_estimator e;
  e.set_first_loss_settle(duration::zero());
  return e;
}

/// RFC 5348 section 5.4, written out for the test: intervals newest first, I_0 the open one.
double rfc_loss_event_rate(const std::vector<double>& closed, double open) {
  const double w[] = {1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2};
  std::vector<double> i = {open};
  i.insert(i.end(), closed.begin(), closed.end());
  const std::size_t k = std::min<std::size_t>(closed.size(), 8);
  double tot0 = 0, w0 = 0, tot1 = 0, w1 = 0;
  for (std::size_t n = 0; n <= std::min<std::size_t>(k, 7); ++n) {
    tot0 += i[n] * w[n];
    w0 += w[n];
  }
  for (std::size_t n = 1; n <= k; ++n) {
    tot1 += i[n] * w[n - 1];
    w1 += w[n - 1];
  }
  // RFC 5348 section 5.5: an open interval above twice the closed mean discounts the history.
  const double closed_mean = tot1 / w1;
  if (open > 2 * closed_mean) {
    const double df = std::max(0.5, 2 * closed_mean / open);
    tot0 = open * w[0];
    w0 = w[0];
    for (std::size_t n = 1; n <= std::min<std::size_t>(k, 7); ++n) {
      tot0 += i[n] * w[n] * df;
      w0 += w[n] * df;
    }
  }
  return 1 / std::max(tot0 / w0, closed_mean);
}

}  // namespace

TEST_CASE("no gap, no loss event: p is 0 and the TCP-friendly rate unbounded", "[unit][receiver]") {
  auto e = at_once();
  feed(e, 1000, 3000, time_point{});
  REQUIRE_FALSE(e.has_loss());
  REQUIRE(e.loss_event_rate() == 0);
  REQUIRE(std::isinf(mcdist::tcp_throughput_bps(1448, rtt, e.loss_event_rate())));
}

TEST_CASE("the loss event rate of two gaps is the RFC 5348 weighted average of their intervals",
          "[unit][receiver]") {
  auto e = at_once();
  time_point t = feed(e, 0, 100, time_point{});  // 0..99
  t = feed(e, 101, 250, t + 1s);                 // 100 lost
  t = feed(e, 252, 400, t + 1s);                 // 250, 251 lost: one event
  REQUIRE(e.loss_events() == 2);
  REQUIRE(e.lost() == 3);
  REQUIRE(e.closed_intervals() == 2);
  REQUIRE(e.closed_interval(0) == 150);  // 250 - 100
  REQUIRE(e.open_interval() == 150);     // 250..399
  // The first interval is synthesised from the receive rate before the first loss (RFC 5348
  // section 6.3.1): first_rate_share of 1,000 datagrams/s of 1448 bytes.
  const double first = static_cast<double>(e.closed_interval(1));
  REQUIRE(first == std::llround(loss_estimator::synthetic_interval(
                       loss_estimator::first_rate_share * 1000.0 * 1448 * 8, 1448, rtt)));
  REQUIRE(e.loss_event_rate() == Approx(rfc_loss_event_rate({150, first}, 150)));
}

TEST_CASE("the synthetic first interval gives back the receive rate through the equation",
          "[unit][receiver]") {
  for (const double rate : {1e6, 11.584e6, 200e6, 4e9}) {
    for (const duration r : {duration(1ms), duration(40ms), duration(700ms)}) {
      const double i = loss_estimator::synthetic_interval(rate, 1448, r);
      if (i > 1 && i < 1e10) {
        REQUIRE(mcdist::tcp_friendly_rate_bps(1448, r, 1 / i) == Approx(rate).epsilon(1e-6));
      }
    }
  }
  // A slow start through a 200 Mbit/s bottleneck: the rate after the first loss is a little
  // under what got through, so the queue slow start filled drains (while the open interval is
  // shorter than the synthetic one).
  auto e = at_once();
  time_point t{};
  std::uint32_t seq = 0;
  for (int i = 0; i < 1000; ++i, ++seq, t += 58us) e.on_datagram(seq, t, 1ms);  // ~200 Mbit/s
  e.on_datagram(seq + 5, t, 1ms);  // the overshoot lost 5 (I_0 = 6, below the synthetic I_1)
  REQUIRE(e.receive_rate_pps() == Approx(1e6 / 58).epsilon(0.02));
  REQUIRE(mcdist::tcp_friendly_rate_bps(1448, 1ms, e.loss_event_rate()) ==
          Approx(loss_estimator::first_rate_share * 1e6 / 58 * 1448 * 8).epsilon(0.03));
}

TEST_CASE("a first loss just after slow start's last doubling synthesises the link's rate",
          "[unit][receiver][rate]") {
  // Through a 200 Mbit/s bottleneck at a 40 ms RTT: 100 Mbit/s for 60 ms, then the doubled rate
  // fills the link (one datagram every 58 us) and 18 ms later the queue overflows. The window
  // of the RTT that is open at the loss holds 20 ms at 100 and 18 at 200 (about 150 Mbit/s):
  // the rate after the first loss must follow the link's (first_rate_share of it), from the
  // last 10 ms.
  constexpr duration r = 40ms;
  auto e = at_once();
  time_point t{};
  std::uint32_t seq = 0;
  for (; t < time_point{} + 60ms; t += 116us) e.on_datagram(seq++, t, r);
  for (; t < time_point{} + 78ms; t += 58us) e.on_datagram(seq++, t, r);
  REQUIRE(e.recent_rate_pps(t) == Approx(1e6 / 58).epsilon(0.02));
  REQUIRE(e.receive_rate_pps() < 0.6 * 1e6 / 58);  // the last whole window: before the doubling
  e.on_datagram(seq + 3, t, r);                    // 3 lost
  REQUIRE(e.loss_events() == 1);
  REQUIRE(mcdist::tcp_friendly_rate_bps(1448, r, e.loss_event_rate()) ==
          Approx(loss_estimator::first_rate_share * 1e6 / 58 * 1448 * 8).epsilon(0.03));
  // A receiver held up 2 ms reads what arrived meanwhile in one batch, all at one `now`: those
  // datagrams count, over the span up to `now`.
  auto held = at_once();
  seq = 0;
  for (t = time_point{}; t < time_point{} + 70ms; t += 58us) held.on_datagram(seq++, t, r);
  const auto backlog = static_cast<std::uint32_t>(2ms / 58us);
  t = time_point{} + 72ms;
  for (std::uint32_t i = 0; i < backlog; ++i) held.on_datagram(seq++, t, r);
  REQUIRE(held.recent_rate_pps(t) == Approx(1e6 / 58).epsilon(0.03));
  // Before 10 whole milliseconds have passed there is no recent rate.
  auto young = at_once();
  young.on_datagram(0, time_point{}, r);
  young.on_datagram(1, time_point{} + 5ms, r);
  REQUIRE(young.recent_rate_pps(time_point{} + 5ms) == 0);
}

TEST_CASE("a burst after a silence is counted over the time it was held, not as a faster link",
          "[unit][receiver][rate]") {
  // 200 Mbit/s (a datagram every 58 us) for 100.5 ms; then the path holds everything for 12 ms
  // (a held-up emulator or router) and delivers those 12 ms of datagrams at once; then 3 ms
  // more at 200 Mbit/s and a loss. The 10 ms span before the loss starts inside the silence:
  // counted over only its own 10 ms it holds about 1.5 times the link's rate; without the half
  // millisecond the silence began in, 4 % more.
  constexpr duration r = 20ms;
  const double link_pps = 1e6 / 58;
  const time_point start{std::chrono::seconds(1)};
  // Wherever the span starts, before the silence, in it (on its first, a middle or its last
  // millisecond), and until it has passed, the rate is the link's: holds of 12 and 5 ms.
  for (const duration hold : {duration{12ms}, duration{5ms}}) {
    loss_estimator e;
    std::uint32_t seq = 0;
    time_point t = start;
    for (; t < start + 100500us; t += 58us) e.on_datagram(seq++, t, r);
    const time_point end = t + hold;
    for (; t < end; t += 58us) e.on_datagram(seq++, end, r);
    double lowest = link_pps, highest = link_pps;
    for (; t < end + 12ms; t += 58us) {
      e.on_datagram(seq++, t, r);
      lowest = std::min(lowest, e.recent_rate_pps(t));
      highest = std::max(highest, e.recent_rate_pps(t));
    }
    REQUIRE(lowest >= 0.95 * link_pps);
    REQUIRE(highest <= 1.02 * link_pps);
  }
  const time_point released = start + 100500us + 12ms;
  // Slow start's 1 ms span right after the burst: the burst alone holds 100 datagrams, at what
  // would read as 12 times the link's rate.
  loss_estimator ss;
  std::uint32_t ss_seq = 0;
  time_point u = start;
  for (; u < start + 100500us; u += 58us) ss.on_datagram(ss_seq++, u, r);
  for (; u < released; u += 58us) ss.on_datagram(ss_seq++, released, r);
  REQUIRE(ss.slow_start_rate_pps(released) == Approx(link_pps).epsilon(0.1));
  REQUIRE(ss.slow_start_rate_pps(released) <= 1.01 * link_pps);
  // A first loss 3 ms after the burst synthesises the link's rate, not the burst's: its event
  // is made with the first datagram first_loss_settle after it.
  loss_estimator f;
  std::uint32_t seq = 0;
  time_point t = start;
  for (; t < start + 100500us; t += 58us) f.on_datagram(seq++, t, r);
  for (; t < released; t += 58us) f.on_datagram(seq++, released, r);
  for (; t < released + 3ms; t += 58us) f.on_datagram(seq++, t, r);
  seq += 4;
  f.on_datagram(seq++, t, r);
  REQUIRE(f.loss_events() == 0);
  const time_point lost_at = t;
  for (t += 58us; t < lost_at + loss_estimator::first_loss_settle; t += 58us) {
    f.on_datagram(seq++, t, r);
  }
  REQUIRE(f.loss_events() == 0);
  f.on_datagram(seq++, t, r);
  REQUIRE(f.loss_events() == 1);
  const double first_bps = mcdist::tcp_friendly_rate_bps(1448, r, f.loss_event_rate());
  REQUIRE(first_bps <= 1.01 * loss_estimator::first_rate_share * link_pps * 1448 * 8);
  REQUIRE(first_bps >= 0.95 * loss_estimator::first_rate_share * link_pps * 1448 * 8);
}

TEST_CASE("a first loss revealed in the burst after a silence is made once the burst is in",
          "[unit][receiver][rate]") {
  // Slow start's last doubling through a 200 Mbit/s bottleneck at a 20 ms RTT: 100 Mbit/s for
  // 60 ms, then the link's rate for 18.5 ms; then the path holds everything for 12 ms and
  // delivers it in one burst, then the link's rate again. A datagram early in the burst reveals
  // the first loss: measured up to it, the span holds the silence and only the burst's first
  // datagrams, and the last whole window is mostly the 100 Mbit/s before the doubling.
  constexpr duration r = 20ms;
  const double link_bps = 1e6 / 58 * 1448 * 8;
  const time_point start{std::chrono::seconds(1)};
  // The rate after the first loss, bit/s, when the burst's datagram number `reveal` shows it
  // and its first `first` datagrams arrive when the hold ends, the rest `straddle` later.
  auto first_rate = [&](loss_estimator e, std::uint32_t reveal, std::uint32_t first,
                        duration straddle) {
    std::uint32_t seq = 0;
    time_point t = start;
    for (; t < start + 60ms; t += 116us) e.on_datagram(seq++, t, r);
    for (; t < start + 78900us; t += 58us) e.on_datagram(seq++, t, r);
    REQUIRE(e.receive_rate_pps() < 0.8 * 1e6 / 58);
    const time_point released = t + 12ms;  // about 0.9 ms into a millisecond
    for (std::uint32_t i = 0; t < released; t += 58us, ++i) {
      if (i == reveal) seq += 3;  // 3 lost
      e.on_datagram(seq++, i < first ? released : released + straddle, r);
    }
    for (t = released + straddle; t < released + 3ms; t += 58us) e.on_datagram(seq++, t, r);
    REQUIRE(e.loss_events() == 1);
    return mcdist::tcp_friendly_rate_bps(1448, r, e.loss_event_rate());
  };
  const double expected = loss_estimator::first_rate_share * link_bps;
  // The loss in the burst's first datagram, the burst in one millisecond.
  REQUIRE(first_rate(loss_estimator{}, 0, 1000, 0us) == Approx(expected).epsilon(0.03));
  // The burst straddles a millisecond and the loss shows in its second part.
  REQUIRE(first_rate(loss_estimator{}, 40, 30, 200us) == Approx(expected).epsilon(0.03));
  // A hold that starts while the first loss settles: the event waits until the burst after
  // it is in (made with the burst's first datagram, the span would hold the silence and not
  // the burst).
  {
    loss_estimator e;
    std::uint32_t seq = 0;
    time_point t = start;
    for (; t < start + 60ms; t += 116us) e.on_datagram(seq++, t, r);
    for (; t < start + 78900us; t += 58us) e.on_datagram(seq++, t, r);
    seq += 3;  // 3 lost
    const time_point hold = t + 1ms;
    for (; t < hold; t += 58us) e.on_datagram(seq++, t, r);
    const time_point released = t + 5ms;
    for (; t < released; t += 58us) e.on_datagram(seq++, released, r);
    REQUIRE(e.loss_events() == 0);
    for (; t < released + 3ms; t += 58us) e.on_datagram(seq++, t, r);
    REQUIRE(e.loss_events() == 1);
    REQUIRE(mcdist::tcp_friendly_rate_bps(1448, r, e.loss_event_rate()) ==
            Approx(expected).epsilon(0.03));
  }
  // Made at once (RFC 5348's timing), both read the silence as a slower link.
  REQUIRE(first_rate(at_once(), 0, 1000, 0us) < 0.8 * expected);
  REQUIRE(first_rate(at_once(), 40, 30, 200us) < 0.8 * expected);
  // A silence reaching back past the ring (62 ms) leaves no recent rate at all.
  auto gone = at_once();
  std::uint32_t seq = 0;
  time_point t = start;
  for (; t < start + 100ms; t += 58us) gone.on_datagram(seq++, t, r);
  REQUIRE(gone.recent_rate_pps(t + 70ms) == 0);
}

TEST_CASE("the recent receive rate spans at least 100 datagrams, and none below ~19 Mbit/s",
          "[unit][receiver][rate]") {
  // 5 datagrams a millisecond (58 Mbit/s): 10 ms hold 50, so the span is 20 ms.
  auto e = at_once();
  std::uint32_t seq = 0;
  time_point t{};
  for (; t < time_point{} + 100ms; t += 200us) e.on_datagram(seq++, t, 40ms);
  REQUIRE(e.recent_rate_pps(t) == Approx(5000).epsilon(0.01));
  // One datagram a millisecond (11.6 Mbit/s): 62 ms hold 62, too few to be a rate; 2 in a 10 ms
  // span would have read as twice the rate.
  auto slow = at_once();
  t = time_point{};
  for (seq = 0; t < time_point{} + 200ms; t += 1ms) slow.on_datagram(seq++, t, 40ms);
  REQUIRE(slow.recent_rate_pps(t) == 0);
  // Then the first loss takes the last whole window's rate (RFC 5348's X_recv alone).
  slow.on_datagram(seq + 1, t, 40ms);
  REQUIRE(slow.loss_events() == 1);
  REQUIRE(mcdist::tcp_friendly_rate_bps(1448, 40ms, slow.loss_event_rate()) ==
          Approx(loss_estimator::first_rate_share * 1000 * 1448 * 8).epsilon(0.03));
}

TEST_CASE("with more than eight loss events only the newest eight intervals count, weighted",
          "[unit][receiver]") {
  const std::vector<std::uint32_t> gaps = {100, 300, 50, 400, 80, 120, 90, 60, 500, 70, 30};
  auto e = at_once();
  std::uint32_t seq = 5;
  time_point t{};
  t = feed(e, seq, seq + 1, t);
  ++seq;
  std::vector<double> closed;   // newest first
  std::uint32_t prev_loss = 5;  // the first interval counts from the first datagram seen
  for (const auto g : gaps) {
    // g datagrams arrive after the previous loss, then one is lost.
    t = feed(e, seq, prev_loss + g, t + 1s);
    seq = prev_loss + g + 1;  // prev_loss + g is lost
    closed.insert(closed.begin(), static_cast<double>(prev_loss + g - prev_loss));
    prev_loss = prev_loss + g;
  }
  t = feed(e, seq, seq + 40, t + 1s);  // the open interval: the lost one + 40
  closed.resize(8);
  REQUIRE(e.loss_events() == gaps.size());
  REQUIRE(e.closed_intervals() == 8);
  REQUIRE(e.open_interval() == 41);
  REQUIRE(e.loss_event_rate() == Approx(rfc_loss_event_rate(closed, 41)));
}

TEST_CASE("losses less than two RTTs after a loss event's first loss are part of it",
          "[unit][receiver]") {
  auto e = at_once();
  time_point t = feed(e, 0, 100, time_point{});
  e.on_datagram(102, t, rtt);        // 100, 101 lost
  e.on_datagram(105, t + 5ms, rtt);  // 103, 104 lost, 5 ms later: same event
  REQUIRE(e.loss_events() == 1);
  // What the sender sent before it heard of the event still arriving: two RTTs.
  e.on_datagram(107, t + 15ms, rtt);  // 106 lost
  REQUIRE(e.loss_events() == 1);
  e.on_datagram(109, t + 21ms, rtt);  // 108 lost more than two RTTs later: a new event
  REQUIRE(e.loss_events() == 2);
  REQUIRE(e.lost() == 6);
  REQUIRE(e.closed_interval(0) == 8);  // 108 - 100
  // Later events span two RTTs as well (RFC 5348 section 5.2 says one).
  e.on_datagram(111, t + 32ms, rtt);  // 110 lost 11 ms after the second event began
  REQUIRE(e.loss_events() == 2);
  e.on_datagram(113, t + 42ms, rtt);  // 112 lost 21 ms after it: a new event
  REQUIRE(e.loss_events() == 3);
  REQUIRE(e.closed_interval(0) == 4);  // 112 - 108
  REQUIRE(loss_estimator::event_span_rtts == 2);
}

TEST_CASE("duplicates and reordered datagrams are ignored, across the sequence wrap",
          "[unit][receiver]") {
  auto e = at_once();
  time_point t = feed(e, 0xFFFFFF00u, 0xFFFFFFFFu, time_point{});
  e.on_datagram(0xFFFFFFFFu, t, rtt);
  e.on_datagram(0, t, rtt);            // wraps: in order
  e.on_datagram(0, t, rtt);            // duplicate
  e.on_datagram(0xFFFFFFF0u, t, rtt);  // old
  REQUIRE_FALSE(e.has_loss());
  e.on_datagram(2, t + 1s, rtt);  // 1 lost
  REQUIRE(e.loss_events() == 1);
  REQUIRE(e.lost() == 1);
  REQUIRE(e.open_interval() == 2);  // 1..2, across the wrap
}

TEST_CASE("the TCP throughput equation matches RFC 5348 section 3.1 and falls with p and R",
          "[unit][receiver]") {
  // s = 1448 bytes, R = 100 ms, p = 1 %: X = s / (R sqrt(2p/3) + 4R (3 sqrt(3p/8)) p (1 + 32p^2))
  const double r = 0.1, p = 0.01;
  const double x = 1448.0 / (r * std::sqrt(2 * p / 3) +
                             4 * r * (3 * std::sqrt(3 * p / 8)) * p * (1 + 32 * p * p));
  REQUIRE(mcdist::tcp_throughput_bps(1448, 100ms, 0.01) == Approx(x * 8));
  REQUIRE(mcdist::tcp_throughput_bps(1448, 100ms, 0.02) <
          mcdist::tcp_throughput_bps(1448, 100ms, 0.01));
  REQUIRE(mcdist::tcp_throughput_bps(1448, 200ms, 0.01) <
          mcdist::tcp_throughput_bps(1448, 100ms, 0.01));
}

TEST_CASE("rate reports: only receivers below the sender's rate draw a timer, within the round",
          "[unit][receiver]") {
  const time_point t0{};
  REQUIRE(rate_feedback::delay(100ms, 1.0) == 100ms);
  REQUIRE(rate_feedback::delay(100ms, 1e-9) == duration::zero());  // ln(u)/ln(N) < -1
  rate_feedback above;
  above.on_marker(100'000'000, false, 1, 100ms, 0, 200e6, rtt, 0.5, t0);
  REQUIRE_FALSE(above.due());
  rate_feedback no_loss;
  no_loss.on_marker(100'000'000, false, 1, 100ms, 0, INFINITY, rtt, 0.5, t0);
  REQUIRE_FALSE(no_loss.due());
  rate_feedback below;
  below.on_marker(100'000'000, false, 1, 100ms, 0, 50e6, rtt, 0.5, t0);
  REQUIRE(below.due());
  REQUIRE(*below.due() >= t0);
  REQUIRE(*below.due() < t0 + 100ms);
  // A marker of the same round draws nothing new; the timer fires and reports.
  const auto due = *below.due();
  below.on_marker(100'000'000, false, 1, 100ms, 0, 50e6, rtt, 0.9, t0 + 1ms);
  REQUIRE(*below.due() == due);
  REQUIRE(below.fire(due, 50e6));
  REQUIRE_FALSE(below.due());
}

TEST_CASE("rate reports: a receiver not 10 % below the lowest echoed rate keeps quiet",
          "[unit][receiver]") {
  const time_point t0{};
  rate_feedback f;
  f.on_marker(100'000'000, false, 1, 100ms, 0, 50e6, rtt, 0.5, t0);
  REQUIRE(f.due());
  // Someone reported 52 Mbit/s: 50 is not 10 % below it.
  f.on_marker(100'000'000, false, 1, 100ms, 52'000'000, 50e6, rtt, 0.5, t0 + 1ms);
  REQUIRE_FALSE(f.fire(*f.due(), 50e6));
  // Next round, someone reported 80: 50 is well below, it reports.
  f.on_marker(100'000'000, false, 2, 100ms, 0, 50e6, rtt, 0.5, t0 + 200ms);
  f.on_marker(100'000'000, false, 2, 100ms, 80'000'000, 50e6, rtt, 0.5, t0 + 201ms);
  REQUIRE(f.fire(*f.due(), 50e6));
}

TEST_CASE("rate reports: the CLR reports at every marker, at most once per RTT",
          "[unit][receiver]") {
  const time_point t0{};
  rate_feedback f;
  f.on_marker(100'000'000, true, 1, 100ms, 0, 150e6, rtt, 0.5, t0);
  REQUIRE(f.due() == t0);  // even above the sender's rate: the sender follows the CLR up
  REQUIRE(f.fire(t0, 150e6));
  f.on_marker(100'000'000, true, 1, 100ms, 0, 150e6, rtt, 0.5, t0 + 5ms);
  REQUIRE_FALSE(f.due());  // 5 ms < RTT
  f.on_marker(100'000'000, true, 1, 100ms, 0, 150e6, rtt, 0.5, t0 + 10ms);
  REQUIRE(f.due() == t0 + 10ms);
  // Not --rate auto: nothing.
  f.on_marker(0, true, 1, 100ms, 0, 150e6, rtt, 0.5, t0 + 30ms);
  REQUIRE_FALSE(f.due());
}

TEST_CASE("a long loss-free stretch discounts the loss history (RFC 5348 section 5.5)",
          "[unit][receiver]") {
  auto e = at_once();
  time_point t = feed(e, 0, 100, time_point{});
  for (std::uint32_t k = 1; k <= 8; ++k) t = feed(e, 100 * k + 1, 100 * k + 100, t + 1s);
  REQUIRE(e.closed_intervals() == 8);
  std::vector<double> closed(8, 100);
  closed[7] = static_cast<double>(e.closed_interval(7));  // the synthetic first
  const double before = e.loss_event_rate();
  REQUIRE(before == Approx(rfc_loss_event_rate(closed, 100)));
  // 1,000 datagrams without loss: I_0 = 1,100 > 2 x the closed mean, so DF applies.
  feed(e, 900, 1900, t + 1s);
  REQUIRE(e.open_interval() == 1100);
  REQUIRE(e.loss_event_rate() == Approx(rfc_loss_event_rate(closed, 1100)));
  // Without discounting I_tot0 / W_tot would be (1100 + the seven newest closed intervals
  // weighted w_1..w_7) / 6; discounted, the open interval weighs more and p is lower.
  double plain = 1100;
  for (std::size_t i = 0; i < 7; ++i) plain += closed[i] * loss_estimator::weights[i + 1];
  REQUIRE(e.loss_event_rate() < 6.0 / plain);
  REQUIRE(e.loss_event_rate() < before);
}

TEST_CASE("rate reports: a loss event far below the sender's rate is reported at once",
          "[unit][receiver]") {
  const time_point t0{};
  rate_feedback f;
  f.on_marker(400'000'000, false, 1, 100ms, 0, INFINITY, rtt, 0.5, t0);
  REQUIRE_FALSE(f.due());
  f.on_loss_event(false, 300e6, rtt,
                  t0 + 1ms);  // not below half the sender's rate: the round decides
  REQUIRE_FALSE(f.due());
  f.on_loss_event(false, 150e6, rtt, t0 + 2ms);
  REQUIRE(f.due() == t0 + 2ms);
  // Not suppressed by a lower echo: it is urgent.
  f.on_marker(400'000'000, false, 1, 100ms, 100'000'000, 150e6, rtt, 0.5, t0 + 2ms);
  REQUIRE(f.fire(t0 + 2ms, 150e6));
  f.on_loss_event(false, 100e6, rtt, t0 + 5ms);  // within one RTT of the last report
  REQUIRE_FALSE(f.due());
  f.on_loss_event(false, 100e6, rtt, t0 + 12ms);
  REQUIRE(f.due() == t0 + 12ms);
}

TEST_CASE("rate reports: a loss event that puts the CLR below the sender's rate goes at once",
          "[unit][receiver]") {
  const time_point t0{std::chrono::seconds(5)};
  // Not the CLR: a rate just below the sender's waits for its round's timer.
  rate_feedback other;
  other.on_marker(200'000'000, false, 1, 100ms, 0, INFINITY, rtt, 1.0, t0);
  other.on_loss_event(false, 190e6, rtt, t0 + 1ms);
  REQUIRE_FALSE(other.due());
  // The CLR (it reports at every marker; this loss must not wait for the next).
  rate_feedback clr;
  clr.on_marker(200'000'000, true, 1, 100ms, 0, 250e6, rtt, 1.0, t0);
  REQUIRE(clr.due() == t0);
  REQUIRE(clr.fire(t0, 250e6));
  clr.on_loss_event(false, 210e6, rtt, t0 + 20ms);  // still above the sender's: no hurry
  REQUIRE_FALSE(clr.due());
  clr.on_loss_event(false, 190e6, rtt, t0 + 30ms);
  REQUIRE(clr.due() == t0 + 30ms);
  REQUIRE(clr.fire(t0 + 30ms, 190e6));
}

TEST_CASE("CUBIC's response function matches RFC 8312 section 5.1 and takes over at low loss",
          "[unit][receiver]") {
  // AVG_W = (C (3 + beta) / (4 (1 - beta)))^(1/4) (R / p)^(3/4) packets, C = 0.4, beta = 0.7.
  const double r = 0.04, p = 1e-5;
  const double w = std::pow(0.4 * 3.7 / 1.2, 0.25) * std::pow(r / p, 0.75);
  REQUIRE(mcdist::cubic_throughput_bps(1448, 40ms, p) == Approx(w * 1448 * 8 / r));
  // At a 40 ms RTT and p = 1e-5 (a 200 Mbit/s path's loss rate) CUBIC's is the higher;
  // the rate reported is it.
  REQUIRE(mcdist::cubic_throughput_bps(1448, 40ms, p) >
          1.3 * mcdist::tcp_throughput_bps(1448, 40ms, p));
  REQUIRE(mcdist::tcp_friendly_rate_bps(1448, 40ms, p) ==
          mcdist::cubic_throughput_bps(1448, 40ms, p));
  // At 1 % loss, or on a 1 ms path, Reno's is the higher (CUBIC's Reno-friendly region).
  REQUIRE(mcdist::tcp_friendly_rate_bps(1448, 40ms, 0.01) ==
          mcdist::tcp_throughput_bps(1448, 40ms, 0.01));
  REQUIRE(mcdist::tcp_friendly_rate_bps(1448, 1ms, 1e-5) ==
          mcdist::tcp_throughput_bps(1448, 1ms, 1e-5));
  // Falls with p, which synthetic_interval's bisection relies on.
  double last = INFINITY;
  for (double q = 1e-9; q <= 1; q *= 1.5) {
    const double x = mcdist::tcp_friendly_rate_bps(1448, 40ms, q);
    REQUIRE(x < last);
    last = x;
  }
  REQUIRE(std::isinf(mcdist::cubic_throughput_bps(1448, 40ms, 0)));
}

TEST_CASE("rate reports: a receiver's first loss event is reported at once (slow start's end)",
          "[unit][receiver]") {
  rate_feedback f;
  const time_point t0{std::chrono::seconds(5)};
  f.on_marker(400'000'000, false, 1, 100ms, 0, INFINITY, rtt, 0.5, t0);
  f.on_loss_event(true, 390e6, rtt, t0 + 1ms);  // hardly below the sender's rate, but the first
  REQUIRE(f.due() == t0 + 1ms);
  REQUIRE(f.fire(t0 + 1ms, 390e6));
}

TEST_CASE("a gap the receiver's own socket made is counted apart, not as a loss event",
          "[unit][receiver]") {
  auto e = at_once();
  time_point t = feed(e, 0, 100, time_point{});
  // The socket dropped 50 datagrams before number 150 (SO_RXQ_OVFL rose).
  e.on_datagram(150, t, rtt, true);
  REQUIRE_FALSE(e.has_loss());
  REQUIRE(e.lost() == 0);
  REQUIRE(e.overrun_lost() == 50);
  REQUIRE(e.loss_event_rate() == 0);
  // A later gap without the flag is the path's loss.
  t = feed(e, 151, 200, t + 1ms);
  e.on_datagram(202, t, rtt);  // 200 and 201 lost
  REQUIRE(e.has_loss());
  REQUIRE(e.lost() == 2);
  REQUIRE(e.overrun_lost() == 50);
}

TEST_CASE("the sustained receive rate spans a whole window, not a burst", "[unit][receiver]") {
  auto e = at_once();
  const time_point t0{};
  REQUIRE(e.sustained_rate_pps(t0) == 0);
  // 1000 datagrams in a burst at 0 ms, then nothing until 100 ms: 10,000 a second, although
  // the burst itself came in no time.
  for (std::uint32_t s = 0; s < 1000; ++s) e.on_datagram(s, t0, rtt);
  REQUIRE(e.sustained_rate_pps(t0 + 5ms) == 0);  // less than min_rate_window: not a rate
  // Before the first whole window: the datagrams since the first.
  REQUIRE(e.sustained_rate_pps(t0 + 50ms) == Approx(1000 / 0.05));
  e.on_datagram(1000, t0 + 100ms, rtt);
  REQUIRE(e.sustained_rate_pps(t0 + 100ms) == Approx(1001 / 0.1));
  // It stays the last whole window's until the next one closes.
  e.on_datagram(1001, t0 + 150ms, rtt);
  REQUIRE(e.sustained_rate_pps(t0 + 150ms) == Approx(1001 / 0.1));
}

TEST_CASE("slow start's receive rate spans a millisecond at high rates, the window at low",
          "[unit][receiver][rate]") {
  // 200 datagrams a millisecond (2.3 Gbit/s): a millisecond holds 200, so the slow-start rate
  // is there 2 ms in, where the 10 ms span of recent_rate_pps has nothing yet.
  auto e = at_once();
  std::uint32_t seq = 0;
  time_point t{std::chrono::seconds(1)};
  const time_point start = t;
  for (; t < start + 3ms; t += 5us) e.on_datagram(seq++, t, 1ms);
  REQUIRE(e.recent_rate_pps(t) == 0);
  REQUIRE(e.slow_start_rate_pps(t) == Approx(200'000).epsilon(0.01));
  // A doubling is seen within the milliseconds after it: 400 a millisecond.
  const time_point doubled = t;
  for (; t < doubled + 3ms; t += 2500ns) e.on_datagram(seq++, t, 1ms);
  REQUIRE(e.slow_start_rate_pps(t) == Approx(400'000).epsilon(0.01));
  // One datagram a millisecond: no 62 ms span holds 100, so the last whole window's rate.
  auto slow = at_once();
  t = time_point{};
  for (seq = 0; t < time_point{} + 200ms; t += 1ms) slow.on_datagram(seq++, t, 40ms);
  REQUIRE(slow.recent_rate_pps(t, loss_estimator::slow_start_span_ms) == 0);
  REQUIRE(slow.slow_start_rate_pps(t) == Approx(1000).epsilon(0.03));
  REQUIRE(slow.slow_start_rate_pps(t) == slow.receive_rate_pps());
}

TEST_CASE("rate reports in slow start: at once without a CLR, then the CLR every RTT",
          "[unit][receiver]") {
  const time_point t0{std::chrono::seconds(5)};
  rate_feedback f;
  // The sender is in slow start and names no CLR: the receive rate goes at once, unsuppressed.
  f.on_marker(40'000'000, false, 1, 100ms, 30'000'000, 35e6, rtt, 1.0, t0, true, false);
  REQUIRE(f.due() == t0);
  REQUIRE(f.fire(t0, 35e6));
  REQUIRE_FALSE(f.due());  // not the CLR: nothing re-armed
  // Within an RTT of that report, another marker without a CLR waits for the round.
  f.on_marker(40'000'000, false, 1, 100ms, 0, 35e6, rtt, 1.0, t0 + 5ms, true, false);
  REQUIRE_FALSE(f.due());
  // Named the CLR: it reports, and again an RTT later with no marker in between.
  f.on_marker(80'000'000, true, 1, 100ms, 0, 70e6, rtt, 1.0, t0 + 12ms, true, true);
  REQUIRE(f.due() == t0 + 12ms);
  REQUIRE(f.fire(t0 + 12ms, 70e6));
  REQUIRE(f.due() == t0 + 12ms + rtt);
  REQUIRE(f.fire(t0 + 22ms, 75e6));
  REQUIRE(f.due() == t0 + 32ms);
  // Slow start over (the marker says so): the CLR goes back to reporting at markers.
  f.on_marker(80'000'000, true, 1, 100ms, 0, 70e6, rtt, 1.0, t0 + 32ms, false, true);
  REQUIRE(f.fire(t0 + 32ms, 70e6));
  REQUIRE_FALSE(f.due());
}

TEST_CASE("rate reports: the first loss event goes at once even right after a receive rate",
          "[unit][receiver]") {
  const time_point t0{std::chrono::seconds(5)};
  rate_feedback f;
  f.on_marker(320'000'000, false, 1, 100ms, 0, 190e6, rtt, 1.0, t0, true, false);
  REQUIRE(f.fire(t0, 190e6));
  // 2 ms later the first loss: within the RTT of the last report, but it ends slow start.
  f.on_loss_event(true, 180e6, rtt, t0 + 2ms);
  REQUIRE(f.due() == t0 + 2ms);
  REQUIRE(f.fire(t0 + 2ms, 180e6));
  // A later urgent event within the RTT waits, as before.
  f.on_loss_event(false, 50e6, rtt, t0 + 4ms);
  REQUIRE_FALSE(f.due());
}
