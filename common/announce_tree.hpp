#pragma once
/// @file
/// A Merkle hash tree over a burst of announce chunks, so that one Ed25519 signature covers
/// the burst (docs/security.md "Announce trees"): the sender signs the tree's root once, and
/// each chunk carries that signature and its own authentication path, so every chunk still
/// verifies alone (a lost chunk costs nothing more) and a site checks the signature of a root
/// once and every other chunk under it with a few SHA-256 (common/auth.hpp). This is the "tree
/// chaining" of Wong and Lam, "Digital Signatures for Flows and Multicasts", IEEE/ACM
/// Transactions on Networking 7(4), 1999.
///
/// The tree is RFC 9162 (Certificate Transparency 2.0) section 2.1.1's, as in RFC 6962
/// section 2.1: leaf hash SHA-256(0x00 || data), node hash SHA-256(0x01 || left || right),
/// the split of n leaves at the largest power of two below n; an authentication path is the
/// inclusion proof of section 2.1.3.1, leaf to root, checked by section 2.1.3.2's algorithm.
/// The 0x00 / 0x01 prefixes keep a leaf from passing for a node (second preimages).
///
/// Pure: SHA-256 through libsodium (crypto_hash_sha256, no allocation), no state.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace mcdist::announce_tree {

/// Bytes of one hash: SHA-256.
inline constexpr std::size_t hash_bytes = 32;
/// A leaf or node hash.
using hash = std::array<std::uint8_t, hash_bytes>;

/// Most leaves in one tree, so that a path is at most max_depth hashes: 64 chunks (90 kB of
/// announce) cover one pacing burst of the sender (64 KiB by default, sender_session.hpp), and
/// a longer burst is cut into several trees. Each level costs every chunk 32 bytes of room
/// (auth::announce_reserve).
inline constexpr std::size_t max_leaves = 64;
/// Most hashes in an authentication path: log2(max_leaves).
inline constexpr std::size_t max_depth = 6;
static_assert(std::size_t{1} << max_depth == max_leaves);

/// SHA-256(0x00 || data): the hash of one leaf.
hash leaf_hash(std::span<const std::byte> data) noexcept;
/// SHA-256(0x01 || left || right): the hash of an inner node.
hash node_hash(const hash& left, const hash& right) noexcept;

/// Hashes in the authentication path of leaf `index` in a tree of `count` leaves (RFC 9162
/// section 2.1.3.1); 0 for a one-leaf tree. @return std::nullopt unless index < count and
/// 1 <= count <= max_leaves
std::optional<std::size_t> path_length(std::size_t index, std::size_t count) noexcept;

/// The root a leaf's authentication path leads to (RFC 9162 section 2.1.3.2).
/// @param leaf   leaf_hash of the chunk
/// @param index  the leaf's index, < count
/// @param count  leaves in the tree, 1..max_leaves
/// @param path   path_length(index, count) hashes, 32 bytes each, leaf to root
/// @return the root, or std::nullopt when index, count or the path's length do not fit
std::optional<hash> root_from_path(const hash& leaf, std::size_t index, std::size_t count,
                                   std::span<const std::byte> path) noexcept;

/// A tree built over 1..max_leaves leaf hashes: its root and every leaf's path.
class tree {
 public:
  /// @param leaves  leaf hashes, 1..max_leaves of them (more or none: an empty tree whose
  ///                size() is 0; the caller cuts bursts to max_leaves)
  explicit tree(std::span<const hash> leaves);

  /// Leaves in the tree.
  std::size_t size() const noexcept { return m_paths.size(); }
  /// The root hash (RFC 9162 MTH).
  const hash& root() const noexcept { return m_root; }
  /// The authentication path of leaf `i` (< size()), leaf to root, path_length(i, size())
  /// hashes.
  const std::vector<hash>& path(std::size_t i) const { return m_paths[i]; }

 private:
  /// Hashes leaves [lo, hi) into a subtree and appends its sibling hashes to their paths.
  hash build(std::span<const hash> leaves, std::size_t lo, std::size_t hi);

  hash m_root{};
  std::vector<std::vector<hash>> m_paths;
};

}  // namespace mcdist::announce_tree
