#include "common/unicast/record_scheduler.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

using namespace mcdist;
using namespace mcdist::unicast;

TEST_CASE("records cover every requested byte exactly once, in order per request",
          "[unit][unicast][scheduler]") {
  record_scheduler s(1000, 3);
  s.push({file_index{0}, 0, 2500});
  s.push({file_index{1}, 10, 1});
  s.push({file_index{2}, 0, 1000});
  s.push({file_index{0}, 5000, 1500});
  REQUIRE(s.pending_bytes() == 5001);
  std::map<std::uint32_t, std::vector<record>> per_file;
  std::uint64_t total = 0;
  while (auto r = s.next()) {
    REQUIRE(r->length > 0);
    REQUIRE(r->length <= 1000);
    total += r->length;
    per_file[r->file.value].push_back(*r);
  }
  REQUIRE(total == 5001);
  REQUIRE(s.empty());
  REQUIRE(s.pending_bytes() == 0);
  // Two requests of file 0 are served side by side; each in increasing offsets.
  std::vector<record> low, high;
  for (const auto& r : per_file[0]) (r.offset < 5000 ? low : high).push_back(r);
  REQUIRE(std::is_sorted(low.begin(), low.end()));
  REQUIRE(std::is_sorted(high.begin(), high.end()));
  std::sort(per_file[0].begin(), per_file[0].end());
  REQUIRE(per_file[0] == std::vector<record>{{file_index{0}, 0, 1000},
                                             {file_index{0}, 1000, 1000},
                                             {file_index{0}, 2000, 500},
                                             {file_index{0}, 5000, 1000},
                                             {file_index{0}, 6000, 500}});
  REQUIRE(per_file[1] == std::vector<record>{{file_index{1}, 10, 1}});
}

TEST_CASE("a small file is not stuck behind a large one", "[unit][unicast][scheduler]") {
  record_scheduler s(64 << 10, 8);
  s.push({file_index{0}, 0, 20u << 20});  // 20 MB first
  for (std::uint32_t f = 1; f <= 100; ++f) s.push({file_index{f}, 0, 10'000});
  // Round robin over 8 active requests: the first 8 records are 8 different files, and all
  // 100 small files are done long before the 20 MB file's 320 records.
  std::vector<std::uint32_t> first;
  std::size_t records = 0;
  std::size_t small_done_at = 0;
  std::size_t small_seen = 0;
  while (auto r = s.next()) {
    ++records;
    if (first.size() < 8) first.push_back(r->file.value);
    if (r->file.value != 0 && ++small_seen == 100) small_done_at = records;
  }
  REQUIRE(first == std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  REQUIRE(small_done_at < 130);
  REQUIRE(records == 320 + 100);
}

TEST_CASE("clear drops everything", "[unit][unicast][scheduler]") {
  record_scheduler s(10, 2);
  s.push({file_index{0}, 0, 100});
  s.push({file_index{1}, 0, 100});
  s.push({file_index{2}, 0, 100});
  (void)s.next();
  s.clear();
  REQUIRE(s.empty());
  REQUIRE_FALSE(s.next());
}

TEST_CASE(
    "spread over n connections the last records shrink so the connections run dry "
    "together",
    "[unit][unicast][scheduler]") {
  constexpr std::uint32_t rs = 64 << 10;
  constexpr std::size_t n = 8;
  record_scheduler s(rs, 4, n);
  const std::uint64_t total = 5'000'000;
  s.push({file_index{0}, 0, total});
  std::uint64_t next_offset = 0;
  std::vector<std::uint32_t> sizes;
  while (true) {
    const std::uint64_t pending = s.pending_bytes();
    auto r = s.next();
    if (!r) break;
    REQUIRE(r->offset == next_offset);  // every byte once, in order
    next_offset += r->length;
    // Never above record_size, never above a (4 n)th of what is left unless at the floor.
    REQUIRE(r->length <= rs);
    REQUIRE(r->length <=
            std::max<std::uint64_t>(pending / (4 * n), record_scheduler::min_tail_record));
    sizes.push_back(r->length);
  }
  REQUIRE(next_offset == total);
  REQUIRE(sizes.front() == rs);  // full records while far from the end
  REQUIRE(sizes.back() <= record_scheduler::min_tail_record);  // the tail is cut fine
  // The last n records together are at most n small records: no connection gets a big one last.
  for (std::size_t i = sizes.size() - n; i < sizes.size(); ++i)
    REQUIRE(sizes[i] <= record_scheduler::min_tail_record);
  // Without a spread (SCTP) records stay whole to the end.
  record_scheduler whole(rs, 4);
  whole.push({file_index{0}, 0, total});
  std::uint32_t last = 0;
  std::size_t count = 0;
  while (auto r = whole.next()) {
    last = r->length;
    ++count;
  }
  REQUIRE(count == (total + rs - 1) / rs);
  REQUIRE(last == total % rs);
}
