// The receiver core's side of parity repairs (docs/design-notes.md "Parity repairs"): what a NAK
// names in a FEC session, when a decode is asked of storage, what follows its outcome.
#include "receiver/core/receiver_engine.hpp"

#include "common/fec/fec.hpp"
#include "common/ranges.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

const endpoint sender_ep = *parse_endpoint("10.0.0.1:5000");
constexpr session_id sid{0x4321};
constexpr std::uint32_t block = 1000;

/// Storage that records parity and decode requests; decodes_parity as configured.
struct fec_sink final : receiver_sink, storage_port {
  bool decodes = true;
  std::vector<std::vector<std::byte>> sent;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::size_t> writes;
  std::vector<std::uint32_t> finalized;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> parity_kept;  ///< (FEC block, index)
  std::vector<recovery_request> recoveries;
  std::size_t held_queries = 0;

  void send(const endpoint&, std::span<const std::byte> d) override {
    sent.emplace_back(d.begin(), d.end());
  }
  void begin_file(file_key, std::uint32_t, const manifest_entry&, bool) override {}
  bool write(file_key k, std::uint64_t off, std::span<const std::byte> d) override {
    writes[{k.file.value, off}] = d.size();
    return true;
  }
  void finalize(file_key k, const sha256_digest&) override { finalized.push_back(k.file.value); }
  void discard_file(file_key) override {}
  void query_held(session_id, std::uint32_t, std::vector<held_query>) override { ++held_queries; }
  void checkpoint(session_id, std::string) override {}
  void close_session(session_id, bool) override {}
  void session_closed(session_id, bool) override {}
  void start_unicast(session_id, const unicast_order&, std::vector<byte_range>) override {}
  void stop_unicast(session_id) override {}
  bool decodes_parity() const override { return decodes; }
  bool write_parity(session_id, std::uint32_t fb, std::uint32_t index,
                    std::span<const std::byte> d) override {
    REQUIRE(d.size() == block);
    parity_kept.emplace_back(fb, index);
    return true;
  }
  void recover(session_id, recovery_request r) override { recoveries.push_back(std::move(r)); }

  std::vector<wire::nak> naks() const {
    std::vector<wire::nak> out;
    for (const auto& d : sent) {
      wire::header h;
      if (wire::parse_header(d, h) || h.type != wire::msg_type::nak) continue;
      wire::nak m;
      REQUIRE_FALSE(wire::parse_control(d, m));
      out.push_back(m);
    }
    return out;
  }
};

template <class Msg>
std::vector<std::byte> datagram(wire::msg_type t, const Msg& m) {
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  wire::encode_control(out, t, sid, m);
  return out;
}

struct harness {
  fec_sink sink;
  receiver_engine engine;
  time_point now{50s};
  std::uint32_t seq = 0;

  explicit harness(receiver_config cfg = receiver_config{"site"})
      : engine{std::move(cfg), sink, sink, 1, nullptr} {}

  void feed(const std::vector<std::byte>& d) {
    engine.on_datagram(d, sender_ep, 0, now);
    engine.on_timer(now);
  }
  /// One file of `blocks` full blocks, FEC blocks of k sources, registered and receiving.
  void start(std::uint32_t blocks, std::uint32_t k, std::uint32_t max_parity) {
    wire::announce a;
    auto* p = a.mutable_params();
    p->set_block_size(block);
    p->set_file_count(1);
    p->set_manifest_chunks(1);
    p->set_total_bytes(std::uint64_t{blocks} * block);
    p->set_grtt_us(10000);
    p->set_fec_k(k);
    p->set_fec_max_parity(max_parity);
    p->set_fec_depth(1);
    a.set_sender_time_us(1);
    auto* e = a.add_files();
    e->set_path("f");
    e->set_size(std::uint64_t{blocks} * block);
    e->set_mode(0644);
    e->set_sha256(std::string(32, '\x11'));
    feed(datagram(wire::msg_type::announce, a));
    REQUIRE(sink.held_queries == 1);
    engine.on_held(sid, {}, now);
    wire::register_reply r;
    r.set_receiver_id("site");
    r.set_accepted(true);
    feed(datagram(wire::msg_type::register_reply, r));
  }
  void data(std::uint32_t b) {
    std::vector<std::byte> d(wire::data_header_size + block, std::byte{7});
    wire::write_data_header(d, {sid, ++seq, file_index{0}, block_index{b}});
    feed(d);
  }
  void parity(std::uint32_t fb, std::uint32_t index) {
    std::vector<std::byte> d(wire::data_header_size + block, std::byte{9});
    wire::write_parity_header(d, {sid, ++seq, fb, index});
    feed(d);
  }
  /// A marker of pass 1 in the middle of file 0, before block `b` (no status request).
  void marker_at(std::uint32_t b) {
    wire::marker m;
    m.set_pass(1);
    m.set_file(0);
    m.set_block(b);
    m.set_seq(seq);
    feed(datagram(wire::msg_type::marker, m));
  }
  /// A repair advert of pass 1 with `pending` parity blocks of FEC block `fb` still to come.
  void advert_parity(std::uint32_t fb, std::uint32_t pending) {
    wire::repair_advert a;
    a.set_pass(1);
    a.add_fec_parity(fb);
    a.add_fec_parity(pending);
    feed(datagram(wire::msg_type::repair_advert, a));
  }
  void pass_end(std::uint32_t pass) {
    wire::marker m;
    m.set_pass(pass);
    m.set_file(1);
    m.set_pass_end(true);
    m.set_status_request(true);
    m.set_seq(seq);
    feed(datagram(wire::msg_type::marker, m));
  }
};

/// (FEC block, lack) pairs of a NAK, decoded.
std::vector<std::pair<std::uint32_t, std::uint32_t>> lacks(const wire::nak& n) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  std::uint32_t fb = 0;
  for (int i = 0; i + 1 < n.fec_lacks_size(); i += 2) {
    fb += n.fec_lacks(i);
    out.emplace_back(fb, n.fec_lacks(i + 1));
  }
  return out;
}

}  // namespace

TEST_CASE(
    "a FEC session NAKs a count per FEC block and asks storage to decode once parity "
    "suffices",
    "[unit][receiver][fec]") {
  harness h;
  h.start(8, 4, 4);  // FEC blocks 0 (blocks 0-3) and 1 (blocks 4-7)
  for (const std::uint32_t b : {0u, 1u, 3u, 4u, 6u}) h.data(b);  // lost 2, 5 and 7
  h.pass_end(1);
  const auto naks = h.sink.naks();
  REQUIRE(naks.size() == 1);
  REQUIRE(naks[0].files_size() == 0);  // no block named
  REQUIRE(lacks(naks[0]) == std::vector<std::pair<std::uint32_t, std::uint32_t>>{{0, 1}, {1, 2}});
  // One parity block makes FEC block 0 whole: storage is asked to decode it.
  h.parity(0, 2);
  REQUIRE(h.sink.parity_kept == std::vector<std::pair<std::uint32_t, std::uint32_t>>{{0, 2}});
  REQUIRE(h.sink.recoveries.size() == 1);
  const auto& r = h.sink.recoveries[0];
  REQUIRE(r.fec_block == 0);
  REQUIRE(r.k == 4);
  REQUIRE(r.parity == std::vector<std::uint32_t>{2});
  REQUIRE(r.sources.size() == 4);
  for (std::uint32_t i = 0; i < 4; ++i) {
    REQUIRE(r.sources[i].block == i);
    REQUIRE(r.sources[i].available == (i != 2));
    REQUIRE(r.sources[i].wanted == (i == 2));
  }
  // The same parity block again, or parity for a FEC block being decoded, is a duplicate.
  h.parity(0, 2);
  h.parity(0, 3);
  REQUIRE(h.sink.parity_kept.size() == 1);
  REQUIRE(h.engine.stats().drops.total() >= 2);
  // FEC block 1 needs two; the decode of block 0 succeeds.
  h.parity(1, 0);
  h.engine.on_recovered(sid, 0, {}, h.now);
  REQUIRE(h.engine.stats().blocks_recovered == 1);
  REQUIRE(h.sink.finalized.empty());  // blocks 5 and 7 still missing
  h.parity(1, 1);
  REQUIRE(h.sink.recoveries.size() == 2);
  h.engine.on_recovered(sid, 1, {}, h.now);
  REQUIRE(h.engine.stats().blocks_recovered == 3);
  REQUIRE(h.sink.finalized == std::vector<std::uint32_t>{0});
}

TEST_CASE("a failed decode turns the FEC block to NAKs block by block", "[unit][receiver][fec]") {
  harness h;
  h.start(4, 4, 4);
  for (const std::uint32_t b : {0u, 1u, 3u}) h.data(b);
  h.parity(0, 0);
  REQUIRE(h.sink.recoveries.size() == 1);
  h.engine.on_recovered(sid, 0, errc::invalid_field, h.now);
  REQUIRE(h.engine.stats().blocks_recovered == 0);
  h.pass_end(1);
  const auto naks = h.sink.naks();
  REQUIRE_FALSE(naks.empty());
  REQUIRE(naks.back().fec_lacks_size() == 0);
  REQUIRE(naks.back().files_size() == 1);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> missing;
  for_each_range(std::span(naks.back().files(0).ranges().data(),
                           static_cast<std::size_t>(naks.back().files(0).ranges_size())),
                 4, [&](std::uint32_t f, std::uint32_t c) { missing.emplace_back(f, c); });
  REQUIRE(missing == std::vector<std::pair<std::uint32_t, std::uint32_t>>{{2, 1}});
  // Parity for it is not kept any more.
  h.parity(0, 1);
  REQUIRE(h.sink.parity_kept.size() == 1);
}

TEST_CASE("a FEC block too costly to decode is NAKed by name in runs, one file_nak a datagram",
          "[unit][receiver][fec]") {
  // One FEC block of 4,096 sources of which this site has every 10th: decoding 3,686 missing
  // sources would take 3,686 x 4,096 multiply-adds, past fec::max_decode_work, so the round
  // that finishes the FEC block names them. Those behind earlier markers are named by
  // fec_report: as runs of 9 in one file_nak they fit a datagram or two, where a file_nak per
  // block (14 bytes each) took 30.
  harness h;
  constexpr std::uint32_t blocks = 4096;
  h.start(blocks, blocks, 64);
  std::set<std::uint32_t> missing;
  for (std::uint32_t b = 0; b < blocks; ++b) {
    if (b % 10 == 0) {
      h.data(b);
    } else {
      missing.insert(b);
    }
    if (b > 0 && b % 1024 == 0) h.marker_at(b);
  }
  REQUIRE(h.sink.naks().empty());  // the FEC block was not finished: nothing to NAK yet
  h.pass_end(1);
  const auto naks = h.sink.naks();
  REQUIRE_FALSE(naks.empty());
  CHECK(naks.size() <= 3);
  std::set<std::uint32_t> named;
  for (const auto& n : naks) {
    CHECK(n.fec_lacks_size() == 0);
    CHECK(n.files_size() <= 2);  // this round's own segment, and the blocks before it
    for (const auto& fn : n.files()) {
      REQUIRE(fn.file() == 0);
      REQUIRE_FALSE(
          for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                         blocks, [&](std::uint32_t f, std::uint32_t c) {
                           for (std::uint32_t b = f; b < f + c; ++b) named.insert(b);
                         }));
    }
  }
  CHECK(named == missing);
}

TEST_CASE("blocks named past a round's datagram cap go out in the rounds that follow",
          "[unit][receiver][fec]") {
  // Two FEC blocks of 4,096 sources. The site has every other block of the first (too costly
  // to decode) and all of the second. The marker one past the first FEC block's end has its
  // 2,048 missing blocks named: runs of one block, more than the one datagram a round may
  // send here. What the cap leaves out is deferred, and the rounds of the later markers name
  // it: the pass-end round alone would not, since the first FEC block is not among those it
  // finishes. (Blocks of the finishing round's own segment may be named twice.)
  receiver_config cfg{"site"};
  cfg.max_nak_datagrams = 1;
  harness h(cfg);
  constexpr std::uint32_t k = 4096, blocks = 2 * k;
  h.start(blocks, k, 64);
  const std::set<std::uint32_t> markers{1024, 2048, 3072, k + 1, 5120, 6144, 7168};
  std::set<std::uint32_t> missing;
  for (std::uint32_t b = 0; b < blocks; ++b) {
    if (b >= k || b % 2 == 0) {
      h.data(b);
    } else {
      missing.insert(b);
    }
    if (markers.count(b + 1)) h.marker_at(b + 1);
  }
  h.pass_end(1);
  const auto naks = h.sink.naks();
  std::set<std::uint32_t> named;
  for (const auto& n : naks) {
    for (const auto& fn : n.files()) {
      REQUIRE_FALSE(
          for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                         blocks, [&](std::uint32_t f, std::uint32_t c) {
                           for (std::uint32_t b = f; b < f + c; ++b) named.insert(b);
                         }));
    }
  }
  CHECK(naks.size() >= 4);  // one datagram a round: the names took several rounds
  // Every missing block asked for: each round went on where the cap had stopped the last one
  // (before, each named the first ~660 blocks again).
  CHECK(named == missing);
}

TEST_CASE("a storage path that does not decode gets block NAKs and drops parity",
          "[unit][receiver][fec]") {
  harness h;
  h.sink.decodes = false;
  h.start(8, 4, 4);
  for (const std::uint32_t b : {0u, 1u, 3u, 4u, 5u, 6u, 7u}) h.data(b);
  h.parity(0, 0);
  REQUIRE(h.sink.parity_kept.empty());
  REQUIRE(h.sink.recoveries.empty());
  h.pass_end(1);
  const auto naks = h.sink.naks();
  REQUIRE(naks.size() == 1);
  REQUIRE(naks[0].fec_lacks_size() == 0);
  REQUIRE(naks[0].files_size() == 1);
}

TEST_CASE("an announce with an impossible FEC shape is taken without FEC",
          "[unit][receiver][fec]") {
  harness h;
  h.start(8, fec::max_k + 1, 4);  // more sources than either field is offered for
  for (const std::uint32_t b : {0u, 1u, 3u, 4u, 5u, 6u, 7u}) h.data(b);
  h.parity(0, 0);
  REQUIRE(h.sink.parity_kept.empty());
  h.pass_end(1);
  const auto naks = h.sink.naks();
  REQUIRE(naks.size() == 1);
  REQUIRE(naks[0].fec_lacks_size() == 0);
  REQUIRE(naks[0].files_size() == 1);
}

TEST_CASE("FEC lacks past a round's datagram cap go out in the next round, not at the pass end",
          "[unit][receiver][fec]") {
  // nak12's rounds each cover the blocks since the previous marker; lacks the cap cut off are
  // deferred to the next round instead of waiting for a rescan.
  receiver_config cfg{"site"};
  cfg.max_nak_datagrams = 1;  // about 128 lacks fit in one NAK
  harness h(cfg);
  h.start(800, 2, 2);                                    // FEC block i: blocks 2i and 2i + 1
  for (std::uint32_t b = 1; b < 600; b += 2) h.data(b);  // FEC blocks 0-299 lack one each
  h.marker_at(600);
  auto naks = h.sink.naks();
  REQUIRE(naks.size() == 1);
  REQUIRE(naks[0].files_size() == 0);
  const auto first = lacks(naks[0]).size();
  REQUIRE(first > 0);
  REQUIRE(first < 300);  // the cap cut the round
  for (std::uint32_t m = 0; m < 4; ++m) {
    for (std::uint32_t b = 600 + 10 * m; b < 610 + 10 * m; ++b) h.data(b);
    h.marker_at(610 + 10 * m);
  }
  std::set<std::uint32_t> reported;
  for (const auto& n : h.sink.naks()) {
    REQUIRE(n.files_size() == 0);
    for (const auto& [fb, lack] : lacks(n)) {
      REQUIRE(lack == 1);
      reported.insert(fb);
    }
  }
  REQUIRE(reported.size() == 300);
  REQUIRE(*reported.rbegin() == 299);
}

TEST_CASE(
    "a FEC block's lack is left out of the NAK while the parity the sender advertised covers it",
    "[unit][receiver][fec]") {
  harness h;
  h.start(16, 4, 8);  // FEC blocks 0-3 of four sources each
  // FEC block 1 (blocks 4-7) loses one, FEC block 2 (blocks 8-11) two.
  for (const std::uint32_t b : {0u, 1u, 2u, 3u, 4u, 5u, 7u, 9u, 11u}) h.data(b);
  h.marker_at(4);  // pass 1 under way
  // The sender has two parity blocks of each pending (another site's NAK raised them).
  h.advert_parity(1, 2);
  h.advert_parity(2, 2);
  h.marker_at(13);  // completes FEC blocks 0-2 (one block past their last sources)
  REQUIRE(h.engine.stats().fec_lacks_covered == 2);
  REQUIRE(h.sink.naks().empty());  // nothing to report, no status asked
  // FEC block 3 loses three; one parity block is pending: the lack of 3 is reported, once.
  h.data(12);
  h.advert_parity(3, 1);
  h.pass_end(1);
  auto naks = h.sink.naks();
  REQUIRE(naks.size() == 1);
  REQUIRE(lacks(naks[0]) == std::vector<std::pair<std::uint32_t, std::uint32_t>>{{3, 3}});
  // A rescan (the sender asking for the pass end again: NAKs or parity were lost) reports
  // everything still missing, covered or not.
  h.pass_end(1);
  naks = h.sink.naks();
  REQUIRE(naks.size() == 2);
  REQUIRE(lacks(naks[1]) ==
          std::vector<std::pair<std::uint32_t, std::uint32_t>>{{1, 1}, {2, 2}, {3, 3}});
}

TEST_CASE("a NAK says how many blocks behind its marker the receiver lacks in all",
          "[unit][receiver]") {
  harness h;
  h.start(16, 4, 8);
  for (const std::uint32_t b : {0u, 1u, 5u, 6u, 7u}) h.data(b);
  // Behind a marker at block 8: 2, 3 and 4 are missing (block 8 on is not sent yet).
  h.marker_at(4);
  h.marker_at(9);
  auto naks = h.sink.naks();
  REQUIRE_FALSE(naks.empty());
  REQUIRE(naks.back().blocks_missing() == 4);  // 2, 3, 4 and 8 (sent: the marker is past it)
  h.pass_end(1);
  naks = h.sink.naks();
  REQUIRE(naks.back().blocks_missing() == 11);  // all of 16 but the five received
}
