#include "receiver/core/unicast_fetch.hpp"

#include "common/error.hpp"
#include "mcdist.pb.h"

#include <cstring>
#include <tuple>

namespace mcdist::receiver {

namespace {

/// The transport a FALLBACK order or an announce's unicast_start names (validated).
transport_kind transport_of(wire::fallback::transport_kind t) noexcept {
  return t == wire::fallback::TCP           ? transport_kind::tcp
         : t == wire::fallback::SCTP_KERNEL ? transport_kind::sctp_kernel
                                            : transport_kind::sctp_udp;
}

}  // namespace

std::optional<unicast_order> unicast_fetch::read_order(const wire::fallback& m,
                                                       const endpoint& from) noexcept {
  if (!wire::fallback::transport_kind_IsValid(m.transport()) || m.port() == 0 || m.port() > 65535 ||
      (!m.address().empty() && m.address().size() != 4 && m.address().size() != 16) ||
      m.connections() > max_connections || m.token().size() != std::tuple_size_v<fallback_token>) {
    return std::nullopt;
  }
  unicast_order o;
  std::memcpy(o.token.data(), m.token().data(), o.token.size());
  o.transport = transport_of(m.transport());
  o.server = from;
  if (!m.address().empty()) {
    o.server.v6 = m.address().size() == 16;
    o.server.addr = {};
    std::memcpy(o.server.addr.data(), m.address().data(), m.address().size());
  }
  o.server.port = static_cast<std::uint16_t>(m.port());
  o.connections = m.connections();
  return o;
}

std::error_code unicast_fetch::read_start(const wire::unicast_start& u, const endpoint& from,
                                          std::optional<unicast_order>& out) noexcept {
  out.reset();
  if (!wire::fallback::transport_kind_IsValid(u.transport()) || u.port() == 0 || u.port() > 65535 ||
      u.connections() > max_connections ||
      (!u.address().empty() && u.address().size() != (from.v6 ? 16u : 4u))) {
    return errc::invalid_field;
  }
  // A server elsewhere is reached when the FALLBACK order names it.
  if (!u.address().empty() &&
      std::memcmp(u.address().data(), from.addr.data(), u.address().size()) != 0) {
    return {};
  }
  unicast_order o;
  o.transport = transport_of(u.transport());
  o.server = from;
  o.server.port = static_cast<std::uint16_t>(u.port());
  o.connections = u.connections();
  out = o;
  return {};
}

std::vector<byte_range> unicast_fetch::wanted(std::span<const file_rx> files,
                                              std::uint32_t block_size) {
  std::vector<byte_range> out;
  for (std::uint32_t f = 0; f < files.size(); ++f) {
    const auto& fr = files[f];
    if (fr.state != file_rx::state_t::receiving) continue;
    for (std::uint32_t b = fr.received.find_clear(0); b < fr.blocks;) {
      std::uint32_t e = fr.received.find_set(b);
      if (e > fr.blocks) e = fr.blocks;
      const std::uint64_t off = std::uint64_t{b} * block_size;
      const std::uint64_t end =
          std::min<std::uint64_t>(std::uint64_t{e} * block_size, fr.entry.size);
      out.push_back({file_index{f}, off, end - off});
      b = fr.received.find_clear(e);
    }
  }
  return out;
}

const unicast_order* unicast_fetch::prepare() noexcept {
  if (!m_start || moved()) return nullptr;
  m_prepared = true;
  return &*m_start;
}

bool unicast_fetch::take_order(const unicast_order& o) noexcept {
  m_path = unicast_path(o.transport);
  m_order = o;
  const bool running = m_active;
  m_active = false;
  return running;
}

bool unicast_fetch::nothing_wanted() noexcept {
  m_partial.clear();
  m_next = time_point::max();  // nothing to fetch (a failed digest re-arms it)
  const bool prepared = m_prepared;
  m_prepared = false;
  return prepared;
}

const unicast_order& unicast_fetch::begin_attempt(duration register_rtt) {
  m_partial.clear();
  ++m_attempts;
  m_active = true;
  m_prepared = false;  // the shell takes the prepared transport, or drops it
  m_order.rtt = register_rtt;
  return m_order;
}

bool unicast_fetch::schedule_retry(time_point now) noexcept {
  if (m_attempts >= max_attempts) return false;
  m_next = now + std::min<duration>(backoff * m_attempts, max_backoff);
  return true;
}

}  // namespace mcdist::receiver
