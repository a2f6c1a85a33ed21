#include "common/announce_tree.hpp"

#include <sodium.h>

#include <bit>

namespace mcdist::announce_tree {

namespace {

/// The largest power of two strictly below n (n >= 2): where RFC 9162 splits n leaves.
std::size_t split(std::size_t n) noexcept { return std::bit_floor(n - 1); }

}  // namespace

hash leaf_hash(std::span<const std::byte> data) noexcept {
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  const unsigned char prefix = 0x00;
  crypto_hash_sha256_update(&st, &prefix, 1);
  crypto_hash_sha256_update(&st, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  hash out{};
  crypto_hash_sha256_final(&st, out.data());
  return out;
}

hash node_hash(const hash& left, const hash& right) noexcept {
  std::array<unsigned char, 1 + 2 * hash_bytes> in{};
  in[0] = 0x01;
  std::copy(left.begin(), left.end(), in.begin() + 1);
  std::copy(right.begin(), right.end(), in.begin() + 1 + hash_bytes);
  hash out{};
  crypto_hash_sha256(out.data(), in.data(), in.size());
  return out;
}

std::optional<std::size_t> path_length(std::size_t index, std::size_t count) noexcept {
  if (count == 0 || count > max_leaves || index >= count) return std::nullopt;
  std::size_t len = 0;
  while (count > 1) {
    const std::size_t k = split(count);
    if (index < k) {
      count = k;
    } else {
      index -= k;
      count -= k;
    }
    ++len;
  }
  return len;
}

std::optional<hash> root_from_path(const hash& leaf, std::size_t index, std::size_t count,
                                   std::span<const std::byte> path) noexcept {
  const auto len = path_length(index, count);
  if (!len || path.size() != *len * hash_bytes) return std::nullopt;
  // RFC 9162 section 2.1.3.2, steps 1-6.
  std::size_t fn = index;
  std::size_t sn = count - 1;
  hash r = leaf;
  for (std::size_t i = 0; i < *len; ++i) {
    if (sn == 0) return std::nullopt;
    hash p{};
    for (std::size_t b = 0; b < hash_bytes; ++b) {
      p[b] = std::to_integer<std::uint8_t>(path[i * hash_bytes + b]);
    }
    if ((fn & 1) != 0 || fn == sn) {
      r = node_hash(p, r);
      while ((fn & 1) == 0 && fn != 0) {
        fn >>= 1;
        sn >>= 1;
      }
    } else {
      r = node_hash(r, p);
    }
    fn >>= 1;
    sn >>= 1;
  }
  if (sn != 0) return std::nullopt;
  return r;
}

tree::tree(std::span<const hash> leaves) {
  if (leaves.empty() || leaves.size() > max_leaves) return;
  m_paths.resize(leaves.size());
  m_root = build(leaves, 0, leaves.size());
}

hash tree::build(std::span<const hash> leaves, std::size_t lo, std::size_t hi) {
  if (hi - lo == 1) return leaves[lo];
  const std::size_t mid = lo + split(hi - lo);
  const hash left = build(leaves, lo, mid);
  const hash right = build(leaves, mid, hi);
  // Deeper levels appended first: every path runs from its leaf to the root.
  for (std::size_t i = lo; i < mid; ++i) m_paths[i].push_back(right);
  for (std::size_t i = mid; i < hi; ++i) m_paths[i].push_back(left);
  return node_hash(left, right);
}

}  // namespace mcdist::announce_tree
