#include "sender/core/relay_gate.hpp"

namespace mcdist::sender {

void relay_gate::on_upstream_marker(std::uint32_t pass, std::uint32_t file, std::uint32_t block,
                                    bool pass_end) noexcept {
  if (pass > 1 || (pass == 1 && pass_end)) {
    m_over = true;
    return;
  }
  if (pass == 1) advance(file, block);
}

gate_answer relay_gate::answer(std::uint32_t file, std::uint32_t block) const {
  if (m_held(file, block)) return gate_answer::send;
  if (m_over || file < m_file || (file == m_file && block < m_block)) return gate_answer::skip;
  return gate_answer::wait;
}

bool relay_gate::parity_ready(const fec::layout& layout, std::uint32_t fec_block) const {
  const std::uint32_t n = layout.sources(fec_block);
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto src = layout.source(fec_block, i);
    if (!m_held(src.file, src.block)) return false;
  }
  return true;
}

}  // namespace mcdist::sender
