// daemon: the receiver_sink's unicast calls, routed to unicast_slots with this site's
// credentials for the session (session_keys), and what the clients report to the engine
// (docs/design-notes.md "Unicast fallback").
#include "receiver/io/daemon.hpp"

#include <spdlog/spdlog.h>

namespace mcdist::receiver {

<<<<<<< HEAD
unicast::client_options daemon::unicast_options(session_id s, const unicast_order& order) const {
  unicast::client_options co;
  co.kind = order.transport;
  co.server = order.server;
  co.session = s;
  co.receiver_id = m_cfg.id;
  co.tcp_connections = order.connections;
  co.sctp_associations = order.connections;
  if (order.rtt > decltype(order.rtt)::zero()) {
    // RFC 6298 section 2.2 after one sample R: RTO = 3R, within the stack's RTO.Min and
    // RTO.Initial (common/unicast/io/sctp_assoc.hpp).
    const auto& t = co.usrsctp;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(order.rtt * 3).count();
    co.sctp.initial_rto_ms =
        static_cast<std::uint32_t>(std::clamp<std::int64_t>(ms, t.rto_min_ms, t.rto_initial_ms));
  }
  const bool any = std::all_of(m_interface.address.addr.begin(),
                               m_interface.address.addr.begin() + (m_interface.address.v6 ? 16 : 4),
                               [](std::uint8_t b) { return b == 0; });
  if (!any) co.local = m_interface.address;
  return co;
}

std::optional<unicast::client_credentials> daemon::unicast_credentials(session_id s,
                                                                       const unicast_order& order) {
  unicast::client_credentials c;
  c.token = order.token;
  // A signed session's connections prove this site's key over the server's challenge.
  if (auto* keys = keys_of(s)) {
    c.proof_key = keys->fallback_key(s);
    // An encrypted session's fallback is sealed both ways (common/unicast/record_seal.hpp).
    // Decided from what this site knows of the session, never from the FALLBACK order.
    c.seal_records = keys->encrypted(s);
    if (c.seal_records && !c.proof_key) {
      m_log->warn(
          "session {}: encrypted, but no fallback key yet; not connecting in the "
          "clear",
          s);
      return std::nullopt;
    }
  }
  return c;
}

unicast::client_events daemon::unicast_events(session_id s, std::uint64_t gen) {
  unicast::client_events ev;
  ev.on_data = [this, s, gen](file_index f, std::uint64_t off, std::span<const std::byte> b) {
    MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
    const auto t = std::chrono::steady_clock::now();
    if (const auto it = m_unicast.find(s); it != m_unicast.end() && it->second.generation == gen) {
      if (!it->second.first) it->second.first = t;
      it->second.last = t;
      it->second.bytes += b.size();
    }
    m_engine->on_unicast_data(s, f, off, b, from_steady(t));
=======
unicast_port daemon::unicast_hooks() {
  unicast_port port;
  port.data = [this](session_id s, file_index f, std::uint64_t off, std::span<const std::byte> b,
                     time_point at) {
    m_engine->on_unicast_data(s, f, off, b, at);
>>>>>>> rxdaemon
    m_store->flush();
  };
  port.closed = [this](session_id s, bool ok, const std::string& detail, time_point at) {
    m_engine->on_unicast_closed(s, ok, detail, at);
  };
  port.service = [this] { service(); };
  port.pool_room = [this] { return m_store->free_bytes(); };
  return port;
}

void daemon::prepare_unicast(session_id s, const unicast_order& order) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  m_unicast.prepare(s, order);
}

void daemon::start_unicast(session_id s, const unicast_order& order,
                           std::vector<byte_range> wanted) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  const auto creds = m_keys->unicast_credentials(s, order);
  if (!creds) {
    m_unicast.stop(s);
    return;
  }
  m_unicast.start(s, order, wanted, *creds);
}

void daemon::stop_unicast(session_id s) { m_unicast.stop(s); }

}  // namespace mcdist::receiver
