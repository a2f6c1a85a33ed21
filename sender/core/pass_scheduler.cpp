#include "sender/core/pass_scheduler.hpp"

#include "common/ids.hpp"

namespace mcdist::sender {

pass_scheduler::pass_scheduler(const std::vector<std::uint32_t>& blocks) {
  m_files.resize(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    m_files[i].blocks = blocks[i];
    m_files[i].wanted = block_map(blocks[i]);
  }
}

void pass_scheduler::want_all() {
  for (auto& fs : m_files) {
    fs.wanted.set_all();
    m_wanted += fs.blocks;
  }
}

void pass_scheduler::start_pass() {
  ++m_pass;
  m_prompt.clear();
  m_cursor_file = 0;
  m_cursor_block = 0;
}

bool pass_scheduler::advance_cursor() {
  while (m_cursor_file < m_files.size()) {
    auto& fs = m_files[m_cursor_file];
    // Pass 1 skips a file every registered receiver already holds, once the group is known.
    if (m_pass == 1 && m_cursor_block == 0 && m_group > 0 && fs.held_by >= m_group &&
        !fs.wanted.none()) {
      m_wanted -= fs.wanted.count();
      fs.wanted.clear_all();
    }
    if (!fs.wanted.none()) {
      const std::uint32_t b = fs.wanted.find_set(m_cursor_block);
      if (b < fs.blocks) {
        m_cursor_block = b;
        return true;
      }
    }
    ++m_cursor_file;
    m_cursor_block = 0;
  }
  return false;
}

std::optional<block_pick> pass_scheduler::peek() {
  while (!m_prompt.empty()) {
    const auto [f, b] = m_prompt.front();
    if (m_files[f].wanted.test(b)) return block_pick{f, b, true};
    m_prompt.pop_front();  // already sent
  }
  if (!advance_cursor()) return std::nullopt;
  return block_pick{m_cursor_file, m_cursor_block, false};
}

std::uint32_t pass_scheduler::take(const block_pick& p) {
  if (++m_seq == 0) ++m_seq;  // 0 means "never sent"
  auto& fs = m_files[p.file];
  fs.wanted.reset(p.block);
  --m_wanted;
  if (p.prompt) {
    m_prompt.pop_front();
    m_repair_log.record(p.file, p.block, m_seq);
    ++m_repairs_sent;
    return m_seq;
  }
  if (m_pass == 1) {
    if (p.block == 0) fs.first_seq = m_seq;
  } else {
    m_repair_log.record(p.file, p.block, m_seq);
    ++m_repairs_sent;
  }
  ++m_cursor_block;
  return m_seq;
}

std::uint64_t pass_scheduler::nak(std::uint32_t file, std::uint32_t first, std::uint32_t count,
                                  std::uint32_t seen_seq, bool prompt) {
  auto& fs = m_files[file];
  std::uint64_t added = 0;
  for (std::uint32_t b = first; b < first + count; ++b) {
    // Sent again after the receiver's view: that copy is still on its way.
    std::uint32_t last = m_repair_log.last(file, b);
    if (last == 0 && fs.first_seq != 0) last = fs.first_seq + b;
    if (last != 0 && seq_after(last, seen_seq)) continue;
    if (!fs.wanted.set(b)) continue;
    ++added;
    const bool behind = file < m_cursor_file || (file == m_cursor_file && b < m_cursor_block);
    if (prompt && behind && m_prompt.size() < max_prompt_repairs) m_prompt.emplace_back(file, b);
  }
  m_wanted += added;
  return added;
}

}  // namespace mcdist::sender
