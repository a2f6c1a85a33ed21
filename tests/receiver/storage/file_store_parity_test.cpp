// file_store's parity repairs (write_parity, recover; docs/design-notes.md "Parity repairs"):
// a real temp directory, parity made with fec::codec, recovered files compared byte for byte.
#include "common/error.hpp"
#include "common/fec/fec.hpp"
#include "receiver/storage/file_store.hpp"
#include "receiver/storage/parity_store.hpp"
#include "tests/receiver/storage/file_store_test_util.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <optional>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace mcdist::receiver::test;
namespace fs = std::filesystem;

namespace {

constexpr std::uint32_t block = 1400;
constexpr std::uint32_t k = 8;
constexpr std::uint32_t max_parity = 4;

/// One store whose channel 0 delivers below dest, recording store results and recoveries.
struct parity_rig {
  scratch_dir dir;
  fs::path temp = dir.path() / "temp";
  fs::path dest = dir.path() / "dest";
  post_queue pq;
  result_log results;
  std::map<std::uint32_t, std::error_code> recovered;  ///< FEC block -> outcome
  std::unique_ptr<file_store> store;

  explicit parity_rig(std::uint64_t parity_memory = std::uint64_t{64} << 20) {
    storage_config cfg;
    cfg.temp_dir = temp;
    cfg.dest_roots = {dest};
    cfg.sync = sync_mode::none;
    cfg.parity_memory_bytes = parity_memory;
    store = std::make_unique<file_store>(
        std::move(cfg), pq.poster(), results.sink(), nullptr,
        [this](session_id, std::uint32_t fb, std::error_code ec) { recovered[fb] = ec; });
  }

  void begin(file_key key, const std::string& path, std::uint64_t size) {
    manifest_entry e;
    e.path = path;
    e.size = size;
    e.mtime_ns = 1'700'000'000'000'000'000;
    e.mode = 0644;
    store->begin_file(key, 0, e, false);
  }

  void write_block(file_key key, const std::vector<std::byte>& data, std::uint32_t b) {
    const std::size_t off = std::size_t{b} * block;
    const std::size_t n = std::min<std::size_t>(block, data.size() - off);
    REQUIRE(store->write(key, off, std::span(data).subspan(off, n)));
  }

  store_result deliver(file_key key, const std::vector<std::byte>& data) {
    const std::size_t before = results.count(key);
    store->finalize(key, sha256(data));
    store->flush();
    pq.run_until([&] { return results.count(key) > before; });
    return *results.find(key);
  }

  std::error_code wait_recovered(std::uint32_t fb) {
    pq.run_until([&] { return recovered.count(fb) > 0; });
    return recovered[fb];
  }
};

/// Block `b` of `data` zero-padded to the block size.
std::vector<std::byte> padded(const std::vector<std::byte>& data, std::uint32_t b) {
  std::vector<std::byte> out(block);
  const std::size_t off = std::size_t{b} * block;
  std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(off),
              std::min<std::size_t>(block, data.size() - off), out.begin());
  return out;
}

/// Parity blocks `indexes` of the FEC block made of `sources` (each padded).
std::vector<std::vector<std::byte>> make_parity(const std::vector<std::vector<std::byte>>& sources,
                                                const std::vector<std::uint32_t>& indexes) {
  const fec::codec c(k, max_parity);
  std::vector<const std::byte*> in;
  for (const auto& s : sources) in.push_back(s.data());
  std::vector<std::vector<std::byte>> out(indexes.size(), std::vector<std::byte>(block));
  std::vector<std::byte*> dst;
  for (auto& o : out) dst.push_back(o.data());
  c.encode(in, indexes, dst, block);
  return out;
}

fec_source source(std::uint32_t file, std::uint32_t b, std::uint64_t size, bool available,
                  const std::string& path) {
  fec_source s;
  s.file = file_index{file};
  s.block = b;
  s.offset = std::uint64_t{b} * block;
  s.length = static_cast<std::uint32_t>(std::min<std::uint64_t>(block, size - s.offset));
  s.available = available;
  s.wanted = !available;
  if (available) s.path = path;
  return s;
}

recovery_request request(std::uint32_t fb, std::vector<fec_source> sources,
                         std::vector<std::uint32_t> parity) {
  recovery_request r;
  r.fec_block = fb;
  r.channel = 0;
  r.k = k;
  r.max_parity = max_parity;
  r.block_size = block;
  r.sources = std::move(sources);
  r.parity = std::move(parity);
  return r;
}

}  // namespace

TEST_CASE("recover writes the lost blocks, short last block included, from temp and dest",
          "[file_store][parity]") {
  parity_rig r;
  std::mt19937_64 rng(12);
  const session_id s{0x12};
  // One FEC block of 6 sources: a.bin's 4 blocks (the last one 500 bytes) and b.bin's 2.
  const auto a = random_bytes(rng, 3 * block + 500);
  const auto b = random_bytes(rng, 2 * block);
  const file_key ka{s, file_index{0}}, kb{s, file_index{1}};
  std::vector<std::vector<std::byte>> src;
  for (std::uint32_t i = 0; i < 4; ++i) src.push_back(padded(a, i));
  for (std::uint32_t i = 0; i < 2; ++i) src.push_back(padded(b, i));
  const auto parity = make_parity(src, {0, 2, 3});

  r.begin(ka, "d/a.bin", a.size());
  r.begin(kb, "b.bin", b.size());
  // a.bin lacks blocks 1 and 3 (the short one); b.bin arrives whole and is delivered first,
  // so its sources are read back from the destination.
  r.write_block(ka, a, 0);
  r.write_block(ka, a, 2);
  r.write_block(kb, b, 0);
  r.write_block(kb, b, 1);
  REQUIRE_FALSE(r.deliver(kb, b).ec);
  REQUIRE(r.store->decodes_parity());
  REQUIRE(r.store->write_parity(s, 0, 0, parity[0]));
  REQUIRE(r.store->write_parity(s, 0, 3, parity[2]));
  REQUIRE_FALSE(
      r.store->write_parity(s, 7, fec::max_blocks_gf16, parity[1]));  // index out of range
  CHECK(r.store->get_stats().parity_kept == 2);
  CHECK(r.store->get_stats().parity_bytes == 2 * (block + parity_store::overhead_bytes));

  r.store->recover(
      s, request(0,
                 {source(0, 0, a.size(), true, "d/a.bin"), source(0, 1, a.size(), false, ""),
                  source(0, 2, a.size(), true, "d/a.bin"), source(0, 3, a.size(), false, ""),
                  source(1, 0, b.size(), true, "b.bin"), source(1, 1, b.size(), true, "b.bin")},
                 {0, 3}));
  REQUIRE_FALSE(r.wait_recovered(0));
  // The recovered blocks went through the write path: the digest at finalize covers them.
  const auto res = r.deliver(ka, a);
  REQUIRE_FALSE(res.ec);
  CHECK(read_file(r.dest / "d" / "a.bin") == a);
  CHECK(read_file(r.dest / "b.bin") == b);
  const auto st = r.store->get_stats();
  CHECK(st.fec_blocks_recovered == 1);
  CHECK(st.blocks_recovered == 2);
  CHECK(st.decode_failures == 0);
  CHECK(st.parity_bytes == 0);  // freed by the decode
}

TEST_CASE("recover fails without enough parity and writes nothing", "[file_store][parity]") {
  parity_rig r;
  std::mt19937_64 rng(3);
  const session_id s{0x13};
  const auto a = random_bytes(rng, 4 * block);
  const file_key ka{s, file_index{0}};
  std::vector<std::vector<std::byte>> src;
  for (std::uint32_t i = 0; i < 4; ++i) src.push_back(padded(a, i));
  const auto parity = make_parity(src, {1});
  r.begin(ka, "a.bin", a.size());
  r.write_block(ka, a, 0);
  r.write_block(ka, a, 1);
  REQUIRE(r.store->write_parity(s, 0, 1, parity[0]));
  // Two lost, one parity block: cannot be decoded.
  r.store->recover(
      s, request(0,
                 {source(0, 0, a.size(), true, "a.bin"), source(0, 1, a.size(), true, "a.bin"),
                  source(0, 2, a.size(), false, ""), source(0, 3, a.size(), false, "")},
                 {1}));
  CHECK(r.wait_recovered(0) == make_error_code(errc::invalid_field));
  CHECK(r.store->get_stats().decode_failures == 1);
  CHECK(r.store->get_stats().blocks_recovered == 0);
  CHECK(r.store->get_stats().parity_bytes == 0);
  // The blocks still arrive over the network and the file is delivered intact.
  r.write_block(ka, a, 2);
  r.write_block(ka, a, 3);
  REQUIRE_FALSE(r.deliver(ka, a).ec);
  CHECK(read_file(r.dest / "a.bin") == a);
}

TEST_CASE("parity beyond parity_memory is refused and its FEC block's parity dropped",
          "[file_store][parity]") {
  // Room for two parity blocks.
  parity_rig r(2 * (block + parity_store::overhead_bytes));
  const session_id s{0x14};
  const std::vector<std::byte> p(block, std::byte{7});
  REQUIRE(r.store->write_parity(s, 0, 0, p));
  REQUIRE(r.store->write_parity(s, 1, 0, p));
  CHECK_FALSE(r.store->write_parity(s, 1, 1, p));
  auto st = r.store->get_stats();
  CHECK(st.parity_kept == 2);
  CHECK(st.parity_refused == 1);
  // FEC block 1 is NAKed block by block now: what it held is freed, FEC block 0's stays.
  CHECK(st.parity_bytes == block + parity_store::overhead_bytes);
  CHECK(r.store->write_parity(s, 2, 0, p));
  CHECK(r.store->get_stats().parity_bytes == 2 * (block + parity_store::overhead_bytes));

  parity_rig none(0);
  CHECK_FALSE(none.store->decodes_parity());
  CHECK_FALSE(none.store->write_parity(s, 0, 0, p));
}

TEST_CASE("close_session frees the session's parity", "[file_store][parity]") {
  parity_rig r;
  const session_id s{0x15}, other{0x16};
  const std::vector<std::byte> p(block, std::byte{9});
  for (std::uint32_t fb = 0; fb < 5; ++fb) REQUIRE(r.store->write_parity(s, fb, 0, p));
  REQUIRE(r.store->write_parity(other, 0, 0, p));
  r.store->close_session(s, true);
  CHECK(r.store->get_stats().parity_bytes == block + parity_store::overhead_bytes);
  // A recover for the closed session finds no parity: it reports a failure.
  r.store->recover(s, request(3, {source(0, 0, block, false, "")}, {0}));
  CHECK(r.wait_recovered(3) == make_error_code(errc::invalid_field));
  r.store->close_session(other, true);
  CHECK(r.store->get_stats().parity_bytes == 0);
}

TEST_CASE("parity_store bounds what it keeps", "[parity_store]") {
  parity_store ps(10 * (block + parity_store::overhead_bytes));
  const session_id s{1};
  const std::vector<std::byte> p(block, std::byte{1});
  CHECK_FALSE(ps.keep(s, 0, 0, {}));  // empty
  CHECK_FALSE(ps.keep(s, 0, 0, std::vector<std::byte>(parity_store::max_block_bytes + 1)));
  CHECK_FALSE(ps.keep(s, 0, fec::max_blocks_gf16, p));  // index
  REQUIRE(ps.keep(s, 0, 4, p));
  CHECK_FALSE(ps.keep(s, 0, 4, p));  // duplicate
  REQUIRE(ps.keep(s, 0, 1, p));
  const auto got = ps.take(s, 0);
  REQUIRE(got.size() == 2);
  CHECK(got.begin()->first == 1);
  CHECK(ps.bytes() == 0);
  CHECK(ps.take(s, 0).empty());
}
