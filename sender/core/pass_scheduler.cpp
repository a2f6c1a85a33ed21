#include "sender/core/pass_scheduler.hpp"

#include "common/ids.hpp"

#include <algorithm>

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
    auto& r = m_prompt.front();
    const std::uint32_t b = m_files[r.file].wanted.find_set(r.next);
    if (b < r.end) {
      r.next = b;
      return block_pick{r.file, b, true};
    }
    m_prompt.pop_front();  // every block of the run already sent
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
    if (++m_prompt.front().next >= m_prompt.front().end) m_prompt.pop_front();
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

void pass_scheduler::skip(const block_pick& p) {
  if (p.prompt) {
    if (++m_prompt.front().next >= m_prompt.front().end) m_prompt.pop_front();
    return;
  }
  auto& fs = m_files[p.file];
  // 1 - 1 = 0 reads as "not sent in pass 1": no in-flight estimate, every NAK taken.
  if (m_pass == 1 && fs.first_seq != 0) --fs.first_seq;
  ++m_cursor_block;
}

std::uint64_t pass_scheduler::nak(
    std::uint32_t file, std::uint32_t first, std::uint32_t count, std::uint32_t seen_seq,
    bool prompt, std::vector<std::pair<std::uint32_t, std::uint32_t>>* added_runs) {
  auto& fs = m_files[file];
  std::uint32_t end = first + count;
  // Pass 1 sent block b with sequence number first_seq + b (an underestimate, repair_log.hpp):
  // blocks from first_seq's offset to seen_seq on left after the receiver's view, so their
  // pass-1 copy (and any repair, later still) is on its way.
  if (fs.first_seq != 0) {
    const auto seen_block = static_cast<std::int32_t>(seen_seq - fs.first_seq);
    if (seen_block < 0) return 0;
    if (static_cast<std::uint32_t>(seen_block) < end) {
      end = std::max(first, static_cast<std::uint32_t>(seen_block) + 1);
    }
  }
  const std::uint32_t behind_end = file < m_cursor_file    ? end
                                   : file == m_cursor_file ? std::min(end, m_cursor_block)
                                                           : 0;
  std::uint64_t added = 0;
  auto add_run = [&](std::uint32_t a, std::uint32_t b) {
    if (a >= b) return;
    fs.wanted.set_range(a, b - a);
    added += b - a;
    if (added_runs) added_runs->emplace_back(a, b);
    if (prompt && a < behind_end && m_prompt.size() < max_prompt_runs) {
      m_prompt.push_back({file, a, std::min(b, behind_end)});
    }
  };
  const bool check_log = m_repair_log.size() > 0;
  for (std::uint32_t b = first; b < end;) {
    // The next run of blocks not wanted yet: [a, e).
    const std::uint32_t a = fs.wanted.find_clear(b);
    if (a >= end) break;
    const std::uint32_t e = std::min(end, fs.wanted.find_set(a));
    if (!check_log) {
      add_run(a, e);
    } else {
      // Repaired after the receiver's view: that copy is still on its way.
      std::uint32_t run = a;
      for (std::uint32_t x = a; x < e; ++x) {
        const std::uint32_t last = m_repair_log.last(file, x);
        if (last != 0 && seq_after(last, seen_seq)) {
          add_run(run, x);
          run = x + 1;
        }
      }
      add_run(run, e);
    }
    b = e;
  }
  m_wanted += added;
  return added;
}

}  // namespace mcdist::sender
