// daemon: the receiver_sink's unicast calls, routed to unicast_slots with this site's
// credentials for the session (session_keys), and what the clients report to the engine
// (docs/design-notes.md "Unicast fallback").
#include "receiver/io/daemon.hpp"

#include <spdlog/spdlog.h>

namespace mcdist::receiver {

unicast_port daemon::unicast_hooks() {
  unicast_port port;
  port.data = [this](session_id s, file_index f, std::uint64_t off, std::span<const std::byte> b,
                     time_point at) {
    m_engine->on_unicast_data(s, f, off, b, at);
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
