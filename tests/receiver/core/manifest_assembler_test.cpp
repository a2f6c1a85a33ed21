#include "receiver/core/manifest_assembler.hpp"

#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;
using fit = manifest_assembler::fit;
using progress = manifest_assembler::progress;

namespace {

constexpr session_id sid{7};
/// Bytes per file-table slot charged in these tests (the engine passes sizeof its file state).
constexpr std::size_t slot = 100;

wire::session_params params(std::uint32_t files, std::uint32_t chunks, std::uint64_t total,
                            std::uint32_t block_size = 1000) {
  wire::session_params p;
  p.set_block_size(block_size);
  p.set_file_count(files);
  p.set_manifest_chunks(chunks);
  p.set_total_bytes(total);
  return p;
}

struct file {
  std::string path;
  std::uint64_t size = 0;
};

wire::announce chunk(std::uint32_t index, std::uint32_t first_file, std::vector<file> files) {
  wire::announce m;
  m.set_chunk(index);
  m.set_first_file(first_file);
  for (const auto& f : files) {
    auto* e = m.add_files();
    e->set_path(f.path);
    e->set_size(f.size);
    e->set_mtime_ns(1'700'000'000'000'000'000);
    e->set_mode(0644);
  }
  return m;
}

/// admit() then take(), as the engine does; REQUIREs admission.
progress add(manifest_assembler& a, const wire::announce& m, memory_budget& budget,
             std::vector<taken_entry>& out) {
  REQUIRE(a.admit(m, budget, sid) == fit::admitted);
  return a.take(m, budget, sid, out);
}

std::vector<std::uint32_t> indexes(const std::vector<taken_entry>& t) {
  std::vector<std::uint32_t> out;
  for (const auto& e : t) out.push_back(e.index);
  return out;
}

}  // namespace

TEST_CASE("chunks in order assemble the manifest, entries taken as they come",
          "[unit][receiver][manifest]") {
  memory_budget budget(1 << 20, 1 << 20);
  manifest_assembler a(params(3, 2, 3500), slot);
  std::vector<taken_entry> t;
  REQUIRE(add(a, chunk(0, 0, {{"a", 1000}, {"b", 2500}}), budget, t) == progress::partial);
  REQUIRE(a.table_size() == 2);
  REQUIRE(indexes(t) == std::vector<std::uint32_t>{0, 1});
  REQUIRE(t[0].refused == errc::ok);
  REQUIRE(t[0].entry.path == "a");
  REQUIRE(t[0].blocks == 1);
  REQUIRE(t[1].blocks == 3);  // 2500 bytes in 1000-byte blocks
  REQUIRE_FALSE(a.complete());
  REQUIRE(add(a, chunk(1, 2, {{"c", 0}}), budget, t) == progress::complete);
  REQUIRE(indexes(t) == std::vector<std::uint32_t>{2});
  REQUIRE(t[0].blocks == 0);  // an empty file
  REQUIRE(a.complete());
  REQUIRE(a.chunks_taken() == 2);
  REQUIRE(a.entries_taken() == 3);
  REQUIRE(a.entry_bytes() == 3500);
  REQUIRE(a.table_size() == 3);
}

TEST_CASE("a chunk out of order is taken at once; the manifest completes with the last one",
          "[unit][receiver][manifest]") {
  memory_budget budget(1 << 20, 1 << 20);
  manifest_assembler a(params(5, 3, 500), slot);
  std::vector<taken_entry> t;
  REQUIRE(add(a, chunk(2, 4, {{"e", 100}}), budget, t) == progress::partial);
  REQUIRE(a.table_size() == 5);  // the table reaches the chunk's last entry
  REQUIRE(indexes(t) == std::vector<std::uint32_t>{4});
  REQUIRE(add(a, chunk(0, 0, {{"a", 100}, {"b", 100}}), budget, t) == progress::partial);
  REQUIRE(add(a, chunk(1, 2, {{"c", 100}, {"d", 100}}), budget, t) == progress::complete);
  REQUIRE(indexes(t) == std::vector<std::uint32_t>{2, 3});
  REQUIRE(a.entries_taken() == 5);
}

TEST_CASE("a duplicate chunk, or one past the chunk count, is ignored and costs nothing",
          "[unit][receiver][manifest]") {
  memory_budget budget(1 << 20, 1 << 20);
  manifest_assembler a(params(4, 2, 400), slot);
  std::vector<taken_entry> t;
  const auto c0 = chunk(0, 0, {{"a", 100}, {"b", 100}});
  add(a, c0, budget, t);
  const auto charged = budget.used(sid);
  REQUIRE(a.admit(c0, budget, sid) == fit::ignored);
  REQUIRE(a.admit(chunk(2, 2, {{"c", 100}}), budget, sid) == fit::ignored);
  REQUIRE(budget.used(sid) == charged);
  REQUIRE(a.chunks_taken() == 1);
  REQUIRE(a.entries_taken() == 2);
}

TEST_CASE("a chunk whose entries run past file_count is invalid and changes nothing",
          "[unit][receiver][manifest]") {
  memory_budget budget(1 << 20, 1 << 20);
  manifest_assembler a(params(3, 2, 300), slot);
  REQUIRE(a.admit(chunk(1, 2, {{"c", 100}, {"d", 100}}), budget, sid) == fit::invalid);
  REQUIRE(a.admit(chunk(1, 0xffffffffu, {{"c", 100}}), budget, sid) == fit::invalid);
  REQUIRE(budget.used(sid) == 0);
  REQUIRE(a.table_size() == 0);
  // The genuine chunk 1 is still taken.
  std::vector<taken_entry> t;
  REQUIRE(add(a, chunk(1, 2, {{"c", 100}}), budget, t) == progress::partial);
}

TEST_CASE("a chunk without entries is invalid unless the session is empty",
          "[unit][receiver][manifest]") {
  memory_budget budget(1 << 20, 1 << 20);
  manifest_assembler a(params(2, 1, 200), slot);
  REQUIRE(a.admit(chunk(0, 0, {}), budget, sid) == fit::invalid);

  manifest_assembler empty(params(0, 1, 0), slot);
  std::vector<taken_entry> t;
  REQUIRE(add(empty, chunk(0, 0, {}), budget, t) == progress::complete);
  REQUIRE(t.empty());
  REQUIRE(empty.table_size() == 0);
  REQUIRE(budget.used(sid) == 0);
}

TEST_CASE("entries that do not fit the parameters are refused, the others taken",
          "[unit][receiver][manifest]") {
  memory_budget budget(1 << 20, 1 << 20);
  // 256-byte blocks: 2^40 bytes would be 2^32 blocks, past what a block index holds.
  const std::uint64_t huge = std::uint64_t{1} << 40;
  manifest_assembler a(params(5, 1, huge + 300, 256), slot);
  std::vector<taken_entry> t;
  REQUIRE(
      add(a,
          chunk(0, 0,
                {{"ok", 100}, {"../etc/passwd", 10}, {"big", huge}, {"fits", 200}, {"small", 1}}),
          budget, t) == progress::complete);
  REQUIRE(t.size() == 5);
  REQUIRE(t[0].refused == errc::ok);
  REQUIRE(t[1].refused == errc::path_dot_dot);
  REQUIRE(t[1].entry.path == "../etc/passwd");  // kept as announced, for the logs and COMPLETE
  REQUIRE(t[1].entry.size == 10);
  REQUIRE(t[2].refused == errc::file_too_large);
  REQUIRE(t[2].blocks == 0);
  REQUIRE(t[3].refused == errc::ok);
  REQUIRE(t[4].refused == errc::ok);
  REQUIRE(a.entry_bytes() == 301);  // refused entries do not count

  manifest_assembler b(params(2, 1, 300), slot);
  REQUIRE(add(b, chunk(0, 0, {{"a", 200}, {"b", 101}}), budget, t) == progress::complete);
  REQUIRE(t[0].refused == errc::ok);
  REQUIRE(t[1].refused == errc::invalid_field);  // 200 + 101 > the announced 300
  REQUIRE(t[1].entry.size == 101);
  REQUIRE(b.entry_bytes() == 200);
}

TEST_CASE("a file table over budget leaves the chunk to a later copy",
          "[unit][receiver][manifest]") {
  manifest_assembler a(params(4, 2, 400), slot);
  memory_budget tight(slot, 1 << 20);  // room for one slot; chunk 0 needs two
  const auto c0 = chunk(0, 0, {{"a", 100}, {"b", 100}});
  REQUIRE(a.admit(c0, tight, sid) == fit::over_budget);
  REQUIRE(tight.used(sid) == 0);
  REQUIRE(a.table_size() == 0);
  REQUIRE(a.chunks_taken() == 0);
  // Once other sessions gave memory back, the next copy of the chunk is taken.
  memory_budget roomy(1 << 20, 1 << 20);
  std::vector<taken_entry> t;
  REQUIRE(add(a, c0, roomy, t) == progress::partial);
  REQUIRE(indexes(t) == std::vector<std::uint32_t>{0, 1});
}

TEST_CASE("a long path over budget refuses its own entry only", "[unit][receiver][manifest]") {
  const std::string long_path(200, 'p');
  manifest_assembler a(params(3, 1, 300), slot);
  // Room for the table (3 slots) and one long path, not two.
  memory_budget budget(3 * slot + 250, 1 << 20);
  std::vector<taken_entry> t;
  REQUIRE(add(a, chunk(0, 0, {{long_path + "1", 100}, {"short", 100}, {long_path + "2", 100}}),
              budget, t) == progress::complete);
  REQUIRE(t[0].refused == errc::ok);
  REQUIRE(t[1].refused == errc::ok);  // up to inline_path_bytes: not charged
  REQUIRE(t[2].refused == errc::over_budget);
  REQUIRE(budget.used(sid) == 3 * slot + 201);
}

TEST_CASE("the file table grows geometrically, charged before the engine allocates it",
          "[unit][receiver][manifest]") {
  memory_budget budget(1 << 20, 1 << 20);
  manifest_assembler a(params(100, 10, 100'000), slot);
  std::vector<taken_entry> t;
  std::size_t grew = 0;
  for (std::uint32_t c = 0; c < 10; ++c) {
    std::vector<file> files;
    for (std::uint32_t i = 0; i < 10; ++i)
      files.push_back({"f" + std::to_string(c * 10 + i), 1000});
    const std::size_t before = a.table_capacity();
    add(a, chunk(c, c * 10, files), budget, t);
    if (a.table_capacity() > before) ++grew;
    REQUIRE(a.table_size() == (c + 1) * 10);
    REQUIRE(a.table_capacity() >= a.table_size());
    REQUIRE(a.table_capacity() <= 100);
    REQUIRE(budget.used(sid) == a.table_capacity() * slot);  // every slot charged
  }
  REQUIRE(a.table_capacity() == 100);
  REQUIRE(grew < 10);  // not once per chunk
  REQUIRE(a.complete());
}

TEST_CASE("an entry an overlapping chunk already gave is not taken twice",
          "[unit][receiver][manifest]") {
  memory_budget budget(1 << 20, 1 << 20);
  manifest_assembler a(params(4, 2, 400), slot);
  std::vector<taken_entry> t;
  add(a, chunk(0, 0, {{"a", 100}, {"b", 100}, {"c", 100}}), budget, t);
  REQUIRE(add(a, chunk(1, 1, {{"x", 100}, {"y", 100}, {"d", 100}}), budget, t) ==
          progress::complete);
  REQUIRE(indexes(t) == std::vector<std::uint32_t>{3});
  REQUIRE(t[0].entry.path == "d");
  REQUIRE(a.entry_bytes() == 400);
}

TEST_CASE("chunks that leave an entry out make the manifest malformed",
          "[unit][receiver][manifest]") {
  memory_budget budget(1 << 20, 1 << 20);
  manifest_assembler a(params(3, 2, 300), slot);
  std::vector<taken_entry> t;
  REQUIRE(add(a, chunk(0, 0, {{"a", 100}}), budget, t) == progress::partial);
  REQUIRE(add(a, chunk(1, 2, {{"c", 100}}), budget, t) == progress::malformed);
  REQUIRE(a.chunks_taken() == 2);
  REQUIRE(a.entries_taken() == 2);
  REQUIRE_FALSE(a.complete());
}

TEST_CASE("the bookkeeping's own bytes are one bit per chunk and per entry, in words",
          "[unit][receiver][manifest]") {
  STATIC_REQUIRE(manifest_assembler::state_bytes(1, 0) == 8);
  STATIC_REQUIRE(manifest_assembler::state_bytes(64, 64) == 16);
  STATIC_REQUIRE(manifest_assembler::state_bytes(65, 1'000'000) == 16 + 125'000);
}
