#include "feed/batcher.hpp"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using mcdist::time_point;
using mcdist::feed::batch_limits;
using mcdist::feed::batcher;
using mcdist::feed::product;

namespace {

product make(std::int64_t id, std::uint64_t size) {
  product p;
  p.id = id;
  p.name = "p" + std::to_string(id);
  p.size = size;
  return p;
}

const time_point t0{std::chrono::seconds(100)};

}  // namespace

TEST_CASE("a batch closes when the window since its first product has passed", "[unit][feed]") {
  batcher b(batch_limits{200ms, 100, 1 << 30});
  REQUIRE_FALSE(b.deadline());
  REQUIRE(b.add(make(1, 10), t0));
  REQUIRE(b.add(make(2, 10), t0 + 150ms));
  REQUIRE(b.deadline() == t0 + 200ms);  // from the first product, not the last
  REQUIRE_FALSE(b.ready(t0 + 199ms));
  REQUIRE(b.ready(t0 + 200ms));
  const auto got = b.take();
  REQUIRE(got.size() == 2);
  REQUIRE(got[0].id == 1);
  REQUIRE(b.empty());
  REQUIRE_FALSE(b.ready(t0 + 1s));
}

TEST_CASE("a batch closes early at max files or max bytes", "[unit][feed]") {
  batcher files(batch_limits{10s, 3, 1 << 30});
  for (int i = 1; i <= 4; ++i) files.add(make(i, 1), t0);
  REQUIRE(files.ready(t0));
  REQUIRE(files.take().size() == 3);
  REQUIRE(files.size() == 1);  // the fourth waits, with its own arrival time
  REQUIRE_FALSE(files.ready(t0 + 9s));
  REQUIRE(files.ready(t0 + 10s));

  batcher bytes(batch_limits{10s, 100, 1000});
  bytes.add(make(1, 600), t0);
  REQUIRE_FALSE(bytes.ready(t0));
  bytes.add(make(2, 600), t0);
  REQUIRE(bytes.ready(t0));
  const auto first = bytes.take();
  REQUIRE(first.size() == 1);  // 1200 bytes would exceed the limit
  REQUIRE(bytes.bytes() == 600);
}

TEST_CASE("a product larger than max bytes is a batch of its own", "[unit][feed]") {
  batcher b(batch_limits{10s, 100, 1000});
  b.add(make(1, 5000), t0);
  b.add(make(2, 10), t0);
  REQUIRE(b.ready(t0));
  const auto got = b.take();
  REQUIRE(got.size() == 1);
  REQUIRE(got[0].id == 1);
}

TEST_CASE("the same product reported twice waits once", "[unit][feed]") {
  batcher b(batch_limits{});
  REQUIRE(b.add(make(7, 10), t0));
  REQUIRE_FALSE(b.add(make(7, 10), t0 + 1ms));
  REQUIRE(b.size() == 1);
  b.take();
  REQUIRE(b.add(make(7, 10), t0 + 2s));  // taken: a later report is a new wait (requeue)
}

TEST_CASE("a held product stays waiting, in its place, while the others go", "[unit][feed]") {
  batcher b(batch_limits{200ms, 100, 1 << 30});
  REQUIRE(b.add(make(1, 10), t0));
  REQUIRE(b.add(make(2, 20), t0 + 10ms));
  REQUIRE(b.add(make(3, 30), t0 + 20ms));
  const auto held = [](const product& p) { return p.id == 2; };
  const auto batch = b.take(held);
  REQUIRE(batch.size() == 2);
  REQUIRE(batch[0].id == 1);
  REQUIRE(batch[1].id == 3);
  REQUIRE(b.size() == 1);
  REQUIRE(b.bytes() == 20);
  // Its arrival time is kept: still ready from its own window.
  REQUIRE(b.deadline() == t0 + 10ms + 200ms);
  // Everything held: nothing taken.
  REQUIRE(b.take(held).empty());
  REQUIRE(b.take().at(0).id == 2);
  REQUIRE(b.empty());
}
