#include "sender/core/digest_windows.hpp"

#include <algorithm>

namespace mcdist::sender {

digest_windows::digest_windows(std::size_t window_size, std::uint32_t ip_udp_bytes)
    : m_window(std::clamp<std::size_t>(window_size, 1, block_digests::max_window)),
      m_ip_udp_bytes(ip_udp_bytes) {}

void digest_windows::start_pass() {
  m_planned.clear();
  m_pass_planned = false;
}

bool digest_windows::wants_more() const noexcept {
  if (m_pass_planned) return false;
  return m_planned.size() < 1 + digest_windows_ahead ||
         m_planned.back().datagrams.size() < m_window;
}

void digest_windows::plan(const data_send& d) {
  if (m_planned.empty() || m_planned.back().datagrams.size() >= m_window) {
    m_planned.emplace_back();
    m_planned.back().datagrams.reserve(m_window);
    ++m_windows_planned;
  }
  m_planned.back().datagrams.push_back(d);
}

const data_send* digest_windows::peek() const noexcept {
  if (m_planned.empty()) return nullptr;
  const window& w = m_planned.front();
  return &w.datagrams[w.released];
}

std::uint64_t digest_windows::queue(window& w, bool first) {
  digest_window_send s;
  s.first_seq = w.datagrams.front().seq;
  s.count = static_cast<std::uint32_t>(w.datagrams.size());
  s.first_copy = first;
  if (first) {
    s.datagrams = w.datagrams;
    w.first_queued = true;
  }
  std::uint64_t bytes = 0;
  for (std::size_t offset = 0; offset < s.count; offset += block_digests::digests_per_chunk) {
    bytes += block_digests::chunk_wire_bytes(s.count, offset) + m_ip_udp_bytes;
    ++m_chunks;
  }
  m_bytes += bytes;
  m_sends.push_back(std::move(s));
  return bytes;
}

std::uint64_t digest_windows::prepare() {
  if (m_planned.empty()) return 0;
  window& w = m_planned.front();
  if (w.started) return 0;
  w.started = true;
  std::uint64_t bytes = 0;
  if (!w.first_queued) bytes += queue(w, true);  // the first window of a pass
  if (m_planned.size() > 1 && !m_planned[1].first_queued) bytes += queue(m_planned[1], true);
  bytes += queue(w, false);
  return bytes;
}

void digest_windows::release() {
  if (m_planned.empty()) return;
  window& w = m_planned.front();
  if (++w.released == w.datagrams.size()) m_planned.pop_front();
}

bool digest_windows::pop(digest_window_send& out) {
  if (m_sends.empty()) return false;
  out = std::move(m_sends.front());
  m_sends.pop_front();
  return true;
}

}  // namespace mcdist::sender
