#include "sender/core/fallback_policy.hpp"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using mcdist::transport_kind;
using mcdist::sender::auto_unicast_connections;
using mcdist::sender::fallback_mode;
using mcdist::sender::fallback_policy;
using mcdist::sender::fallback_settings;

namespace {

const mcdist::endpoint ep = *mcdist::parse_endpoint("10.0.0.1:4712");

fallback_policy with(fallback_settings s, std::initializer_list<transport_kind> offered) {
  fallback_policy p(s);
  for (const auto k : offered) p.set_endpoint(k, ep);
  return p;
}

}  // namespace

TEST_CASE("the fallback transport follows the mode and what the shell offers", "[unit][sender]") {
  using tk = transport_kind;
  const auto all = {tk::sctp_udp, tk::sctp_kernel, tk::tcp};
  REQUIRE_FALSE(with({.mode = fallback_mode::off}, all).transport());
  REQUIRE(with({.mode = fallback_mode::tcp}, all).transport() == tk::tcp);
  REQUIRE_FALSE(with({.mode = fallback_mode::tcp}, {tk::sctp_udp}).transport());
  REQUIRE(with({.mode = fallback_mode::sctp_kernel}, all).transport() == tk::sctp_kernel);
  REQUIRE(with({.mode = fallback_mode::sctp}, all).transport(5s) == tk::sctp_udp);

  // Automatic: SCTP over UDP, multi-socket TCP on a long path, TCP when SCTP is not offered.
  const auto a = with({}, {tk::sctp_udp, tk::tcp});
  REQUIRE(a.transport() == tk::sctp_udp);
  REQUIRE(a.transport(20ms) == tk::sctp_udp);
  REQUIRE(a.transport(fallback_policy::long_path_rtt) == tk::sctp_udp);
  REQUIRE(a.transport(300ms) == tk::tcp);
  REQUIRE(with({}, {tk::sctp_udp}).transport(300ms) == tk::sctp_udp);
  REQUIRE(with({}, {tk::tcp}).transport() == tk::tcp);
  REQUIRE_FALSE(with({}, {tk::sctp_kernel}).transport());
  REQUIRE(a.endpoint_of(tk::tcp) == ep);
  REQUIRE_FALSE(a.endpoint_of(tk::sctp_kernel));
}

TEST_CASE("a receiver goes unicast on its NAK ratio or after enough passes", "[unit][sender]") {
  const auto p =
      with({.nak_ratio = 0.05, .min_sample = 2000, .after_passes = 10}, {transport_kind::sctp_udp});
  REQUIRE_FALSE(p.nak_ratio_exceeded(500, 1999));  // sample too small
  REQUIRE_FALSE(p.nak_ratio_exceeded(100, 2000));  // exactly 5 %: not above
  const auto why = p.nak_ratio_exceeded(110, 2000);
  REQUIRE(why);
  REQUIRE(*why == "NAK ratio 5.5 % above 5.0 % (110 of 2000 blocks)");
  REQUIRE_FALSE(with({.mode = fallback_mode::off}, {}).nak_ratio_exceeded(2000, 2000));
  // Over the ratio, but no other receiver on multicast is below it: moving this one would
  // spare no one its repairs.
  REQUIRE(p.over_nak_ratio(110, 2000));
  REQUIRE_FALSE(p.over_nak_ratio(100, 2000));
  REQUIRE_FALSE(p.over_nak_ratio(500, 1999));
  REQUIRE_FALSE(p.nak_ratio_exceeded(110, 2000, false));
  REQUIRE(p.nak_ratio_exceeded(110, 2000, true) == why);

  REQUIRE_FALSE(p.after_passes(9));
  REQUIRE(p.after_passes(10) == "still missing data after 10 passes");
  // No transport to go to: the receiver stays on multicast (and is failed after max passes).
  REQUIRE_FALSE(with({.after_passes = 1}, {}).after_passes(3));
}

TEST_CASE("the small-set cost model sends a set unicast when that is cheaper", "[unit][sender]") {
  // 1 MB at 100 Mbit/s multicast: 0.08 s + 2 RTT. Unicast at 1 Gbit/s to 2 receivers: 0.016 s
  // + 2 RTT: cheaper. To 20 receivers 0.16 s: dearer.
  const auto p = with({.unicast_rate_bps = 1'000'000'000}, {transport_kind::tcp});
  REQUIRE(p.decides_at_registration());
  const auto why = p.unicast_from_start(1e6, 2, 10ms, 100'000'000);
  REQUIRE(why);
  REQUIRE(why->rfind("small set: unicast to 2 receivers 0.036 s < 1.00 x multicast 0.100 s", 0) ==
          0);
  REQUIRE_FALSE(p.unicast_from_start(1e6, 20, 10ms, 100'000'000));
  REQUIRE_FALSE(p.unicast_from_start(1e6, 0, 10ms, 100'000'000));
  // Model off without a unicast rate; --unicast forces it whatever the numbers.
  const auto off = with({}, {transport_kind::tcp});
  REQUIRE_FALSE(off.decides_at_registration());
  REQUIRE_FALSE(off.unicast_from_start(1e3, 1, 10ms, 100'000'000));
  const auto forced = with({.force_unicast = true}, {transport_kind::tcp});
  REQUIRE(forced.decides_at_registration());
  REQUIRE(forced.unicast_from_start(1e12, 1000, 1s, 0) == "unicast requested by the operator");
  REQUIRE_FALSE(
      with({.mode = fallback_mode::off, .force_unicast = true}, {}).decides_at_registration());
}

TEST_CASE("TCP connections and SCTP associations cover the bandwidth-delay product, 4 to 8",
          "[unit][sender]") {
  REQUIRE(auto_unicast_connections(0, 100ms) == 4);
  REQUIRE(auto_unicast_connections(100'000'000, duration_cast<mcdist::duration>(0ms)) == 4);
  REQUIRE(auto_unicast_connections(10'000'000, 10ms) == 4);  // 12.5 kB: one initial window
  // 100 Mbit/s x 70 ms = 875 kB = 60 initial windows: capped at 8.
  REQUIRE(auto_unicast_connections(100'000'000, 70ms) == 8);
  // 10 Mbit/s x 70 ms = 87.5 kB / 14.48 kB = 6.04: 7.
  REQUIRE(auto_unicast_connections(10'000'000, 70ms) == 7);
  const auto p = with({.unicast_max_rate_bps = 10'000'000}, {transport_kind::tcp});
  // The per-receiver cap, not the rate.
  REQUIRE(p.connections(transport_kind::tcp, 1'000'000'000, 70ms) == 7);
  // SCTP over UDP: two associations up to 200 ms (and when the RTT is not known yet), the TCP
  // rule on longer paths: 10 Mbit/s x 700 ms = 875 kB, capped at 8.
  REQUIRE(p.connections(transport_kind::sctp_udp, 1'000'000'000, 70ms) == 2);
  REQUIRE(p.connections(transport_kind::sctp_udp, 1'000'000'000, 200ms) == 2);
  REQUIRE(p.connections(transport_kind::sctp_udp, 1'000'000'000, 0ms) == 2);
  REQUIRE(p.connections(transport_kind::sctp_udp, 1'000'000'000, 700ms) == 8);
  REQUIRE(with({.unicast_max_rate_bps = 1'000'000}, {})
              .connections(transport_kind::sctp_udp, 1'000'000'000, 300ms) == 4);
  // Each transport's own operator count; kernel SCTP always one.
  const auto given = with({.tcp_connections = 3, .sctp_associations = 2}, {});
  REQUIRE(given.connections(transport_kind::tcp, 1'000'000'000, 70ms) == 3);
  REQUIRE(given.connections(transport_kind::sctp_udp, 1'000'000'000, 70ms) == 2);
  REQUIRE(given.connections(transport_kind::sctp_kernel, 1'000'000'000, 70ms) == 1);
  REQUIRE(given.connections_given(transport_kind::sctp_udp));
  REQUIRE_FALSE(p.connections_given(transport_kind::sctp_udp));
}
