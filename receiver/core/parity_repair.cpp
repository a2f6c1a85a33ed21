#include "receiver/core/parity_repair.hpp"

#include "common/fec/fec.hpp"
#include "common/fec/fec_layout.hpp"
#include "common/manifest.hpp"

#include <stdexcept>

namespace mcdist::receiver {

parity_repair::parity_repair(std::uint32_t k, std::uint32_t max_parity, std::uint32_t depth,
                             std::uint32_t block_size) noexcept {
  if (fec::valid_shape(k, max_parity) && depth >= 1 && depth <= fec::max_depth &&
      (fec::field_for(k, max_parity) == fec::field::gf8 || block_size % 2 == 0)) {
    m_k = k;
    m_max_parity = max_parity;
    m_depth = depth;
  }
}

bool parity_repair::build(std::span<const file_rx> files, std::uint32_t block_size, bool decodes,
                          memory_budget& budget, session_id id) {
  if (m_tracker) return true;
  if (m_k == 0) return false;
  // A storage path that cannot decode: no FEC state at all, missing blocks are NAKed one by
  // one and parity is dropped (as stale).
  if (!decodes) {
    m_k = 0;
    return false;
  }
  // The layout is the sender's: every manifest entry's block count, refused ones included.
  const auto file_count = static_cast<std::uint32_t>(files.size());
  std::vector<std::uint32_t> blocks(file_count);
  for (std::uint32_t i = 0; i < file_count; ++i) {
    const std::uint64_t n = (files[i].entry.size + block_size - 1) / block_size;
    if (n > 0x7fffffffu) {
      m_k = 0;
      return false;
    }
    blocks[i] = static_cast<std::uint32_t>(n);
  }
  try {
    fec::layout l(blocks, m_k, m_depth);
    // 2 bytes per FEC block (fec_tracker.hpp), charged before it is allocated.
    if (!budget.charge(id, std::uint64_t{l.fec_blocks()} * 2 + sizeof(fec_tracker))) {
      m_k = 0;
      return false;
    }
    m_tracker = std::make_unique<fec_tracker>(std::move(l), m_max_parity);
  } catch (const std::invalid_argument&) {
    m_k = 0;
    return false;
  }
  // What this receiver can already read back: received blocks, and held or stored files whole.
  for (std::uint32_t i = 0; i < file_count; ++i) {
    const auto& fr = files[i];
    const bool whole = fr.state == file_rx::state_t::stored || fr.state == file_rx::state_t::held;
    const bool partial =
        (fr.state == file_rx::state_t::receiving || fr.state == file_rx::state_t::awaiting_digest ||
         fr.state == file_rx::state_t::finalizing) &&
        fr.received.size() == blocks[i] && blocks[i] > 0;
    if (!whole && !partial) continue;
    for (std::uint32_t b = 0; b < blocks[i]; ++b) {
      if (whole || fr.received.test(b)) {
        m_tracker->add_source(m_tracker->layout().locate(i, b).fec_block);
      }
    }
  }
  return true;
}

bool parity_repair::source_added(std::uint32_t f, std::uint32_t b, std::uint32_t& fb) noexcept {
  fb = m_tracker->layout().locate(f, b).fec_block;
  m_tracker->add_source(fb);
  return m_tracker->decodable(fb);
}

recovery_request parity_repair::request(std::uint32_t fb, std::span<const file_rx> files,
                                        std::uint32_t channel, std::uint32_t block_size) {
  auto& t = *m_tracker;
  recovery_request req;
  req.fec_block = fb;
  req.channel = channel;
  req.k = m_k;
  req.max_parity = m_max_parity;
  req.block_size = block_size;
  req.parity = t.parity_indexes(fb);
  const std::uint32_t n = t.layout().sources(fb);
  req.sources.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto src = t.layout().source(fb, i);
    const auto& fr = files[src.file];
    fec_source fs;
    fs.file = file_index{src.file};
    fs.block = src.block;
    fs.offset = std::uint64_t{src.block} * block_size;
    fs.length = block_length(fr.entry.size, block_size, src.block);
    const bool has_map = fr.received.size() == fr.blocks && fr.blocks > 0;
    fs.available = fr.state == file_rx::state_t::stored || fr.state == file_rx::state_t::held ||
                   ((fr.state == file_rx::state_t::receiving ||
                     fr.state == file_rx::state_t::awaiting_digest ||
                     fr.state == file_rx::state_t::finalizing) &&
                    has_map && fr.received.test(src.block));
    fs.wanted = !fs.available && fr.state == file_rx::state_t::receiving && has_map;
    if (fs.available) fs.path = fr.entry.path;
    req.sources.push_back(std::move(fs));
  }
  t.start_decode(fb);
  return req;
}

void parity_repair::decode_failed(std::uint32_t fb) {
  ++m_counts.failures;
  m_tracker->set_explicit_only(fb);
}

std::vector<parity_repair::recovered> parity_repair::decoded(std::uint32_t fb,
                                                             std::span<const file_rx> files) {
  std::vector<recovered> out;
  const std::uint32_t n = m_tracker->layout().sources(fb);
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto src = m_tracker->layout().source(fb, i);
    const auto& fr = files[src.file];
    if (fr.state != file_rx::state_t::receiving || fr.received.size() != fr.blocks ||
        fr.blocks == 0 || fr.received.test(src.block)) {
      continue;
    }
    out.push_back({src.file, src.block});
  }
  m_tracker->decoded(fb);
  ++m_counts.fec_blocks;
  m_counts.blocks += static_cast<std::uint32_t>(out.size());
  return out;
}

void parity_repair::parity_refused(std::uint32_t fb) {
  // This storage path does not decode (or is full): NAK the FEC block's blocks instead.
  m_tracker->set_explicit_only(fb);
  ++m_counts.refused;
}

}  // namespace mcdist::receiver
