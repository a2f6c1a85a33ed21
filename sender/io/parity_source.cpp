#include "sender/io/parity_source.hpp"

#include <algorithm>
#include <cstring>

namespace mcdist::sender {

parity_source::parity_source(const fec::layout& layout, const std::vector<source_file>& files,
                             std::uint32_t max_parity, std::uint32_t block_size)
    : m_layout(layout), m_files(files), m_codec(layout.k(), max_parity), m_block_size(block_size),
      // Reads come in FEC blocks of k x depth consecutive blocks at most: small chunks.
      m_reader(files, 256 * 1024, 8, 64), m_cache(cached_fec_blocks),
      m_build_first_rows(m_codec.field() == fec::field::gf8 && block_size >= 64) {}

void parity_source::observe(std::uint32_t file, std::uint32_t block,
                            std::span<const std::byte> data) {
  if (!m_build_first_rows) return;
  const fec::position pos = m_layout.locate(file, block);
  auto it = m_first_rows.find(pos.fec_block);
  if (it == m_first_rows.end()) {
    if (m_first_rows_bytes + m_block_size > first_rows_max_bytes) return;
    first_row r;
    r.row.assign(m_block_size, std::byte{0});
    r.seen.assign(m_layout.sources(pos.fec_block), false);
    m_first_rows_bytes += m_block_size;
    it = m_first_rows.emplace(pos.fec_block, std::move(r)).first;
  }
  first_row& r = it->second;
  if (pos.index >= r.seen.size() || r.seen[pos.index]) return;
  if (!m_codec.accumulate(0, pos.index, data, r.row)) return;
  r.seen[pos.index] = true;
  ++r.count;
}

std::error_code parity_source::load(cached& c, std::uint32_t fec_block, std::string& why) {
  const std::uint32_t n = m_layout.sources(fec_block);
  c.fec_block = UINT32_MAX;
  c.bytes.assign(std::size_t{n} * m_block_size, std::byte{0});
  for (std::uint32_t i = 0; i < n; ++i) {
    if (auto ec = read_source(fec_block, i, c.bytes, why)) return ec;
  }
  c.fec_block = fec_block;
  return {};
}

std::error_code parity_source::load_group(std::uint32_t first, std::uint32_t count,
                                          std::string& why) {
  // The least recently used entries take the group's FEC blocks.
  std::vector<cached*> slots;
  for (auto& e : m_cache) slots.push_back(&e);
  std::partial_sort(slots.begin(), slots.begin() + count, slots.end(),
                    [](const cached* a, const cached* b) { return a->used < b->used; });
  slots.resize(count);
  std::uint32_t most = 0;
  for (std::uint32_t j = 0; j < count; ++j) {
    slots[j]->fec_block = UINT32_MAX;
    slots[j]->bytes.assign(std::size_t{m_layout.sources(first + j)} * m_block_size, std::byte{0});
    most = std::max(most, m_layout.sources(first + j));
  }
  // Source i of FEC block first + j is the group's block i x count + j: this order reads the
  // group's stretch front to back, each file once through the reader's chunks.
  for (std::uint32_t i = 0; i < most; ++i) {
    for (std::uint32_t j = 0; j < count; ++j) {
      if (i >= m_layout.sources(first + j)) continue;
      if (auto ec = read_source(first + j, i, slots[j]->bytes, why)) return ec;
    }
  }
  for (std::uint32_t j = 0; j < count; ++j) {
    slots[j]->fec_block = first + j;
    slots[j]->used = ++m_clock;
  }
  return {};
}

std::error_code parity_source::read_source(std::uint32_t fec_block, std::uint32_t i,
                                           std::vector<std::byte>& into, std::string& why) {
  const auto src = m_layout.source(fec_block, i);
  const std::uint64_t offset = std::uint64_t{src.block} * m_block_size;
  std::span<const std::byte> got;
  // The last block of a file is short: read what there is, the rest stays zero.
  const std::uint64_t size = m_files[src.file].entry.size;
  const auto len = static_cast<std::uint32_t>(std::min<std::uint64_t>(m_block_size, size - offset));
  if (auto ec = m_reader.read(src.file, offset, len, got, why)) return ec;
  std::memcpy(into.data() + std::size_t{i} * m_block_size, got.data(), got.size());
  return {};
}

std::error_code parity_source::parity(std::uint32_t fec_block, std::uint32_t index,
                                      std::span<std::byte> out, std::string& why) {
  if (index == 0) {
    const auto it = m_first_rows.find(fec_block);
    if (it != m_first_rows.end() && it->second.count == it->second.seen.size() &&
        out.size() == it->second.row.size()) {
      std::copy(it->second.row.begin(), it->second.row.end(), out.begin());
      return {};
    }
  }
  cached* c = nullptr;
  for (auto& e : m_cache) {
    if (e.fec_block == fec_block) c = &e;
  }
  if (!c) {
    const auto [first, count] = m_layout.group_fec_blocks(fec_block);
    const std::uint64_t group_bytes = std::uint64_t{m_layout.k()} * count * m_block_size;
    if (count > 1 && count <= m_cache.size() && group_bytes <= group_load_max_bytes) {
      if (auto ec = load_group(first, count, why)) return ec;
      for (auto& e : m_cache) {
        if (e.fec_block == fec_block) c = &e;
      }
    } else {
      c = &*std::min_element(m_cache.begin(), m_cache.end(),
                             [](const cached& a, const cached& b) { return a.used < b.used; });
      if (auto ec = load(*c, fec_block, why)) return ec;
    }
  }
  c->used = ++m_clock;
  const std::uint32_t n = m_layout.sources(fec_block);
  std::vector<const std::byte*> in(n);
  for (std::uint32_t i = 0; i < n; ++i) in[i] = c->bytes.data() + std::size_t{i} * m_block_size;
  std::byte* dst = out.data();
  m_codec.encode(in, std::span(&index, 1), std::span(&dst, 1), m_block_size);
  return {};
}

}  // namespace mcdist::sender
