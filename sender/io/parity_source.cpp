#include "sender/io/parity_source.hpp"

#include <algorithm>
#include <cstring>

namespace mcdist::sender {

parity_source::parity_source(const fec::layout& layout, const std::vector<source_file>& files,
                             std::uint32_t max_parity, std::uint32_t block_size)
    : m_layout(layout), m_files(files), m_codec(layout.k(), max_parity), m_block_size(block_size),
      // Reads come in FEC blocks of k x depth consecutive blocks at most: small chunks.
      m_reader(files, 256 * 1024, 8, 64), m_cache(cached_fec_blocks) {}

std::error_code parity_source::load(cached& c, std::uint32_t fec_block, std::string& why) {
  const std::uint32_t n = m_layout.sources(fec_block);
  c.fec_block = UINT32_MAX;
  c.bytes.assign(std::size_t{n} * m_block_size, std::byte{0});
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto src = m_layout.source(fec_block, i);
    const std::uint64_t offset = std::uint64_t{src.block} * m_block_size;
    std::span<const std::byte> got;
    // The last block of a file is short: read what there is, the rest stays zero.
    const std::uint64_t size = m_files[src.file].entry.size;
    const auto len =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(m_block_size, size - offset));
    if (auto ec = m_reader.read(src.file, offset, len, got, why)) return ec;
    std::memcpy(c.bytes.data() + std::size_t{i} * m_block_size, got.data(), got.size());
  }
  c.fec_block = fec_block;
  return {};
}

std::error_code parity_source::parity(std::uint32_t fec_block, std::uint32_t index,
                                      std::span<std::byte> out, std::string& why) {
  cached* c = nullptr;
  for (auto& e : m_cache) {
    if (e.fec_block == fec_block) c = &e;
  }
  if (!c) {
    c = &*std::min_element(m_cache.begin(), m_cache.end(),
                           [](const cached& a, const cached& b) { return a.used < b.used; });
    if (auto ec = load(*c, fec_block, why)) return ec;
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
