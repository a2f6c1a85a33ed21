// daemon: the unicast fallback's clients, one per session moved to unicast (opened ahead of the
// FALLBACK order in a session served over unicast from the start), their options, credentials
// and events (docs/design-notes.md "Unicast fallback").
#include "receiver/io/daemon.hpp"

#include "common/log_limit.hpp"
#include "common/units.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace mcdist::receiver {

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
    m_store->flush();
    check_unicast_backpressure();
  };
  ev.on_complete = [this, s, gen] {
    const auto it = m_unicast.find(s);
    if (it == m_unicast.end() || it->second.generation != gen) return;
    const auto& slot = it->second;
    if (slot.first) {
      const double secs = std::chrono::duration<double>(slot.last - *slot.first).count();
      m_log->info(
          "session {}: unicast transfer done: {} bytes in {:.3f} s from first to last "
          "byte ({})",
          s, slot.bytes, secs,
          format_rate(secs > 0 ? static_cast<double>(slot.bytes) * 8 / secs : 0));
    }
    it->second.client->close();
  };
  ev.on_closed = [this, s, gen](const std::error_code& ec, const std::string& detail) {
    const auto it = m_unicast.find(s);
    if (it == m_unicast.end() || it->second.generation != gen) return;
    if (ec == make_error_code(errc::unauthenticated)) {
      // A sealed frame that did not open: someone on the path altered or injected bytes. The
      // connection is gone; the engine retries as after any failed connection.
      if (worth_logging(++m_unicast_unsealed))
        m_log->warn("session {}: unicast: a sealed frame did not open ({} so far): {}", s,
                    m_unicast_unsealed, detail);
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
      const auto it2 = m_unicast.find(s);
      if (it2 == m_unicast.end() || it2->second.generation != gen) return;
      const bool prepared = it2->second.prepared;
      m_unicast.erase(it2);
      // A prepared client was never the engine's: it has nothing to retry.
      if (!prepared) {
        m_engine->on_unicast_closed(s, ok, detail, from_steady(std::chrono::steady_clock::now()));
      }
      service();
    });
  };
  return ev;
}

void daemon::prepare_unicast(session_id s, const unicast_order& order) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  stop_unicast(s);
  auto co = unicast_options(s, order);
  co.await_credentials = true;
  const std::uint64_t gen = ++m_unicast_generation;
  auto c = unicast::make_client(m_io, co, unicast_events(s, gen));
  c->start();
  unicast_slot slot{std::move(c), gen, false};
  slot.prepared = true;
  slot.prepared_for = order;
  slot.prepared_at = std::chrono::steady_clock::now();
  m_unicast[s] = std::move(slot);
  m_log->debug(
      "session {}: served over unicast from the start: opening {} to {} while "
      "registering",
      s, to_string(order.transport), order.server.to_string());
}

void daemon::start_unicast(session_id s, const unicast_order& order,
                           std::vector<byte_range> wanted) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  const auto creds = unicast_credentials(s, order);
  if (!creds) {
    stop_unicast(s);
    return;
  }
  std::vector<mcdist::byte_range> req;
  req.reserve(wanted.size());
  std::uint64_t bytes = 0;
  for (const auto& w : wanted) {
    req.push_back({w.file, w.offset, w.length});
    bytes += w.length;
  }
  const auto it = m_unicast.find(s);
  const bool same_place = it != m_unicast.end() && it->second.prepared &&
                          it->second.prepared_for.transport == order.transport &&
                          it->second.prepared_for.server == order.server;
  // Both counts as the client takes them (the engine accepts orders of up to 64).
  const std::size_t had = same_place ? unicast::client_connection_count(
                                           order.transport, it->second.prepared_for.connections)
                                     : 0;
  const std::size_t wanted_count =
      unicast::client_connection_count(order.transport, order.connections);
  // The announce's count was computed before any RTT was known; beyond 200 ms the order asks
  // for more (fallback_policy::connections). No hello has left yet, so the prepared client
  // grows to it and keeps what is up or on its way. It cannot shrink: fewer means afresh.
  const bool adopt = same_place && (had == wanted_count ||
                                    (wanted_count > had && it->second.client->grow(wanted_count)));
  if (adopt) {
    // The transport opened while this site registered (session_params.unicast_start): the
    // hello and the requests go on it now.
    auto& slot = it->second;
    // Requests first: the hello goes ahead of them, and over SCTP all of them with the COOKIE
    // ECHO when the INIT ACK has not arrived yet.
    if (slot.client->request(req)) {
      // It failed a moment ago (its end is still on its way): connect afresh.
      connect_unicast(s, order, req, *creds);
      return;
    }
    slot.prepared = false;
    slot.client->set_credentials(*creds);
    m_log->info("session {}: fetching {} ranges, {} over the {} opened to {} while registering{}",
                s, req.size(), format_bytes(static_cast<double>(bytes)), to_string(order.transport),
                order.server.to_string(),
                had == wanted_count
                    ? std::string()
                    : fmt::format(", grown from {} to {}", had,
                                  connection_count_text(order.transport, wanted_count)));
    if (!slot.client->established()) {
      // The handshake left with REGISTER, R ago (the registration round trip, or more when
      // REGISTER was sent again). Not up within 3R more (RFC 6298 section 2.2's RTO after one
      // sample), a packet of it was lost and the prepared client would wait out RTO.Initial
      // (1 s, RFC 9260 section 16; a SYN's 1 s, RFC 6298): connect afresh with the RTO the
      // order's round trip gives, as without the head start.
      const auto r = std::chrono::steady_clock::now() - slot.prepared_at;
      const auto wait = std::max<std::chrono::steady_clock::duration>(
          r * 3, std::chrono::milliseconds(unicast::usrsctp_tuning{}.rto_min_ms));
      slot.hedge = std::make_unique<boost::asio::steady_timer>(m_io, wait);
      slot.hedge->async_wait([this, s, gen = slot.generation, order, req = std::move(req),
                              c = *creds](const boost::system::error_code& ec) {
        if (ec || m_stopping) return;
        const auto it2 = m_unicast.find(s);
        if (it2 == m_unicast.end() || it2->second.generation != gen ||
            it2->second.client->established()) {
          return;
        }
        m_log->debug(
            "session {}: unicast: the handshake begun while registering is not up; "
            "connecting afresh",
            s);
        connect_unicast(s, order, req, c);
      });
    }
    return;
  }
  connect_unicast(s, order, req, *creds);
}

void daemon::connect_unicast(session_id s, const unicast_order& order,
                             const std::vector<mcdist::byte_range>& req,
                             const unicast::client_credentials& creds) {
  stop_unicast(s);
  auto co = unicast_options(s, order);
  co.token = creds.token;
  co.proof_key = creds.proof_key;
  co.seal_records = creds.seal_records;
  const std::uint64_t gen = ++m_unicast_generation;
  auto c = unicast::make_client(m_io, co, unicast_events(s, gen));
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
  m_unicast[s] = unicast_slot{std::move(c), gen, false};
}

void daemon::stop_unicast(session_id s) { m_unicast.erase(s); }

}  // namespace mcdist::receiver
