#include "receiver/core/manifest_assembler.hpp"

#include "mcdist.pb.h"

#include <algorithm>
#include <cassert>

namespace mcdist::receiver {

manifest_assembler::manifest_assembler(const wire::session_params& p, std::size_t slot_bytes)
    : m_block_size(p.block_size()), m_file_count(p.file_count()), m_total_bytes(p.total_bytes()),
      m_slot_bytes(slot_bytes), m_chunks(p.manifest_chunks()), m_entries(p.file_count()) {}

manifest_assembler::fit manifest_assembler::admit(const wire::announce& m, memory_budget& budget,
                                                  session_id s) {
  if (m.chunk() >= m_chunks.size() || m_chunks.test(m.chunk())) return fit::ignored;
  const std::uint64_t end =
      std::uint64_t{m.first_file()} + static_cast<std::uint64_t>(m.files_size());
  if (end > m_file_count || (m.files_size() == 0 && m_file_count > 0)) return fit::invalid;
  // (end == 0: the one empty chunk of an empty session; the table needs no entry)
  if (end <= m_table_size) return fit::admitted;
  // Grow geometrically (chunks usually come in order), charging the new capacity first.
  const std::size_t want = std::min<std::size_t>(
      m_file_count, std::max<std::size_t>(static_cast<std::size_t>(end), m_table_capacity * 2));
  if (want > m_table_capacity) {
    if (!budget.charge(s, (want - m_table_capacity) * m_slot_bytes)) return fit::over_budget;
    m_table_capacity = want;
  }
  m_table_size = static_cast<std::size_t>(end);
  return fit::admitted;
}

manifest_assembler::progress manifest_assembler::take(const wire::announce& m,
                                                      memory_budget& budget, session_id s,
                                                      std::vector<taken_entry>& out) {
  out.clear();
  assert(m.chunk() < m_chunks.size() && !m_chunks.test(m.chunk()));
  assert(std::uint64_t{m.first_file()} + static_cast<std::uint64_t>(m.files_size()) <=
         m_table_size);
  out.reserve(static_cast<std::size_t>(m.files_size()));
  std::uint64_t entry_bytes = m_entry_bytes;
  for (int i = 0; i < m.files_size(); ++i) {
    const std::uint32_t idx = m.first_file() + static_cast<std::uint32_t>(i);
    if (m_entries.test(idx)) continue;
    const wire::file_entry& raw = m.files(i);
    taken_entry& t = out.emplace_back();
    t.index = idx;
    std::error_code ec = from_wire(raw, t.entry);
    const std::uint64_t blocks = (raw.size() + m_block_size - 1) / m_block_size;
    if (!ec && blocks > max_file_blocks) ec = errc::file_too_large;
    // The entries may not add up to more than the announced total the budget was checked
    // against; the entry that would is refused.
    if (!ec && raw.size() > m_total_bytes - entry_bytes) ec = errc::invalid_field;
    if (!ec && t.entry.path.size() > inline_path_bytes && !budget.charge(s, t.entry.path.size())) {
      ec = errc::over_budget;
    }
    if (ec) {
      t.refused = static_cast<errc>(ec.value());
      t.entry.path = raw.path();
      t.entry.size = raw.size();
    } else {
      t.blocks = static_cast<std::uint32_t>(blocks);
      entry_bytes += t.entry.size;
    }
  }
  // Everything is in `out`: the chunk and its entries count as taken from here on.
  for (const auto& t : out) m_entries.set(t.index);
  m_entry_bytes = entry_bytes;
  m_chunks.set(m.chunk());
  if (!m_chunks.all()) return progress::partial;
  return m_entries.all() ? progress::complete : progress::malformed;
}

}  // namespace mcdist::receiver
