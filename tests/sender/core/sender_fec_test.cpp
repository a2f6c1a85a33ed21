// The sender core's side of parity repairs (docs/design-notes.md "Parity repairs"): the announce
// carries the FEC shape, NAKed lacks become new parity blocks (the largest lack, not the sum),
// proactive parity follows each FEC block in pass 1, malformed lacks are dropped.
#include "sender/core/sender_session.hpp"

#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <set>

using namespace mcdist;
using namespace mcdist::sender;
using namespace std::chrono_literals;

namespace {

const endpoint rx_a = *parse_endpoint("10.0.0.2:7000");
const endpoint rx_b = *parse_endpoint("10.0.0.3:7000");

template <class Msg>
std::vector<std::byte> datagram(wire::msg_type t, session_id s, const Msg& m) {
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  wire::encode_control(out, t, s, m);
  return out;
}

struct harness {
  sender_config cfg;
  std::unique_ptr<sender_session> s;
  time_point now{100s};
  std::vector<control_send> control;

  /// One file of `blocks` full 1400-byte blocks, FEC blocks of k, receivers a and b.
  harness(std::uint32_t blocks, std::uint32_t k, double overhead = 0,
          std::uint32_t single_parity = 1) {
    cfg.session = session_id{42};
    cfg.single_fec_block_parity = single_parity;
    cfg.rate_bps = 80'000'000;
    cfg.receivers = {"a", "b"};
    cfg.fec_k = k;
    cfg.fec_max_parity = 8;
    cfg.fec_depth = 1;
    cfg.fec_overhead = overhead;
    manifest_entry e;
    e.path = "f";
    e.size = std::uint64_t{blocks} * 1400;
    e.digest = sha256_digest{};
    s = std::make_unique<sender_session>(cfg, std::vector{e}, 1, nullptr);
    s->start(now);
    for (const auto& [id, ep] : {std::pair{"a", rx_a}, std::pair{"b", rx_b}}) {
      wire::register_request r;
      r.set_receiver_id(id);
      s->on_datagram(datagram(wire::msg_type::register_request, cfg.session, r), ep, now);
      tick();
    }
  }
  void tick() {
    s->on_timer(now);
    control_send c;
    while (s->pop_control(c)) control.push_back(std::move(c));
  }
  std::vector<data_send> drain() {
    std::vector<data_send> all;
    std::array<data_send, 64> buf;
    now += 1ms;  // past the NAK backoff before a repair pass
    for (int i = 0; i < 10000; ++i) {
      tick();
      const auto n = s->next_data(now, buf);
      all.insert(all.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
      tick();
      if (s->current_phase() != sender_session::phase::transferring) break;
      now += 1ms;
    }
    return all;
  }
  void lacks(const std::string& id, const endpoint& from,
             std::vector<std::pair<std::uint32_t, std::uint32_t>> fb_lack, std::uint32_t seen) {
    wire::nak m;
    m.set_receiver_id(id);
    m.set_seen_seq(seen);
    std::uint32_t prev = 0;
    bool first = true;
    for (const auto& [fb, lack] : fb_lack) {
      m.add_fec_lacks(first ? fb : fb - prev);
      m.add_fec_lacks(lack);
      prev = fb;
      first = false;
    }
    s->on_datagram(datagram(wire::msg_type::nak, cfg.session, m), from, now);
    tick();
  }
};

std::vector<data_send> parity_of(const std::vector<data_send>& d) {
  std::vector<data_send> out;
  for (const auto& x : d) {
    if (x.parity) out.push_back(x);
  }
  return out;
}

}  // namespace

TEST_CASE("the announce carries the FEC shape", "[unit][sender][fec]") {
  harness h(40, 16);
  bool seen = false;
  for (const auto& c : h.control) {
    wire::header hd;
    if (wire::parse_header(c.bytes, hd) || hd.type != wire::msg_type::announce) continue;
    wire::announce a;
    REQUIRE_FALSE(wire::parse_control(c.bytes, a));
    REQUIRE(a.params().fec_k() == 16);
    REQUIRE(a.params().fec_max_parity() == 8);
    REQUIRE(a.params().fec_depth() == 1);
    seen = true;
  }
  REQUIRE(seen);
  REQUIRE(h.s->fec_layout() != nullptr);
  REQUIRE(h.s->fec_layout()->fec_blocks() == 3);  // 16 + 16 + 8
}

TEST_CASE("lacks from two receivers get the largest lack in new parity blocks",
          "[unit][sender][fec]") {
  harness h(40, 16);
  const auto pass1 = h.drain();
  REQUIRE(parity_of(pass1).empty());  // no proactive parity asked for
  REQUIRE(pass1.size() == 40);
  const std::uint32_t seen = pass1.back().seq;
  h.lacks("a", rx_a, {{0, 2}, {2, 1}}, seen);
  h.lacks("b", rx_b, {{0, 3}}, seen);
  const auto rep = parity_of(h.drain());
  // FEC block 0: max(2, 3) = 3; FEC block 2: 1. Indexes never repeat within a FEC block.
  std::map<std::uint32_t, std::set<std::uint32_t>> by_fb;
  for (const auto& p : rep) REQUIRE(by_fb[p.fec_block].insert(p.parity_index).second);
  REQUIRE(by_fb[0].size() == 3);
  REQUIRE(by_fb[2].size() == 1);
  REQUIRE(by_fb.size() == 2);
  REQUIRE(h.s->report(h.now).parity_datagrams == 4);
  REQUIRE(h.s->report(h.now).repair_datagrams == 4);
  // A repeat of a's NAK from before those went out: they are on their way, nothing new.
  h.lacks("a", rx_a, {{0, 2}}, seen);
  REQUIRE(parity_of(h.drain()).empty());
}

TEST_CASE("next_data codes no more parity than the shell's budget; the rest follows",
          "[unit][sender][fec]") {
  harness h(40, 16);
  const auto pass1 = h.drain();
  const std::uint32_t seen = pass1.back().seq;
  h.lacks("a", rx_a, {{0, 3}, {2, 1}}, seen);
  h.now += 1ms;
  h.tick();
  std::array<data_send, 64> buf;
  std::size_t calls = 0;
  std::size_t parity = 0;
  for (int i = 0; i < 100 && parity < 4; ++i) {
    const auto n = h.s->next_data(h.now, buf, 1);
    REQUIRE(n <= 1);
    if (n == 1) {
      REQUIRE(buf[0].parity);
      ++parity;
      ++calls;
    }
    h.tick();
  }
  REQUIRE(parity == 4);  // every parity block asked for, one per call
  REQUIRE(calls == 4);
}

TEST_CASE("lacks count in the NAK feedback: a NAK of lacks only is a NAK, new parity is fresh",
          "[unit][sender][fec]") {
  // nak12's counters (control_counters, the window's redundancy) see FEC lacks like blocks.
  harness h(40, 16);
  const auto pass1 = h.drain();
  const std::uint32_t seen = pass1.back().seq;
  const auto before = h.s->report(h.now).control;
  h.lacks("a", rx_a, {{0, 2}, {2, 1}}, seen);
  h.lacks("b", rx_b, {{0, 3}}, seen);
  auto c = h.s->report(h.now).control;
  REQUIRE(c.naks == before.naks + 2);
  REQUIRE(c.status == before.status);
  REQUIRE(c.nak_blocks == before.nak_blocks + 6);          // 2 + 1 + 3 named
  REQUIRE(c.nak_new_blocks == before.nak_new_blocks + 4);  // parity scheduled: 3 + 1
  h.drain();
  // A repeat from before that parity went out names blocks, schedules nothing.
  h.lacks("a", rx_a, {{0, 2}}, seen);
  c = h.s->report(h.now).control;
  REQUIRE(c.naks == before.naks + 3);
  REQUIRE(c.nak_blocks == before.nak_blocks + 8);
  REQUIRE(c.nak_new_blocks == before.nak_new_blocks + 4);
}

TEST_CASE("proactive parity follows each FEC block's last source in pass 1",
          "[unit][sender][fec]") {
  harness h(40, 16, 0.10);  // 10 %: 2 parity blocks for 16 sources, 1 for 8
  const auto pass1 = h.drain();
  const auto par = parity_of(pass1);
  REQUIRE(par.size() == 5);
  REQUIRE(h.s->report(h.now).proactive_parity == 5);
  REQUIRE(h.s->report(h.now).repair_datagrams == 0);
  // FEC block 0's parity goes out after its block 15 and before block 16.
  std::size_t last_src0 = 0, first_par0 = pass1.size(), first_src1 = pass1.size();
  for (std::size_t i = 0; i < pass1.size(); ++i) {
    const auto& d = pass1[i];
    if (!d.parity && d.block.value == 15) last_src0 = i;
    if (d.parity && d.fec_block == 0 && first_par0 == pass1.size()) first_par0 = i;
    if (!d.parity && d.block.value == 16) first_src1 = i;
  }
  REQUIRE(last_src0 < first_par0);
  REQUIRE(first_par0 < first_src1);
}

TEST_CASE("a session of a single FEC block sends one parity block after it, unasked",
          "[unit][sender][fec]") {
  harness small(8, 200);  // a 10 kB warning: one FEC block of 8 sources
  auto pass1 = small.drain();
  REQUIRE(pass1.size() == 9);
  REQUIRE(pass1.back().parity);
  REQUIRE(pass1.back().fec_block == 0);
  REQUIRE(small.s->report(small.now).proactive_parity == 1);
  REQUIRE(small.s->report(small.now).repair_datagrams == 0);
  // Two FEC blocks (40 blocks, k = 16): no parity unless fec_overhead asks for it.
  harness two(40, 16);
  REQUIRE(parity_of(two.drain()).empty());
  // Turned off.
  harness off(8, 200, 0, 0);
  REQUIRE(parity_of(off.drain()).empty());
}

TEST_CASE("malformed FEC lacks are dropped whole", "[unit][sender][fec]") {
  harness h(40, 16);
  const auto pass1 = h.drain();
  const std::uint32_t seen = pass1.back().seq;
  const auto before = h.s->report(h.now).drops.total();
  h.lacks("a", rx_a, {{3, 1}}, seen);          // no FEC block 3
  h.lacks("a", rx_a, {{2, 9}}, seen);          // FEC block 2 has 8 sources
  h.lacks("a", rx_a, {{0, 1}, {0, 1}}, seen);  // not ascending
  h.lacks("a", rx_a, {{1, 0}}, seen);          // a lack of 0
  REQUIRE(h.s->report(h.now).drops.total() == before + 4);
  REQUIRE(parity_of(h.drain()).empty());
}
