#include "receiver/core/fec_tracker.hpp"

#include "common/fec/fec.hpp"

#include <algorithm>

namespace mcdist::receiver {

fec_tracker::fec_tracker(fec::layout layout, std::uint32_t max_parity)
    : m_layout(std::move(layout)),
      m_max_parity(std::min<std::uint32_t>(max_parity, fec::max_blocks_gf16)),
      m_sources(m_layout.fec_blocks(), 0) {}

void fec_tracker::add_source(std::uint32_t fb) noexcept {
  if (fb < m_sources.size() && m_sources[fb] < m_layout.sources(fb)) ++m_sources[fb];
}

bool fec_tracker::add_parity(std::uint32_t fb, std::uint32_t index) {
  if (fb >= m_sources.size() || index >= m_max_parity) return false;
  if (m_sources[fb] >= m_layout.sources(fb)) return false;  // complete
  if (m_parity.size() >= max_parity_states && !m_parity.count(fb)) return false;
  auto& st = m_parity[fb];
  if (st.decoding || st.explicit_only) return false;
  const auto at = std::lower_bound(st.held.begin(), st.held.end(), index);
  if (at != st.held.end() && *at == index) return false;
  st.held.insert(at, index);
  return true;
}

std::uint32_t fec_tracker::parity_held(std::uint32_t fb) const noexcept {
  const auto it = m_parity.find(fb);
  return it == m_parity.end() ? 0 : static_cast<std::uint32_t>(it->second.held.size());
}

std::vector<std::uint32_t> fec_tracker::parity_indexes(std::uint32_t fb) const {
  const auto it = m_parity.find(fb);
  if (it == m_parity.end()) return {};
  return it->second.held;
}

std::uint32_t fec_tracker::lack(std::uint32_t fb, std::uint32_t sent) const noexcept {
  if (fb >= m_sources.size()) return 0;
  const std::uint32_t have = m_sources[fb] + parity_held(fb);
  const std::uint32_t due = std::min(sent, m_layout.sources(fb));
  return due > have ? due - have : 0;
}

bool fec_tracker::too_costly(std::uint32_t fb) const noexcept {
  const std::uint64_t n = m_layout.sources(fb);
  return (n - std::min<std::uint64_t>(n, m_sources[fb])) * n > fec::max_decode_work;
}

bool fec_tracker::by_count(std::uint32_t fb, std::uint32_t lack) const noexcept {
  if (explicit_only(fb) || too_costly(fb)) return false;
  return lack <= m_max_parity - parity_held(fb);
}

bool fec_tracker::decodable(std::uint32_t fb) const noexcept {
  if (fb >= m_sources.size()) return false;
  const auto it = m_parity.find(fb);
  if (it == m_parity.end() || it->second.decoding || it->second.explicit_only) return false;
  const std::uint32_t n = m_layout.sources(fb);
  return m_sources[fb] < n && m_sources[fb] + it->second.held.size() >= n && !too_costly(fb);
}

void fec_tracker::start_decode(std::uint32_t fb) { m_parity[fb].decoding = true; }

bool fec_tracker::decoding(std::uint32_t fb) const noexcept {
  const auto it = m_parity.find(fb);
  return it != m_parity.end() && it->second.decoding;
}

void fec_tracker::decoded(std::uint32_t fb) {
  if (fb >= m_sources.size()) return;
  m_sources[fb] = static_cast<std::uint16_t>(m_layout.sources(fb));
  m_parity.erase(fb);
}

void fec_tracker::set_explicit_only(std::uint32_t fb) {
  if (m_parity.size() >= max_parity_states && !m_parity.count(fb)) return;
  auto& st = m_parity[fb];
  st.held.clear();
  st.held.shrink_to_fit();
  st.decoding = false;
  st.explicit_only = true;
}

bool fec_tracker::explicit_only(std::uint32_t fb) const noexcept {
  const auto it = m_parity.find(fb);
  return it != m_parity.end() && it->second.explicit_only;
}

}  // namespace mcdist::receiver
