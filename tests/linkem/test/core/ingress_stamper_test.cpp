#include "tests/linkem/core/ingress_stamper.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

using namespace mcdist::linkem;

namespace {

/// An IP-like packet of `length` bytes whose head carries `id` (so packets differ).
std::vector<std::byte> packet(std::uint32_t id, std::size_t length = 1428) {
  std::vector<std::byte> p(length, std::byte{0x5a});
  std::memcpy(p.data() + 4, &id, sizeof id);
  return p;
}

tap_record record_of(const std::vector<std::byte>& p, std::int64_t at_ns) {
  tap_record r;
  r.at_ns = at_ns;
  r.length = static_cast<std::uint32_t>(p.size());
  r.head_len = static_cast<std::uint8_t>(std::min(p.size(), tap_record::k_head_bytes));
  std::memcpy(r.head.data(), p.data(), r.head_len);
  return r;
}

}  // namespace

TEST_CASE("frames read after a hold-up keep the times the host queued them", "[ingress]") {
  ingress_stamper s;
  // A paced host queued ten frames 1 ms apart while the reader was held up; all are read
  // at 20 ms.
  std::vector<std::vector<std::byte>> frames;
  for (std::uint32_t i = 0; i < 10; ++i) {
    frames.push_back(packet(i));
    s.on_tap(record_of(frames.back(), 1'000'000 * (i + 1)));
  }
  for (std::uint32_t i = 0; i < 10; ++i) {
    CHECK(s.stamp(frames[i], 20'000'000) == 1'000'000 * (i + 1));
  }
  CHECK(s.counters().tapped.value() == 10);
  CHECK(s.counters().read_stamped.value() == 0);
  CHECK(s.counters().max_wait_us.value() == 19'000);
  CHECK(s.queued() == 0);
}

TEST_CASE("a record without a frame (the device dropped it) is skipped", "[ingress]") {
  ingress_stamper s;
  const auto a = packet(1), dropped = packet(2), b = packet(3);
  s.on_tap(record_of(a, 100));
  s.on_tap(record_of(dropped, 200));
  s.on_tap(record_of(b, 300));
  CHECK(s.stamp(a, 1000) == 100);
  CHECK(s.stamp(b, 1000) == 300);
  CHECK(s.counters().skipped.value() == 1);
  CHECK(s.queued() == 0);
}

TEST_CASE("a frame the tap missed keeps its read time and consumes nothing", "[ingress]") {
  ingress_stamper s;
  const auto missed = packet(1), next = packet(2);
  s.on_tap(record_of(next, 500));
  CHECK(s.stamp(missed, 900) == 900);
  CHECK(s.counters().read_stamped.value() == 1);
  CHECK(s.queued() == 1);
  // The next frame still finds its record; the stamp never goes back before the last one.
  CHECK(s.stamp(next, 1000) == 900);
  CHECK(s.counters().tapped.value() == 1);
}

TEST_CASE("frames of the same head but another length do not match", "[ingress]") {
  ingress_stamper s;
  const auto small = packet(7, 100), large = packet(7, 14028);
  s.on_tap(record_of(large, 50));
  CHECK(s.stamp(small, 70) == 70);
  CHECK(s.stamp(large, 80) == 70);  // matched, but not before the previous stamp
  CHECK(s.counters().tapped.value() == 1);
}

TEST_CASE("stamps are never after the read time and never go backwards", "[ingress]") {
  ingress_stamper s;
  const auto a = packet(1), b = packet(2), c = packet(3);
  s.on_tap(record_of(a, 5000));  // a clock step: the record claims a time after the read
  s.on_tap(record_of(b, 100));
  s.on_tap(record_of(c, 4000));
  CHECK(s.stamp(a, 3000) == 3000);
  CHECK(s.stamp(b, 3100) == 3000);
  CHECK(s.stamp(c, 4100) == 4000);
}

TEST_CASE("the record queue is bounded, the oldest records go first", "[ingress]") {
  ingress_stamper s(4);
  std::vector<std::vector<std::byte>> frames;
  for (std::uint32_t i = 0; i < 6; ++i) {
    frames.push_back(packet(i));
    s.on_tap(record_of(frames.back(), 10 * (i + 1)));
  }
  CHECK(s.queued() == 4);
  CHECK(s.counters().overflowed.value() == 2);
  CHECK(s.stamp(frames[0], 100) == 100);  // its record was discarded
  CHECK(s.stamp(frames[2], 100) == 100);  // found (30), but not before the previous stamp
  CHECK(s.stamp(frames[5], 100) == 100);
  CHECK(s.counters().tapped.value() == 2);
}

TEST_CASE("a frame is looked for only k_search_depth records ahead", "[ingress]") {
  ingress_stamper s;
  for (std::uint32_t i = 0; i < ingress_stamper::k_search_depth; ++i) {
    s.on_tap(record_of(packet(1000 + i), i));
  }
  const auto far = packet(1);
  s.on_tap(record_of(far, 999));
  CHECK(s.stamp(far, 5000) == 5000);
  CHECK(s.queued() == ingress_stamper::k_search_depth + 1);
}

TEST_CASE(
    "records a second older than the read are discarded, so a long run of device drops "
    "does not strand later frames",
    "[ingress]") {
  ingress_stamper s;
  // More dropped frames than the search looks past, then a frame that was read.
  for (std::uint32_t i = 0; i < ingress_stamper::k_search_depth + 10; ++i) {
    s.on_tap(record_of(packet(5000 + i), 1'000 + i));
  }
  const auto read = packet(1);
  const std::int64_t at = 3'000'000'000;
  s.on_tap(record_of(read, at - 1'000'000));
  CHECK(s.stamp(read, at) == at - 1'000'000);
  CHECK(s.counters().skipped.value() == ingress_stamper::k_search_depth + 10);
  CHECK(s.queued() == 0);
}
