// block_reader: the sender's reads of its files, chunked (read) and straight into datagram
// payload slots (read_into), with SHA-256 hashed in band from the same reads.
#include "sender/io/block_reader.hpp"
#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>

using namespace mcdist;
using namespace mcdist::sender;
namespace fs = std::filesystem;

namespace {

struct temp_files {
  mcdist::test::scratch_dir root{"mcdist-reader"};
  fs::path dir = root.path();
  std::vector<source_file> files;
  std::vector<std::vector<std::byte>> contents;

  explicit temp_files(const std::vector<std::size_t>& sizes) {
    std::mt19937_64 rng(sizes.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::vector<std::byte> data(sizes[i]);
      for (auto& b : data) b = static_cast<std::byte>(rng());
      source_file f;
      f.local = dir / ("f" + std::to_string(i));
      f.entry.path = "f" + std::to_string(i);
      f.entry.size = data.size();
      std::ofstream(f.local, std::ios::binary)
          .write(reinterpret_cast<const char*>(data.data()),
                 static_cast<std::streamsize>(data.size()));
      files.push_back(std::move(f));
      contents.push_back(std::move(data));
    }
  }
};

/// Payload slots of `count` datagrams of `block` bytes in a GSO-like buffer: `header` bytes
/// before each payload, the last payload `last` bytes long.
std::vector<iovec> slots(std::vector<std::byte>& buf, std::size_t header, std::size_t block,
                         std::size_t count, std::size_t last) {
  buf.assign(count * (header + block), std::byte{0xee});
  std::vector<iovec> out;
  for (std::size_t i = 0; i < count; ++i) {
    out.push_back({buf.data() + i * (header + block) + header, i + 1 == count ? last : block});
  }
  return out;
}

}  // namespace

TEST_CASE("read_into places consecutive blocks in their slots and hashes the file in band",
          "[block_reader]") {
  constexpr std::size_t block = 1400, header = 20;
  const std::size_t size = GENERATE(std::size_t{1}, std::size_t{1399}, std::size_t{1400},
                                    std::size_t{1401}, std::size_t{1400 * 44 * 3 + 17});
  CAPTURE(size);
  temp_files t({size});
  block_reader r(t.files);
  r.hash_while_reading(0);
  const std::size_t blocks = (size + block - 1) / block;
  std::vector<std::byte> buf;
  for (std::size_t first = 0; first < blocks; first += 44) {
    const std::size_t n = std::min<std::size_t>(44, blocks - first);
    const std::size_t last = first + n == blocks ? size - (blocks - 1) * block : block;
    auto iov = slots(buf, header, block, n, last);
    std::string why;
    REQUIRE_FALSE(r.read_into(0, first * block, iov, why));
    for (std::size_t i = 0; i < n; ++i) {
      const auto* got = static_cast<const std::byte*>(iov[i].iov_base);
      REQUIRE(std::equal(got, got + iov[i].iov_len, t.contents[0].begin() + (first + i) * block));
      // The header slots are left alone.
      CHECK(buf[i * (header + block)] == std::byte{0xee});
    }
  }
  CHECK(r.bytes_read() == size);
  const auto digests = r.take_digests();
  REQUIRE(digests.size() == 1);
  CHECK(digests[0].first == 0);
  CHECK(digests[0].second == sha256(t.contents[0]));
  CHECK(r.take_unhashable().empty());
}

TEST_CASE("in-band hashing survives repeats and mixed reads, and gives up on a gap",
          "[block_reader]") {
  constexpr std::size_t block = 1400;
  temp_files t({3u << 20, 100'000});
  block_reader r(t.files, 1 << 20);
  r.hash_while_reading(0);
  r.hash_while_reading(1);
  std::vector<std::byte> buf(block);
  std::string why;
  // File 0: blocks read in order, one read again (a repair), a chunked read overlapping the
  // hashed prefix (the unicast path), then the rest.
  for (std::uint64_t off = 0; off < 1000 * block; off += block) {
    const iovec one{buf.data(), block};
    REQUIRE_FALSE(r.read_into(0, off, {&one, 1}, why));
  }
  const iovec again{buf.data(), block};
  REQUIRE_FALSE(r.read_into(0, 10 * block, {&again, 1}, why));
  std::span<const std::byte> chunk;
  // The chunk [1 MiB, 2 MiB) starts below the hashed prefix (1,400,000 bytes) and ends past
  // it: only its unhashed part is hashed.
  REQUIRE_FALSE(r.read(0, 1 << 20, 4096, chunk, why));
  std::vector<std::byte> rest((3u << 20) - 2 * (1u << 20));
  const iovec tail{rest.data(), rest.size()};
  REQUIRE_FALSE(r.read_into(0, 2u << 20, {&tail, 1}, why));
  // File 1: a gap (block 2 before block 1): in-band hashing gives up on it.
  const iovec b0{buf.data(), block};
  REQUIRE_FALSE(r.read_into(1, 0, {&b0, 1}, why));
  REQUIRE_FALSE(r.read_into(1, 2 * block, {&b0, 1}, why));
  const auto digests = r.take_digests();
  REQUIRE(digests.size() == 1);
  CHECK(digests[0].first == 0);
  CHECK(digests[0].second == sha256(t.contents[0]));
  CHECK(r.take_unhashable() == std::vector<std::uint32_t>{1});
}

TEST_CASE("a file shorter than announced is an error naming it", "[block_reader]") {
  temp_files t({5000});
  t.files[0].entry.size = 8000;  // announced larger than it is now
  block_reader r(t.files);
  std::vector<std::byte> buf(3000);
  const iovec pieces[] = {{buf.data(), 1000}, {buf.data() + 1000, 1000}};
  std::string why;
  CHECK_FALSE(r.read_into(0, 2000, pieces, why));  // bytes [2000, 4000) are there
  const iovec across[] = {{buf.data(), 1500}, {buf.data() + 1500, 1500}};
  const auto ec = r.read_into(0, 3000, across, why);  // [3000, 6000): 1000 bytes are missing
  CHECK(ec == std::errc::io_error);
  CHECK(why.find("shorter than when it was announced") != std::string::npos);
  CHECK(why.find(t.files[0].local) != std::string::npos);
}

namespace {

/// The files of `t` this process holds open, by index (from /proc/self/fd).
std::vector<std::size_t> open_files(const temp_files& t) {
  std::vector<std::size_t> out;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = fs::read_symlink(e.path(), ec);
    if (ec) continue;
    for (std::size_t i = 0; i < t.files.size(); ++i) {
      if (target == t.files[i].local) out.push_back(i);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("descriptors are kept to max_open, the least recently read file closed first",
          "[block_reader]") {
  // Sizes on both sides of the 128 kB below which no readahead hint is given.
  temp_files t({3000, 200'000, 4000, 150'000, 5000});
  std::string why;
  {
    block_reader r(t.files, 1 << 20, 8, 3);
    std::vector<std::byte> buf(1000);
    const iovec piece{buf.data(), buf.size()};
    auto read = [&](std::uint32_t f) {
      REQUIRE_FALSE(r.read_into(f, 1000, {&piece, 1}, why));
      CHECK(std::equal(buf.begin(), buf.end(), t.contents[f].begin() + 1000));
    };
    read(0);
    read(1);
    read(2);
    CHECK(open_files(t) == std::vector<std::size_t>{0, 1, 2});
    read(0);  // now the most recent: 1 is the least recently read
    read(3);
    CHECK(open_files(t) == std::vector<std::size_t>{0, 2, 3});
    read(4);  // closes 2
    CHECK(open_files(t) == std::vector<std::size_t>{0, 3, 4});
    read(2);  // reopened, closing 0
    read(2);
    CHECK(open_files(t) == std::vector<std::size_t>{2, 3, 4});
    for (std::uint32_t round = 0; round < 3; ++round) {
      for (std::uint32_t f = 0; f < 5; ++f) read(f);
    }
    CHECK(open_files(t) == std::vector<std::size_t>{2, 3, 4});
  }
  CHECK(open_files(t).empty());  // the destructor closes them all
}
