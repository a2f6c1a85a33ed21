#include "sender/core/repair_advert.hpp"

#include "common/block_map.hpp"
#include "common/ranges.hpp"

#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <span>
#include <vector>

using mcdist::block_map;
using mcdist::sender::repair_advert;
using namespace std::chrono_literals;

namespace {

using runs = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

/// The wanted callback over per-file bitmaps.
struct wanted_maps {
  std::map<std::uint32_t, block_map> maps;
  void operator()(std::uint32_t file, std::uint32_t first, std::uint32_t end,
                  const std::function<bool(std::uint32_t, std::uint32_t)>& emit) const {
    const auto& w = maps.at(file);
    for (std::uint32_t b = first; b < end;) {
      const std::uint32_t a = w.find_set(b);
      if (a >= end) return;
      const std::uint32_t e = std::min(end, w.find_clear(a));
      if (!emit(a, e)) return;
      b = e;
    }
  }
};

std::map<std::uint32_t, runs> decode(const mcdist::wire::repair_advert& m) {
  std::map<std::uint32_t, runs> out;
  for (const auto& fn : m.files()) {
    REQUIRE_FALSE(mcdist::for_each_range(
        std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())), 1u << 30,
        [&](std::uint32_t first, std::uint32_t count) {
          out[fn.file()].emplace_back(first, first + count);
        }));
  }
  return out;
}

}  // namespace

TEST_CASE("an advert carries the coalesced runs still wanted when it leaves", "[unit][sender]") {
  repair_advert adv;
  wanted_maps w;
  w.maps.emplace(0, block_map(1000));
  w.maps.emplace(2, block_map(1000));
  REQUIRE_FALSE(adv.pending());
  adv.scheduled(0, 10, 5);
  adv.scheduled(0, 15, 5);  // touches: one run [10, 20)
  adv.scheduled(2, 100, 1);
  adv.scheduled(0, 500, 100);
  REQUIRE(adv.pending_runs() == 3);
  w.maps[0].set_range(10, 10);
  w.maps[0].set_range(500, 100);
  w.maps[2].set(100);
  w.maps[0].reset(12);  // a prompt repair already left: no hint needed
  REQUIRE(adv.due(mcdist::time_point{} + 1s));
  mcdist::wire::repair_advert m;
  REQUIRE(adv.take(m, w) == 10 - 1 + 100 + 1);
  REQUIRE_FALSE(adv.pending());
  const auto got = decode(m);
  REQUIRE(got.at(0) == runs{{10, 12}, {13, 20}, {500, 600}});
  REQUIRE(got.at(2) == runs{{100, 101}});
  REQUIRE(m.ByteSizeLong() < mcdist::wire::control_budget);
}

TEST_CASE("an advert is bounded; what does not fit waits for the next", "[unit][sender]") {
  repair_advert adv;
  wanted_maps w;
  w.maps.emplace(0, block_map(100000));
  // Scattered single blocks: far more than one advert carries.
  for (std::uint32_t b = 0; b < 100000; b += 7) {
    adv.scheduled(0, b, 1);
    w.maps[0].set(b);
  }
  REQUIRE(adv.pending_runs() == repair_advert::max_pending_runs);  // bounded
  std::uint64_t total = 0;
  int adverts = 0;
  while (adv.pending()) {
    mcdist::wire::repair_advert m;
    total += adv.take(m, w);
    ++adverts;
    REQUIRE(m.ByteSizeLong() <= repair_advert::range_budget + 64);
  }
  REQUIRE(total == repair_advert::max_pending_runs);
  REQUIRE(adverts > 1);
  // Pacing: one advert per interval.
  const auto t0 = mcdist::time_point{} + 10s;
  adv.sent(t0, 5ms);
  adv.scheduled(0, 1, 1);
  REQUIRE_FALSE(adv.due(t0 + 4ms));
  REQUIRE(adv.due(t0 + 5ms));
  adv.clear();  // a new pass
  REQUIRE_FALSE(adv.due(t0 + 5ms));
}

TEST_CASE("an advert carries the parity still pending of the FEC blocks NAKs raised, three times",
          "[unit][sender][fec]") {
  repair_advert a;
  std::map<std::uint32_t, std::uint32_t> pending{{2, 40}, {7, 3}, {9, 0}};
  auto pending_of = [&](std::uint32_t fb) { return pending[fb]; };
  a.scheduled_parity(7);
  a.scheduled_parity(2);
  a.scheduled_parity(9);
  REQUIRE(a.pending());
  auto take = [&] {
    mcdist::wire::repair_advert m;
    a.take_parity(m, pending_of);
    // (gap, pending) pairs over ascending FEC blocks, decoded back to (FEC block, pending).
    std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
    std::uint32_t fb = 0;
    for (int i = 0; i + 1 < m.fec_parity_size(); i += 2) {
      fb += m.fec_parity(i);
      out.emplace_back(fb, m.fec_parity(i + 1));
    }
    return out;
  };
  using pairs = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
  // FEC block 9 has nothing pending (its parity left): it is dropped, the parity is the hint.
  REQUIRE(take() == pairs{{2, 40}, {7, 3}});
  // Each advert says what is pending then.
  pending[2] = 38;
  REQUIRE(take() == pairs{{2, 38}, {7, 3}});
  pending[7] = 0;
  REQUIRE(take() == pairs{{2, 38}});
  // Three adverts in all, then nothing waits.
  REQUIRE_FALSE(a.pending());
  REQUIRE(take().empty());
  // A NAK that raises it again starts over.
  a.scheduled_parity(2);
  REQUIRE(take() == pairs{{2, 38}});
  a.clear();
  REQUIRE_FALSE(a.pending());
}

TEST_CASE("an advert carries at most fec_budget bytes of parity counts", "[unit][sender][fec]") {
  repair_advert a;
  const std::size_t per_advert = repair_advert::fec_budget / repair_advert::fec_pair_bytes;
  for (std::uint32_t fb = 0; fb < per_advert + 5; ++fb) a.scheduled_parity(fb * 1000);
  mcdist::wire::repair_advert m;
  REQUIRE(a.take_parity(m, [](std::uint32_t) { return 4u; }) == per_advert);
  REQUIRE(m.ByteSizeLong() <= repair_advert::range_budget + repair_advert::fec_budget);
  mcdist::wire::repair_advert next;
  // The rest, and the first ones for their second advert.
  REQUIRE(a.take_parity(next, [](std::uint32_t) { return 4u; }) == per_advert);
  REQUIRE(next.fec_parity(0) == 0);  // FEC block 0 again first
}
