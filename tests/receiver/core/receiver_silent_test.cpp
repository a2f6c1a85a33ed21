// The receiver core's side of silent sessions (docs/design-notes.md "Silent sessions"): a site
// never sends for them (no REGISTER, NAK, COMPLETE, unicast), delivers what it completes, and
// records what it could not when the session ends.
#include "receiver/core/receiver_engine.hpp"

#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

const endpoint sender_ep = *parse_endpoint("10.0.0.1:5000");
constexpr session_id sid{0x5151};
constexpr std::uint32_t block = 1000;

/// Sink and storage that record everything asked of them.
struct silent_sink final : receiver_sink, storage_port {
  std::vector<std::vector<std::byte>> sent;
  std::vector<std::uint32_t> finalized;
  std::vector<recovery_request> recoveries;
  std::size_t unicast_starts = 0;
  struct outcome {
    std::string path;
    bool stored = false;
    std::string failure;
  };
  std::vector<outcome> outcomes;

  void send(const endpoint&, std::span<const std::byte> d) override {
    sent.emplace_back(d.begin(), d.end());
  }
  void file_finished(const file_outcome& o) override {
    outcomes.push_back({std::string(o.path), o.stored, std::string(o.failure)});
  }
  void begin_file(file_key, std::uint32_t, const manifest_entry&, bool) override {}
  bool write(file_key, std::uint64_t, std::span<const std::byte>) override { return true; }
  void finalize(file_key k, const sha256_digest&) override { finalized.push_back(k.file.value); }
  void discard_file(file_key) override {}
  void query_held(session_id, std::uint32_t, std::vector<held_query>) override {}
  void checkpoint(session_id, std::string) override {}
  void close_session(session_id, bool) override {}
  void session_closed(session_id, bool) override {}
  void start_unicast(session_id, const unicast_order&, std::vector<byte_range>) override {
    ++unicast_starts;
  }
  void stop_unicast(session_id) override {}
  bool decodes_parity() const override { return true; }
  bool write_parity(session_id, std::uint32_t, std::uint32_t, std::span<const std::byte>) override {
    return true;
  }
  void recover(session_id, recovery_request r) override { recoveries.push_back(std::move(r)); }
};

template <class Msg>
std::vector<std::byte> datagram(wire::msg_type t, const Msg& m) {
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  wire::encode_control(out, t, sid, m);
  return out;
}

struct harness {
  silent_sink sink;
  receiver_engine engine;
  time_point now{50s};
  std::uint32_t seq = 0;

  explicit harness(receiver_config cfg = receiver_config{"site"})
      : engine{std::move(cfg), sink, sink, 1, nullptr} {}

  void feed(const std::vector<std::byte>& d) {
    engine.on_datagram(d, sender_ep, 0, now);
    engine.on_timer(now);
  }
  /// Files of `blocks` full blocks each ("f0", "f1", ...), FEC blocks of k sources (0: none);
  /// silent_passes as the sender announces it (0: an ordinary session).
  void announce(std::vector<std::uint32_t> blocks, std::uint32_t k, std::uint32_t silent_passes,
                std::uint64_t channel_seq = 0) {
    wire::announce a;
    auto* p = a.mutable_params();
    if (channel_seq > 0) {
      p->set_channel("fields");
      p->set_channel_seq(channel_seq);
      p->set_sender_name("hub");
    }
    std::uint64_t total = 0;
    for (const auto b : blocks) total += std::uint64_t{b} * block;
    p->set_block_size(block);
    p->set_file_count(static_cast<std::uint32_t>(blocks.size()));
    p->set_manifest_chunks(1);
    p->set_total_bytes(total);
    p->set_grtt_us(10000);
    p->set_silent_passes(silent_passes);
    if (k > 0) {
      p->set_fec_k(k);
      p->set_fec_max_parity(8);
      p->set_fec_depth(1);
    }
    a.set_sender_time_us(1);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      auto* e = a.add_files();
      e->set_path("f" + std::to_string(i));
      e->set_size(std::uint64_t{blocks[i]} * block);
      e->set_mode(0644);
      e->set_sha256(std::string(32, '\x11'));
    }
    feed(datagram(wire::msg_type::announce, a));
    engine.on_held(sid, {}, now);
    engine.on_timer(now);
  }
  /// `version`: the header's version byte (3: a block digest session's block, which the
  /// daemon's authentication layer checked and handed on whole, docs/security.md "Block
  /// digests").
  void data(std::uint32_t file, std::uint32_t b, std::uint8_t version = wire::version) {
    std::vector<std::byte> d(wire::data_header_size + block, std::byte{7});
    wire::write_data_header(d, {sid, ++seq, file_index{file}, block_index{b}});
    d[2] = std::byte{version};
    feed(d);
  }
  void parity(std::uint32_t fb, std::uint32_t index, std::uint8_t version = wire::version) {
    std::vector<std::byte> d(wire::data_header_size + block, std::byte{9});
    wire::write_parity_header(d, {sid, ++seq, fb, index});
    d[2] = std::byte{version};
    feed(d);
  }
  void pass_end(std::uint32_t pass, std::uint32_t files) {
    wire::marker m;
    m.set_pass(pass);
    m.set_file(files);
    m.set_pass_end(true);
    m.set_status_request(true);  // a silent site answers no status request either
    m.set_seq(seq);
    feed(datagram(wire::msg_type::marker, m));
    now += 2s;  // past any NAK backoff or retransmission
    engine.on_timer(now);
  }
};

}  // namespace

TEST_CASE("a silent session delivers from data and parity and never sends",
          "[unit][receiver][silent]") {
  harness h;
  h.announce({4}, 4, 2);
  REQUIRE(h.engine.silent(sid));
  for (const std::uint32_t b : {0u, 1u, 3u}) h.data(0, b);  // block 2 lost
  h.pass_end(1, 1);
  h.parity(0, 0);  // pass 2's parity repairs it
  REQUIRE(h.sink.recoveries.size() == 1);
  h.engine.on_recovered(sid, 0, {}, h.now);
  REQUIRE(h.sink.finalized == std::vector<std::uint32_t>{0});
  h.engine.on_file_stored(sid, file_index{0}, {}, {}, h.now);
  h.pass_end(2, 1);
  h.now += 120s;  // every timer the engine could have
  h.engine.on_timer(h.now);
  CHECK(h.sink.sent.empty());
  CHECK(h.engine.stats().sessions_completed == 1);
  CHECK(h.engine.stats().files_stored == 1);
  CHECK(h.engine.stats().files_incomplete == 0);
  CHECK(h.engine.stats().naks_sent == 0);
}

TEST_CASE("a block digest session's version-3 data and parity are taken like any block",
          "[unit][receiver][silent][block_digests]") {
  harness h;
  h.announce({4}, 4, 2);
  for (const std::uint32_t b : {0u, 1u, 3u}) h.data(0, b, wire::digest_version);
  h.parity(0, 0, wire::digest_version);
  REQUIRE(h.sink.recoveries.size() == 1);
  h.engine.on_recovered(sid, 0, {}, h.now);
  REQUIRE(h.sink.finalized == std::vector<std::uint32_t>{0});
  CHECK(h.engine.stats().drops.total() == 0);
  CHECK(h.sink.sent.empty());
}

TEST_CASE("a silent session that ends short records each file it could not complete",
          "[unit][receiver][silent]") {
  harness h;
  h.announce({2, 3}, 0, 1);
  h.data(0, 0);
  h.data(0, 1);  // f0 complete
  h.data(1, 0);  // f1 has 1 of 3
  h.engine.on_file_stored(sid, file_index{0}, {}, {}, h.now);
  h.pass_end(1, 2);
  wire::session_end end;
  h.feed(datagram(wire::msg_type::session_end, end));
  CHECK(h.sink.sent.empty());
  CHECK(h.engine.stats().files_incomplete == 1);
  CHECK(h.engine.stats().sessions_failed == 1);
  REQUIRE(h.sink.outcomes.size() == 2);
  CHECK(h.sink.outcomes[0].path == "f0");
  CHECK(h.sink.outcomes[0].stored);
  CHECK(h.sink.outcomes[1].path == "f1");
  CHECK_FALSE(h.sink.outcomes[1].stored);
  CHECK(h.sink.outcomes[1].failure.find("incomplete: 1 of 3 blocks") != std::string::npos);
}

TEST_CASE("a numbered silent session that ends short stays missing in the channel's numbering",
          "[unit][receiver][silent]") {
  receiver_config cfg{"site"};
  cfg.silent_channels = {true};  // an ordinary session of the hub on a one-way site's channel
  harness h(cfg);
  h.announce({2}, 0, 0, 3);
  h.data(0, 0);  // 1 of 2 blocks
  h.pass_end(1, 1);
  h.feed(datagram(wire::msg_type::session_end, wire::session_end{}));
  CHECK(h.sink.sent.empty());
  const auto st = h.engine.sequences().status();
  REQUIRE(st.size() == 1);
  CHECK(st[0].channel == "fields");
  CHECK(st[0].last_seen == 3);
  CHECK(st[0].last_completed == 0);
  // A heartbeat naming 3 as the newest: 3 is what the site asks for over HTTP.
  const auto rep = h.engine.sequences().on_heartbeat("fields", st[0].source, 3, {});
  REQUIRE(rep.missing.size() == 1);
  CHECK(rep.missing[0] == std::pair<std::uint64_t, std::uint64_t>{3, 3});
}

TEST_CASE("a numbered silent session that completes counts as completed",
          "[unit][receiver][silent]") {
  harness h;
  h.announce({1}, 0, 1, 4);
  h.data(0, 0);
  h.engine.on_file_stored(sid, file_index{0}, {}, {}, h.now);
  const auto st = h.engine.sequences().status();
  REQUIRE(st.size() == 1);
  CHECK(st[0].last_seen == 4);
  CHECK(st[0].last_completed == 4);
  CHECK(h.engine.sequences().on_heartbeat("fields", st[0].source, 4, {}).missing.empty());
}

TEST_CASE("a silent channel keeps an ordinary session silent, FALLBACK orders included",
          "[unit][receiver][silent]") {
  receiver_config cfg{"site"};
  cfg.silent_channels = {true};
  harness h(cfg);
  h.announce({3}, 0, 0);  // the sender did not ask for silence
  REQUIRE(h.engine.silent(sid));
  h.data(0, 0);
  h.pass_end(1, 1);
  wire::fallback f;
  f.set_receiver_id("site");
  f.set_port(9000);
  f.set_token(std::string(16, 'k'));
  h.feed(datagram(wire::msg_type::fallback, f));
  h.now += 1s;
  h.engine.on_timer(h.now);
  CHECK(h.sink.sent.empty());
  CHECK(h.sink.unicast_starts == 0);
  CHECK(h.engine.stats().silent_suppressed >= 1);
}

TEST_CASE("an ordinary session on an ordinary channel still registers",
          "[unit][receiver][silent]") {
  harness h;
  h.announce({3}, 0, 0);
  CHECK_FALSE(h.engine.silent(sid));
  CHECK(h.sink.sent.size() == 1);  // REGISTER
}

TEST_CASE("a relayed silent session stays open after its files until the sender's END",
          "[unit][receiver][silent][relay]") {
  receiver_config cfg{"relay"};
  cfg.relay_channels = {true};
  harness h(cfg);
  h.announce({2}, 0, 2, 5);
  h.data(0, 0);
  h.data(0, 1);
  h.engine.on_file_stored(sid, file_index{0}, {}, {}, h.now);
  // Every file stored: still tracked and silent, so its later passes and END are checked and
  // relayed; counted completed in the channel's numbering already.
  REQUIRE(h.engine.silent(sid));
  CHECK(h.engine.stats().sessions_completed == 0);
  CHECK(h.engine.sequences().status().at(0).last_completed == 5);
  h.pass_end(1, 1);  // a marker of pass 2 keeps it alive; no timer sends anything
  h.parity(0, 0);
  CHECK(h.engine.silent(sid));
  CHECK(h.sink.sent.empty());
  h.feed(datagram(wire::msg_type::session_end, wire::session_end{}));
  CHECK_FALSE(h.engine.silent(sid));
  CHECK(h.engine.stats().sessions_completed == 1);
  CHECK(h.engine.stats().sessions_failed == 0);
  CHECK(h.engine.stats().files_incomplete == 0);
  CHECK(h.sink.sent.empty());
}

TEST_CASE("a relayed silent session whose sender falls silent after its files completes",
          "[unit][receiver][silent][relay]") {
  receiver_config cfg{"relay"};
  cfg.relay_channels = {true};
  cfg.session_timeout = 10s;
  harness h(cfg);
  h.announce({1}, 0, 2);
  h.data(0, 0);
  h.engine.on_file_stored(sid, file_index{0}, {}, {}, h.now);
  REQUIRE(h.engine.silent(sid));
  // The END is lost: the session ends at session_timeout, complete, and the engine's next
  // deadline is that timeout, never a busy loop.
  const auto next = h.engine.next_deadline();
  REQUIRE(next);
  CHECK(*next > h.now);
  h.now += 11s;
  h.engine.on_timer(h.now);
  CHECK_FALSE(h.engine.silent(sid));
  CHECK(h.engine.stats().sessions_completed == 1);
  CHECK(h.engine.stats().sessions_failed == 0);
  CHECK(h.sink.sent.empty());
}

TEST_CASE("an unrelayed silent session closes as soon as its files are stored",
          "[unit][receiver][silent][relay]") {
  receiver_config cfg{"site"};
  cfg.relay_channels = {false};
  harness h(cfg);
  h.announce({1}, 0, 2);
  h.data(0, 0);
  h.engine.on_file_stored(sid, file_index{0}, {}, {}, h.now);
  CHECK_FALSE(h.engine.silent(sid));
  CHECK(h.engine.stats().sessions_completed == 1);
}
