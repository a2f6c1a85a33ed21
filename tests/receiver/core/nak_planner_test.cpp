#include "receiver/core/nak_planner.hpp"

#include "common/fec/fec_layout.hpp"
#include "common/ranges.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/core/fec_tracker.hpp"
#include "tests/receiver/core/core_testing.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <utility>
#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;
using mcdist::receiver::testing::nak_blocks;
using mcdist::receiver::testing::receiving_files;
using namespace std::chrono_literals;

namespace {

const time_point t0{std::chrono::seconds(100)};

wire::marker marker(std::uint32_t pass, std::uint32_t file, std::uint32_t block,
                    std::uint32_t seq = 1) {
  wire::marker m;
  m.set_pass(pass);
  m.set_file(file);
  m.set_block(block);
  m.set_seq(seq);
  m.set_nak_backoff_us(100'000);
  return m;
}

/// The rounds due at `now`, each built.
std::vector<nak_round_out> fire(nak_planner& p, const std::vector<file_rx>& files, time_point now,
                                const fec_tracker* fec = nullptr) {
  std::vector<nak_round_out> out;
  for (const auto& r : p.take_due(now)) out.push_back(p.build_round(r, {}, files, fec, now));
  return out;
}

/// A random() that always draws the same value (0: no backoff).
auto fixed(std::uint64_t v) {
  return [v] { return v; };
}

}  // namespace

TEST_CASE("a marker schedules a round for the gaps behind it, due after the drawn backoff",
          "[unit][receiver][nak_planner]") {
  nak_planner p(64, 0);
  const auto files = receiving_files({10, 5}, {{0, 3}, {0, 7}, {1, 0}, {1, 4}}, 1000);
  p.on_marker_params(marker(1, 1, 2), 2);
  // Half the window: the draw is uniform without a group size.
  p.on_marker(marker(1, 1, 2), false, false, t0, fixed(std::uint64_t{1} << 63));
  REQUIRE(p.rounds() == 1);
  REQUIRE(p.due() == t0 + 50ms);
  CHECK(p.progress().pass == 1);
  CHECK(p.progress().file == 1);
  CHECK(p.progress().block == 2);
  CHECK(fire(p, files, t0 + 49ms).empty());
  const auto out = fire(p, files, t0 + 50ms);
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].datagrams.size() == 1);
  // Behind the marker only: block 4 of file 1 has not been sent yet.
  CHECK(nak_blocks(out[0].datagrams) ==
        std::set<std::pair<std::uint32_t, std::uint32_t>>{{0, 3}, {0, 7}, {1, 0}});
  // blocks_missing: the marker's own file counts what it lacks in all, bounded by the blocks
  // behind the marker (file 1 holds 3 of 5: none of its 2 behind the marker counted).
  CHECK(out[0].datagrams[0].blocks_missing() == 2);
  CHECK_FALSE(p.due());

  // The next marker's round starts where the last one ended.
  p.on_marker(marker(1, 2, 0), false, false, t0 + 60ms, fixed(0));
  const auto next = fire(p, files, t0 + 60ms);
  REQUIRE(next.size() == 1);
  CHECK(nak_blocks(next[0].datagrams) == std::set<std::pair<std::uint32_t, std::uint32_t>>{{1, 4}});
}

TEST_CASE(
    "older markers are ignored, a new pass starts the scan over, a silent site only "
    "follows",
    "[unit][receiver][nak_planner]") {
  nak_planner p(64, 0);
  const auto files = receiving_files({10}, {{0, 1}}, 1000);
  p.on_marker(marker(1, 0, 8), false, true, t0, [] {
    FAIL("a silent session draws no backoff");
    return std::uint64_t{0};
  });
  CHECK(p.rounds() == 0);
  CHECK(p.progress().block == 8);
  p.on_marker(marker(1, 0, 5), false, false, t0, fixed(0));  // older
  CHECK(p.rounds() == 0);
  CHECK(p.progress().block == 8);
  p.on_marker(marker(2, 0, 2), false, false, t0, fixed(0));
  CHECK(p.progress().pass == 2);
  const auto out = fire(p, files, t0);
  REQUIRE(out.size() == 1);
  CHECK(nak_blocks(out[0].datagrams) == std::set<std::pair<std::uint32_t, std::uint32_t>>{{0, 1}});
}

TEST_CASE("a pass end asked again is a rescan; a status request answers by slice",
          "[unit][receiver][nak_planner]") {
  // id hash 5: slice 1 of 2.
  nak_planner p(64, 5);
  auto files = receiving_files({4}, {{0, 2}}, 1000);
  auto end = marker(1, 1, 0);
  end.set_pass_end(true);
  p.on_marker(end, false, false, t0, fixed(0));
  REQUIRE(fire(p, files, t0).at(0).datagrams.size() == 1);
  // The repair was lost: the same pass end again NAKs everything still missing.
  p.on_marker(end, false, false, t0 + 1s, fixed(0));
  const auto again = fire(p, files, t0 + 1s);
  REQUIRE(again.size() == 1);
  CHECK(nak_blocks(again[0].datagrams) ==
        std::set<std::pair<std::uint32_t, std::uint32_t>>{{0, 2}});

  // Nothing missing: a status request answers only in this receiver's slice.
  files[0].received.set(2);
  auto status = end;
  status.set_status_request(true);
  status.set_status_slices(2);
  status.set_status_slice(0);
  p.on_marker(status, false, false, t0 + 2s, fixed(0));
  CHECK(fire(p, files, t0 + 2s).at(0).datagrams.empty());
  status.set_status_slice(1);
  p.on_marker(status, false, false, t0 + 3s, fixed(0));
  CHECK(fire(p, files, t0 + 3s).at(0).datagrams.size() == 1);
}

TEST_CASE("advertised blocks are left out for the pass; a bad advert is refused whole",
          "[unit][receiver][nak_planner]") {
  nak_planner p(64, 0);
  const auto files = receiving_files({10}, {{0, 2}, {0, 3}, {0, 6}}, 1000);
  p.on_marker(marker(1, 0, 1), false, false, t0, fixed(0));
  REQUIRE(fire(p, files, t0).size() == 1);
  wire::repair_advert a;
  a.set_pass(1);
  auto* fn = a.add_files();
  fn->set_file(0);
  fn->add_ranges(2);
  fn->add_ranges(2);  // blocks 2-3
  REQUIRE(nak_planner::advert_files_valid(a, files));
  REQUIRE(p.take_advert(a, files, nullptr));
  CHECK(p.feedback().advertised(0, 3));
  p.on_marker(marker(1, 1, 0), false, false, t0, fixed(0));
  CHECK(nak_blocks(fire(p, files, t0).at(0).datagrams) ==
        std::set<std::pair<std::uint32_t, std::uint32_t>>{{0, 6}});

  wire::repair_advert bad;
  auto* bf = bad.add_files();
  bf->set_file(0);
  bf->add_ranges(8);
  bf->add_ranges(5);  // past the file's 10 blocks
  CHECK_FALSE(nak_planner::advert_files_valid(bad, files));
  wire::repair_advert other;
  other.add_files()->set_file(1);  // no such file
  CHECK_FALSE(nak_planner::advert_files_valid(other, files));
}

TEST_CASE("the datagram cap reschedules the rest of a round at once",
          "[unit][receiver][nak_planner]") {
  // Every other block of 20,000 missing: far more runs than one datagram holds.
  std::set<std::pair<std::uint32_t, std::uint32_t>> missing;
  for (std::uint32_t b = 0; b < 20000; b += 2) missing.emplace(0, b);
  const auto files = receiving_files({20000}, missing, 1000);
  nak_planner p(1, 0);
  p.on_marker(marker(1, 1, 0), false, false, t0, fixed(0));
  std::set<std::pair<std::uint32_t, std::uint32_t>> asked;
  int rounds = 0;
  while (p.due() && rounds < 1000) {
    for (const auto& out : fire(p, files, t0)) {
      REQUIRE(out.datagrams.size() <= 1);
      const auto n = nak_blocks(out.datagrams);
      asked.insert(n.begin(), n.end());
    }
    ++rounds;
  }
  CHECK(rounds > 1);
  CHECK(asked == missing);
}

TEST_CASE("over unicast a round asks only for digests", "[unit][receiver][nak_planner]") {
  nak_planner p(64, 0);
  auto files = receiving_files({4, 4}, {{0, 1}}, 1000);
  files[1].entry.digest.reset();
  files[0].entry.digest = sha256_digest{};
  auto m = marker(1, 1, 2);
  m.set_digests_through(2);
  p.on_marker_params(m, 2);
  p.on_marker(m, true, false, t0, fixed(0));
  CHECK(p.rounds() == 0);  // nothing new behind the marker over unicast, no status asked
  m.set_status_request(true);
  p.on_marker(m, true, false, t0, fixed(0));
  const auto out = fire(p, files, t0);
  REQUIRE(out.at(0).datagrams.size() == 1);
  const auto& nak = out[0].datagrams[0];
  CHECK(nak.files_size() == 0);
  REQUIRE(nak.digests_wanted_size() == 1);
  CHECK(nak.digests_wanted(0) == 1);
}

TEST_CASE("with parity a FEC block's loss is reported as a lack once per pass",
          "[unit][receiver][nak_planner]") {
  // One file of 8 blocks, k = 4, depth 1: FEC blocks 0 (blocks 0-3) and 1 (blocks 4-7).
  const auto files = receiving_files({8}, {{0, 1}, {0, 2}, {0, 6}}, 1000);
  fec_tracker t(fec::layout({8}, 4, 1), 4);
  for (std::uint32_t b = 0; b < 8; ++b) {
    if (files[0].received.test(b)) t.add_source(b / 4);
  }
  nak_planner p(64, 0);
  // Pass 1 has sent FEC block 0 and one block past it: its lack is due, FEC block 1 is not.
  p.on_marker(marker(1, 0, 5), false, false, t0, fixed(0));
  auto out = fire(p, files, t0, &t);
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].datagrams.size() == 1);
  CHECK(nak_blocks(out[0].datagrams).empty());
  auto lacks = out[0].datagrams[0].fec_lacks();
  CHECK(std::vector<std::uint32_t>(lacks.begin(), lacks.end()) == std::vector<std::uint32_t>{0, 2});

  // The end of pass 1: FEC block 1's lack; FEC block 0's was reported already.
  auto end = marker(1, 1, 0);
  end.set_pass_end(true);
  p.on_marker(end, false, false, t0, fixed(0));
  out = fire(p, files, t0, &t);
  REQUIRE(out.size() == 1);
  lacks = out[0].datagrams.at(0).fec_lacks();
  CHECK(std::vector<std::uint32_t>(lacks.begin(), lacks.end()) == std::vector<std::uint32_t>{1, 1});

  // Asked again at the pass end (the parity was lost): a rescan reports both.
  p.on_marker(end, false, false, t0 + 1s, fixed(0));
  out = fire(p, files, t0 + 1s, &t);
  lacks = out.at(0).datagrams.at(0).fec_lacks();
  CHECK(std::vector<std::uint32_t>(lacks.begin(), lacks.end()) ==
        std::vector<std::uint32_t>{0, 2, 1, 1});
  CHECK(out[0].lacks_covered == 0);
}

TEST_CASE("parity the sender advertised pending covers a FEC block's lack",
          "[unit][receiver][nak_planner]") {
  const auto files = receiving_files({8}, {{0, 1}}, 1000);
  fec_tracker t(fec::layout({8}, 4, 1), 4);
  for (std::uint32_t b = 0; b < 8; ++b) {
    if (files[0].received.test(b)) t.add_source(b / 4);
  }
  nak_planner p(64, 0);
  p.on_marker(marker(2, 0, 0), false, false, t0, fixed(0));
  wire::repair_advert a;
  a.set_pass(2);
  a.add_fec_parity(0);  // FEC block 0
  a.add_fec_parity(1);  // one parity block pending
  REQUIRE(p.take_advert(a, files, &t));
  wire::repair_advert bad = a;
  bad.add_fec_parity(0);  // odd pair count
  CHECK_FALSE(p.take_advert(bad, files, &t));
  p.on_marker(marker(2, 1, 0), false, false, t0, fixed(0));
  const auto out = fire(p, files, t0, &t);
  REQUIRE(out.size() == 1);
  CHECK(out[0].lacks_covered == 1);
  CHECK(out[0].datagrams.empty());
}

TEST_CASE("blocks_missing counts the receiving files' gaps behind the marker",
          "[unit][receiver][nak_planner]") {
  auto files = receiving_files({10, 10, 10}, {{0, 0}, {1, 1}, {1, 9}, {2, 0}}, 1000);
  files[2].state = file_rx::state_t::stored;
  nak_round r;
  r.to_file = 1;
  r.to_block = 5;
  // (0, 0); file 1, the marker's, lacks 2 in all but 5 are behind the marker: none counted.
  CHECK(nak_planner::blocks_missing(files, r) == 1);
  r.to_file = 3;
  r.to_block = 0;
  CHECK(nak_planner::blocks_missing(files, r) == 3);  // the stored file is not counted
}
