// The sender core's side of block digests (sender/core/digest_windows.hpp, docs/security.md
// "Block digests"): every datagram's digest goes out twice, a window apart, both before it; a
// block digest session sends exactly what the same session without digests sends, in the same
// order, and its announce says so.
#include "sender/core/digest_windows.hpp"

#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <tuple>

using namespace mcdist;
using namespace mcdist::sender;
using namespace std::chrono_literals;
namespace bd = mcdist::block_digests;

namespace {

data_send datagram(std::uint32_t seq) {
  data_send d;
  d.seq = seq;
  d.file = file_index{0};
  d.block = block_index{seq};
  d.length = 1400;
  return d;
}

/// What a site could check of each datagram when it went out: copies of its digest sent
/// before it, and the datagrams released since its first copy.
struct coverage {
  std::map<std::uint32_t, int> copies;              ///< seq -> digest copies queued so far
  std::map<std::uint32_t, std::uint64_t> first_at;  ///< seq -> datagrams released at its first
  std::uint64_t released = 0;

  void take(const digest_window_send& w) {
    for (std::uint32_t i = 0; i < w.count; ++i) {
      const std::uint32_t seq = w.first_seq + i;
      if (++copies[seq] == 1) first_at[seq] = released;
    }
    if (w.first_copy) {
      REQUIRE(w.datagrams.size() == w.count);
      for (std::uint32_t i = 0; i < w.count; ++i) REQUIRE(w.datagrams[i].seq == w.first_seq + i);
    } else {
      REQUIRE(w.datagrams.empty());
    }
  }
};

}  // namespace

TEST_CASE(
    "every planned datagram's digests go out twice before it: the first copy a window ahead, "
    "the second just before its window, and the pacer is told their bytes",
    "[unit][sender][block_digests]") {
  digest_windows dw(1024, 28);
  coverage cov;
  std::uint32_t next_seq = 1;
  const std::uint32_t total = 2500;                   // windows of 1024, 1024 and 452
  std::vector<std::pair<std::uint32_t, bool>> order;  // (first seq, first copy) as popped
  std::uint64_t bytes = 0;
  while (true) {
    while (dw.wants_more()) {
      if (next_seq > total) {
        dw.pass_planned();
        break;
      }
      dw.plan(datagram(next_seq++));
    }
    const data_send* d = dw.peek();
    if (!d) break;
    const std::uint32_t seq = d->seq;
    bytes += dw.prepare();
    digest_window_send w;
    while (dw.pop(w)) {
      order.push_back({w.first_seq, w.first_copy});
      cov.take(w);
    }
    REQUIRE(cov.copies[seq] == 2);
    // The first copy went out at least a window before, except for the first window.
    if (seq > 1024) REQUIRE(cov.released - cov.first_at[seq] >= 1024);
    dw.release();
    ++cov.released;
  }
  REQUIRE(cov.released == total);
  const std::vector<std::pair<std::uint32_t, bool>> want{
      {1, true}, {1025, true}, {1, false}, {2049, true}, {1025, false}, {2049, false}};
  REQUIRE(order == want);
  REQUIRE(dw.windows() == 3);
  REQUIRE(dw.chunks_sent() == 2 * (16 + 16 + 8));
  std::uint64_t want_bytes = 0;
  for (const std::size_t count : {1024, 1024, 452}) {
    for (std::size_t off = 0; off < count; off += 64)
      want_bytes += bd::chunk_wire_bytes(count, off) + 28;
  }
  REQUIRE(bytes == 2 * want_bytes);
  REQUIRE(dw.bytes_sent() == bytes);
}

TEST_CASE("a pass of fewer datagrams than a window is one window, its digests sent twice first",
          "[unit][sender][block_digests]") {
  digest_windows dw;
  for (std::uint32_t s = 10; s < 15; ++s) {
    REQUIRE(dw.wants_more());
    dw.plan(datagram(s));
  }
  REQUIRE(dw.wants_more());
  dw.pass_planned();
  REQUIRE_FALSE(dw.wants_more());
  REQUIRE(dw.prepare() > 0);
  REQUIRE(dw.prepare() == 0);  // once per window
  digest_window_send a, b, c;
  REQUIRE(dw.pop(a));
  REQUIRE(dw.pop(b));
  REQUIRE_FALSE(dw.pop(c));
  REQUIRE((a.first_copy && !b.first_copy && a.first_seq == 10 && b.count == 5));
  for (int i = 0; i < 5; ++i) dw.release();
  REQUIRE(dw.peek() == nullptr);
  dw.start_pass();
  REQUIRE(dw.wants_more());
}

namespace {

using sent_key = std::tuple<std::uint32_t, bool, std::uint32_t, std::uint32_t, std::uint32_t>;

sent_key key_of(const data_send& d) {
  return d.parity ? sent_key{d.seq, true, d.fec_block, d.parity_index, 0}
                  : sent_key{d.seq, false, d.file.value, d.block.value, d.length};
}

struct silent_run {
  std::vector<sent_key> sent;
  std::vector<control_send> control;
  session_report report;
};

/// Two files in a silent session with FEC, driven in 1 ms steps; with `digests`, every popped
/// window is checked to come before the datagrams it covers.
silent_run drive(bool digests) {
  sender_config cfg;
  cfg.session = session_id{91};
  cfg.rate_bps = 100'000'000;
  cfg.silent_passes = 2;
  cfg.fec_k = 64;
  cfg.fec_depth = 4;
  cfg.fec_overhead = 0.05;
  cfg.block_digests = digests;
  std::vector<manifest_entry> files(2);
  files[0].path = "a";
  files[0].size = 1400 * 1500 + 77;  // 1501 blocks, the last short
  files[1].path = "b";
  files[1].size = 1400 * 900;
  for (auto& f : files) f.digest = sha256_digest{};
  sender_session s(cfg, files, 1, nullptr);
  time_point now{100s};
  s.start(now);
  silent_run r;
  coverage cov;
  std::array<data_send, 45> buf;
  for (int i = 0; i < 200000 && !s.done(); ++i) {
    s.on_timer(now);
    const auto n = s.next_data(now, buf);
    digest_window_send w;
    while (s.pop_digest_window(w)) {
      REQUIRE(digests);
      if (w.first_copy) {
        // The first copy names what will go out under each sequence number.
        for (const auto& d : w.datagrams) REQUIRE(d.length > 0);
      }
      cov.take(w);
    }
    for (std::size_t j = 0; j < n; ++j) {
      if (digests) REQUIRE(cov.copies[buf[j].seq] == 2);
      r.sent.push_back(key_of(buf[j]));
      ++cov.released;
    }
    control_send c;
    while (s.pop_control(c)) r.control.push_back(std::move(c));
    now += 1ms;
  }
  REQUIRE(s.done());
  r.report = s.report(now);
  return r;
}

}  // namespace

TEST_CASE(
    "a block digest session sends the same datagrams in the same order as without digests, "
    "each after both copies of its digest, and its announce says block_digests",
    "[unit][sender][block_digests]") {
  const auto plain = drive(false);
  const auto digested = drive(true);
  REQUIRE(plain.sent == digested.sent);
  REQUIRE(digested.report.block_digests);
  REQUIRE_FALSE(plain.report.block_digests);
  // 2401 sources and 2 x 4 parity per FEC block of 64 (the last shorter): windows of 1024.
  const std::uint64_t total = digested.sent.size();
  REQUIRE(digested.report.digest_windows >= total / bd::max_window);
  REQUIRE(digested.report.digest_chunks >= 2 * ((total + 63) / 64));
  REQUIRE(digested.report.digest_bytes > 0);
  for (const auto& c : digested.control) {
    wire::header h;
    REQUIRE_FALSE(wire::parse_header(c.bytes, h));
    if (h.type != wire::msg_type::announce) continue;
    wire::announce a;
    REQUIRE_FALSE(wire::parse_control(c.bytes, a));
    REQUIRE(a.params().block_digests() == 1);
  }
}

TEST_CASE("block digests are for silent sessions only", "[unit][sender][block_digests]") {
  manifest_entry e;
  e.path = "f";
  e.size = 1400;
  e.digest = sha256_digest{};
  sender_config cfg;
  cfg.block_digests = true;
  REQUIRE_THROWS_AS(sender_session(cfg, {e}, 1, nullptr), std::invalid_argument);
}
