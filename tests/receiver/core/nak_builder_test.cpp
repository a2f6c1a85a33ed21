#include "receiver/core/nak_builder.hpp"

#include "common/ranges.hpp"
#include "common/wire.hpp"
#include "tests/receiver/core/core_testing.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <utility>

using namespace mcdist;
using namespace mcdist::receiver;
using mcdist::receiver::testing::nak_blocks;

namespace {

wire::nak header() {
  wire::nak h;
  h.set_receiver_id("site-a");
  h.set_pass(3);
  h.set_seen_seq(777);
  h.set_bytes_received(123456);
  return h;
}

/// A bitmap of `blocks` with every block in except `missing`.
block_map with_holes(std::uint32_t blocks, const std::set<std::uint32_t>& missing) {
  block_map m(blocks);
  for (std::uint32_t b = 0; b < blocks; ++b) {
    if (!missing.count(b)) m.set(b);
  }
  return m;
}

}  // namespace

TEST_CASE("the missing blocks of each file become runs from block 0 of its own file_nak",
          "[unit][receiver][nak]") {
  nak_builder b(header(), 64);
  const auto f2 = with_holes(100, {3, 4, 5, 50});
  const auto f7 = with_holes(10, {0, 9});
  std::uint32_t from = 0;
  REQUIRE(b.add_missing(2, f2, from, 100));
  from = 0;
  REQUIRE(b.add_missing(7, f7, from, 10));
  b.finish(false);
  REQUIRE(b.datagrams().size() == 1);
  const auto& n = b.datagrams()[0];
  REQUIRE(n.files_size() == 2);
  CHECK(n.files(0).file() == 2);
  CHECK(std::vector<std::uint32_t>(n.files(0).ranges().begin(), n.files(0).ranges().end()) ==
        std::vector<std::uint32_t>{3, 3, 44, 1});
  CHECK(n.files(1).file() == 7);
  CHECK(std::vector<std::uint32_t>(n.files(1).ranges().begin(), n.files(1).ranges().end()) ==
        std::vector<std::uint32_t>{0, 1, 8, 1});
  // The header rides along.
  CHECK(n.receiver_id() == "site-a");
  CHECK(n.pass() == 3);
  CHECK(n.seen_seq() == 777);
  CHECK(n.bytes_received() == 123456);
}

TEST_CASE("only blocks before the end given are asked for", "[unit][receiver][nak]") {
  nak_builder b(header(), 64);
  const auto f = with_holes(100, {10, 20, 30, 40});
  std::uint32_t from = 15;                 // where the last round stopped
  REQUIRE(b.add_missing(0, f, from, 35));  // the sender's marker is at block 35
  b.finish(false);
  CHECK(nak_blocks(b.datagrams()) ==
        std::set<std::pair<std::uint32_t, std::uint32_t>>{{0, 20}, {0, 30}});
}

TEST_CASE("a long loss list is split into NAKs that each fit the control budget",
          "[unit][receiver][nak]") {
  // Every other block of 5000 missing: 2500 runs of two 1..2-byte varints, far more than one
  // datagram carries.
  std::set<std::uint32_t> missing;
  for (std::uint32_t i = 0; i < 5000; i += 2) missing.insert(i);
  const auto f = with_holes(5000, missing);
  nak_builder b(header(), 64);
  std::uint32_t from = 0;
  REQUIRE(b.add_missing(4, f, from, 5000));
  b.finish(false);
  REQUIRE(b.datagrams().size() > 1);
  std::set<std::pair<std::uint32_t, std::uint32_t>> want;
  for (const auto m : missing) want.emplace(4, m);
  CHECK(nak_blocks(b.datagrams()) == want);
  for (const auto& n : b.datagrams()) {
    CHECK(wire::header_size + n.ByteSizeLong() <= wire::control_budget);
    CHECK(n.receiver_id() == "site-a");
  }
}

TEST_CASE("at the datagram cap the round stops and says where the next one goes on",
          "[unit][receiver][nak]") {
  std::set<std::uint32_t> missing;
  for (std::uint32_t i = 0; i < 5000; i += 2) missing.insert(i);
  const auto f = with_holes(5000, missing);
  nak_builder b(header(), 2);
  std::uint32_t from = 0;
  CHECK_FALSE(b.add_missing(4, f, from, 5000));
  CHECK(b.full());
  REQUIRE(b.datagrams().size() == 2);
  // Everything missing before `from` was asked for, nothing from it on.
  const auto got = nak_blocks(b.datagrams());
  REQUIRE(from > 0);
  REQUIRE(from < 5000);
  for (const auto m : missing) CHECK(got.count({4, m}) == (m < from ? 1u : 0u));
  // Nothing more goes out this round: not the open datagram, not a status answer.
  b.want_digest(9);
  b.finish(true);
  CHECK(b.datagrams().size() == 2);
}

TEST_CASE("blocks named one by one go as runs of one file_nak, split at the budget and capped",
          "[unit][receiver][nak]") {
  // A FEC block of an interleaved layout: every 7th block of file 3, plus a contiguous stretch
  // (a stripe's FEC blocks together), 1,200 blocks in all.
  std::vector<std::uint32_t> blocks;
  for (std::uint32_t i = 0; i < 1000; ++i) blocks.push_back(i * 7);
  for (std::uint32_t i = 0; i < 200; ++i) blocks.push_back(7000 + i);
  std::set<std::pair<std::uint32_t, std::uint32_t>> want;
  for (const auto v : blocks) want.emplace(3, v);

  nak_builder b(header(), 64);
  std::size_t done = 0;
  REQUIRE(b.add_blocks(3, blocks, done));
  CHECK(done == blocks.size());
  b.finish(false);
  CHECK(nak_blocks(b.datagrams()) == want);
  std::size_t file_naks = 0;
  for (const auto& n : b.datagrams()) {
    CHECK(wire::header_size + n.ByteSizeLong() <= wire::control_budget);
    file_naks += static_cast<std::size_t>(n.files_size());
  }
  // One file_nak per datagram, and 1,001 runs of ~2 bytes: two or three datagrams, where a
  // file_nak per block (14 bytes each) would take 15.
  CHECK(file_naks == b.datagrams().size());
  CHECK(b.datagrams().size() <= 3);

  // At the cap: what went in is exactly blocks[0, done).
  nak_builder capped(header(), 1);
  done = 0;
  CHECK_FALSE(capped.add_blocks(3, blocks, done));
  REQUIRE(done > 0);
  REQUIRE(done < blocks.size());
  std::set<std::pair<std::uint32_t, std::uint32_t>> first_part;
  for (std::size_t i = 0; i < done; ++i) first_part.emplace(3, blocks[i]);
  CHECK(nak_blocks(capped.datagrams()) == first_part);
}

TEST_CASE("a round without losses sends nothing, unless the sender asked for a status",
          "[unit][receiver][nak]") {
  const auto full = with_holes(50, {});
  {
    nak_builder b(header(), 64);
    std::uint32_t from = 0;
    REQUIRE(b.add_missing(0, full, from, 50));
    b.finish(false);
    CHECK(b.datagrams().empty());
  }
  {
    nak_builder b(header(), 64);
    b.finish(true);
    REQUIRE(b.datagrams().size() == 1);
    CHECK(b.datagrams()[0].files_size() == 0);
    CHECK(b.datagrams()[0].pass() == 3);
  }
}

TEST_CASE("digests are asked for in the last NAK of the round", "[unit][receiver][nak]") {
  nak_builder b(header(), 64);
  const auto f = with_holes(10, {4});
  std::uint32_t from = 0;
  REQUIRE(b.add_missing(1, f, from, 10));
  b.want_digest(0);
  b.want_digest(1);
  CHECK(b.digests_wanted() == 2);
  b.finish(false);
  REQUIRE(b.datagrams().size() == 1);
  CHECK(b.datagrams()[0].digests_wanted_size() == 2);
  CHECK(b.datagrams()[0].files_size() == 1);
}

TEST_CASE("FEC lacks are packed as (gap, lack) pairs, split at the budget and capped",
          "[unit][nak_builder][fec]") {
  // 1,000 FEC blocks lacking 1..7 blocks each: more than one datagram's worth.
  nak_builder b(header(), 64);
  for (std::uint32_t fb = 5; fb < 5 + 3000; fb += 3) REQUIRE(b.add_fec_lack(fb, 1 + fb % 7));
  b.finish(false);
  const auto& naks = b.datagrams();
  REQUIRE(naks.size() > 1);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> got;
  for (const auto& n : naks) {
    REQUIRE(n.ByteSizeLong() + wire::header_size <= wire::control_budget);
    REQUIRE(n.fec_lacks_size() % 2 == 0);
    std::uint32_t fb = 0;
    for (int i = 0; i < n.fec_lacks_size(); i += 2) {
      if (i > 0) REQUIRE(n.fec_lacks(i) > 0);  // strictly ascending within a datagram
      fb += n.fec_lacks(i);
      got.emplace_back(fb, n.fec_lacks(i + 1));
    }
  }
  REQUIRE(got.size() == 1000);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::uint32_t fb = 5 + 3 * static_cast<std::uint32_t>(i);
    REQUIRE(got[i] == std::pair{fb, 1 + fb % 7});
  }
  // The cap: two datagrams at most; what does not fit is refused.
  nak_builder capped(header(), 2);
  std::uint32_t taken = 0;
  for (std::uint32_t fb = 0; fb < 100000; ++fb) {
    if (!capped.add_fec_lack(fb, 1)) break;
    ++taken;
  }
  REQUIRE(taken < 100000);
  REQUIRE(capped.full());
}
