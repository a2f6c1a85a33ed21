#include "sender/core/nak_intake.hpp"

#include "common/error.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <initializer_list>
#include <vector>

using namespace mcdist;
using namespace mcdist::sender;

namespace {

// Two files of 40 and 24 blocks; with k = 16 and depth 1, four FEC blocks of 16 sources.
const std::vector<std::uint32_t> file_blocks{40, 24};

void add_file(wire::nak& m, std::uint32_t file, std::initializer_list<std::uint32_t> pairs) {
  auto* f = m.add_files();
  f->set_file(file);
  for (const auto v : pairs) f->add_ranges(v);
}

void add_lacks(wire::nak& m, std::initializer_list<std::uint32_t> pairs) {
  for (const auto v : pairs) m.add_fec_lacks(v);
}

}  // namespace

TEST_CASE("a NAK's runs come out in the session's block indexes, with their totals",
          "[unit][sender][nak_intake]") {
  wire::nak m;
  add_file(m, 0, {3, 2, 10, 5});  // blocks 3-4 and 15-19
  add_file(m, 1, {0, 24});        // the whole second file
  nak_request r;
  REQUIRE_FALSE(read_nak(m, file_blocks, nullptr, r));
  REQUIRE(r.runs.size() == 3);
  CHECK(r.runs[0].file == 0);
  CHECK(r.runs[0].first == 3);
  CHECK(r.runs[0].count == 2);
  CHECK(r.runs[1].first == 15);
  CHECK(r.runs[1].count == 5);
  CHECK(r.runs[2].file == 1);
  CHECK(r.runs[2].first == 0);
  CHECK(r.runs[2].count == 24);
  CHECK(r.named_blocks == 31);
  CHECK(r.lacks.empty());
  CHECK(r.asked() == 31);
}

TEST_CASE("FEC lacks come out by FEC block with its sources; the request is cleared per NAK",
          "[unit][sender][nak_intake]") {
  const fec::layout fec(file_blocks, 16, 1);
  REQUIRE(fec.fec_blocks() == 4);
  wire::nak m;
  add_lacks(m, {1, 3, 2, 16});  // FEC block 1 lacks 3, FEC block 3 lacks all 16
  nak_request r;
  r.runs.push_back({9, 9, 9});  // left from an earlier NAK
  REQUIRE_FALSE(read_nak(m, file_blocks, &fec, r));
  CHECK(r.runs.empty());
  REQUIRE(r.lacks.size() == 2);
  CHECK(r.lacks[0].fec_block == 1);
  CHECK(r.lacks[0].lack == 3);
  CHECK(r.lacks[0].sources == 16);
  CHECK(r.lacks[1].fec_block == 3);
  CHECK(r.lacks[1].lack == 16);
  CHECK(r.lacked_blocks == 19);
  CHECK(r.lacked_sources == 32);
  CHECK(r.asked() == 19);
}

TEST_CASE("a NAK outside the session's shape is refused as a whole", "[unit][sender][nak_intake]") {
  const fec::layout fec(file_blocks, 16, 1);
  nak_request r;
  auto refused = [&](auto&& build, const fec::layout* layout) {
    wire::nak m;
    build(m);
    return read_nak(m, file_blocks, layout, r) == errc::invalid_field;
  };
  CHECK(refused([](wire::nak& m) { add_file(m, 2, {0, 1}); }, &fec));      // no file 2
  CHECK(refused([](wire::nak& m) { add_file(m, 1, {20, 5}); }, &fec));     // past block 24
  CHECK(refused([](wire::nak& m) { add_file(m, 0, {0, 0}); }, &fec));      // a run of 0
  CHECK(refused([](wire::nak& m) { add_file(m, 0, {0, 1, 2}); }, &fec));   // odd pairs
  CHECK(refused([](wire::nak& m) { add_lacks(m, {0, 1}); }, nullptr));     // no parity
  CHECK(refused([](wire::nak& m) { add_lacks(m, {0, 1, 0, 1}); }, &fec));  // not ascending
  CHECK(refused([](wire::nak& m) { add_lacks(m, {4, 1}); }, &fec));        // past FEC block 3
  CHECK(refused([](wire::nak& m) { add_lacks(m, {0, 17}); }, &fec));       // above 16 sources
  CHECK(refused([](wire::nak& m) { add_lacks(m, {0, 0}); }, &fec));        // a lack of 0
  CHECK(refused([](wire::nak& m) { add_lacks(m, {0, 1, 1}); }, &fec));     // odd pairs
  // A good file NAK beside a bad lack: nothing of it is taken.
  CHECK(refused(
      [](wire::nak& m) {
        add_file(m, 0, {0, 1});
        add_lacks(m, {0, 17});
      },
      &fec));
  // The largest gap: no overflow past the last FEC block.
  CHECK(refused([](wire::nak& m) { add_lacks(m, {1, 1, 0xffffffffu, 1}); }, &fec));
}
