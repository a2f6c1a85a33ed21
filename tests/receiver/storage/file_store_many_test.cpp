// 1000 files of 10 kB through file_store on the disk behind /tmp: every one delivered in
// sync_mode::batch, and an informational files/s figure for batch against file (fsync each).
#include "receiver/storage/file_store.hpp"

#include "tests/receiver/storage/file_store_test_util.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace mcdist::receiver::test;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t block = 1400;
constexpr std::uint32_t n_files = 1000;
constexpr std::size_t file_bytes = 10'000;

/// Delivers n_files files and returns files per second, from the first begin to the last
/// result.
double run(sync_mode mode, std::mt19937_64& rng, bool check_content) {
  scratch_dir dir;
  post_queue pq;
  result_log results;
  storage_config cfg;
  cfg.temp_dir = dir.path() / "temp";
  cfg.sync = mode;
  file_store store(cfg, pq.poster(), results.sink());
  std::vector<std::vector<std::byte>> data;
  for (std::uint32_t i = 0; i < n_files; ++i) data.push_back(random_bytes(rng, file_bytes));

  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint32_t i = 0; i < n_files; ++i) {
    const file_key k{session_id{0x600d}, file_index{i}};
    file_spec s;
    s.dest_root = dir.path() / "dest";
    s.relative_path = "obs/" + std::to_string(i % 10) + "/bulletin" + std::to_string(i);
    s.size = file_bytes;
    s.mtime_ns = 1'700'000'000'000'000'000;
    s.mode = 0644;
    store.begin_file(k, std::move(s));
    for (std::uint64_t off = 0; off < file_bytes; off += block)
      REQUIRE(store.write(
          k, off, std::span(data[i]).subspan(off, std::min<std::size_t>(block, file_bytes - off))));
    store.finalize(k, sha256(data[i]));
    if (i % 8 == 7) store.flush();  // a receive batch every 8 files
    pq.run_ready();
  }
  store.flush();
  pq.run_until([&] { return results.all.size() == n_files; });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (const auto& r : results.all) REQUIRE_FALSE(r.ec);
  if (check_content) {
    for (std::uint32_t i = 0; i < n_files; ++i)
      REQUIRE(read_file(dir.path() / "dest" / "obs" / std::to_string(i % 10) /
                        ("bulletin" + std::to_string(i))) == data[i]);
    CHECK(fs::is_empty(cfg.temp_dir / "0000600d"));
  }
  return n_files / secs;
}

}  // namespace

TEST_CASE("1000 small files are delivered with group commit; batch against fsync per file",
          "[file_store][integration]") {
  std::mt19937_64 rng(41);
  const double batch = run(sync_mode::batch, rng, true);
  const double file = run(sync_mode::file, rng, false);
  const double none = run(sync_mode::none, rng, false);
  std::printf(
      "file_store, %u files of %zu bytes on /tmp: batch %.0f files/s, file %.0f files/s, "
      "none %.0f files/s\n",
      n_files, file_bytes, batch, file, none);
  CHECK(batch > 0);
}
