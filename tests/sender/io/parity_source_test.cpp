// parity_source: the sender's parity blocks, computed from the FEC block's sources read back
// from the files (whole interleaving groups at a time where they fit), must equal the parity of
// the sources as the manifest lays them out, whatever order the FEC blocks are asked in.
#include "sender/io/parity_source.hpp"
#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <random>

using namespace mcdist;
using namespace mcdist::sender;
namespace fs = std::filesystem;

namespace {

constexpr std::uint32_t block = 100;

struct set_on_disk {
  mcdist::test::scratch_dir root{"mcdist-parity"};
  std::vector<source_file> files;
  std::vector<std::vector<std::byte>> contents;
  std::vector<std::uint32_t> blocks;

  /// Files of `sizes` bytes, alternately in two subdirectories (the reader caches directories).
  explicit set_on_disk(const std::vector<std::size_t>& sizes) {
    std::mt19937_64 rng(sizes.size() * 7919);
    fs::create_directories(root.path() / "a");
    fs::create_directories(root.path() / "b");
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::vector<std::byte> data(sizes[i]);
      for (auto& b : data) b = static_cast<std::byte>(rng());
      source_file f;
      const std::string rel = std::string(i % 2 ? "a/" : "b/") + "f" + std::to_string(i);
      f.local = (root.path() / rel).string();
      f.entry.path = rel;
      f.entry.size = data.size();
      std::ofstream(f.local, std::ios::binary)
          .write(reinterpret_cast<const char*>(data.data()),
                 static_cast<std::streamsize>(data.size()));
      files.push_back(std::move(f));
      blocks.push_back(static_cast<std::uint32_t>((sizes[i] + block - 1) / block));
      contents.push_back(std::move(data));
    }
  }

  /// Parity block `index` of FEC block `fb`, from the contents in memory.
  std::vector<std::byte> expected(const fec::layout& l, const fec::codec& c, std::uint32_t fb,
                                  std::uint32_t index) const {
    const std::uint32_t n = l.sources(fb);
    std::vector<std::vector<std::byte>> src(n, std::vector<std::byte>(block, std::byte{0}));
    std::vector<const std::byte*> in;
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto s = l.source(fb, i);
      const auto& d = contents[s.file];
      const std::size_t off = std::size_t{s.block} * block;
      std::copy(d.begin() + static_cast<std::ptrdiff_t>(off),
                d.begin() + static_cast<std::ptrdiff_t>(std::min(d.size(), off + block)),
                src[i].begin());
      in.push_back(src[i].data());
    }
    std::vector<std::byte> out(block);
    std::byte* dst = out.data();
    c.encode(in, std::span(&index, 1), std::span(&dst, 1), block);
    return out;
  }
};

}  // namespace

TEST_CASE("parity blocks equal the parity of the laid-out sources in any order",
          "[parity_source]") {
  // Small files (one to three blocks, as 10 kB products are at 1400 bytes), a large one, an
  // empty one; k = 6 at depth 4 makes groups of 24 blocks and a shorter last group.
  std::vector<std::size_t> sizes;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 40; ++i) sizes.push_back(1 + rng() % (3 * block));
  sizes.insert(sizes.begin() + 17, 0);
  sizes.insert(sizes.begin() + 23, 37 * block + 5);
  set_on_disk set(sizes);
  const std::uint32_t depth = GENERATE(1u, 4u, 8u);
  const fec::layout layout(set.blocks, 6, depth);
  const std::uint32_t max_parity = 3;
  const fec::codec codec(layout.k(), max_parity);
  parity_source source(layout, set.files, max_parity, block);

  std::vector<std::pair<std::uint32_t, std::uint32_t>> asks;
  for (std::uint32_t fb = 0; fb < layout.fec_blocks(); ++fb)
    for (std::uint32_t p = 0; p < max_parity; ++p) asks.emplace_back(fb, p);
  // Twice each, shuffled: groups are loaded, evicted and loaded again.
  asks.insert(asks.end(), asks.begin(), asks.end());
  std::shuffle(asks.begin(), asks.end(), rng);
  std::vector<std::byte> got(block);
  for (const auto& [fb, p] : asks) {
    std::string why;
    REQUIRE_FALSE(source.parity(fb, p, got, why));
    REQUIRE(got == set.expected(layout, codec, fb, p));
  }
}

TEST_CASE("a source file gone since the scan is an error naming it", "[parity_source]") {
  set_on_disk set(std::vector<std::size_t>(12, 2 * block));
  const fec::layout layout(set.blocks, 6, 2);
  parity_source source(layout, set.files, 2, block);
  fs::remove(set.files[5].local);
  std::vector<std::byte> got(block);
  std::string why;
  bool failed = false;
  for (std::uint32_t fb = 0; fb < layout.fec_blocks() && !failed; ++fb) {
    failed = static_cast<bool>(source.parity(fb, 0, got, why));
  }
  CHECK(failed);
  CHECK(why.find(set.files[5].local) != std::string::npos);
}

TEST_CASE("parity index 0 built from the blocks as sent needs no read of the sources",
          "[parity_source]") {
  std::vector<std::size_t> sizes;
  std::mt19937_64 rng(17);
  for (int i = 0; i < 30; ++i) sizes.push_back(1 + rng() % (3 * block));
  set_on_disk set(sizes);
  const fec::layout layout(set.blocks, 6, 4);
  const fec::codec codec(layout.k(), 2);
  parity_source source(layout, set.files, 2, block);
  // Every block as pass 1 sends it, one of them twice (a retransmission is not added again),
  // except one source of the last FEC block.
  const std::uint32_t last_fb = layout.fec_blocks() - 1;
  const auto held_back = layout.source(last_fb, 0);
  for (std::uint32_t f = 0; f < set.files.size(); ++f) {
    for (std::uint32_t b = 0; b < set.blocks[f]; ++b) {
      if (f == held_back.file && b == held_back.block) continue;
      const auto& d = set.contents[f];
      const std::size_t off = std::size_t{b} * block;
      const auto bytes_of = std::span(d).subspan(off, std::min<std::size_t>(block, d.size() - off));
      source.observe(f, b, bytes_of);
      if (f == 3 && b == 0) source.observe(f, b, bytes_of);
    }
  }
  // The files are gone: index 0 of every complete FEC block still comes out right.
  for (const auto& f : set.files) fs::remove(f.local);
  std::vector<std::byte> got(block);
  for (std::uint32_t fb = 0; fb < last_fb; ++fb) {
    std::string why;
    REQUIRE_FALSE(source.parity(fb, 0, got, why));
    REQUIRE(got == set.expected(layout, codec, fb, 0));
  }
  // Index 1, and index 0 of the FEC block missing a source, are read: the files are gone.
  std::string why;
  CHECK(source.parity(0, 1, got, why));
  CHECK(source.parity(last_fb, 0, got, why));
}
