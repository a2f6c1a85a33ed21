// The writer thread's stepwise preallocation (receiver/storage/temp_writer.hpp), through the
// file_store it serves: on tmpfs a whole-file fallocate stalls the writer, so the file is
// reserved in steps ahead of the data. Forced on here whatever filesystem /tmp is.
#include "receiver/storage/temp_writer.hpp"

#include "receiver/storage/file_store.hpp"
#include "tests/receiver/storage/file_store_test_util.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <memory>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace mcdist::receiver::test;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t block = 1400;
constexpr std::uint64_t step = 64u << 10;

struct stepwise_rig {
  scratch_dir dir{"/tmp"};
  post_queue pq;
  result_log results;
  std::shared_ptr<std::atomic<int>> fallocates = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<file_store> store;

  /// @param fail_at  the n-th fallocate (1-based) fails with ENOSPC; 0 = none
  explicit stepwise_rig(int fail_at = 0) {
    storage_config cfg;
    cfg.temp_dir = dir.path() / "temp";
    cfg.preallocate_min_bytes = 1;
    cfg.preallocate_step_bytes = step;
    cfg.preallocate_in_steps = true;
    cfg.sync = sync_mode::none;
    cfg.fault = [n = fallocates, fail_at](storage_op op, const file_key*) {
      if (op != storage_op::fallocate) return 0;
      return ++*n == fail_at ? ENOSPC : 0;
    };
    store = std::make_unique<file_store>(std::move(cfg), pq.poster(), results.sink());
  }

  file_spec spec(std::string rel, std::uint64_t size) const {
    file_spec s;
    s.dest_root = dir.path() / "dest";
    s.relative_path = std::move(rel);
    s.size = size;
    return s;
  }

  /// Writes the blocks of `data` in `order`; false when a write was refused.
  bool feed(file_key k, const std::vector<std::byte>& data,
            const std::vector<std::uint64_t>& order) {
    for (auto off : order) {
      const std::size_t n = std::min<std::size_t>(block, data.size() - off);
      if (!store->write(k, off, std::span(data).subspan(off, n))) return false;
      if (off % (32 * block) == 0) pq.run_ready();
    }
    return true;
  }

  store_result finish(file_key k, const std::vector<std::byte>& data) {
    store->finalize(k, sha256(data));
    store->flush();
    pq.run_until([&] { return results.count(k) >= 1; });
    return *results.find(k);
  }
};

}  // namespace

TEST_CASE("a file preallocated in steps is delivered intact, in order and shuffled",
          "[temp_writer]") {
  const bool shuffled = GENERATE(false, true);
  CAPTURE(shuffled);
  std::mt19937_64 rng(41);
  stepwise_rig r;
  const auto data = random_bytes(rng, 10 * step + 777);
  const auto k = key_of(7, 0);
  r.store->begin_file(k, r.spec("big.bin", data.size()));
  REQUIRE(r.feed(k, data, block_order(rng, data.size(), block, shuffled, 0)));
  const auto res = r.finish(k, data);
  INFO(res.detail);
  CHECK_FALSE(res.ec);
  CHECK(read_file(r.dir.path() / "dest" / "big.bin") == data);
  // The first step at begin_file, then one each time the data comes within half a step of the
  // preallocated end: with 256 KiB chunks written in one pwrite each, about one per chunk (a
  // chunk may cover several steps). Never the whole file in one call, never one per block.
  CHECK(*r.fallocates >= (shuffled ? 2 : 3));
  CHECK(*r.fallocates <= 11);
}

TEST_CASE("a preallocation step that fails fails the file; nothing reaches the destination",
          "[temp_writer]") {
  std::mt19937_64 rng(42);
  stepwise_rig r(3);  // the begin_file step and the next succeed, the third fails
  const auto data = random_bytes(rng, 6 * step);
  const auto other = random_bytes(rng, 3 * block);
  const auto k = key_of(8, 0), ko = key_of(8, 1);
  r.store->begin_file(k, r.spec("big.bin", data.size()));
  r.feed(k, data, block_order(rng, data.size(), block, false, 0));  // refused once failed
  r.store->flush();
  r.pq.run_until([&] { return r.results.count(k) >= 1; });
  const auto res = *r.results.find(k);
  CHECK(res.ec == std::make_error_code(std::errc::no_space_on_device));
  CHECK(res.detail.find("fallocate") != std::string::npos);
  CHECK_FALSE(fs::exists(r.dir.path() / "dest" / "big.bin"));
  CHECK_FALSE(fs::exists(file_store::temp_path(r.dir.path() / "temp", k)));
  CHECK(r.results.count(k) == 1);
  // Other files go on.
  r.store->begin_file(ko, r.spec("small.bin", other.size()));
  REQUIRE(r.feed(ko, other, block_order(rng, other.size(), block, false, 0)));
  CHECK_FALSE(r.finish(ko, other).ec);
  CHECK(read_file(r.dir.path() / "dest" / "small.bin") == other);
}

TEST_CASE("without steps the whole file is preallocated at begin_file", "[temp_writer]") {
  std::mt19937_64 rng(43);
  scratch_dir dir("/tmp");
  post_queue pq;
  result_log results;
  auto calls = std::make_shared<std::atomic<int>>(0);
  storage_config cfg;
  cfg.temp_dir = dir.path() / "temp";
  cfg.preallocate_min_bytes = 1;
  cfg.preallocate_step_bytes = step;
  cfg.preallocate_in_steps = false;
  cfg.sync = sync_mode::none;
  cfg.fault = [calls](storage_op op, const file_key*) {
    if (op == storage_op::fallocate) ++*calls;
    return 0;
  };
  file_store store(cfg, pq.poster(), results.sink());
  const auto data = random_bytes(rng, 5 * step);
  const auto k = key_of(9, 0);
  file_spec s;
  s.dest_root = dir.path() / "dest";
  s.relative_path = "f";
  s.size = data.size();
  store.begin_file(k, s);
  for (std::uint64_t off = 0; off < data.size(); off += block) {
    REQUIRE(store.write(
        k, off, std::span(data).subspan(off, std::min<std::size_t>(block, data.size() - off))));
  }
  store.finalize(k, sha256(data));
  store.flush();
  pq.run_until([&] { return results.count(k) >= 1; });
  CHECK_FALSE(results.find(k)->ec);
  CHECK(*calls == 1);
  struct stat st {};
  REQUIRE(::stat((dir.path() / "dest" / "f").c_str(), &st) == 0);
  CHECK(static_cast<std::uint64_t>(st.st_size) == data.size());
}
