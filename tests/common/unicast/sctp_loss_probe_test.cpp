// The SCTP packet reader (sctp_packet.hpp) and the loss probe under usrsctp associations
// (sctp_loss_probe.hpp), fed packets built here as RFC 9260 section 3 lays them out.

#include "common/unicast/sctp_loss_probe.hpp"
#include "common/unicast/sctp_packet.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <utility>
#include <vector>

using namespace mcdist::unicast;
using namespace std::chrono_literals;
// Virtual time: a fixed start, moved by the tests.
using clock_type = std::chrono::steady_clock;
using bytes = std::vector<std::byte>;

namespace {

void put16(bytes& b, std::uint16_t v) {
  b.push_back(std::byte(v >> 8));
  b.push_back(std::byte(v & 0xff));
}
void put32(bytes& b, std::uint32_t v) {
  put16(b, static_cast<std::uint16_t>(v >> 16));
  put16(b, static_cast<std::uint16_t>(v & 0xffff));
}
bytes common_header() { return bytes(12, std::byte{0x5a}); }

/// A packet of DATA chunks (type 0; 64 = I-DATA) with TSNs first .. first + count - 1, each
/// carrying `payload` bytes (padded to 4).
bytes data_packet(std::uint32_t first, std::uint32_t count, std::uint16_t payload = 33,
                  std::uint8_t type = 0) {
  bytes b = common_header();
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint16_t header = type == 64 ? 20 : 16;
    b.push_back(std::byte{type});
    b.push_back(std::byte{3});
    put16(b, static_cast<std::uint16_t>(header + payload));
    put32(b, first + i);
    put32(b, 1);  // stream, SSN (or reserved)
    put32(b, 0);  // PPID (I-DATA: MID)
    if (type == 64) put32(b, 0);
    b.insert(b.end(), (payload + 3u) & ~3u, std::byte{0x11});
  }
  return b;
}

/// A packet with one SACK (or NR-SACK) chunk: cumulative ack `cum`, gap blocks as offsets.
bytes sack_packet(std::uint32_t cum, std::vector<std::pair<std::uint16_t, std::uint16_t>> gaps = {},
                  bool nr = false) {
  bytes b = common_header();
  b.push_back(std::byte{nr ? std::uint8_t{16} : std::uint8_t{3}});
  b.push_back(std::byte{0});
  put16(b, static_cast<std::uint16_t>((nr ? 20 : 16) + 4 * gaps.size()));
  put32(b, cum);
  put32(b, 1 << 20);  // a_rwnd
  put16(b, static_cast<std::uint16_t>(gaps.size()));
  if (nr) put16(b, 0);  // NR gap blocks
  put16(b, 0);          // duplicate TSNs
  if (nr) put16(b, 0);  // reserved
  for (auto [s, e] : gaps) {
    put16(b, s);
    put16(b, e);
  }
  return b;
}

/// The TSNs of the packets in `v`, as summarize() reads them (first TSN of each).
std::vector<std::uint32_t> first_tsns(const std::vector<std::span<const std::byte>>& v) {
  std::vector<std::uint32_t> out;
  for (auto p : v) {
    sctp_wire::packet_summary s;
    REQUIRE(sctp_wire::summarize(p, s));
    REQUIRE(s.data);
    out.push_back(s.first_tsn);
  }
  return out;
}

/// The verification tag of every packet built here (common_header()).
constexpr std::uint32_t our_tag = 0x5a5a5a5a;

/// Our INIT ACK (type 2), naming `tag` as the tag the peer's packets must carry.
bytes init_ack_packet(std::uint32_t tag) {
  bytes b = common_header();
  b.push_back(std::byte{2});
  b.push_back(std::byte{0});
  put16(b, 20);
  put32(b, tag);
  put32(b, 1 << 20);     // a_rwnd
  put32(b, 0x000a000a);  // streams out, in
  put32(b, 1);           // initial TSN
  return b;
}

/// Our INIT ACK naming our_tag (as usrsctp's handshake would), then TSNs first .. last, one
/// packet each, at `t`.
void send_each(sctp_loss_probe& p, std::uint32_t first, std::uint32_t last,
               clock_type::time_point t) {
  p.on_sent(init_ack_packet(our_tag), t);
  for (std::uint32_t tsn = first; tsn != last + 1; ++tsn) p.on_sent(data_packet(tsn, 1), t);
}

}  // namespace

TEST_CASE("the SCTP packet reader finds TSNs and acks and stops at a bad chunk",
          "[unit][unicast][sctp_loss_probe]") {
  sctp_wire::packet_summary s;
  // Several DATA chunks in one packet, across the TSN wrap: lowest and highest by serial order.
  REQUIRE(sctp_wire::summarize(data_packet(0xfffffffe, 4), s));
  REQUIRE(s.data);
  REQUIRE_FALSE(s.sack);
  REQUIRE(s.first_tsn == 0xfffffffe);
  REQUIRE(s.last_tsn == 1);
  REQUIRE(sctp_wire::summarize(data_packet(77, 2, 5, 64), s));  // I-DATA (RFC 8260)
  REQUIRE(s.first_tsn == 77);
  REQUIRE(s.last_tsn == 78);

  REQUIRE(sctp_wire::summarize(sack_packet(100, {{2, 3}, {6, 6}}), s));
  REQUIRE(s.verification_tag == our_tag);
  REQUIRE_FALSE(s.init);
  REQUIRE(s.sack);
  REQUIRE_FALSE(s.data);
  REQUIRE(s.cum_tsn == 100);
  REQUIRE(s.gap_count == 2);
  REQUIRE(s.gaps[0].first == 102);
  REQUIRE(s.gaps[0].last == 103);
  REQUIRE(s.gaps[1].first == 106);
  REQUIRE(s.gaps[1].last == 106);
  REQUIRE(sctp_wire::summarize(sack_packet(7, {{1, 1}}, true), s));  // NR-SACK
  REQUIRE(s.cum_tsn == 7);
  REQUIRE(s.gap_count == 1);
  REQUIRE(s.gaps[0].first == 8);

  REQUIRE(sctp_wire::summarize(init_ack_packet(0x01020304), s));
  REQUIRE(s.init);
  REQUIRE(s.initiate_tag == 0x01020304);
  // Gap blocks that do not ascend disjoint (overlapping, repeated, out of order) end the list.
  REQUIRE(sctp_wire::summarize(sack_packet(10, {{2, 3}, {3, 5}, {7, 7}}), s));
  REQUIRE(s.gap_count == 1);
  REQUIRE(sctp_wire::summarize(sack_packet(10, {{5, 6}, {2, 3}}), s));
  REQUIRE(s.gap_count == 1);

  // A SACK bundled after DATA (as usrsctp does): both read.
  bytes both = data_packet(5, 1);
  const bytes sack = sack_packet(9);
  both.insert(both.end(), sack.begin() + 12, sack.end());
  REQUIRE(sctp_wire::summarize(both, s));
  REQUIRE(s.data);
  REQUIRE(s.sack);
  REQUIRE(s.cum_tsn == 9);

  // A chunk longer than the packet, one shorter than its header, a packet without a common
  // header: refused; what came before the bad chunk stands.
  bytes bad = data_packet(40, 2);
  bad.resize(bad.size() - 8);
  REQUIRE_FALSE(sctp_wire::summarize(bad, s));
  REQUIRE(s.data);
  REQUIRE(s.first_tsn == 40);
  REQUIRE(s.last_tsn == 40);
  bytes tiny = common_header();
  put32(tiny, 0x00000002);  // type 0, length 2
  REQUIRE_FALSE(sctp_wire::summarize(tiny, s));
  REQUIRE_FALSE(s.data);
  REQUIRE_FALSE(sctp_wire::summarize(bytes(11), s));
  // A SACK whose gap blocks run past its chunk: the blocks inside are read.
  bytes cut = sack_packet(50, {{1, 1}, {3, 4}});
  cut[14] = std::byte{0};
  cut[15] = std::byte{20};  // chunk length: header + fixed part + one block
  cut.resize(12 + 20);
  REQUIRE(sctp_wire::summarize(cut, s));
  REQUIRE(s.gap_count == 1);
}

TEST_CASE("the loss probe repairs nothing before it has a round-trip sample",
          "[unit][unicast][sctp_loss_probe]") {
  sctp_loss_probe p;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  send_each(p, 1, 5, t0);
  REQUIRE(p.held() == 5);
  REQUIRE(p.due(t0 + 10s).empty());
  REQUIRE(p.repairs() == 0);
}

TEST_CASE("a silent tail is probed with the newest packet, then backs off",
          "[unit][unicast][sctp_loss_probe]") {
  sctp_loss_probe p;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  send_each(p, 1, 5, t0);
  p.on_received(sack_packet(2), t0 + 100ms);  // packets 1-2 acked: RTT 100 ms
  REQUIRE(p.srtt() == 100ms);
  REQUIRE(p.held() == 3);
  REQUIRE(p.due(t0 + 199ms).empty());  // 2 x SRTT after the newest packet left
  const auto probe = p.due(t0 + 200ms);
  REQUIRE(first_tsns(probe) == std::vector<std::uint32_t>{5});
  const bytes original = data_packet(5, 1);
  REQUIRE(bytes(probe[0].begin(), probe[0].end()) == original);  // byte for byte
  REQUIRE(p.tail_probes() == 1);
  // Not again until twice the wait has passed, and at most max_repeats times in all.
  REQUIRE(p.due(t0 + 599ms).empty());
  REQUIRE(first_tsns(p.due(t0 + 600ms)) == std::vector<std::uint32_t>{5});
  REQUIRE(first_tsns(p.due(t0 + 1400ms)) == std::vector<std::uint32_t>{5});
  REQUIRE(first_tsns(p.due(t0 + 3000ms)) == std::vector<std::uint32_t>{5});
  REQUIRE(p.due(t0 + 60s).empty());
  REQUIRE(p.repairs() == sctp_loss_probe::max_repeats);
  // Its SACK acknowledges everything: nothing held, nothing due.
  p.on_received(sack_packet(5), t0 + 61s);
  REQUIRE(p.held() == 0);
  REQUIRE(p.due(t0 + 70s).empty());
}

TEST_CASE("a hole below the last acknowledged packet is repaired once no SACK can follow",
          "[unit][unicast][sctp_loss_probe]") {
  sctp_loss_probe p;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  send_each(p, 1, 5, t0);
  // 1 acked, 3-5 in a gap block, 2 missing: every packet sent is accounted for.
  p.on_received(sack_packet(1, {{2, 4}}), t0 + 100ms);
  REQUIRE(p.srtt() == 100ms);
  REQUIRE(p.due(t0 + 124ms).empty());  // SRTT + reordering window (SRTT / 4) after it left
  REQUIRE(first_tsns(p.due(t0 + 125ms)) == std::vector<std::uint32_t>{2});
  REQUIRE(p.tail_probes() == 0);
  // The repair fills the hole; 3-5 arrived long ago and 2 was sent twice: no RTT sample.
  p.on_received(sack_packet(5), t0 + 230ms);
  REQUIRE(p.held() == 0);
  REQUIRE(p.srtt() == 100ms);
}

TEST_CASE("a gap block gives an RTT sample when it first acknowledges a packet",
          "[unit][unicast][sctp_loss_probe]") {
  sctp_loss_probe p;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  send_each(p, 1, 3, t0);
  p.on_received(sack_packet(0, {{2, 3}}), t0 + 80ms);  // 1 missing, 2-3 in: sample 80 ms
  REQUIRE(p.srtt() == 80ms);
  p.on_received(sack_packet(0, {{2, 3}}), t0 + 200ms);  // the same report again: no sample
  REQUIRE(p.srtt() == 80ms);
}

TEST_CASE("a hole with packets still in flight above it is left to SCTP's fast retransmit",
          "[unit][unicast][sctp_loss_probe]") {
  sctp_loss_probe p;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  send_each(p, 1, 8, t0);
  // 2 missing, 3 acked, 4-8 not yet: their SACKs will make SCTP's miss indications.
  p.on_received(sack_packet(1, {{2, 2}}), t0 + 100ms);
  REQUIRE(p.due(t0 + 150ms).empty());
  p.on_received(sack_packet(1, {{2, 4}}), t0 + 110ms);
  REQUIRE(p.due(t0 + 160ms).empty());
  // SCTP's fast retransmission of 2 leaves at 120 ms; 4-8 are acked at 130 ms. The wait for 2
  // now runs from its retransmission: a lost fast retransmission is repaired a round trip
  // (and the reordering window) after it.
  p.on_sent(data_packet(2, 1), t0 + 120ms);
  p.on_received(sack_packet(1, {{2, 7}}), t0 + 130ms);
  // Each SACK acknowledged packets sent at t0 for the first time: samples of 100, 110 and
  // 130 ms (RFC 6298 smoothing).
  const auto srtt = p.srtt();
  REQUIRE(srtt > 100ms);
  REQUIRE(srtt < 110ms);
  const auto at = t0 + 120ms + srtt + srtt / 4;
  REQUIRE(p.due(at - 1ms).empty());
  REQUIRE(first_tsns(p.due(at)) == std::vector<std::uint32_t>{2});
}

TEST_CASE("the loss probe believes only SACKs with the tag its INIT ACK named",
          "[unit][unicast][sctp_loss_probe]") {
  sctp_loss_probe p;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  for (std::uint32_t tsn = 1; tsn <= 3; ++tsn) p.on_sent(data_packet(tsn, 1), t0);
  p.on_received(sack_packet(3), t0 + 50ms);  // no INIT or INIT ACK seen: no tag known
  REQUIRE(p.held() == 3);
  p.on_sent(init_ack_packet(0x11111111), t0);  // the peer's packets must carry 0x11111111
  p.on_received(sack_packet(3), t0 + 60ms);    // ours carry 0x5a5a5a5a: forged
  REQUIRE(p.held() == 3);
  REQUIRE(p.srtt() == clock_type::duration::zero());
  p.on_sent(init_ack_packet(our_tag), t0);  // a restart names the tag they carry
  p.on_received(sack_packet(3), t0 + 70ms);
  REQUIRE(p.held() == 0);
  REQUIRE(p.srtt() == 70ms);
}

TEST_CASE("the loss probe ignores acks of TSNs never sent and bounds its copies",
          "[unit][unicast][sctp_loss_probe]") {
  sctp_loss_probe p;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  send_each(p, 10, 12, t0);
  p.on_received(sack_packet(500), t0 + 50ms);  // beyond anything sent
  REQUIRE(p.held() == 3);
  REQUIRE(p.srtt() == clock_type::duration::zero());
  p.on_received(sack_packet(10, {{1, 400}}), t0 + 50ms);  // a gap block beyond too
  p.on_received(sack_packet(10), t0 + 60ms);
  REQUIRE(p.held() == 2);
  REQUIRE(p.due(t0 + 75ms).empty());  // the bogus block did not make 11 a hole

  sctp_loss_probe many;
  send_each(many, 1, sctp_loss_probe::max_packets + 100, t0);
  REQUIRE(many.held() == sctp_loss_probe::max_packets);
}

TEST_CASE("the loss probe counts what is in flight and what is delivered once",
          "[unit][unicast][sctp_loss_probe]") {
  sctp_loss_probe p;
  const auto t0 = clock_type::time_point{} + std::chrono::hours(1);
  send_each(p, 1, 4, t0);
  const std::size_t each = data_packet(1, 1).size();
  REQUIRE(p.in_flight_bytes() == 4 * each);
  REQUIRE(p.delivered_bytes() == 0);
  // 1 acked, 3 in a gap block: two delivered, two in flight (2 missing, 4 not reported).
  p.on_received(sack_packet(1, {{2, 2}}), t0 + 70ms);
  REQUIRE(p.in_flight_bytes() == 2 * each);
  REQUIRE(p.delivered_bytes() == 2 * each);
  REQUIRE(p.rtt_samples() == 1);
  REQUIRE(p.latest_rtt() == 70ms);
  // A SACK that no longer reports 3 (reneged, RFC 9260 section 6.2): in flight again, but not
  // delivered twice when it is acknowledged after all.
  p.on_received(sack_packet(1), t0 + 80ms);
  REQUIRE(p.in_flight_bytes() == 3 * each);
  p.on_received(sack_packet(4), t0 + 150ms);
  REQUIRE(p.in_flight_bytes() == 0);
  REQUIRE(p.delivered_bytes() == 4 * each);
}
