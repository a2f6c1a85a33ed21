// sender_session: the unicast fallback (orders, FALLBACK datagrams, unicast outcomes).
#include "sender/core/sender_session_parts.hpp"

namespace mcdist::sender {

using namespace session_detail;

void sender_session::set_unicast_endpoint(transport_kind k, const endpoint& e) {
  m_fallback.set_endpoint(k, e);
}

void sender_session::announce_unicast_start() {
  const auto t = m_fallback.transport();  // no receiver's RTT is known yet
  if (!t) return;
  auto settings = announce_settings_of(m_cfg, m_pacer.rate_bps());
  settings.unicast_start = unicast_start_settings{
      .transport = *t,
      .server = *m_fallback.endpoint_of(*t),
      .connections = m_fallback.connections(*t, m_pacer.rate_bps(), duration::zero())};
  m_announce =
      announcer(settings, m_files,
                m_cfg.announce_interval * (silent() ? silent_announce_interval_factor : 1));
}

bool sender_session::pop_fallback(fallback_order& out) {
  if (m_fallbacks.empty()) return false;
  out = std::move(m_fallbacks.front());
  m_fallbacks.pop_front();
  return true;
}

void sender_session::order_fallback(receiver_state& r, std::string reason, time_point now) {
  if (!r.on_multicast()) return;
  const auto t = m_fallback.transport(r.rep.rtt_valid ? std::optional(r.rep.rtt) : std::nullopt);
  if (!t) return;
  r.rep.path = unicast_path(*t);
  // The multicast group changed: the next NAK-ratio check scans the receivers again.
  m_below_scan_at.reset();
  forget_rate(r, now);  // a receiver on unicast no longer holds the group's rate back
  if (m_cfg.token_source) {
    r.token = m_cfg.token_source();
  } else {
    for (std::size_t i = 0; i < r.token.size(); i += 8) {
      const std::uint64_t v = splitmix64(m_rng_state);
      for (std::size_t k = 0; k < 8; ++k) r.token[i + k] = static_cast<std::uint8_t>(v >> (8 * k));
    }
  }
  r.token.back() |= 1;  // never all zero
  r.rep.fallback_reason = reason;
  r.rep.fallback_at = now - m_start;
  r.rep.fallback_connections = m_fallback.connections(
      *t, m_pacer.rate_bps(), r.rep.rtt_valid ? r.rep.rtt : m_grtt.estimate());
  m_fallbacks.push_back({r.rep.id, *t, r.token, reason});
  track(r, false);
  if (m_log) {
    const auto n = r.rep.fallback_connections;
    m_log->info("session {}: receiver '{}' goes unicast over {} ({}{}): {}", m_cfg.session,
                r.rep.id, *t, connection_count_text(*t, n),
                m_fallback.connections_given(*t) ? "" : ", automatic", reason);
  }
  send_fallback(r, now);
}

void sender_session::send_fallback(receiver_state& r, time_point now) {
  if (r.fallback_orders >= m_cfg.fallback_max_orders) {
    fail_receiver(r,
                  "did not connect for its unicast fallback after " +
                      std::to_string(r.fallback_orders) + " orders",
                  now);
    check_done(now);
    return;
  }
  const transport_kind t = *unicast_transport(r.rep.path);
  const auto& ep = *m_fallback.endpoint_of(t);
  wire::fallback m;
  m.set_receiver_id(r.rep.id);
  m.set_transport(t == transport_kind::tcp           ? wire::fallback::TCP
                  : t == transport_kind::sctp_kernel ? wire::fallback::SCTP_KERNEL
                                                     : wire::fallback::SCTP_UDP);
  // An unspecified address (0.0.0.0) means "where my control datagrams come from".
  const bool unspecified = std::all_of(ep.addr.begin(), ep.addr.begin() + (ep.v6 ? 16 : 4),
                                       [](std::uint8_t b) { return b == 0; });
  if (!unspecified) m.set_address(ep.addr.data(), ep.v6 ? 16 : 4);
  m.set_port(ep.port);
  m.set_token(r.token.data(), r.token.size());
  m.set_connections(r.rep.fallback_connections);
  m.set_reason(r.rep.fallback_reason.substr(0, 200));
  queue_unicast(r.rep.address, encode(wire::msg_type::fallback, m_cfg.session, m));
  ++r.fallback_orders;
  r.next_fallback = now + std::max<duration>(status_interval(), std::chrono::milliseconds(200));
}

void sender_session::on_unicast_started(const std::string& receiver_id, time_point now) {
  receiver_state* r = m_receivers.find(receiver_id);
  if (!r || !r->on_unicast()) return;
  r->unicast_started = true;
  r->fallback_orders = 0;  // it connected: the order limit counts unanswered orders only
  r->last_heard = now;
  track(*r, true);
}

void sender_session::on_unicast_failed(const std::string& receiver_id, const std::string& why,
                                       time_point now) {
  receiver_state* r = m_receivers.find(receiver_id);
  if (!r || !r->on_unicast()) return;
  r->unicast_started = false;
  track(*r, false);
  if (++r->unicast_failures > m_cfg.fallback_max_orders) {
    fail_receiver(*r, "unicast fallback failed: " + why, now);
    check_done(now);
    return;
  }
  if (m_log) {
    m_log->warn("session {}: unicast session of '{}' ended early ({}); it may reconnect",
                m_cfg.session, receiver_id, why);
  }
  r->next_fallback = now;  // order it again: the receiver reconnects and asks for what it lacks
}

}  // namespace mcdist::sender
