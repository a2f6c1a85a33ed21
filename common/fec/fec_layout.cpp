#include "common/fec/fec_layout.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace mcdist::fec {

layout::layout(const std::vector<std::uint32_t>& blocks, std::uint32_t k, std::uint32_t depth)
    : m_k(k), m_depth(depth) {
  if (k == 0 || depth == 0 || depth > max_depth) {
    throw std::invalid_argument("FEC layout needs k >= 1 and an interleaving depth of 1.." +
                                std::to_string(max_depth) + " (k " + std::to_string(k) +
                                ", depth " + std::to_string(depth) + ")");
  }
  m_prefix.reserve(blocks.size() + 1);
  for (const auto b : blocks) {
    m_prefix.push_back(m_total);
    m_total += b;
  }
  m_prefix.push_back(m_total);
  const std::uint64_t group = std::uint64_t{k} * depth;
  m_full_groups = m_total / group;
  const std::uint64_t rest = m_total % group;
  const std::uint64_t count = m_full_groups * depth + (rest > 0 ? last_depth(rest) : 0);
  if (count > std::numeric_limits<std::uint32_t>::max()) {
    throw std::invalid_argument("too many FEC blocks for one session (" + std::to_string(count) +
                                "); choose a larger k");
  }
  m_fec_blocks = static_cast<std::uint32_t>(count);
}

std::uint32_t layout::last_depth(std::uint64_t size) const noexcept {
  // As deep as the other groups while each FEC block keeps min_last_sources sources, but never
  // more than k sources per FEC block (size < k x depth, so ceil(size / k) <= depth).
  std::uint64_t d = std::max<std::uint64_t>(size / min_last_sources, 1);
  d = std::max<std::uint64_t>(d, (size + m_k - 1) / m_k);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(d, m_depth));
}

layout::group_shape layout::group_of_block(std::uint64_t g) const noexcept {
  const std::uint64_t group = std::uint64_t{m_k} * m_depth;
  const std::uint64_t n = g / group;
  if (n < m_full_groups) {
    return {n * group, static_cast<std::uint32_t>(n * m_depth), m_depth, group};
  }
  const std::uint64_t size = m_total - m_full_groups * group;
  return {m_full_groups * group, static_cast<std::uint32_t>(m_full_groups * m_depth),
          last_depth(size), size};
}

layout::group_shape layout::group_of_fec(std::uint32_t fb) const noexcept {
  const std::uint64_t n = fb / m_depth;
  if (n < m_full_groups) return group_of_block(n * m_k * m_depth);
  return group_of_block(m_full_groups * m_k * m_depth);
}

position layout::locate(std::uint32_t file, std::uint32_t block) const noexcept {
  const std::uint64_t g = global(file, block);
  const auto shape = group_of_block(g);
  const std::uint64_t o = g - shape.first_block;
  return {shape.first_fec + static_cast<std::uint32_t>(o % shape.depth),
          static_cast<std::uint32_t>(o / shape.depth)};
}

std::uint32_t layout::sources(std::uint32_t fb) const noexcept {
  const auto shape = group_of_fec(fb);
  const std::uint64_t j = fb - shape.first_fec;
  // Offsets o in [0, size) with o mod depth == j.
  return static_cast<std::uint32_t>((shape.size - j + shape.depth - 1) / shape.depth);
}

source_ref layout::source(std::uint32_t fb, std::uint32_t index) const noexcept {
  const auto shape = group_of_fec(fb);
  const std::uint64_t g =
      shape.first_block + std::uint64_t{index} * shape.depth + (fb - shape.first_fec);
  // The file whose range [prefix[f], prefix[f + 1]) holds g; empty files have equal bounds.
  const auto it = std::upper_bound(m_prefix.begin(), m_prefix.end() - 1, g);
  const auto f = static_cast<std::uint32_t>(it - m_prefix.begin() - 1);
  return {f, static_cast<std::uint32_t>(g - m_prefix[f])};
}

std::uint32_t layout::sources_before(std::uint32_t fb, std::uint64_t g) const noexcept {
  const auto shape = group_of_fec(fb);
  const std::uint64_t first = shape.first_block + (fb - shape.first_fec);  // its source 0
  if (g <= first) return 0;
  const std::uint64_t before = (g - first + shape.depth - 1) / shape.depth;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(before, sources(fb)));
}

std::vector<std::uint32_t> layout::completed_in(std::uint64_t g0, std::uint64_t g1) const {
  std::vector<std::uint32_t> out;
  g1 = std::min(g1, m_total);
  while (g0 < g1) {
    const auto shape = group_of_block(g0);
    const std::uint64_t end = shape.first_block + shape.size;
    // The group's tail: its last `depth` blocks hold every FEC block's last source.
    const std::uint64_t tail = end - std::min<std::uint64_t>(shape.depth, shape.size);
    for (std::uint64_t g = std::max(g0, tail); g < std::min(g1, end); ++g) {
      const std::uint64_t o = g - shape.first_block;
      const auto fb = shape.first_fec + static_cast<std::uint32_t>(o % shape.depth);
      // The last source of fb is the last offset of its residue class in the group.
      if (o + shape.depth >= shape.size) out.push_back(fb);
    }
    g0 = end;
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::pair<std::uint32_t, std::uint32_t>> layout::fec_blocks_of(
    std::uint32_t file) const noexcept {
  const std::uint64_t first = m_prefix[file];
  const std::uint64_t end = m_prefix[file + 1];
  if (first == end) return std::nullopt;
  // Every FEC block of the groups holding the file's first and last blocks, and of those between.
  const auto a = group_of_block(first);
  const auto b = group_of_block(end - 1);
  return std::pair{a.first_fec, b.first_fec + b.depth - 1};
}

}  // namespace mcdist::fec
