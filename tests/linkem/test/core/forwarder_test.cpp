#include "tests/linkem/core/forwarder.hpp"

#include <algorithm>
#include <map>

#include <catch2/catch.hpp>

#include "tests/linkem/core/units.hpp"
#include "tests/linkem/test/core/frame_builder.hpp"

using namespace mcdist::linkem;
using namespace mcdist::linkem::test;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t k_net = 0x0A4D0000;  // 10.77.0.0/24
constexpr std::uint32_t k_group = 0xEF010203;

std::uint32_t addr(std::size_t host) { return k_net + static_cast<std::uint32_t>(host) + 1; }

/// Records every frame written, with the virtual time of the run_due call.
struct recording_sink final : packet_sink {
  struct write {
    std::size_t host;
    std::chrono::nanoseconds at;
    bytes frame;
  };
  std::vector<write> writes;
  std::chrono::nanoseconds now{0};
  bool fail = false;

  bool write_frame(std::size_t host, std::span<const std::span<const std::byte>> parts) override {
    bytes f;
    for (const auto& p : parts) {
      f.insert(f.end(), p.begin(), p.end());
    }
    writes.push_back({host, now, std::move(f)});
    return !fail;
  }
  [[nodiscard]] std::vector<bytes> frames_to(std::size_t host) const {
    std::vector<bytes> out;
    for (const auto& w : writes) {
      if (w.host == host) {
        out.push_back(w.frame);
      }
    }
    return out;
  }
};

/// Test bed: n hosts on 10.77.0.0/24, virtual clock, recording sink.
struct bed {
  recording_sink sink;
  forwarder_config config;
  std::unique_ptr<forwarder> fwd;

  explicit bed(std::size_t n, std::uint64_t max_memory = 256U << 20U) {
    config.network = k_net;
    config.netmask = 0xFFFFFF00;
    for (std::size_t i = 0; i < n; ++i) {
      config.addresses.push_back(addr(i));
    }
    config.up.assign(n, link_params{});
    config.down.assign(n, link_params{});
    config.seed = 7;
    config.max_buffer_bytes = max_memory;
  }
  void start() { fwd = std::make_unique<forwarder>(config, sink); }

  void inject(std::size_t host, const bytes& frame, std::chrono::nanoseconds t) {
    buffer_handle buf = fwd->acquire_read_buffer();
    REQUIRE(buf);
    std::memcpy(buf->data(), frame.data(), frame.size());
    buf->length = frame.size();
    fwd->on_frame(host, buf, t);
  }
  void run(std::chrono::nanoseconds t) {
    sink.now = t;
    fwd->run_due(t);
  }
  [[nodiscard]] std::uint64_t global(global_counter c) const { return fwd->counter_value(c); }
  [[nodiscard]] std::uint64_t link(std::size_t h, direction d, link_counter c) const {
    return fwd->counters(h, d).get(c);
  }
  /// packets_in + duplicated = delivered + lost + queue drops + other + in flight.
  void check_conservation() const {
    for (std::size_t h = 0; h < fwd->host_count(); ++h) {
      for (const auto d : {direction::up, direction::down}) {
        INFO("host " << h << (d == direction::up ? " up" : " down"));
        CHECK(link(h, d, link_counter::packets_in) + link(h, d, link_counter::duplicated) ==
              link(h, d, link_counter::delivered) + link(h, d, link_counter::dropped_loss) +
                  link(h, d, link_counter::dropped_queue) +
                  link(h, d, link_counter::dropped_other) + fwd->in_flight(h, d));
      }
    }
  }
};

bytes udp_to(std::uint32_t dst, std::size_t payload, std::uint16_t gso = 0,
             std::uint32_t src = addr(0), unsigned seed = 1) {
  ip_spec ip;
  ip.src = src;
  ip.dst = dst;
  return make_udp_frame(payload_pattern(payload, seed), gso, true, ip);
}

bytes join(std::size_t host, std::uint32_t group, bool v3 = true) {
  if (v3) {
    return make_igmp_frame(igmp_v3({{4, group, {}}}), addr(host), 0xE0000016);
  }
  return make_igmp_frame(igmp_v2(k_igmp_v2_report, group), addr(host), group);
}

bytes leave(std::size_t host, std::uint32_t group) {
  return make_igmp_frame(igmp_v3({{3, group, {}}}), addr(host), 0xE0000016);
}

/// All wire datagrams in the frames, as the receiving kernel would see them.
std::vector<bytes> segments_of(const std::vector<bytes>& frames) {
  std::vector<bytes> out;
  for (const auto& f : frames) {
    REQUIRE(checksum_field_ok(f));
    for (auto& s : reference_segments(f)) {
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("unicast goes to the owner after up and down delay", "[forwarder]") {
  bed b(3);
  b.config.up[0].delay = 10ms;
  b.config.down[1].delay = 20ms;
  b.start();
  const bytes f = udp_to(addr(1), 100);
  b.inject(0, f, 0ms);
  CHECK(*b.fwd->next_due() == 10ms);
  b.run(10ms);
  CHECK(b.sink.writes.empty());
  CHECK(*b.fwd->next_due() == 30ms);
  b.run(std::chrono::nanoseconds(29'999'999));
  CHECK(b.sink.writes.empty());
  b.run(30ms);
  REQUIRE(b.sink.writes.size() == 1);
  CHECK(b.sink.writes[0].host == 1);
  CHECK(b.sink.writes[0].frame == f);  // plain frames are forwarded verbatim
  CHECK_FALSE(b.fwd->next_due());
  b.check_conservation();
}

TEST_CASE("unicast to an unknown address is dropped and counted", "[forwarder]") {
  bed b(2);
  b.start();
  b.inject(0, udp_to(k_net + 99, 100), 0ms);
  b.run(0ms);
  CHECK(b.sink.writes.empty());
  CHECK(b.global(global_counter::unknown_destination) == 1);
}

TEST_CASE("multicast follows IGMP joins and leaves", "[forwarder][igmp]") {
  bed b(4);
  b.start();
  b.inject(0, udp_to(k_group, 200), 0ms);
  b.run(0ms);
  CHECK(b.sink.writes.empty());
  CHECK(b.global(global_counter::no_members) == 1);

  b.inject(1, join(1, k_group), 1ms);
  b.inject(2, join(2, k_group, false), 1ms);
  b.inject(0, join(0, k_group), 1ms);  // the sender itself listening: no loopback via us
  b.run(1ms);
  CHECK(b.sink.writes.empty());  // IGMP is consumed, not forwarded
  CHECK(b.global(global_counter::igmp_messages) == 3);

  b.inject(0, udp_to(k_group, 200), 2ms);
  b.run(2ms);
  REQUIRE(b.sink.writes.size() == 2);
  CHECK(b.sink.writes[0].host == 1);
  CHECK(b.sink.writes[1].host == 2);

  b.inject(1, leave(1, k_group), 3ms);
  b.inject(0, udp_to(k_group, 200), 3ms);
  b.run(3ms);
  REQUIRE(b.sink.writes.size() == 3);
  CHECK(b.sink.writes[2].host == 2);
  CHECK(b.global(global_counter::igmp_leaves) == 1);
}

TEST_CASE("flooding, link-local multicast and broadcast reach every other host", "[forwarder]") {
  SECTION("--flood-multicast") {
    bed b(3);
    b.config.flood_multicast = true;
    b.start();
    b.inject(1, udp_to(k_group, 10, 0, addr(1)), 0ms);
    b.run(0ms);
    REQUIRE(b.sink.writes.size() == 2);
    CHECK(b.sink.writes[0].host == 0);
    CHECK(b.sink.writes[1].host == 2);
  }
  SECTION("224.0.0.251 and the subnet broadcast") {
    bed b(3);
    b.start();
    b.inject(0, udp_to(0xE00000FB, 10), 0ms);
    b.inject(0, udp_to(k_net | 0xFF, 10), 0ms);
    b.run(0ms);
    CHECK(b.sink.writes.size() == 4);
  }
}

TEST_CASE("a GSO frame crosses an unimpaired path as one write", "[forwarder][gso]") {
  bed b(2);
  b.start();
  const bytes f = udp_to(addr(1), 45 * 1400, 1400);
  b.inject(0, f, 0ms);
  b.run(0ms);
  REQUIRE(b.sink.writes.size() == 1);
  CHECK(b.sink.writes[0].frame == f);
  CHECK(b.link(1, direction::down, link_counter::delivered) == 45);
  CHECK(b.link(1, direction::down, link_counter::bytes_delivered) == 45 * 1428);
}

TEST_CASE("loss applies per wire datagram inside GSO frames", "[forwarder][gso]") {
  bed b(3);
  b.config.down[1].loss_rate = 0.3;
  b.start();
  b.inject(1, join(1, k_group), 0ms);
  b.inject(2, join(2, k_group), 0ms);
  std::vector<bytes> originals;
  for (unsigned i = 0; i < 20; ++i) {
    const bytes f = udp_to(k_group, 40 * 1000 - 123, 1000, addr(0), i);
    for (auto& s : reference_segments(f)) {
      originals.push_back(std::move(s));
    }
    b.inject(0, f, std::chrono::milliseconds(i));
    b.run(std::chrono::milliseconds(i));
  }
  // h2 gets everything, h1 what survived: a subsequence of the originals.
  CHECK(segments_of(b.sink.frames_to(2)) == originals);
  const auto got = segments_of(b.sink.frames_to(1));
  const auto lost = b.link(1, direction::down, link_counter::dropped_loss);
  CHECK(got.size() + lost == originals.size());
  CHECK(lost > 150);
  CHECK(lost < 330);
  std::size_t j = 0;
  for (const auto& s : got) {
    while (j < originals.size() && originals[j] != s) {
      ++j;
    }
    REQUIRE(j < originals.size());  // in order, each datagram an exact original
    ++j;
  }
  // Surviving runs are written as GSO frames, not datagram by datagram: each lost
  // datagram splits at most one run, so at most (frames + lost) writes.
  CHECK(b.sink.frames_to(1).size() <= 20 + lost);
  CHECK(b.sink.frames_to(2).size() == 20);
  b.check_conservation();
}

TEST_CASE("a rate-limited down link releases GSO segments one by one", "[forwarder][gso][rate]") {
  bed b(2);
  // 1428-byte datagrams at 11.424 Mbit/s: exactly 1 ms each.
  b.config.down[1].rate_bps = 11.424e6;
  b.start();
  const bytes f = udp_to(addr(1), 5 * 1400, 1400);
  b.inject(0, f, 0ms);
  b.run(0ms);
  CHECK(b.sink.writes.empty());
  CHECK(*b.fwd->next_due() == 1ms);
  b.run(2500us);
  REQUIRE(b.sink.writes.size() == 1);  // segments 0 and 1, coalesced
  CHECK(reference_segments(b.sink.writes[0].frame).size() == 2);
  b.run(5ms);
  REQUIRE(b.sink.writes.size() == 2);
  CHECK(segments_of(b.sink.frames_to(1)) == reference_segments(f));
}

TEST_CASE("a TSO frame with loss yields exact TCP segments", "[forwarder][gso]") {
  bed b(2);
  b.config.down[1].loss_rate = 0.25;
  b.start();
  ip_spec ip;
  const bytes f = make_tcp_frame(payload_pattern(40 * 1448), 777, 0x18, 1448, ip);
  b.inject(0, f, 0ms);
  b.run(0ms);
  const auto expected = reference_segments(f);
  const auto got = segments_of(b.sink.frames_to(1));
  CHECK(got.size() + b.link(1, direction::down, link_counter::dropped_loss) == 40);
  for (const auto& s : got) {
    CHECK(std::find(expected.begin(), expected.end(), s) != expected.end());
  }
}

TEST_CASE("reordered datagrams arrive after later ones", "[forwarder]") {
  bed b(2);
  b.config.down[1].delay = 5ms;
  b.config.down[1].reorder_rate = 0.5;
  b.config.down[1].reorder_delay = 3ms;
  b.start();
  for (unsigned i = 0; i < 200; ++i) {
    b.inject(0, udp_to(addr(1), 100, 0, addr(0), i), std::chrono::microseconds(100 * i));
  }
  for (int t = 0; t <= 40; ++t) {
    b.run(std::chrono::milliseconds(t));
  }
  const auto reordered = b.link(1, direction::down, link_counter::reordered);
  CHECK(reordered > 60);
  CHECK(reordered < 140);
  REQUIRE(b.sink.writes.size() == 200);
  // Reordered datagrams were due 3 ms later: each write happened at or after its due.
  for (std::size_t i = 1; i < b.sink.writes.size(); ++i) {
    CHECK(b.sink.writes[i].at >= b.sink.writes[i - 1].at);
  }
  std::vector<bytes> in_order;
  for (unsigned i = 0; i < 200; ++i) {
    in_order.push_back(udp_to(addr(1), 100, 0, addr(0), i));
  }
  CHECK(b.sink.frames_to(1) != in_order);
  b.check_conservation();
}

TEST_CASE("duplicated datagrams are written twice", "[forwarder]") {
  bed b(2);
  b.config.down[1].duplicate_rate = 1.0;
  b.start();
  b.inject(0, udp_to(addr(1), 100), 0ms);
  b.run(0ms);
  CHECK(b.sink.writes.size() == 2);
  CHECK(b.link(1, direction::down, link_counter::duplicated) == 1);
  CHECK(b.link(1, direction::down, link_counter::delivered) == 2);
  b.check_conservation();
}

TEST_CASE("a full delay line stops at the memory cap and counts the drops", "[forwarder]") {
  bed b(2, 4U << 20U);
  b.config.up[0].delay = 1s;
  b.start();
  for (int i = 0; i < 5000; ++i) {
    b.inject(0, udp_to(addr(1), 1000), std::chrono::microseconds(i));
  }
  const auto exhausted = b.global(global_counter::buffer_exhausted);
  CHECK(exhausted > 0);
  CHECK(b.link(0, direction::up, link_counter::dropped_other) == exhausted);
  CHECK(b.fwd->in_flight(0, direction::up) == 5000 - exhausted);
  b.run(2s);
  CHECK(b.sink.writes.size() == 5000 - exhausted);
  b.check_conservation();
}

TEST_CASE("failed TUN writes are counted as drops", "[forwarder]") {
  bed b(2);
  b.start();
  b.sink.fail = true;
  b.inject(0, udp_to(addr(1), 100), 0ms);
  b.run(0ms);
  CHECK(b.global(global_counter::write_errors) == 1);
  CHECK(b.link(1, direction::down, link_counter::dropped_other) == 1);
  b.check_conservation();
}

TEST_CASE("malformed and non-IPv4 frames are dropped and counted", "[forwarder]") {
  bed b(2);
  b.start();
  bytes v6 = udp_to(addr(1), 10);
  v6[k_vnet_header_size] = std::byte{0x60};
  b.inject(0, v6, 0ms);
  bytes bad = udp_to(addr(1), 10);
  bad.resize(bad.size() - 3);
  b.inject(0, bad, 0ms);
  b.run(0ms);
  CHECK(b.sink.writes.empty());
  CHECK(b.global(global_counter::not_ipv4) == 1);
  CHECK(b.global(global_counter::malformed) == 1);
}

TEST_CASE("configuration errors are reported", "[forwarder]") {
  recording_sink sink;
  forwarder_config c;
  CHECK_THROWS_AS(forwarder(c, sink), config_error);
  c.addresses = {addr(0), addr(0)};
  c.up.resize(2);
  c.down.resize(2);
  CHECK_THROWS_AS(forwarder(c, sink), config_error);
}
