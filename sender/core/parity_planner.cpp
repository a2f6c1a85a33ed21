#include "sender/core/parity_planner.hpp"

#include "common/ids.hpp"

#include <algorithm>

namespace mcdist::sender {

parity_planner::parity_planner(std::uint32_t fec_blocks, std::uint32_t max_parity)
    : m_fec_blocks(fec_blocks), m_max_parity(std::max<std::uint32_t>(max_parity, 1)) {}

void parity_planner::schedule(std::uint32_t fb, fec_state& st, std::uint32_t count) {
  if (count == 0) return;
  if (st.pending == 0) m_queue.push_back(fb);
  st.pending += count;
  m_scheduled += count;
}

std::uint32_t parity_planner::nak(std::uint32_t fb, std::uint32_t lack, std::uint32_t seen_seq) {
  if (fb >= m_fec_blocks || lack == 0) return 0;
  auto& st = m_state[fb];
  // Parity sent after the receiver's view is on its way to it.
  const auto in_flight = static_cast<std::uint32_t>(std::count_if(
      st.seqs.begin(), st.seqs.end(), [&](std::uint32_t s) { return seq_after(s, seen_seq); }));
  if (lack <= in_flight + st.pending) return 0;
  const std::uint32_t more = lack - in_flight - st.pending;
  schedule(fb, st, more);
  return more;
}

std::uint32_t parity_planner::raise_sent_to(std::uint32_t fb, std::uint64_t total) {
  if (fb >= m_fec_blocks) return 0;
  auto& st = m_state[fb];
  const std::uint64_t have = std::uint64_t{st.next} + st.pending;
  if (total <= have) return 0;
  const auto more = static_cast<std::uint32_t>(std::min<std::uint64_t>(total - have, UINT32_MAX));
  schedule(fb, st, more);
  return more;
}

void parity_planner::add(std::uint32_t fb, std::uint32_t count) {
  if (fb >= m_fec_blocks) return;
  schedule(fb, m_state[fb], count);
}

std::optional<parity_pick> parity_planner::peek() const {
  if (m_queue.empty()) return std::nullopt;
  const std::uint32_t fb = m_queue.front();
  return parity_pick{fb, m_state.at(fb).next % m_max_parity};
}

void parity_planner::take(const parity_pick& p, std::uint32_t seq) {
  if (m_queue.empty() || m_queue.front() != p.fec_block) return;
  auto& st = m_state[p.fec_block];
  m_queue.pop_front();
  ++st.next;
  --st.pending;
  --m_scheduled;
  ++m_sent;
  if (st.seqs.size() == seq_log_max) st.seqs.erase(st.seqs.begin());
  st.seqs.push_back(seq);
  // Round robin: the FEC block waits behind the others for its next parity block.
  if (st.pending > 0) m_queue.push_back(p.fec_block);
}

std::uint32_t parity_planner::sent_of(std::uint32_t fb) const {
  const auto it = m_state.find(fb);
  return it == m_state.end() ? 0 : it->second.next;
}

}  // namespace mcdist::sender
