#include "common/announce_tree.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

using namespace mcdist;
using announce_tree::hash;
using announce_tree::hash_bytes;

namespace {

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

/// `n` distinct chunks and their leaf hashes.
std::vector<hash> leaves(std::size_t n, std::vector<std::vector<std::byte>>* chunks = nullptr) {
  std::vector<hash> out;
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = bytes_of("announce chunk " + std::to_string(i));
    out.push_back(announce_tree::leaf_hash(c));
    if (chunks) chunks->push_back(c);
  }
  return out;
}

std::vector<std::byte> wire_path(const std::vector<hash>& path) {
  std::vector<std::byte> out(path.size() * hash_bytes);
  for (std::size_t i = 0; i < path.size(); ++i) {
    std::memcpy(out.data() + i * hash_bytes, path[i].data(), hash_bytes);
  }
  return out;
}

/// RFC 9162 MTH, written out recursively from section 2.1.1 as a reference.
hash reference_root(std::span<const hash> l) {
  if (l.size() == 1) return l[0];
  std::size_t k = 1;
  while (k * 2 < l.size()) k *= 2;
  return announce_tree::node_hash(reference_root(l.first(k)), reference_root(l.subspan(k)));
}

}  // namespace

TEST_CASE("leaf and node hashes are domain-separated (RFC 9162 section 2.1.1)", "[announce_tree]") {
  // A node's 64 input bytes hashed as a leaf give a different value: a leaf cannot pass for a
  // node.
  const hash a = announce_tree::leaf_hash(bytes_of("a"));
  const hash b = announce_tree::leaf_hash(bytes_of("b"));
  std::vector<std::byte> both(2 * hash_bytes);
  std::memcpy(both.data(), a.data(), hash_bytes);
  std::memcpy(both.data() + hash_bytes, b.data(), hash_bytes);
  CHECK(announce_tree::leaf_hash(both) != announce_tree::node_hash(a, b));
  // SHA-256(0x00) is the leaf hash of empty data (a known value).
  const hash empty = announce_tree::leaf_hash({});
  CHECK(empty[0] == 0x6e);
  CHECK(empty[1] == 0x34);
  CHECK(empty[31] == 0x1d);
}

TEST_CASE("every leaf of every tree size verifies against the root", "[announce_tree]") {
  for (std::size_t n = 1; n <= announce_tree::max_leaves; ++n) {
    const auto l = leaves(n);
    const announce_tree::tree t(l);
    REQUIRE(t.size() == n);
    REQUIRE(t.root() == reference_root(l));
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(t.path(i).size() == announce_tree::path_length(i, n).value());
      REQUIRE(t.path(i).size() <= announce_tree::max_depth);
      const auto root = announce_tree::root_from_path(l[i], i, n, wire_path(t.path(i)));
      REQUIRE(root);
      REQUIRE(*root == t.root());
    }
  }
}

TEST_CASE("a changed byte in a chunk or in its path leads to another root", "[announce_tree]") {
  std::vector<std::vector<std::byte>> chunks;
  const auto l = leaves(13, &chunks);
  const announce_tree::tree t(l);
  for (std::size_t i = 0; i < l.size(); ++i) {
    auto c = chunks[i];
    for (std::size_t b = 0; b < c.size(); ++b) {
      c[b] ^= std::byte{0x01};
      const auto root = announce_tree::root_from_path(announce_tree::leaf_hash(c), i, l.size(),
                                                      wire_path(t.path(i)));
      REQUIRE(root);
      REQUIRE(*root != t.root());
      c[b] ^= std::byte{0x01};
    }
    auto p = wire_path(t.path(i));
    for (std::size_t b = 0; b < p.size(); ++b) {
      p[b] ^= std::byte{0x80};
      const auto root = announce_tree::root_from_path(l[i], i, l.size(), p);
      REQUIRE(root);
      REQUIRE(*root != t.root());
      p[b] ^= std::byte{0x80};
    }
  }
}

TEST_CASE("a path under another index does not lead to the root", "[announce_tree]") {
  for (std::size_t n : {2u, 3u, 5u, 8u, 13u, 64u}) {
    const auto l = leaves(n);
    const announce_tree::tree t(l);
    for (std::size_t i = 0; i < n; ++i) {
      const auto p = wire_path(t.path(i));
      for (std::size_t j = 0; j < n; ++j) {
        if (j == i) continue;
        const auto root = announce_tree::root_from_path(l[i], j, n, p);
        CHECK((!root || *root != t.root()));
      }
      // A path does not fix the count by itself (leaf 0 of 5 and of 8 both have 3 left-hand
      // siblings): the count is in what the sender signs (auth.hpp), as the tree size is in
      // RFC 9162's signed tree head. A count whose path has another length is refused.
      for (std::size_t m = 1; m <= announce_tree::max_leaves; ++m) {
        if (i >= m || announce_tree::path_length(i, m) == announce_tree::path_length(i, n)) {
          continue;
        }
        CHECK_FALSE(announce_tree::root_from_path(l[i], i, m, p));
      }
    }
  }
}

TEST_CASE("index, count and path length out of bounds are refused", "[announce_tree]") {
  const auto l = leaves(4);
  const announce_tree::tree t(l);
  const auto p = wire_path(t.path(1));
  CHECK_FALSE(announce_tree::path_length(0, 0));
  CHECK_FALSE(announce_tree::path_length(4, 4));
  CHECK_FALSE(announce_tree::path_length(0, announce_tree::max_leaves + 1));
  CHECK(announce_tree::path_length(0, 1) == 0u);
  CHECK(announce_tree::path_length(63, 64) == 6u);
  CHECK(announce_tree::path_length(4, 5) == 1u);  // the lone right leaf of 5
  CHECK_FALSE(announce_tree::root_from_path(l[1], 4, 4, p));
  CHECK_FALSE(announce_tree::root_from_path(l[1], 1, 0, p));
  CHECK_FALSE(announce_tree::root_from_path(l[1], 1, 4, std::span(p).first(p.size() - 1)));
  auto longer = p;
  longer.resize(p.size() + hash_bytes);
  CHECK_FALSE(announce_tree::root_from_path(l[1], 1, 4, longer));
  // Too many or no leaves: an empty tree.
  CHECK(announce_tree::tree(leaves(announce_tree::max_leaves + 1)).size() == 0);
  CHECK(announce_tree::tree(std::span<const hash>{}).size() == 0);
}
