#include "receiver/io/unicast_slots.hpp"

#include "common/log_limit.hpp"
#include "common/units.hpp"

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace mcdist::receiver {

unicast_slots::unicast_slots(boost::asio::io_context& io, settings s,
                             std::shared_ptr<spdlog::logger> log, unicast_port port)
    : m_io(io), m_settings(std::move(s)), m_log(std::move(log)), m_port(std::move(port)),
      m_poll(io) {}

unicast_slots::~unicast_slots() = default;

void unicast_slots::close_all() {
  m_stopping = true;
  m_slots.clear();
  m_poll.cancel();
}

unicast::client_options unicast_slots::options(session_id s, const unicast_order& order) const {
  unicast::client_options co;
  co.kind = order.transport;
  co.server = order.server;
  co.session = s;
  co.receiver_id = m_settings.receiver_id;
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
  if (m_settings.local) co.local = *m_settings.local;
  return co;
}

unicast::client_events unicast_slots::events(session_id s, std::uint64_t gen) {
  unicast::client_events ev;
  ev.on_data = [this, s, gen](file_index f, std::uint64_t off, std::span<const std::byte> b) {
    MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
    const auto t = std::chrono::steady_clock::now();
    if (const auto it = m_slots.find(s); it != m_slots.end() && it->second.generation == gen) {
      if (!it->second.first) it->second.first = t;
      it->second.last = t;
      it->second.bytes += b.size();
    }
    m_port.data(s, f, off, b, from_steady(t));
    check_backpressure();
  };
  ev.on_complete = [this, s, gen] {
    const auto it = m_slots.find(s);
    if (it == m_slots.end() || it->second.generation != gen) return;
    const auto& sl = it->second;
    if (sl.first) {
      const double secs = std::chrono::duration<double>(sl.last - *sl.first).count();
      m_log->info(
          "session {}: unicast transfer done: {} bytes in {:.3f} s from first to last "
          "byte ({})",
          s, sl.bytes, secs, format_rate(secs > 0 ? static_cast<double>(sl.bytes) * 8 / secs : 0));
    }
    it->second.client->close();
  };
  ev.on_closed = [this, s, gen](const std::error_code& ec, const std::string& detail) {
    const auto it = m_slots.find(s);
    if (it == m_slots.end() || it->second.generation != gen) return;
    if (ec == make_error_code(errc::unauthenticated)) {
      // A sealed frame that did not open: someone on the path altered or injected bytes. The
      // connection is gone; the engine retries as after any failed connection.
      if (worth_logging(++m_unsealed))
        m_log->warn("session {}: unicast: a sealed frame did not open ({} so far): {}", s,
                    m_unsealed, detail);
    } else if (ec && it->second.prepared) {
      // Opened ahead of the FALLBACK order: the order connects afresh; nothing is lost.
      m_log->debug("session {}: unicast: the transport opened while registering failed: {}", s,
                   detail);
    } else if (ec) {
      m_log->warn("session {}: unicast: {}", s, detail);
    }
    // The client may not be destroyed inside its own last callback's caller frame safely for
    // every transport: let the io_context unwind first.
    boost::asio::post(m_io, [this, s, gen, ok = !ec, detail] {
      const auto it2 = m_slots.find(s);
      if (it2 == m_slots.end() || it2->second.generation != gen) return;
      const bool prepared = it2->second.prepared;
      m_slots.erase(it2);
      // A prepared client was never the engine's: it has nothing to retry.
      if (!prepared) {
        m_port.closed(s, ok, detail, from_steady(std::chrono::steady_clock::now()));
      }
      m_port.service();
    });
  };
  return ev;
}

void unicast_slots::prepare(session_id s, const unicast_order& order) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  stop(s);
  auto co = options(s, order);
  co.await_credentials = true;
  const std::uint64_t gen = ++m_generation;
  auto c = unicast::make_client(m_io, co, events(s, gen));
  c->start();
  slot sl{std::move(c), gen, false};
  sl.prepared = true;
  sl.prepared_for = order;
  sl.prepared_at = std::chrono::steady_clock::now();
  m_slots[s] = std::move(sl);
  m_log->debug(
      "session {}: served over unicast from the start: opening {} to {} while "
      "registering",
      s, to_string(order.transport), order.server.to_string());
}

void unicast_slots::start(session_id s, const unicast_order& order,
                          const std::vector<byte_range>& wanted,
                          const unicast::client_credentials& creds) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  std::vector<mcdist::byte_range> req;
  req.reserve(wanted.size());
  for (const auto& w : wanted) req.push_back({w.file, w.offset, w.length});
  if (!adopt(s, order, req, creds)) connect(s, order, req, creds);
}

bool unicast_slots::adopt(session_id s, const unicast_order& order,
                          std::vector<mcdist::byte_range>& req,
                          const unicast::client_credentials& creds) {
  const auto it = m_slots.find(s);
  const bool same_place = it != m_slots.end() && it->second.prepared &&
                          it->second.prepared_for.transport == order.transport &&
                          it->second.prepared_for.server == order.server;
  if (!same_place) return false;
  // Both counts as the client takes them (the engine accepts orders of up to 64).
  const std::size_t had =
      unicast::client_connection_count(order.transport, it->second.prepared_for.connections);
  const std::size_t wanted_count =
      unicast::client_connection_count(order.transport, order.connections);
  // The announce's count was computed before any RTT was known; beyond 200 ms the order asks
  // for more (fallback_policy::connections). No hello has left yet, so the prepared client
  // grows to it and keeps what is up or on its way. It cannot shrink: fewer means afresh.
  if (had != wanted_count && !(wanted_count > had && it->second.client->grow(wanted_count))) {
    return false;
  }
  // The transport opened while this site registered (session_params.unicast_start): the
  // hello and the requests go on it now.
  auto& sl = it->second;
  // Requests first: the hello goes ahead of them, and over SCTP all of them with the COOKIE
  // ECHO when the INIT ACK has not arrived yet. A failure: it failed a moment ago (its end is
  // still on its way), so the order connects afresh.
  if (sl.client->request(req)) return false;
  sl.prepared = false;
  sl.client->set_credentials(creds);
  std::uint64_t bytes = 0;
  for (const auto& r : req) bytes += r.length;
  m_log->info("session {}: fetching {} ranges, {} over the {} opened to {} while registering{}", s,
              req.size(), format_bytes(static_cast<double>(bytes)), to_string(order.transport),
              order.server.to_string(),
              had == wanted_count
                  ? std::string()
                  : fmt::format(", grown from {} to {}", had,
                                connection_count_text(order.transport, wanted_count)));
  if (sl.client->established()) return true;
  // The handshake left with REGISTER, R ago (the registration round trip, or more when
  // REGISTER was sent again). Not up within 3R more (RFC 6298 section 2.2's RTO after one
  // sample), a packet of it was lost and the prepared client would wait out RTO.Initial
  // (1 s, RFC 9260 section 16; a SYN's 1 s, RFC 6298): connect afresh with the RTO the
  // order's round trip gives, as without the head start.
  const auto r = std::chrono::steady_clock::now() - sl.prepared_at;
  const auto wait = std::max<std::chrono::steady_clock::duration>(
      r * 3, std::chrono::milliseconds(unicast::usrsctp_tuning{}.rto_min_ms));
  sl.hedge = std::make_unique<boost::asio::steady_timer>(m_io, wait);
  sl.hedge->async_wait([this, s, gen = sl.generation, order, req = std::move(req),
                        c = creds](const boost::system::error_code& ec) {
    if (ec || m_stopping) return;
    const auto it2 = m_slots.find(s);
    if (it2 == m_slots.end() || it2->second.generation != gen ||
        it2->second.client->established()) {
      return;
    }
    m_log->debug(
        "session {}: unicast: the handshake begun while registering is not up; "
        "connecting afresh",
        s);
    connect(s, order, req, c);
  });
  return true;
}

void unicast_slots::connect(session_id s, const unicast_order& order,
                            const std::vector<mcdist::byte_range>& req,
                            const unicast::client_credentials& creds) {
  stop(s);
  auto co = options(s, order);
  co.token = creds.token;
  co.proof_key = creds.proof_key;
  co.seal_records = creds.seal_records;
  const std::uint64_t gen = ++m_generation;
  auto c = unicast::make_client(m_io, co, events(s, gen));
  if (auto ec = c->request(req)) {
    m_log->error("session {}: unicast request refused locally: {}", s, ec.message());
    return;
  }
  std::uint64_t bytes = 0;
  for (const auto& r : req) bytes += r.length;
  m_log->info("session {}: fetching {} ranges, {} over {} from {}", s, req.size(),
              format_bytes(static_cast<double>(bytes)),
              co.kind == unicast::transport_kind::tcp ? "tcp" : "sctp", co.server.to_string());
  c->start();
  m_slots[s] = slot{std::move(c), gen, false};
}

void unicast_slots::check_backpressure() {
  // Pause clients while the storage pool is nearly full; the transports' receive windows then
  // hold the sender back (the back-pressure the multicast sockets get too, without drops).
  bool any_paused = false;
  const bool full = m_port.pool_room() < m_settings.min_pool_room;
  for (auto& [s, sl] : m_slots) {
    if (full && !sl.paused) {
      sl.paused = true;
      sl.client->set_paused(true);
    }
    any_paused = any_paused || sl.paused;
  }
  if (!any_paused || m_polling) return;
  m_polling = true;
  m_poll.expires_after(m_settings.poll);
  m_poll.async_wait([this](const boost::system::error_code& ec) {
    m_polling = false;
    if (ec || m_stopping) return;
    if (m_port.pool_room() >= 4 * m_settings.min_pool_room) {
      for (auto& [s, sl] : m_slots) {
        if (sl.paused) {
          sl.paused = false;
          sl.client->set_paused(false);
        }
      }
    }
    check_backpressure();  // looks again while anything is still paused
  });
}

}  // namespace mcdist::receiver
