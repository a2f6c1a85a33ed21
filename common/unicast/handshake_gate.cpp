#include "common/unicast/handshake_gate.hpp"

#include <algorithm>

namespace mcdist::unicast {

handshake_source source_of(const endpoint& peer) noexcept {
  handshake_source s;
  const auto& a = peer.addr;
  // ::ffff:a.b.c.d (RFC 4291 section 2.5.5.2): an IPv4 peer seen through an IPv6 socket.
  const bool mapped = peer.v6 &&
                      std::all_of(a.begin(), a.begin() + 10, [](auto b) { return b == 0; }) &&
                      a[10] == 0xff && a[11] == 0xff;
  if (mapped) {
    std::copy(a.begin() + 12, a.end(), s.prefix.begin());
  } else if (peer.v6) {
    s.v6 = true;
    std::copy(a.begin(), a.begin() + 8, s.prefix.begin());
  } else {
    std::copy(a.begin(), a.begin() + 4, s.prefix.begin());
  }
  return s;
}

std::string to_string(const handshake_source& s) {
  endpoint e;
  e.v6 = s.v6;
  std::copy(s.prefix.begin(), s.prefix.end(), e.addr.begin());
  return s.v6 ? e.address_string() + "/64" : e.address_string();
}

handshake_gate::handshake_gate(handshake_limits limits) : m_limits(limits) {
  m_limits.total = std::max<std::size_t>(m_limits.total, 1);
}

handshake_gate::admission handshake_gate::admit(const handshake_source& from) {
  admission out;
  const auto mine = m_by_source.find(from);
  const std::size_t held = mine == m_by_source.end() ? 0 : mine->second.size();
  if (m_limits.per_source > 0 && held >= m_limits.per_source) {
    out.outcome = admission::verdict::refused_per_source;
    return out;
  }
  if (pending() >= m_limits.total) {
    // The heaviest source gives up its oldest: a flooding host loses its own slots first, and
    // a site, holding at most the handshakes of one session, is reached only once every source
    // holds as few. At most `total` sources: a linear scan per eviction.
    auto victim = m_by_source.begin();
    for (auto it = m_by_source.begin(); it != m_by_source.end(); ++it) {
      const auto n = it->second.size();
      const auto best = victim->second.size();
      if (n > best || (n == best && *it->second.begin() < *victim->second.begin())) victim = it;
    }
    const ticket oldest = *victim->second.begin();
    out.evicted = oldest;
    out.evicted_source = victim->first;
    out.evicted_source_pending = victim->second.size();
    erase(oldest, victim->first);
  }
  out.id = m_next++;
  m_by_source[from].insert(out.id);
  m_sources_of.emplace(out.id, from);
  return out;
}

bool handshake_gate::release(ticket id) {
  const auto it = m_sources_of.find(id);
  if (it == m_sources_of.end()) return false;
  erase(id, it->second);
  return true;
}

std::size_t handshake_gate::pending(const handshake_source& from) const {
  const auto it = m_by_source.find(from);
  return it == m_by_source.end() ? 0 : it->second.size();
}

void handshake_gate::erase(ticket id, const handshake_source& from) {
  if (const auto s = m_by_source.find(from); s != m_by_source.end()) {
    s->second.erase(id);
    if (s->second.empty()) m_by_source.erase(s);
  }
  m_sources_of.erase(id);
}

}  // namespace mcdist::unicast
