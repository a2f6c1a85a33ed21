#include "tests/linkem/core/igmp.hpp"

#include <catch2/catch.hpp>

#include "tests/linkem/test/core/frame_builder.hpp"

using namespace mcdist::linkem;
using namespace mcdist::linkem::test;

namespace {

constexpr std::uint32_t k_group_a = 0xEF010203;  // 239.1.2.3
constexpr std::uint32_t k_group_b = 0xEF010204;

bytes checksummed(bytes m) {
  put16(m, 2, 0);
  put16(m, 2, ref_checksum(m, 0, m.size()));
  return m;
}

}  // namespace

TEST_CASE("IGMPv2 reports join and leaves leave", "[igmp]") {
  std::vector<membership_change> changes;
  CHECK(parse_igmp(checksummed(igmp_v2(k_igmp_v2_report, k_group_a)), changes) == igmp_result::ok);
  CHECK(parse_igmp(checksummed(igmp_v2(k_igmp_v2_leave, k_group_a)), changes) == igmp_result::ok);
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].group == k_group_a);
  CHECK(changes[0].join);
  CHECK_FALSE(changes[1].join);
}

TEST_CASE("IGMPv3 records map to joins and leaves", "[igmp]") {
  const bytes m = checksummed(igmp_v3({
      {4, k_group_a, {}},             // CHANGE_TO_EXCLUDE {}: join
      {3, k_group_b, {}},             // CHANGE_TO_INCLUDE {}: leave
      {1, 0xEF000001, {0x0A000001}},  // MODE_IS_INCLUDE {S}: join (source filter ignored)
      {5, 0xEF000002, {0x0A000001}},  // ALLOW_NEW_SOURCES: join
      {6, 0xEF000003, {0x0A000001}},  // BLOCK_OLD_SOURCES: no change
      {2, 0xEF000004, {}, 1},         // MODE_IS_EXCLUDE with aux data: join
      {4, 0x0A000001, {}},            // not a multicast group: skipped
  }));
  std::vector<membership_change> changes;
  REQUIRE(parse_igmp(m, changes) == igmp_result::ok);
  REQUIRE(changes.size() == 5);
  CHECK(changes[0].group == k_group_a);
  CHECK(changes[0].join);
  CHECK(changes[1].group == k_group_b);
  CHECK_FALSE(changes[1].join);
  CHECK(changes[2].join);
  CHECK(changes[3].join);
  CHECK(changes[4].group == 0xEF000004);
  CHECK(changes[4].join);
}

TEST_CASE("queries carry no membership", "[igmp]") {
  bytes q = igmp_v2(k_igmp_query, 0);
  std::vector<membership_change> changes;
  CHECK(parse_igmp(checksummed(q), changes) == igmp_result::ignored);
  CHECK(changes.empty());
}

TEST_CASE("a bad checksum is malformed", "[igmp]") {
  bytes m = checksummed(igmp_v2(k_igmp_v2_report, k_group_a));
  m[7] ^= std::byte{1};
  std::vector<membership_change> changes;
  CHECK(parse_igmp(m, changes) == igmp_result::malformed);
  CHECK(changes.empty());
}

TEST_CASE("every truncation of a v3 report is rejected without partial changes", "[igmp]") {
  const bytes full = checksummed(igmp_v3({{4, k_group_a, {}}, {1, k_group_b, {1, 2, 3}}}));
  for (std::size_t len = 0; len < full.size(); ++len) {
    // Re-checksum the cut message so that the length checks, not the checksum, reject it.
    bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
    if (cut.size() >= 4) {
      cut = checksummed(cut);
    }
    std::vector<membership_change> changes;
    INFO("length " << len);
    CHECK(parse_igmp(cut, changes) == igmp_result::malformed);
    CHECK(changes.empty());
  }
}

TEST_CASE("a v3 report declaring too many records is malformed", "[igmp]") {
  bytes m = igmp_v3({});
  put16(m, 6, static_cast<std::uint16_t>(k_max_igmp_records + 1));
  std::vector<membership_change> changes;
  CHECK(parse_igmp(checksummed(m), changes) == igmp_result::malformed);
}

TEST_CASE("the membership table tracks hosts per group", "[igmp]") {
  membership_table t;
  t.apply(2, {k_group_a, true});
  t.apply(1, {k_group_a, true});
  t.apply(1, {k_group_a, true});  // idempotent
  REQUIRE(t.members(k_group_a).size() == 2);
  CHECK(t.members(k_group_a)[0] == 1);
  CHECK(t.members(k_group_a)[1] == 2);
  CHECK(t.members(k_group_b).empty());
  t.apply(1, {k_group_a, false});
  REQUIRE(t.members(k_group_a).size() == 1);
  CHECK(t.members(k_group_a)[0] == 2);
  t.apply(2, {k_group_a, false});
  CHECK(t.members(k_group_a).empty());
  CHECK(t.group_count() == 0);
  t.apply(3, {k_group_b, false});  // leave without join: no effect
  CHECK(t.group_count() == 0);
}
