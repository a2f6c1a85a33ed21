#include "sender/core/sender_session.hpp"
#include "sender/core/fallback_policy.hpp"
#include "sender/core/sender_session_parts.hpp"

#include "common/ranges.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>

using namespace mcdist;
using namespace mcdist::sender;
using namespace std::chrono_literals;

namespace {

const endpoint rx_a = *parse_endpoint("10.0.0.2:7000");
const endpoint rx_b = *parse_endpoint("10.0.0.3:7000");

std::vector<manifest_entry> files(std::initializer_list<std::uint64_t> sizes) {
  std::vector<manifest_entry> out;
  int i = 0;
  for (auto s : sizes) {
    manifest_entry e;
    e.path = "f" + std::to_string(i++);
    e.size = s;
    e.digest = sha256_digest{};
    out.push_back(e);
  }
  return out;
}

template <class Msg>
std::vector<std::byte> datagram(wire::msg_type t, session_id s, const Msg& m) {
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  wire::encode_control(out, t, s, m);
  return out;
}

/// Drives a session with virtual time and collects what it sends.
struct harness {
  sender_config cfg;
  std::unique_ptr<sender_session> s;
  time_point now{100s};
  std::vector<control_send> control;

  explicit harness(std::vector<manifest_entry> f, std::vector<std::string> receivers = {"a", "b"},
                   bool eager = true, std::vector<std::string> not_awaited = {},
                   bool own_echoes_only = false) {
    cfg.own_echoes_only = own_echoes_only;
    cfg.session = session_id{42};
    cfg.rate_bps = 80'000'000;  // 10 MB/s
    cfg.receivers = std::move(receivers);
    cfg.not_awaited = std::move(not_awaited);
    cfg.eager_start = eager;
    s = std::make_unique<sender_session>(cfg, std::move(f), 1, nullptr);
    s->start(now);
  }
  void tick() {
    s->on_timer(now);
    control_send c;
    while (s->pop_control(c)) control.push_back(std::move(c));
  }
  template <class Msg>
  std::vector<Msg> sent(wire::msg_type t) {
    std::vector<Msg> out;
    for (const auto& c : control) {
      wire::header h;
      if (wire::parse_header(c.bytes, h) || h.type != t) continue;
      Msg m;
      REQUIRE_FALSE(wire::parse_control(c.bytes, m));
      out.push_back(m);
    }
    return out;
  }
  void register_rx(const std::string& id, const endpoint& from,
                   std::vector<std::uint32_t> held = {}) {
    wire::register_request r;
    r.set_receiver_id(id);
    for (auto v : held) r.add_held_files(v);
    s->on_datagram(datagram(wire::msg_type::register_request, cfg.session, r), from, now);
    tick();
  }
  /// Sends for `d` of virtual time, waking at each deadline (at least `step` apart).
  /// @return the bytes of the data datagrams sent (payload + 48 bytes of headers each)
  std::uint64_t send_for(duration d, duration step = 10us) {
    std::array<data_send, 64> buf;
    const time_point end = now + d;
    std::uint64_t bytes = 0;
    while (now < end) {
      tick();
      const auto n = s->next_data(now, buf);
      for (std::size_t i = 0; i < n; ++i) bytes += buf[i].length + 48;
      now = std::max(*s->next_deadline(now), now + step);
    }
    return bytes;
  }
  std::vector<data_send> drain_data(duration step = 1ms, int max_steps = 100000) {
    std::vector<data_send> all;
    std::array<data_send, 64> buf;
    for (int i = 0; i < max_steps; ++i) {
      tick();
      const auto n = s->next_data(now, buf);
      all.insert(all.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
      tick();
      if (s->current_phase() != sender_session::phase::transferring) break;
      now += step;
    }
    return all;
  }
  void nak(const std::string& id, const endpoint& from, std::uint32_t file,
           std::vector<std::pair<std::uint32_t, std::uint32_t>> runs, std::uint32_t seen_seq,
           std::uint64_t blocks_missing = 0) {
    wire::nak m;
    m.set_receiver_id(id);
    m.set_seen_seq(seen_seq);
    m.set_blocks_missing(blocks_missing);
    auto* fn = m.add_files();
    fn->set_file(file);
    std::vector<std::uint32_t> pairs;
    range_encoder enc(pairs);
    for (auto [f, c] : runs) enc.add(f, c);
    for (auto v : pairs) fn->add_ranges(v);
    s->on_datagram(datagram(wire::msg_type::nak, cfg.session, m), from, now);
    tick();
  }
  void complete(const std::string& id, const endpoint& from) {
    wire::complete m;
    m.set_receiver_id(id);
    m.set_files_stored(1);
    s->on_datagram(datagram(wire::msg_type::complete, cfg.session, m), from, now);
    tick();
  }
};

/// An authenticated closed group {near, far} of one file of `size` bytes whose pass 1 started on
/// near's key alone (far's key request is a round trip further away), near registered.
harness started_on_near_key(std::uint64_t size) {
  harness h(files({size}), {"near", "far"});
  h.cfg.start_on_registration = true;
  h.s = std::make_unique<sender_session>(h.cfg, files({size}), 1, nullptr);
  h.s->start(h.now);
  h.tick();
  h.s->on_site_keyed("near", h.now);
  for (int i = 0; i < 100 && h.s->current_phase() == sender_session::phase::announcing; ++i) {
    h.now = std::max(h.now + 1ms, *h.s->next_deadline(h.now));
    h.tick();
  }
  h.register_rx("near", rx_a);
  return h;
}

}  // namespace

TEST_CASE("announce carries the whole manifest in chunks that fit a datagram", "[unit][sender]") {
  std::vector<manifest_entry> many;
  for (int i = 0; i < 500; ++i) {
    manifest_entry e;
    e.path = "products/obs/2026/11/22/bulletin_" + std::to_string(i) + ".bufr";
    e.size = 1000 + static_cast<std::uint64_t>(i);
    e.digest = sha256_digest{};
    many.push_back(e);
  }
  harness h(many);
  h.tick();
  const auto ann = h.sent<wire::announce>(wire::msg_type::announce);
  REQUIRE(ann.size() > 1);
  std::map<std::uint32_t, std::string> seen;
  for (const auto& a : ann) {
    // The first announce cycle is sent twice back to back.
    REQUIRE(2 * a.params().manifest_chunks() == ann.size());
    REQUIRE(a.params().file_count() == 500);
    REQUIRE(a.params().closed_group());
    for (int i = 0; i < a.files_size(); ++i)
      seen[a.first_file() + static_cast<std::uint32_t>(i)] = a.files(i).path();
  }
  REQUIRE(seen.size() == 500);
  REQUIRE(seen[499] == many[499].path);
  for (const auto& c : h.control) {
    REQUIRE_FALSE(c.to);  // multicast
    REQUIRE(c.bytes.size() <= wire::control_budget);
  }
}

TEST_CASE("without eager start a closed group starts pass 1 once every receiver registered",
          "[unit][sender]") {
  harness h(files({3000, 0, 1400}), {"a", "b"}, false);
  h.tick();
  h.register_rx("a", rx_a);
  REQUIRE(h.s->current_phase() == sender_session::phase::announcing);
  h.register_rx("intruder", rx_b);
  h.register_rx("b", rx_b);
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);
  const auto replies = h.sent<wire::register_reply>(wire::msg_type::register_reply);
  REQUIRE(replies.size() == 3);
  REQUIRE(replies[0].accepted());
  REQUIRE_FALSE(replies[1].accepted());
  REQUIRE(replies[1].reason() == "not a member of the closed group");
  REQUIRE(replies[2].accepted());
  // Pass 1: every block of every file in order; the empty file has none.
  const auto data = h.drain_data();
  REQUIRE(data.size() == 4);
  REQUIRE(data[0].file == file_index{0});
  REQUIRE(data[1].length == 1400);
  REQUIRE(data[2].length == 200);  // 3000 bytes: 1400 + 1400 + 200
  REQUIRE(data[2].offset == 2800);
  REQUIRE(data[3].file == file_index{2});  // 1400 bytes: exactly one block
  REQUIRE(data[3].length == 1400);
  for (std::size_t i = 1; i < data.size(); ++i) REQUIRE(data[i].seq == data[i - 1].seq + 1);
  const auto markers = h.sent<wire::marker>(wire::msg_type::marker);
  REQUIRE_FALSE(markers.empty());
  REQUIRE(markers.back().pass_end());
  REQUIRE(markers.back().pass() == 1);
  REQUIRE(h.s->current_phase() == sender_session::phase::waiting);
}

TEST_CASE("a closed group does not wait for a receiver that is not awaited, but takes it",
          "[unit][sender]") {
  harness h(files({3000}), {"a", "b", "c"}, false, {"c"});
  h.tick();
  h.register_rx("c", rx_b);  // not awaited, yet registering while registration is open
  REQUIRE(h.s->current_phase() == sender_session::phase::announcing);
  h.register_rx("a", rx_a);
  REQUIRE(h.s->current_phase() == sender_session::phase::announcing);  // b is awaited
  h.register_rx("b", rx_b);
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);
  const auto replies = h.sent<wire::register_reply>(wire::msg_type::register_reply);
  REQUIRE(replies.size() == 3);
  for (const auto& r : replies) REQUIRE(r.accepted());
}

TEST_CASE("a receiver not awaited that does not register is failed when the others are in",
          "[unit][sender]") {
  harness h(files({3000}), {"a", "b"}, false, {"b"});
  h.tick();
  h.register_rx("a", rx_a);
  // Closed well before register_timeout: only a was awaited.
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);
  h.register_rx("b", rx_b);
  const auto replies = h.sent<wire::register_reply>(wire::msg_type::register_reply);
  REQUIRE(replies.size() == 2);
  REQUIRE_FALSE(replies[1].accepted());
  REQUIRE(replies[1].reason().find("not awaited") != std::string::npos);
  h.drain_data();
  h.complete("a", rx_a);
  h.now += 60s;
  h.tick();
  const auto rep = h.s->report(h.now);
  REQUIRE(rep.receivers.size() == 2);
  const auto& b = rep.receivers[0].id == "b" ? rep.receivers[0] : rep.receivers[1];
  REQUIRE(b.state == receiver_report::state_t::failed);
  REQUIRE(b.reason.find("not awaited") != std::string::npos);
}

TEST_CASE(
    "a session lingering for a listed receiver that is down stops waiting for it when told, "
    "and ends",
    "[unit][sender]") {
  harness h(files({3000}), {"a", "b"}, true);
  h.tick();
  h.register_rx("a", rx_a);
  REQUIRE_FALSE(h.s->lingering());
  h.drain_data();
  h.complete("a", rx_a);
  h.now += 1s;
  h.tick();
  // Every registered receiver is done; registration stays open for b until register_timeout.
  REQUIRE(h.s->current_phase() == sender_session::phase::waiting);
  REQUIRE(h.s->lingering());
  REQUIRE_FALSE(h.s->stop_awaiting("a", h.now));   // registered
  REQUIRE_FALSE(h.s->stop_awaiting("zz", h.now));  // not listed
  REQUIRE(h.s->stop_awaiting("b", h.now));
  REQUIRE_FALSE(h.s->stop_awaiting("b", h.now));  // once
  REQUIRE_FALSE(h.s->lingering());
  for (int i = 0; i < 100 && !h.s->done(); ++i) {
    h.now += 10ms;
    h.tick();
  }
  REQUIRE(h.s->done());
  REQUIRE(h.now < time_point{100s} + h.cfg.register_timeout);
  const auto rep = h.s->report(h.now);
  const auto& b = rep.receivers[0].id == "b" ? rep.receivers[0] : rep.receivers[1];
  REQUIRE(b.state == receiver_report::state_t::failed);
  REQUIRE(b.reason.find("not awaited") != std::string::npos);
}

TEST_CASE("when no listed receiver is awaited, registration stays open for the window",
          "[unit][sender]") {
  harness h(files({3000}), {"a", "b"}, false, {"a", "b"});
  h.tick();
  h.now += h.cfg.register_window - 1ms;
  h.tick();
  REQUIRE(h.s->current_phase() == sender_session::phase::announcing);
  h.register_rx("a", rx_a);
  REQUIRE(h.s->current_phase() == sender_session::phase::announcing);
  h.now += 2ms;
  h.tick();
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);
}

TEST_CASE("data leaves at the configured rate", "[unit][sender]") {
  harness h(files({14'000'000}), {"a"});
  h.tick();
  h.register_rx("a", rx_a);
  const std::uint64_t bytes = h.send_for(500ms);
  // 0.5 s at 80 Mbit/s = 5 MB on the wire (+ the initial full bucket).
  REQUIRE(bytes >= 4'900'000);
  REQUIRE(bytes <= 5'000'000 + h.cfg.burst_bytes + 1500);
}

TEST_CASE("set_rate changes the pace of a running session from the next datagram on",
          "[unit][sender]") {
  // mcdist-feed lowers a model field's session to a floor while a warning is sent, then raises it.
  harness h(files({40'000'000}), {"a"});
  h.tick();
  h.register_rx("a", rx_a);
  h.send_for(200ms);  // past the initial full bucket
  const auto fast = h.send_for(500ms);
  REQUIRE(fast >= 4'900'000);  // 80 Mbit/s
  h.s->set_rate(800'000);      // 1 %
  REQUIRE(h.s->rate_bps() == 800'000);
  h.send_for(300ms);  // what the bucket held drains
  const auto slow = h.send_for(1s);
  REQUIRE(slow >= 90'000);  // 100 kB/s
  REQUIRE(slow <= 110'000 + 1500);
  h.s->set_rate(80'000'000);
  const auto again = h.send_for(500ms);
  REQUIRE(again >= 4'900'000);
  REQUIRE(again <= 5'000'000 + h.cfg.burst_bytes + 1500);
}

TEST_CASE("at a rate far below the markers' own, progress markers leave room for the data",
          "[unit][sender]") {
  // --rate auto's floor is 64 kbit/s, and a short GRTT asks for a marker every 5 ms: ~100-byte
  // markers at that interval alone would take more than the whole rate, and the pacer would
  // never let a data block go.
  harness h(files({1'400'000}), {"a"});
  h.cfg.rate_bps = 64'000;
  h.cfg.grtt_initial = 2ms;
  h.s = std::make_unique<sender_session>(h.cfg, files({1'400'000}), 1, nullptr);
  h.s->start(h.now);
  h.tick();
  h.register_rx("a", rx_a);
  h.send_for(40s, 100us);  // the bucket's first 256 kB drain
  const std::size_t markers_before = h.sent<wire::marker>(wire::msg_type::marker).size();
  const std::uint64_t data_bytes = h.send_for(20s, 100us);
  // 20 s at 64 kbit/s is 160 kB on the wire: most of it must be data.
  REQUIRE(data_bytes >= 120'000);
  // And the markers still come, about one a second (max_marker_interval).
  const std::size_t markers = h.sent<wire::marker>(wire::msg_type::marker).size() - markers_before;
  REQUIRE(markers >= 10);
}

TEST_CASE("NAKs from several receivers are merged into one repair pass", "[unit][sender]") {
  harness h(files({14'000}));  // 10 blocks
  h.tick();
  h.register_rx("a", rx_a);
  h.register_rx("b", rx_b);
  const auto pass1 = h.drain_data();
  REQUIRE(pass1.size() == 10);
  const std::uint32_t last_seq = pass1.back().seq;
  h.nak("a", rx_a, 0, {{2, 3}}, last_seq);          // 2,3,4
  h.nak("b", rx_b, 0, {{3, 1}, {8, 2}}, last_seq);  // 3, 8, 9
  h.now += 50ms;
  const auto pass2 = h.drain_data();
  std::vector<std::uint32_t> blocks;
  for (const auto& d : pass2) blocks.push_back(d.block.value);
  REQUIRE(blocks == std::vector<std::uint32_t>{2, 3, 4, 8, 9});
  REQUIRE(h.s->pass() == 2);
  // A NAK that left before the repair of block 3 reached the receiver is stale: not resent.
  h.nak("a", rx_a, 0, {{3, 1}}, last_seq);
  h.now += 50ms;
  REQUIRE(h.drain_data().empty());
  // The same NAK after the receiver saw the repair pass is a new loss.
  h.nak("a", rx_a, 0, {{3, 1}}, pass2.back().seq);
  h.now += 50ms;
  const auto pass3 = h.drain_data();
  REQUIRE(pass3.size() == 1);
  REQUIRE(pass3[0].block == block_index{3});
  const auto rep = h.s->report(h.now);
  REQUIRE(rep.repair_datagrams == 6);
}

TEST_CASE("malformed NAKs change nothing and are counted", "[unit][sender]") {
  harness h(files({14'000}), {"a"});
  h.tick();
  h.register_rx("a", rx_a);
  h.drain_data();
  h.nak("a", rx_a, 5, {{0, 1}}, 100);       // no file 5
  h.nak("a", rx_a, 0, {{9, 5}}, 100);       // past the end of the file
  h.nak("nobody", rx_a, 0, {{0, 1}}, 100);  // not registered
  h.now += 50ms;
  REQUIRE(h.drain_data().empty());
  const auto rep = h.s->report(h.now);
  REQUIRE(rep.drops[errc::invalid_field] == 2);
  REQUIRE(rep.drops[errc::not_registered] == 1);
}

TEST_CASE("files every receiver already holds are not sent", "[unit][sender]") {
  harness h(files({2800, 2800, 2800}));
  h.tick();
  std::vector<std::uint32_t> held_01;
  range_encoder enc(held_01);
  enc.add(0, 2);
  h.register_rx("a", rx_a, held_01);
  std::vector<std::uint32_t> held_1;
  range_encoder enc2(held_1);
  enc2.add(1, 1);
  h.register_rx("b", rx_b, held_1);
  const auto data = h.drain_data();
  // File 1 is held by both; file 0 only by a; file 2 by none.
  REQUIRE(data.size() == 4);
  for (const auto& d : data) REQUIRE(d.file != file_index{1});
}

TEST_CASE("a COMPLETE's loss counts are kept, bounded by the datagrams the session sent",
          "[unit][sender]") {
  harness h(files({14'000}), {"a", "b"});  // 10 blocks
  h.tick();
  h.register_rx("a", rx_a);
  h.register_rx("b", rx_b);
  const auto sent = h.drain_data().size();
  REQUIRE(sent == 10);
  auto complete = [&](const char* id, const endpoint& from, std::uint64_t received,
                      std::uint64_t lost) {
    wire::complete m;
    m.set_receiver_id(id);
    m.set_files_stored(1);
    m.set_datagrams_received(received);
    m.set_datagrams_lost(lost);
    h.s->on_datagram(datagram(wire::msg_type::complete, h.cfg.session, m), from, h.now);
    h.tick();
  };
  complete("a", rx_a, 9, 1);
  complete("b", rx_b, 1'000'000, 1'000'000);  // more than there were
  const auto rep = h.s->report(h.now);
  std::map<std::string, receiver_report> by_id;
  for (const auto& r : rep.receivers) by_id[r.id] = r;
  REQUIRE(by_id["a"].datagrams_received == 9);
  REQUIRE(by_id["a"].datagrams_lost == 1);
  REQUIRE(by_id["b"].datagrams_received == sent);
  REQUIRE(by_id["b"].datagrams_lost == 0);
}

TEST_CASE("the session ends once every receiver completed", "[unit][sender]") {
  harness h(files({100}));
  h.tick();
  h.register_rx("a", rx_a);
  h.register_rx("b", rx_b);
  h.drain_data();
  h.complete("a", rx_a);
  REQUIRE_FALSE(h.s->done());
  h.complete("b", rx_b);
  h.complete("b", rx_b);  // a repeat is acknowledged again and changes nothing
  REQUIRE(h.sent<wire::complete_ack>(wire::msg_type::complete_ack).size() == 3);
  for (int i = 0; i < 10 && !h.s->done(); ++i) {
    h.now += 30ms;
    h.tick();
  }
  REQUIRE(h.s->done());
  REQUIRE(h.s->succeeded());
  REQUIRE(h.sent<wire::session_end>(wire::msg_type::session_end).size() == 1);
}

TEST_CASE("when every receiver completed, the session is done with its one END", "[unit][sender]") {
  harness h(files({100}), {"a"});
  h.tick();
  h.register_rx("a", rx_a);
  h.drain_data();
  h.complete("a", rx_a);  // no time passes: END goes out and the session is over
  REQUIRE(h.s->done());
  REQUIRE(h.s->succeeded());
  REQUIRE(h.sent<wire::session_end>(wire::msg_type::session_end).size() == 1);
}

TEST_CASE("a silent receiver is failed after the receiver timeout", "[unit][sender]") {
  harness h(files({100}));
  h.tick();
  h.register_rx("a", rx_a);
  h.register_rx("b", rx_b);
  h.drain_data();
  h.complete("a", rx_a);
  for (int i = 0; i < 200 && !h.s->done(); ++i) {
    h.now += 100ms;
    h.tick();
  }
  REQUIRE(h.s->done());
  REQUIRE_FALSE(h.s->succeeded());
  const auto rep = h.s->report(h.now);
  REQUIRE(rep.receivers[1].state == receiver_report::state_t::failed);
  REQUIRE(rep.receivers[1].reason.find("silent") != std::string::npos);
  REQUIRE(h.sent<wire::session_end>(wire::msg_type::session_end).size() == 3);
}

TEST_CASE("digests that arrive late are multicast once the transfer runs", "[unit][sender]") {
  auto f = files({5000, 5000});
  f[1].digest.reset();
  harness h(f, {"a"}, false);
  h.tick();
  sha256_digest d{};
  d[0] = 0xab;
  h.s->on_digest(file_index{1}, d, h.now);
  h.tick();
  REQUIRE(h.sent<wire::digest_list>(wire::msg_type::digest_list).empty());  // still announcing
  h.register_rx("a", rx_a);
  h.tick();
  const auto lists = h.sent<wire::digest_list>(wire::msg_type::digest_list);
  REQUIRE(lists.size() == 1);
  REQUIRE(lists[0].digests(0).file() == 1);
  REQUIRE(static_cast<std::uint8_t>(lists[0].digests(0).sha256()[0]) == 0xab);
}

TEST_CASE("blocks NAKed behind the cursor are repaired during the pass, ahead of new data",
          "[unit][sender]") {
  harness h(files({140'000}), {"a"});  // 100 blocks
  h.tick();
  h.register_rx("a", rx_a);
  std::array<data_send, 10> buf;
  h.tick();
  REQUIRE(h.s->next_data(h.now, buf) == 10);   // blocks 0-9
  h.nak("a", rx_a, 0, {{3, 2}}, buf[9].seq);   // lost 3 and 4
  h.nak("a", rx_a, 0, {{50, 1}}, buf[9].seq);  // ahead of the cursor: served in order
  h.now += 10ms;
  const auto n = h.s->next_data(h.now, buf);
  REQUIRE(n == 10);
  REQUIRE(buf[0].block == block_index{3});
  REQUIRE(buf[1].block == block_index{4});
  REQUIRE(buf[2].block == block_index{10});
  REQUIRE(h.s->pass() == 1);
  REQUIRE(h.s->report(h.now).repair_datagrams == 2);
  const auto rest = h.drain_data();
  REQUIRE(rest.size() == 100 - 18);  // block 50 once, nothing sent twice
}

TEST_CASE(
    "eager start sends data before registrations arrive and skips files all receivers hold "
    "once they have",
    "[unit][sender]") {
  harness h(files({14'000, 14'000, 14'000}));  // 10 blocks each
  h.tick();
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);
  std::array<data_send, 5> buf;
  REQUIRE(h.s->next_data(h.now, buf) == 5);  // file 0 starts before anyone registered
  std::vector<std::uint32_t> held;
  range_encoder enc(held);
  enc.add(1, 1);  // both hold file 1
  h.register_rx("a", rx_a, held);
  h.register_rx("b", rx_b, held);
  const auto rest = h.drain_data();
  REQUIRE(rest.size() == 5 + 10);
  for (const auto& d : rest) REQUIRE(d.file != file_index{1});
  // Late registrations after the group closed are refused.
  h.register_rx("c", rx_b);
  const auto replies = h.sent<wire::register_reply>(wire::msg_type::register_reply);
  REQUIRE_FALSE(replies.back().accepted());
}

TEST_CASE("the automatic TCP connection count covers the path's bandwidth-delay product",
          "[unit][sender][fallback]") {
  using std::chrono::milliseconds;
  // Allman et al.: T1 at 590 ms, 113 kB in flight = 7.8 initial windows of 10 x 1448 bytes.
  REQUIRE(auto_unicast_connections(1'536'000, milliseconds(590)) == 8);
  // 2 Mbit/s at 300 ms: 75 kB = 5.2 initial windows.
  REQUIRE(auto_unicast_connections(2'000'000, milliseconds(300)) == 6);
  // Ladha & Amer's 1 Mbit/s at 70 ms needs one window: the floor of 4.
  REQUIRE(auto_unicast_connections(1'000'000, milliseconds(70)) == 4);
  // A fast long path is capped at 8; an unknown rate or RTT gives the floor.
  REQUIRE(auto_unicast_connections(1'000'000'000, milliseconds(700)) == 8);
  REQUIRE(auto_unicast_connections(0, milliseconds(700)) == 4);
  REQUIRE(auto_unicast_connections(1'000'000'000, duration::zero()) == 4);
}

namespace {

/// The announces `s` sends at `now` on start, decoded.
std::vector<wire::announce> first_announces(sender_session& s, time_point now) {
  s.start(now);
  s.on_timer(now);
  std::vector<wire::announce> out;
  control_send c;
  while (s.pop_control(c)) {
    wire::header h;
    REQUIRE_FALSE(wire::parse_header(c.bytes, h));
    if (h.type != wire::msg_type::announce) continue;
    wire::announce a;
    REQUIRE_FALSE(wire::parse_control(c.bytes, a));
    out.push_back(a);
  }
  REQUIRE_FALSE(out.empty());
  return out;
}

}  // namespace

TEST_CASE("a session served over unicast from the start names its unicast server in the announce",
          "[unit][sender][fallback]") {
  const auto mode = GENERATE(fallback_mode::tcp, fallback_mode::sctp, fallback_mode::automatic);
  CAPTURE(static_cast<int>(mode));
  sender_config cfg;
  cfg.session = session_id{42};
  cfg.rate_bps = 800'000;
  cfg.receivers = {"a"};
  cfg.force_unicast = true;
  cfg.fallback = mode;
  cfg.tcp_connections = 4;
  sender_session s(cfg, files({100, 200, 300}), 1, nullptr);
  s.set_unicast_endpoint(transport_kind::tcp, *parse_endpoint("10.0.0.1:4712"));
  s.set_unicast_endpoint(transport_kind::sctp_udp, *parse_endpoint("0.0.0.0:4713"));
  for (const auto& a : first_announces(s, time_point{100s})) {
    REQUIRE(a.params().has_unicast_start());
    const auto& u = a.params().unicast_start();
    if (mode == fallback_mode::tcp) {
      CHECK(u.transport() == wire::fallback::TCP);
      CHECK(u.port() == 4712);
      CHECK(u.address() == std::string("\x0a\x00\x00\x01", 4));
      CHECK(u.connections() == 4);
    } else {
      // SCTP (automatic, with no RTT known yet, gives it too), two associations
      // (fallback_policy::short_path_sctp_associations) until an RTT above 200 ms says
      // otherwise; an unspecified address means the announce's own source, and is left out.
      CHECK(u.transport() == wire::fallback::SCTP_UDP);
      CHECK(u.port() == 4713);
      CHECK(u.address().empty());
      CHECK(u.connections() == fallback_policy::short_path_sctp_associations);
    }
  }
}

TEST_CASE("a session that may still go multicast does not name its unicast server",
          "[unit][sender][fallback]") {
  sender_config cfg;
  cfg.session = session_id{42};
  cfg.rate_bps = 800'000;
  cfg.receivers = {"a"};
  cfg.fallback = fallback_mode::tcp;
  cfg.unicast_rate_bps = 100'000'000;  // the cost model may still choose unicast: not forced
  sender_session s(cfg, files({100}), 1, nullptr);
  s.set_unicast_endpoint(transport_kind::tcp, *parse_endpoint("10.0.0.1:4712"));
  for (const auto& a : first_announces(s, time_point{100s})) {
    CHECK_FALSE(a.params().has_unicast_start());
  }
}

TEST_CASE(
    "a unicast receiver that stops answering is failed after the receiver timeout and the "
    "session ends",
    "[unit][sender][fallback]") {
  sender_config cfg;
  cfg.session = session_id{42};
  cfg.rate_bps = 80'000'000;
  cfg.receivers = {"a"};
  cfg.force_unicast = true;
  cfg.fallback = fallback_mode::tcp;
  sender_session s(cfg, files({100}), 1, nullptr);
  s.set_unicast_endpoint(transport_kind::tcp, *parse_endpoint("10.0.0.1:4712"));
  time_point now{100s};
  s.start(now);
  control_send c;
  auto tick = [&] {
    s.on_timer(now);
    while (s.pop_control(c)) {
    }
  };
  tick();
  wire::register_request r;
  r.set_receiver_id("a");
  s.on_datagram(datagram(wire::msg_type::register_request, cfg.session, r), rx_a, now);
  tick();
  fallback_order order;
  REQUIRE(s.pop_fallback(order));
  // It connects (the unicast server saw its token), then neither COMPLETE nor NAK follows: a
  // receiver whose disk failed at the start of a file used to livelock here, and the sender
  // waited forever.
  s.on_unicast_started("a", now);
  const time_point connected = now;
  for (int i = 0; i < 300 && !s.done(); ++i) {
    now += 100ms;
    tick();
  }
  REQUIRE(s.done());
  REQUIRE(now - connected <= cfg.receiver_timeout + 2s);
  const auto rep = s.report(now);
  REQUIRE(rep.receivers[0].state == receiver_report::state_t::failed);
  REQUIRE(rep.receivers[0].reason.find("silent") != std::string::npos);
}

TEST_CASE("COMPLETE with failed files fails the receiver and lists them in the report",
          "[unit][sender]") {
  harness h(files({100, 100}), {"a"});
  h.tick();
  h.register_rx("a", rx_a);
  h.drain_data();
  wire::complete m;
  m.set_receiver_id("a");
  m.set_files_stored(1);
  auto* f = m.add_failures();
  f->set_file(1);
  f->set_reason("disk reserve: \"f1\" (100 bytes) does not fit");
  h.s->on_datagram(datagram(wire::msg_type::complete, h.cfg.session, m), rx_a, h.now);
  for (int i = 0; i < 20 && !h.s->done(); ++i) {
    h.now += 30ms;
    h.tick();
  }
  REQUIRE(h.s->done());
  REQUIRE_FALSE(h.s->succeeded());
  const auto rep = h.s->report(h.now);
  REQUIRE(rep.receivers[0].file_failures.size() == 1);
  REQUIRE(rep.receivers[0].file_failures[0].first == 1);
  REQUIRE(rep.receivers[0].file_failures[0].second.find("disk reserve") == 0);
}

namespace {

/// A REGISTER of a sequenced session: last completed seq and missing ranges.
std::vector<std::byte> sequenced_register(
    session_id s, const std::string& id, std::uint64_t last,
    std::vector<std::pair<std::uint64_t, std::uint64_t>> missing) {
  wire::register_request r;
  r.set_receiver_id(id);
  r.set_last_seq(last);
  for (auto [first, l] : missing) {
    auto* m = r.add_missing_seqs();
    m->set_first(first);
    m->set_last(l);
  }
  return datagram(wire::msg_type::register_request, s, r);
}

}  // namespace

TEST_CASE("a sequenced session announces its channel and number, and reports each site's gaps",
          "[unit][sender][sequence]") {
  sender_config cfg;
  cfg.session = session_id{7};
  cfg.receivers = {"a", "b"};
  cfg.channel = "obs";
  cfg.channel_seq = 5;
  sender_session s(cfg, files({1000}), 1, nullptr);
  time_point now{100s};
  s.start(now);
  s.on_timer(now);
  control_send c;
  std::vector<control_send> out;
  while (s.pop_control(c)) out.push_back(std::move(c));
  REQUIRE_FALSE(out.empty());
  wire::announce a;
  REQUIRE_FALSE(wire::parse_control(out.front().bytes, a));
  REQUIRE(a.params().channel() == "obs");
  REQUIRE(a.params().channel_seq() == 5);

  s.on_datagram(sequenced_register(cfg.session, "a", 2, {{3, 4}}), rx_a, now);
  s.on_datagram(sequenced_register(cfg.session, "b", 0, {}), rx_b, now);
  const auto rep = s.report(now);
  REQUIRE(rep.channel == "obs");
  REQUIRE(rep.channel_seq == 5);
  REQUIRE(rep.receivers.size() == 2);
  for (const auto& r : rep.receivers) {
    REQUIRE(r.state == receiver_report::state_t::registered);
    if (r.id == "a") {
      REQUIRE(r.last_seq == 2);
      REQUIRE(r.missing_seqs == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{3, 4}});
    } else {
      REQUIRE(r.last_seq == 0);
      REQUIRE(r.missing_seqs.empty());
    }
  }
}

TEST_CASE("a REGISTER with malformed or too many missing ranges is dropped and counted",
          "[unit][sender][sequence]") {
  sender_config cfg;
  cfg.session = session_id{7};
  cfg.channel = "obs";
  cfg.channel_seq = 10;
  sender_session s(cfg, files({1000}), 1, nullptr);
  time_point now{100s};
  s.start(now);
  const std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> bad = {
      {{0, 3}},          // seq 0 is "unsequenced", never missing
      {{4, 3}},          // first > last
      {{3, 10}},         // not below this session's number
      {{5, 6}, {2, 3}},  // not ascending
      {{2, 5}, {5, 6}},  // overlapping
  };
  std::uint64_t invalid = 0;
  for (const auto& b : bad) {
    s.on_datagram(sequenced_register(cfg.session, "a", 1, b), rx_a, now);
    REQUIRE(s.report(now).drops.counts[static_cast<std::size_t>(errc::invalid_field)] == ++invalid);
  }
  // 33 ranges: one more than wire::max_seq_ranges (a hostile site cannot grow our report).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> many;
  for (std::uint64_t i = 0; i <= wire::max_seq_ranges; ++i) many.emplace_back(2 * i + 1, 2 * i + 1);
  sender_config big = cfg;
  big.channel_seq = 1000;
  sender_session s2(big, files({1000}), 1, nullptr);
  s2.start(now);
  s2.on_datagram(sequenced_register(big.session, "a", 1, many), rx_a, now);
  REQUIRE(s2.report(now).drops.counts[static_cast<std::size_t>(errc::invalid_field)] == 1);
  REQUIRE(s2.report(now).receivers.empty());
  many.pop_back();
  s2.on_datagram(sequenced_register(big.session, "a", 1, many), rx_a, now);
  REQUIRE(s2.report(now).receivers.size() == 1);
  REQUIRE(s2.report(now).receivers[0].missing_seqs.size() == wire::max_seq_ranges);
  // A hostile last_seq of 2^64-1 is only reported, never used for anything.
  s2.on_datagram(sequenced_register(big.session, "b", ~std::uint64_t{0}, {}), rx_b, now);
  REQUIRE(s2.report(now).receivers.size() == 2);
}

TEST_CASE("an unsequenced session refuses sequence reports and bad sequence settings",
          "[unit][sender][sequence]") {
  sender_config cfg;
  cfg.session = session_id{7};
  sender_session s(cfg, files({1000}), 1, nullptr);
  time_point now{100s};
  s.start(now);
  s.on_datagram(sequenced_register(cfg.session, "a", 0, {{1, 2}}), rx_a, now);
  REQUIRE(s.report(now).drops.counts[static_cast<std::size_t>(errc::invalid_field)] == 1);
  REQUIRE(s.report(now).receivers.empty());

  sender_config no_channel;
  no_channel.channel_seq = 3;
  REQUIRE_THROWS_AS(sender_session(no_channel, files({1}), 1, nullptr), std::invalid_argument);
  sender_config bad_name;
  bad_name.channel = "obs warnings";
  REQUIRE_THROWS_AS(sender_session(bad_name, files({1}), 1, nullptr), std::invalid_argument);
  sender_config catch_up;
  catch_up.channel = "obs";
  catch_up.catch_up_seqs = {{3, 4}, {7, 7}};
  REQUIRE_NOTHROW(sender_session(catch_up, files({1}), 1, nullptr));
  catch_up.channel_seq = 9;  // a catch-up session is unsequenced
  REQUIRE_THROWS_AS(sender_session(catch_up, files({1}), 1, nullptr), std::invalid_argument);
}

TEST_CASE("an open group accepts at most max_receivers; more REGISTERs are refused",
          "[unit][sender]") {
  harness h(files({1000}), {}, true);
  h.cfg.max_receivers = 2;
  h.s = std::make_unique<sender_session>(h.cfg, files({1000}), 1, nullptr);
  h.s->start(h.now);
  h.tick();
  h.register_rx("a", rx_a);
  h.register_rx("b", rx_b);
  h.register_rx("c", rx_b);
  h.register_rx("a", rx_a);  // a repeat of an accepted receiver is answered again
  const auto replies = h.sent<wire::register_reply>(wire::msg_type::register_reply);
  REQUIRE(replies.size() == 4);
  REQUIRE(replies[0].accepted());
  REQUIRE(replies[1].accepted());
  REQUIRE_FALSE(replies[2].accepted());
  REQUIRE(replies[2].reason() == "the session has its maximum number of receivers");
  REQUIRE(replies[3].accepted());
  REQUIRE(h.s->report(h.now).receivers.size() == 2);
}

TEST_CASE(
    "an authenticated session starts pass 1 once every listed site holds the session key, "
    "from its key request or its registration",
    "[unit][sender][auth]") {
  harness h(files({5000, 5000}), {"a", "b"});
  h.cfg.start_on_registration = true;
  h.s = std::make_unique<sender_session>(h.cfg, files({5000, 5000}), 1, nullptr);
  h.s->start(h.now);
  for (int i = 0; i < 20; ++i, h.now += 1ms) h.tick();
  REQUIRE(h.s->current_phase() == sender_session::phase::announcing);  // no site holds the key
  h.s->on_site_keyed("a", h.now);
  h.s->on_site_keyed("a", h.now);         // counted once
  h.s->on_site_keyed("stranger", h.now);  // not listed: ignored
  h.tick();
  REQUIRE(h.s->current_phase() == sender_session::phase::announcing);
  // b registers without a key request (a sender answering none gives the key there): a has
  // not registered yet, but both hold the key, so pass 1 starts while registration is open.
  h.register_rx("b", rx_b);
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);
  for (const auto& r : h.s->report(h.now).receivers) {
    REQUIRE(r.state == (r.id == "a" ? receiver_report::state_t::missing
                                    : receiver_report::state_t::registered));
  }
  const auto data = h.drain_data();
  REQUIRE(data.size() == 8);  // 2 x ceil(5000 / 1400)
}

TEST_CASE("an authenticated open group starts pass 1 two GRTT after the first site holds the key",
          "[unit][sender][auth]") {
  harness h(files({5000}), {});
  h.cfg.start_on_registration = true;
  h.s = std::make_unique<sender_session>(h.cfg, files({5000}), 1, nullptr);
  h.s->start(h.now);
  for (int i = 0; i < 20; ++i, h.now += 1ms) h.tick();
  REQUIRE(h.s->current_phase() == sender_session::phase::announcing);
  h.s->on_site_keyed("a", h.now);
  h.tick();
  REQUIRE(h.s->current_phase() == sender_session::phase::announcing);  // others may follow
  const auto deadline = h.s->next_deadline(h.now);
  REQUIRE(deadline);
  for (int i = 0; i < 100 && h.s->current_phase() == sender_session::phase::announcing; ++i) {
    h.now = std::max(h.now + 1ms, *h.s->next_deadline(h.now));
    h.tick();
  }
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);
}

TEST_CASE(
    "an authenticated session whose sites got the key during the announce burst is due to "
    "start pass 1 at once, not a grace period later",
    "[unit][sender][auth]") {
  harness h(files({5000, 5000}), {"a", "b"});
  h.cfg.start_on_registration = true;
  h.s = std::make_unique<sender_session>(h.cfg, files({5000, 5000}), 1, nullptr);
  h.s->start(h.now);
  // One wake-up queues the whole initial burst; the shell answers the key requests between
  // its chunks (sender_app::poll_feedback), so on_site_keyed comes after on_timer, with no
  // datagram left to wake the shell again.
  h.s->on_timer(h.now);
  h.s->on_site_keyed("a", h.now);
  REQUIRE(h.s->current_phase() == sender_session::phase::announcing);
  // b does not hold the key: no start before the grace period (no busy wake-ups either).
  auto next = h.s->next_deadline(h.now);
  REQUIRE(next);
  REQUIRE(*next > h.now);
  h.s->on_site_keyed("b", h.now);
  next = h.s->next_deadline(h.now);
  REQUIRE(next);
  REQUIRE(*next <= h.now);  // every listed site holds the key: due now
  h.tick();
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);
  REQUIRE(h.drain_data().size() == 8);  // 2 x ceil(5000 / 1400)
}

TEST_CASE(
    "a closed group's site that gets the key after pass 1 gets the blocks sent before it at "
    "once, without a NAK round",
    "[unit][sender][auth]") {
  auto h = started_on_near_key(5000);
  const auto pass1 = h.drain_data();
  REQUIRE(pass1.size() == 4);  // ceil(5000 / 1400)
  REQUIRE(h.s->current_phase() == sender_session::phase::waiting);
  h.s->on_site_keyed("far", h.now);
  // The four blocks far could not check go out again within late_key_gather, in pass 2.
  h.now += sender_session::late_key_gather;
  h.tick();
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);
  const auto again = h.drain_data();
  REQUIRE(again.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) REQUIRE(again[i].offset == pass1[i].offset);
  REQUIRE(h.s->report(h.now).late_key_blocks == 4);
  // near, keyed before pass 1, asked for nothing: a later key of a site already keyed changes
  // nothing either.
  h.s->on_site_keyed("near", h.now);
  h.now += 1s;
  h.tick();
  REQUIRE(h.drain_data().empty());
}

TEST_CASE(
    "the NAK window is drawn for the receivers still active: the last one of a large group is "
    "not held back by a backoff sized for the others",
    "[unit][sender]") {
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) ids.push_back("r" + std::to_string(i));
  harness h(files({5000}), ids);
  for (int i = 0; i < 8; ++i) {
    h.register_rx(ids[static_cast<std::size_t>(i)],
                  *parse_endpoint("10.0.1." + std::to_string(i + 2) + ":7000"));
  }
  REQUIRE(h.drain_data().size() == 4);
  const auto last_marker = [&] {
    const auto markers = h.sent<wire::marker>(wire::msg_type::marker);
    REQUIRE_FALSE(markers.empty());
    return markers.back();
  };
  const auto whole = last_marker();
  REQUIRE(whole.group_size() == 8);
  // Above suppression_threshold: lambda x GRTT / 2, far above the 8 x 20 us spread.
  REQUIRE(whole.nak_backoff_us() > 1000);
  for (int i = 0; i < 7; ++i) {
    h.complete(ids[static_cast<std::size_t>(i)],
               *parse_endpoint("10.0.1." + std::to_string(i + 2) + ":7000"));
  }
  h.control.clear();
  for (int i = 0; i < 500 && h.sent<wire::marker>(wire::msg_type::marker).empty(); ++i) {
    h.now += 10ms;
    h.tick();
  }
  const auto one = last_marker();
  REQUIRE(one.status_request());
  REQUIRE(one.group_size() == 1);
  // One receiver left: the unsuppressed spread, 20 us.
  REQUIRE(one.nak_backoff_us() == 20);
}

TEST_CASE(
    "a far site keyed within a round trip of the start gets every block sent before its key, "
    "however many",
    "[unit][sender][auth]") {
  // 1000 blocks, all out before a geostationary site's key request arrives (0.7 s): more
  // than late_key_max_blocks and 5 % of the session, yet a site that answered the first
  // announces, which would NAK every one of them.
  auto h = started_on_near_key(1'400'000);
  const auto start = h.now;
  REQUIRE(h.drain_data().size() == 1000);
  REQUIRE(h.s->current_phase() == sender_session::phase::waiting);
  while (h.now < start + 700ms) {
    h.now += 10ms;
    h.tick();
  }
  h.drain_data();
  h.s->on_site_keyed("far", h.now);
  h.now += sender_session::late_key_gather;
  h.tick();
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);
  for (int i = 0; i < 200 && h.s->current_phase() == sender_session::phase::transferring; ++i) {
    h.now += 10ms;
    h.tick();
  }
  REQUIRE(h.drain_data().size() == 1000);
  REQUIRE(h.s->report(h.now).late_key_blocks == 1000);
}

TEST_CASE("a site keyed far into a session is not sent everything again by multicast",
          "[unit][sender][auth]") {
  // 1000 blocks, all out when the far site's key leaves, past late_key_window: more than
  // late_key_max_blocks and 5 % of the session; its NAKs take the usual path, where the
  // fallback policy may move it.
  auto h = started_on_near_key(1'400'000);
  const auto start = h.now;
  REQUIRE(h.drain_data().size() == 1000);
  REQUIRE(h.s->current_phase() == sender_session::phase::waiting);
  while (h.now <= start + sender_session::late_key_min_window + 1s) {
    h.now += 100ms;
    h.tick();
  }
  h.drain_data();
  REQUIRE(h.s->current_phase() == sender_session::phase::waiting);
  h.s->on_site_keyed("far", h.now);
  h.now += sender_session::late_key_gather;
  h.tick();
  REQUIRE(h.s->report(h.now).late_key_blocks == 0);
  REQUIRE(h.s->current_phase() == sender_session::phase::waiting);
}

TEST_CASE(
    "rate auto: a loss report lowers the rate at once, markers name the CLR, and a receiver "
    "moved to unicast no longer holds the rate back",
    "[unit][sender][rate]") {
  sender_config cfg;
  cfg.session = session_id{42};
  cfg.receivers = {"a", "b"};
  cfg.rate_auto = true;
  cfg.rate_max_bps = 1'000'000'000;
  cfg.rate_bps = cfg.rate_max_bps;
  cfg.fallback = fallback_mode::sctp;
  cfg.fallback_nak_ratio = 0.05;
  cfg.fallback_min_sample = 1;
  sender_session s(cfg, files({1'400'000}), 1, nullptr);  // 1000 blocks
  s.set_unicast_endpoint(transport_kind::sctp_udp, *parse_endpoint("10.0.0.1:4712"));
  time_point now{100s};
  s.start(now);
  std::vector<control_send> sent;
  auto tick = [&] {
    s.on_timer(now);
    control_send c;
    while (s.pop_control(c)) sent.push_back(std::move(c));
  };
  tick();
  for (const char* id : {"a", "b"}) {
    wire::register_request r;
    r.set_receiver_id(id);
    s.on_datagram(datagram(wire::msg_type::register_request, cfg.session, r),
                  std::string(id) == "a" ? rx_a : rx_b, now);
    tick();
  }
  REQUIRE(s.rate_bps() == cfg.rate_auto_initial_bps);
  // Slow start: without a loss report the rate doubles once per GRTT.
  std::array<data_send, 64> buf;
  for (int i = 0; i < 40; ++i) {
    now += 50ms;
    s.next_data(now, buf);
    tick();
  }
  REQUIRE(s.rate_bps() > cfg.rate_auto_initial_bps);
  const std::uint64_t before = s.rate_bps();
  auto report = [&](const char* id, const endpoint& from, std::uint64_t bps) {
    wire::nak m;
    m.set_receiver_id(id);
    m.set_rate_report(true);
    m.set_rate_bps(bps);
    m.set_loss_ppb(1'000'000);
    m.set_rtt_us(10'000);
    s.on_datagram(datagram(wire::msg_type::nak, cfg.session, m), from, now);
    tick();
  };
  report("a", rx_a, 2'000'000);
  REQUIRE(s.rate_bps() == 2'000'000);
  REQUIRE(s.rate_bps() < before);
  report("b", rx_b, 50'000'000);  // higher: a stays the CLR
  REQUIRE(s.rate_bps() == 2'000'000);
  REQUIRE(s.report(now).rate_clr == "a");
  now += 1s;
  tick();
  bool named = false;
  for (const auto& c : sent) {
    wire::header h;
    wire::marker m;
    if (wire::parse_header(c.bytes, h) || h.type != wire::msg_type::marker) continue;
    REQUIRE_FALSE(wire::parse_control(c.bytes, m));
    REQUIRE(m.rate_bps() > 0);
    named = named || m.rate_clr() == "a";
  }
  REQUIRE(named);
  // a NAKs far more than 5 % of what was sent: it is moved to unicast and stops being the CLR.
  wire::nak n;
  n.set_receiver_id("a");
  n.set_seen_seq(0);
  auto* fn = n.add_files();
  fn->set_file(0);
  fn->add_ranges(0);
  fn->add_ranges(900);
  s.on_datagram(datagram(wire::msg_type::nak, cfg.session, n), rx_a, now);
  tick();
  fallback_order order;
  REQUIRE(s.pop_fallback(order));
  REQUIRE(order.receiver_id == "a");
  REQUIRE(s.report(now).rate_clr == "b");
  // Its reports no longer count.
  const std::uint64_t after = s.rate_bps();
  report("a", rx_a, 1'000'000);
  REQUIRE(s.rate_bps() >= after);
  REQUIRE(s.report(now).rate_clr == "b");
  const auto rep = s.report(now);
  REQUIRE(rep.rate_auto);
  REQUIRE(rep.rate_max_bps == cfg.rate_max_bps);
  REQUIRE(rep.rate_lowest_bps == 2'000'000);
}

namespace {

/// A --rate auto session (ceiling 20 Gbit/s) of one 14 MB file to the closed group {"a"}, "a"
/// registered, driven by hand: the markers it sends are kept.
struct auto_session {
  explicit auto_session(std::uint32_t id)
      : cfg(config(id)), s(cfg, files({14'000'000}), 1, nullptr) {
    s.start(now);
    tick();
    wire::register_request r;
    r.set_receiver_id("a");
    s.on_datagram(datagram(wire::msg_type::register_request, cfg.session, r), rx_a, now);
    tick();
  }
  static sender_config config(std::uint32_t id) {
    sender_config c;
    c.session = session_id{id};
    c.receivers = {"a"};
    c.rate_auto = true;
    c.rate_max_bps = 20'000'000'000;
    c.rate_bps = c.rate_max_bps;
    return c;
  }
  void tick() {
    s.on_timer(now);
    control_send c;
    while (s.pop_control(c)) {
      wire::header h;
      wire::marker m;
      if (wire::parse_header(c.bytes, h) || h.type != wire::msg_type::marker) continue;
      if (!wire::parse_control(c.bytes, m)) markers.push_back(m);
    }
  }
  /// `steps` steps of 50 ms, sending what the pacer lets go.
  void run(int steps) {
    std::array<data_send, 64> buf;
    for (int i = 0; i < steps; ++i) {
      now += 50ms;
      s.next_data(now, buf);
      tick();
    }
  }
  /// A rate report (a NAK naming nothing) from `id` at `from`, its fields set by `fill`.
  template <typename Fill>
  void report(const char* id, const endpoint& from, Fill fill) {
    wire::nak m;
    m.set_receiver_id(id);
    m.set_rate_report(true);
    m.set_rtt_us(1'000);
    fill(m);
    s.on_datagram(datagram(wire::msg_type::nak, cfg.session, m), from, now);
    tick();
  }

  sender_config cfg;
  time_point now{100s};
  sender_session s;
  std::vector<wire::marker> markers;
};

}  // namespace

TEST_CASE(
    "rate auto: a receiver's overrun report ends slow start and caps the rate below what it "
    "takes in; a registered receiver only",
    "[unit][sender][rate]") {
  auto_session a(43);
  a.run(40);
  REQUIRE(a.s.rate_bps() > 100'000'000);  // slow start, above what "a" takes
  auto overrun = [&](const char* id, const endpoint& from, std::uint64_t bps) {
    a.report(id, from, [&](wire::nak& m) { m.set_overrun_bps(bps); });
  };
  overrun("x", rx_b, 1'000'000);  // not a registered receiver: ignored
  REQUIRE(a.s.rate_bps() > 100'000'000);
  overrun("a", rx_a, 100'000'000);
  REQUIRE(a.s.rate_bps() == 85'000'000);  // 0.85 of what it takes in
  const auto rep = a.s.report(a.now);
  REQUIRE(rep.control.overrun_reports == 1);
  REQUIRE(rep.rate_lowest_bps == 85'000'000);  // slow start is over
  REQUIRE(rep.rate_clr.empty());               // an overrun names no CLR: not the path's loss
}

TEST_CASE(
    "rate auto: slow start's markers ask for receive rates and stay under twice the lowest "
    "(RFC 4654 section 3.4)",
    "[unit][sender][rate]") {
  auto_session a(44);
  a.run(40);
  REQUIRE(a.s.rate_bps() > a.cfg.rate_auto_initial_bps);  // no report yet: it doubles
  REQUIRE_FALSE(a.markers.empty());
  REQUIRE(a.markers.back().rate_slow_start());
  REQUIRE(a.markers.back().rate_clr().empty());
  auto receive_rate = [&](const char* id, const endpoint& from, std::uint64_t bps) {
    a.report(id, from, [&](wire::nak& m) { m.set_receive_bps(bps); });
  };
  const std::uint64_t held = a.s.rate_bps();
  receive_rate("x", rx_b, 1'000);  // not a registered receiver: ignored
  receive_rate("a", rx_a, held / 2);
  a.run(30);  // 1.5 s: several GRTTs, and no doubling (the report is not yet 2 s old)
  REQUIRE(a.s.rate_bps() == held);
  REQUIRE(a.markers.back().rate_slow_start());
  REQUIRE(a.markers.back().rate_clr() == "a");
  receive_rate("a", rx_a, held);  // the last doubling got through: the next may go
  REQUIRE(a.s.rate_bps() == 2 * held);
  // The first loss report ends slow start; the markers say so.
  a.report("a", rx_a, [&](wire::nak& m) {
    m.set_rate_bps(held);
    m.set_loss_ppb(1'000);
  });
  a.run(10);
  REQUIRE(a.s.rate_bps() == held);
  REQUIRE_FALSE(a.markers.back().rate_slow_start());
}

TEST_CASE(
    "rate auto: after a hold-up the sender catches up at most auto_catch_up_ms of the rate, "
    "not a burst into the bottleneck's queue",
    "[unit][sender][rate]") {
  auto_session a(45);
  a.run(40);
  // A loss report ends slow start and sets the rate: 100 Mbit/s, 12.5 kB a millisecond.
  constexpr std::uint64_t rate = 100'000'000;
  REQUIRE(a.s.rate_bps() > rate);
  a.report("a", rx_a, [&](wire::nak& m) {
    m.set_rate_bps(rate);
    m.set_loss_ppb(1'000);
  });
  REQUIRE(a.s.rate_bps() == rate);
  // Steady sending, 1 ms steps, then the sender is held up for 20 ms.
  std::array<data_send, 256> buf;
  auto wire_bytes = [&](std::size_t n) {
    std::uint64_t b = 0;
    for (std::size_t i = 0; i < n; ++i) {
      b += buf[i].length + wire::data_header_size + session_detail::ip_udp_overhead;
    }
    return b;
  };
  for (int i = 0; i < 50; ++i) {
    a.now += 1ms;
    (void)a.s.next_data(a.now, buf);
  }
  a.now += 20ms;
  std::uint64_t burst = 0;
  for (std::size_t n; (n = a.s.next_data(a.now, buf)) > 0;) burst += wire_bytes(n);
  REQUIRE(a.s.rate_bps() == rate);
  const std::uint64_t per_ms = rate / 8 / 1000;
  // One datagram of rounding on either side of the bucket's depth.
  const std::uint64_t datagram = a.cfg.block_size + wire::data_header_size + 100;
  REQUIRE(burst + datagram >= session_detail::auto_catch_up_ms * per_ms);
  REQUIRE(burst <= session_detail::auto_catch_up_ms * per_ms + datagram);
  REQUIRE(session_detail::auto_catch_up_ms < session_detail::catch_up_ms);
}

namespace {

/// Rebuilds h's session over one 14,000-byte file (10 blocks) with an SCTP fallback at NAK
/// ratio `ratio`, judged from the first datagram on, and starts it.
void with_sctp_fallback(harness& h, double ratio) {
  h.cfg.fallback = fallback_mode::sctp;
  h.cfg.fallback_nak_ratio = ratio;
  h.cfg.fallback_min_sample = 1;
  h.s = std::make_unique<sender_session>(h.cfg, files({14'000}), 1, nullptr);
  h.s->set_unicast_endpoint(transport_kind::sctp_udp, *parse_endpoint("10.0.0.1:4712"));
  h.s->start(h.now);
  h.tick();
}

}  // namespace

TEST_CASE("a receiver over the NAK ratio stays on multicast when no other receiver is below it",
          "[unit][sender]") {
  // The trigger spares the others a lossy receiver's repairs. Alone on multicast, or with every
  // receiver as lossy (a rate above what they take), moving it spares no one and trades the
  // multicast rate for one unicast stream.
  SECTION("the only receiver") {
    harness h(files({14'000}), {"a"});  // 10 blocks
    with_sctp_fallback(h, 0.5);
    h.register_rx("a", rx_a);
    const auto pass1 = h.drain_data();
    REQUIRE(pass1.size() == 10);
    h.nak("a", rx_a, 0, {{0, 8}}, pass1.back().seq);
    fallback_order order;
    REQUIRE_FALSE(h.s->pop_fallback(order));
    h.now += 50ms;
    REQUIRE(h.drain_data().size() == 8);  // repaired on multicast
    for (const auto& rr : h.s->report(h.now).receivers)
      REQUIRE(rr.path == delivery_path::multicast);
  }
  SECTION("the last receiver left on multicast") {
    harness h(files({14'000}), {"a", "b"});
    with_sctp_fallback(h, 0.5);
    h.register_rx("a", rx_a);
    h.register_rx("b", rx_b);
    const auto pass1 = h.drain_data();
    REQUIRE(pass1.size() == 10);
    // b is below when a first goes over: a moves, and b, now alone on multicast, stays.
    h.nak("a", rx_a, 0, {{0, 8}}, pass1.back().seq);
    fallback_order order;
    REQUIRE(h.s->pop_fallback(order));
    REQUIRE(order.receiver_id == "a");
    h.nak("b", rx_b, 0, {{0, 7}}, pass1.back().seq);
    REQUIRE_FALSE(h.s->pop_fallback(order));
  }
}

TEST_CASE(
    "a NAK that moves its receiver to unicast is answered there, not by a multicast repair "
    "pass to every receiver",
    "[unit][sender]") {
  harness h(files({14'000}), {"a", "b"});  // 10 blocks
  with_sctp_fallback(h, 0.5);              // a's 8 of 10 blocks are over it, b's 1 is not
  h.register_rx("a", rx_a);
  h.register_rx("b", rx_b);
  const auto pass1 = h.drain_data();
  REQUIRE(pass1.size() == 10);
  const std::uint32_t last_seq = pass1.back().seq;
  // a lacks 8 of 10 blocks (it learned the manifest late): over the ratio, it goes unicast.
  h.nak("a", rx_a, 0, {{0, 8}}, last_seq);
  fallback_order order;
  REQUIRE(h.s->pop_fallback(order));
  REQUIRE(order.receiver_id == "a");
  // b lacks one block: the repair pass carries that one, not a's eight.
  h.nak("b", rx_b, 0, {{9, 1}}, last_seq);
  h.now += 50ms;
  const auto pass2 = h.drain_data();
  std::vector<std::uint32_t> blocks;
  for (const auto& d : pass2) blocks.push_back(d.block.value);
  REQUIRE(blocks == std::vector<std::uint32_t>{9});
  const auto rep = h.s->report(h.now);
  REQUIRE(rep.repair_datagrams == 1);
  for (const auto& rr : rep.receivers) {
    if (rr.id == "a") REQUIRE(rr.blocks_naked == 8);
  }
}

TEST_CASE(
    "a receiver whose whole need is over the NAK ratio moves at its first NAK datagram, before "
    "the blocks that datagram names are scheduled for everyone",
    "[unit][sender]") {
  harness h(files({14'000}), {"a", "b"});  // 10 blocks
  with_sctp_fallback(h, 0.5);
  h.register_rx("a", rx_a);
  h.register_rx("b", rx_b);
  const auto pass1 = h.drain_data();
  REQUIRE(pass1.size() == 10);
  // a's round names its 8 missing blocks over several datagrams (the cap cut it): the first
  // names 2, under the ratio, but says 8 are missing in all.
  h.nak("a", rx_a, 0, {{0, 2}}, pass1.back().seq, 8);
  fallback_order order;
  REQUIRE(h.s->pop_fallback(order));
  REQUIRE(order.receiver_id == "a");
  h.nak("b", rx_b, 0, {{9, 1}}, pass1.back().seq, 1);
  h.now += 50ms;
  std::vector<std::uint32_t> blocks;
  for (const auto& d : h.drain_data()) blocks.push_back(d.block.value);
  REQUIRE(blocks == std::vector<std::uint32_t>{9});  // not a's two
  // A claim of more than was sent counts as what was sent (here the whole file: still over).
  SECTION("blocks_missing is capped at the data sent") {
    harness g(files({14'000}), {"a", "b"});
    with_sctp_fallback(g, 0.5);
    g.register_rx("a", rx_a);
    g.register_rx("b", rx_b);
    const auto p1 = g.drain_data();
    g.nak("b", rx_b, 0, {{9, 1}}, p1.back().seq, 1'000'000);
    REQUIRE(g.s->pop_fallback(order));
    REQUIRE(order.receiver_id == "b");
    for (const auto& rr : g.s->report(g.now).receivers) {
      if (rr.id == "b") REQUIRE(rr.blocks_naked <= 10);
    }
  }
}

TEST_CASE(
    "a relay's session sends what it holds, waits for what is on its way and passes over "
    "what was lost upstream until the repair is held",
    "[unit][sender]") {
  std::set<std::pair<std::uint32_t, std::uint32_t>> held;
  relay_gate gate([&held](std::uint32_t f, std::uint32_t b) { return held.count({f, b}) > 0; });
  harness h(files({5 * 1400}), {"a"});
  h.cfg.block_gate = [&gate](std::uint32_t f, std::uint32_t b) { return gate.answer(f, b); };
  h.s = std::make_unique<sender_session>(h.cfg, files({5 * 1400}), 1, nullptr);
  h.s->start(h.now);
  h.register_rx("a", rx_a);
  std::array<data_send, 64> buf;
  auto blocks = [&] {
    std::vector<std::uint32_t> out;
    h.tick();
    const auto n = h.s->next_data(h.now, buf);
    for (std::size_t i = 0; i < n; ++i) out.push_back(buf[i].block.value);
    h.tick();
    return out;
  };
  for (int i = 0; i < 100 && h.s->current_phase() == sender_session::phase::announcing; ++i) {
    h.now = std::max(h.now + 1ms, *h.s->next_deadline(h.now));
    h.tick();
  }
  REQUIRE(h.s->current_phase() == sender_session::phase::transferring);

  // Nothing held, nothing passed upstream: the sweep waits, and the session does not ask to be
  // woken for the pacer (only for its markers).
  REQUIRE(blocks().empty());
  REQUIRE(h.s->gate_waiting());
  REQUIRE(*h.s->next_deadline(h.now) > h.now + 1ms);

  held = {{0, 0}, {0, 1}};
  gate.on_upstream_block(0, 1);
  h.s->on_available(h.now);
  REQUIRE(blocks() == std::vector<std::uint32_t>{0, 1});
  REQUIRE(h.s->gate_waiting());

  // Block 2 was lost upstream: block 3 arrived, so the sweep passes over 2 and waits at 4.
  held.insert({0, 3});
  gate.on_upstream_block(0, 3);
  h.s->on_available(h.now);
  REQUIRE(blocks() == std::vector<std::uint32_t>{3});
  REQUIRE(h.s->gate_waiting());

  // The upstream pass ended without block 4 either: pass 1 ends, and pass 2 finds both still
  // missing, so the session waits instead of sweeping again.
  gate.upstream_pass_over();
  h.s->on_available(h.now);
  REQUIRE(blocks().empty());  // pass 1 ends, pass 2 starts
  REQUIRE(h.s->pass() == 2);
  REQUIRE(blocks().empty());  // pass 2 passes over both
  REQUIRE(h.s->current_phase() == sender_session::phase::waiting);
  const auto pass = h.s->pass();
  REQUIRE(pass == 2);

  // The site asks for 2 and 4 again: nothing new to sweep for, no pass starts.
  h.nak("a", rx_a, 0, {{2, 1}, {4, 1}}, 3);
  for (int i = 0; i < 20; ++i) {
    h.now += 50ms;
    REQUIRE(blocks().empty());
  }
  REQUIRE(h.s->pass() == pass);
  REQUIRE(h.s->current_phase() == sender_session::phase::waiting);

  // The upstream repairs are held: the next pass sends them, after gathering.
  held.insert({0, 2});
  held.insert({0, 4});
  h.s->on_available(h.now);
  h.now += sender_session::relay_gather;
  REQUIRE(blocks() == std::vector<std::uint32_t>{2, 4});
  REQUIRE(h.s->pass() == pass + 1);
}

TEST_CASE("a relay's session encodes parity only for FEC blocks whose sources it holds",
          "[unit][sender]") {
  // Two FEC blocks of 2 sources each (k = 2, depth 1): 0 = blocks 0, 1; 1 = blocks 2, 3.
  std::set<std::pair<std::uint32_t, std::uint32_t>> held{{0, 0}, {0, 1}, {0, 2}, {0, 3}};
  relay_gate gate([&held](std::uint32_t f, std::uint32_t b) { return held.count({f, b}) > 0; });
  harness h(files({4 * 1400}), {"a"});
  h.cfg.fec_k = 2;
  h.cfg.fec_depth = 1;
  h.cfg.block_gate = [&gate](std::uint32_t f, std::uint32_t b) { return gate.answer(f, b); };
  const sender_session* session = nullptr;
  h.cfg.parity_gate = [&](std::uint32_t fb) {
    return gate.parity_ready(*session->fec_layout(), fb);
  };
  h.s = std::make_unique<sender_session>(h.cfg, files({4 * 1400}), 1, nullptr);
  session = h.s.get();
  h.s->start(h.now);
  h.register_rx("a", rx_a);
  const auto sent = h.drain_data();
  REQUIRE(sent.size() == 4);  // pass 1: the sources
  REQUIRE(h.s->fec_layout()->fec_blocks() == 2);
  // The relay no longer holds block 2 (say, a newer product replaced the file): the site lacks
  // one block of each FEC block, and only FEC block 0's parity can be made.
  held.erase({0, 2});
  wire::nak m;
  m.set_receiver_id("a");
  m.set_seen_seq(4);
  m.set_pass(h.s->pass());
  for (const std::uint32_t v : {0U, 1U, 1U, 1U}) m.add_fec_lacks(v);  // (FEC block step, lack)
  h.s->on_datagram(datagram(wire::msg_type::nak, h.cfg.session, m), rx_a, h.now);
  h.now += 1s;
  const auto repair = h.drain_data();
  REQUIRE(repair.size() == 1);
  REQUIRE(repair[0].parity);
  REQUIRE(repair[0].fec_block == 0);
  held.insert({0, 2});
  h.s->on_available(h.now);
  h.now += 1s;
  const auto later = h.drain_data();
  REQUIRE(later.size() == 1);
  REQUIRE(later[0].parity);
  REQUIRE(later[0].fec_block == 1);
}

TEST_CASE(
    "a session taken up again numbers past the run before and admits its sites by their "
    "feedback",
    "[unit][sender]") {
  harness h(files({3 * 1400}), {});
  h.cfg.receivers.clear();
  h.cfg.wire_pass_offset = 1000;
  h.cfg.first_seq = 1U << 28;
  h.cfg.admit_on_feedback = true;
  h.cfg.register_window = 30s;
  h.s = std::make_unique<sender_session>(h.cfg, files({3 * 1400}), 1, nullptr);
  h.s->start(h.now);
  const auto sent = h.drain_data();
  REQUIRE(sent.size() == 3);
  REQUIRE(sent.front().seq == (1U << 28) + 1);
  const auto markers = h.sent<wire::marker>(wire::msg_type::marker);
  REQUIRE_FALSE(markers.empty());
  REQUIRE(markers.back().pass() == 1001);
  REQUIRE(markers.back().seq() == (1U << 28) + 3);
  // A site that registered with the run before NAKs block 1, having seen the new numbers to the
  // end: it is admitted, and the block is wanted again.
  h.nak("a", rx_a, 0, {{1, 1}}, (1U << 28) + 3);
  auto rep = h.s->report(h.now);
  REQUIRE(rep.receivers.size() == 1);
  REQUIRE(rep.receivers[0].id == "a");
  REQUIRE(rep.receivers[0].state == receiver_report::state_t::registered);
  REQUIRE(rep.receivers[0].blocks_naked == 1);
  h.now += 1s;
  const auto repair = h.drain_data();
  REQUIRE(repair.size() == 1);
  REQUIRE(repair[0].block.value == 1);
  // Another one that got everything completes without having registered here.
  h.complete("b", rx_b);
  rep = h.s->report(h.now);
  REQUIRE(rep.receivers.size() == 2);
  REQUIRE(rep.receivers[1].state == receiver_report::state_t::completed);
}

TEST_CASE("a session's own feedback from an unknown receiver is refused", "[unit][sender]") {
  harness h(files({3 * 1400}), {});
  h.nak("x", rx_a, 0, {{1, 1}}, 1);
  h.complete("x", rx_a);
  const auto rep = h.s->report(h.now);
  REQUIRE(rep.receivers.empty());
  REQUIRE(rep.drops[errc::not_registered] == 2);
}

namespace {

/// A closed group of `receivers` whose "relay" is a relay (relay_timeout 40 s) on rx_a, the
/// others on rx_b, every one registered and pass 1 sent.
harness relay_session(std::vector<std::string> receivers) {
  harness h(files({3000}), receivers);
  h.cfg.relays = {"relay"};
  h.cfg.relay_timeout = 40s;
  h.s = std::make_unique<sender_session>(h.cfg, files({3000}), 1, nullptr);
  h.s->start(h.now);
  h.tick();
  for (const auto& id : receivers) h.register_rx(id, id == "relay" ? rx_a : rx_b);
  h.drain_data();
  return h;
}

}  // namespace

TEST_CASE("a silent relay is waited for relay_timeout, an ordinary receiver receiver_timeout",
          "[unit][sender]") {
  auto h = relay_session({"relay", "site"});
  // Both fall silent once pass 1 is out (a relay restarting, a site crashed).
  const auto state_of = [&](const std::string& id) {
    for (const auto& r : h.s->report(h.now).receivers) {
      if (r.id == id) return r.state;
    }
    FAIL("no receiver " << id);
    return receiver_report::state_t::missing;
  };
  const auto wait_until = [&](time_point until) {
    while (h.now < until && h.s->current_phase() != sender_session::phase::done) {
      h.now = std::min(until, std::max(h.now + 1ms, *h.s->next_deadline(h.now)));
      h.tick();
    }
  };
  const auto silent_from = h.now;
  wait_until(silent_from + h.cfg.receiver_timeout + 2s);
  REQUIRE(state_of("site") == receiver_report::state_t::failed);
  REQUIRE(state_of("relay") == receiver_report::state_t::registered);
  // The relay is back before relay_timeout and completes: the session has waited for it.
  wait_until(silent_from + 30s);
  REQUIRE(state_of("relay") == receiver_report::state_t::registered);
  h.complete("relay", rx_a);
  REQUIRE(state_of("relay") == receiver_report::state_t::completed);

  // Another session where the relay never comes back: failed at relay_timeout, not before.
  auto g = relay_session({"relay"});
  const auto gone = g.now;
  while (g.s->current_phase() != sender_session::phase::done && g.now < gone + 120s) {
    g.now = std::max(g.now + 1ms, *g.s->next_deadline(g.now));
    g.tick();
  }
  const auto rep = g.s->report(g.now);
  REQUIRE(rep.receivers.at(0).state == receiver_report::state_t::failed);
  REQUIRE(rep.receivers.at(0).reason.find("silent for 4") != std::string::npos);
}

TEST_CASE("a relay's session takes only echoes of its own markers as round-trip samples",
          "[unit][sender]") {
  for (const bool own : {false, true}) {
    CAPTURE(own);
    harness h(files({20'000}), {"a"}, true, {}, own);
    h.tick();
    // A REGISTER echoing a time this session never sent (the hub's announce, on another clock).
    wire::register_request r;
    r.set_receiver_id("a");
    r.set_echo_time_us(to_wire_us(h.now - 300ms));
    h.s->on_datagram(datagram(wire::msg_type::register_request, h.cfg.session, r), rx_a, h.now);
    h.tick();
    REQUIRE(h.s->report(h.now).receivers.at(0).rtt_valid == !own);
    h.drain_data();
    const auto markers = h.sent<wire::marker>(wire::msg_type::marker);
    REQUIRE_FALSE(markers.empty());
    // A NAK echoing one of its markers is a sample in both cases.
    h.now += 40ms;
    wire::nak n;
    n.set_receiver_id("a");
    n.set_pass(markers.back().pass());
    n.set_echo_time_us(markers.back().sender_time_us());
    h.s->on_datagram(datagram(wire::msg_type::nak, h.cfg.session, n), rx_a, h.now);
    h.tick();
    const auto rep = h.s->report(h.now).receivers.at(0);
    REQUIRE(rep.rtt_valid);
    // 40 ms since that marker left, whatever the earlier foreign echo said.
    if (own) REQUIRE(rep.rtt >= 40ms);
  }
}

namespace {

/// A signed hub's session (relay_end_wait 2 s) listing `relays`, whose one receiver `receiver`
/// registered, got pass 1 and completed.
harness completed_with_relays(std::vector<std::string> relays, const std::string& receiver) {
  harness h(files({3000}), {receiver});
  h.cfg.relays = std::move(relays);
  h.cfg.relay_end_wait = 2s;
  h.s = std::make_unique<sender_session>(h.cfg, files({3000}), 1, nullptr);
  h.s->start(h.now);
  h.tick();
  h.register_rx(receiver, rx_a);
  h.drain_data();
  h.complete(receiver, rx_a);
  return h;
}

}  // namespace

TEST_CASE("a signed hub's END waits for relays behind relays to be delegated, and no longer",
          "[unit][sender]") {
  const auto session = [](std::vector<std::string> relays) {
    return completed_with_relays(std::move(relays), "ra");
  };
  const auto ends = [](harness& h) {
    return h.sent<wire::session_end>(wire::msg_type::session_end);
  };
  const auto run_until = [](harness& h, time_point until) {
    while (h.now < until && h.s->current_phase() != sender_session::phase::done) {
      h.now = std::min(until, std::max(h.now + 1ms, *h.s->next_deadline(h.now)));
      h.tick();
    }
  };
  SECTION("every listed relay took part: END at once") {
    auto h = session({"ra"});
    REQUIRE(ends(h).size() == 1);
  }
  SECTION("rb, listed, not a receiver: END once rb is delegated") {
    auto h = session({"ra", "rb"});
    REQUIRE(ends(h).empty());
    REQUIRE(h.s->current_phase() == sender_session::phase::ending);
    run_until(h, h.now + 500ms);
    REQUIRE(ends(h).empty());
    h.s->on_relay_delegated("rb", h.now);
    h.tick();
    REQUIRE(ends(h).size() == 1);
  }
  SECTION("rb never asks: END after the wait") {
    auto h = session({"ra", "rb"});
    const auto done_at = h.now;
    run_until(h, done_at + 1900ms);
    REQUIRE(ends(h).empty());
    run_until(h, done_at + 30s);
    REQUIRE(ends(h).size() == 1);
    REQUIRE(h.s->current_phase() == sender_session::phase::done);
    REQUIRE(h.now - done_at < 2s + 4 * h.s->grtt() + 100ms);
  }
}

TEST_CASE("a signed hub's END does not wait when no listed relay took part", "[unit][sender]") {
  auto h = completed_with_relays({"ra", "rb"}, "site");
  REQUIRE(h.sent<wire::session_end>(wire::msg_type::session_end).size() == 1);
}
