#include "common/unicast/io/usrsctp_stack.hpp"

#include "common/unicast/error.hpp"
#include "common/unicast/sctp_packet.hpp"

#include <spdlog/spdlog.h>
#include <usrsctp.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <span>

#include <netinet/in.h>

namespace mcdist::unicast {

namespace {

/// The live stack, if any (usrsctp's conn_output is a plain C callback without context).
usrsctp_stack* g_stack = nullptr;
std::weak_ptr<usrsctp_stack> g_weak;
/// usrsctp_init_nothreads has run and usrsctp_finish has not succeeded since.
bool g_initialized = false;
/// Next AF_CONN address token. Starts high and steps by 16 so no token is ever NULL or looks
/// like a small integer; never reused within the process.
std::uintptr_t g_next_address = 0x10000;

void apply_tuning(const usrsctp_tuning& t) {
  usrsctp_sysctl_set_sctp_rto_min_default(t.rto_min_ms);
  usrsctp_sysctl_set_sctp_rto_initial_default(t.rto_initial_ms);
  usrsctp_sysctl_set_sctp_rto_max_default(t.rto_max_ms);
  usrsctp_sysctl_set_sctp_init_rto_max_default(t.rto_max_ms);
  usrsctp_sysctl_set_sctp_delayed_sack_time_default(t.delayed_sack_ms);
  usrsctp_sysctl_set_sctp_sack_freq_default(t.sack_freq);
  // RFC 7053: the sender marks the last chunk before it runs out of window or data with the
  // I bit, and the receiver SACKs it at once instead of after the delayed-SACK timer.
  usrsctp_sysctl_set_sctp_enable_sack_immediately(1);
  usrsctp_sysctl_set_sctp_initial_cwnd(t.initial_cwnd_mtus);
  usrsctp_sysctl_set_sctp_max_burst_default(t.max_burst);
  usrsctp_sysctl_set_sctp_max_chunks_on_queue(t.max_chunks_on_queue);
  usrsctp_sysctl_set_sctp_default_cc_module(t.cc_module);
  // Not needed between two mcdist programs, and each is attack surface (RFC 6951 peers are
  // untrusted): address reconfiguration, stream reset, packet-drop reports.
  usrsctp_sysctl_set_sctp_asconf_enable(0);
  usrsctp_sysctl_set_sctp_auto_asconf(0);
  usrsctp_sysctl_set_sctp_pktdrop_enable(0);
  if (t.crc32c) {
    usrsctp_disable_crc32c_offload();
  } else {
    usrsctp_enable_crc32c_offload();
  }
}

}  // namespace

std::shared_ptr<usrsctp_stack> usrsctp_stack::acquire(boost::asio::io_context& io,
                                                      const usrsctp_tuning& tuning,
                                                      std::error_code& ec) {
  ec.clear();
  if (auto live = g_weak.lock()) {
    if (&live->m_io != &io) {
      ec = error::usrsctp_unavailable;
      return nullptr;
    }
    return live;
  }
  if (!g_initialized) {
    usrsctp_init_nothreads(0, &usrsctp_stack::conn_output, nullptr);
    g_initialized = true;
  }
  apply_tuning(tuning);
  std::shared_ptr<usrsctp_stack> s(new usrsctp_stack(io, tuning));
  g_weak = s;
  g_stack = s.get();
  s->do_tick();
  return s;
}

usrsctp_stack::usrsctp_stack(boost::asio::io_context& io, const usrsctp_tuning& tuning)
    : m_io(io), m_tuning(tuning), m_timer(io), m_last_tick(std::chrono::steady_clock::now()) {}

usrsctp_stack::~usrsctp_stack() {
  *m_alive = false;
  m_timer.cancel();
  for (auto& [addr, peer] : m_routes) usrsctp_deregister_address(addr);
  m_routes.clear();
  // Closed sockets are freed by usrsctp's timers (the endpoint-kill timer); give them a few
  // virtual seconds so usrsctp_finish finds nothing left and frees its memory.
  for (int i = 0; i < 50 && g_initialized; ++i) {
    if (usrsctp_finish() == 0) {
      g_initialized = false;
      break;
    }
    usrsctp_handle_timers(100);
  }
  if (g_initialized)
    spdlog::debug("usrsctp: sockets still open at release; stack kept initialized");
  if (g_stack == this) g_stack = nullptr;
}

void* usrsctp_stack::add_address(const conn_route& route) {
  void* addr = reinterpret_cast<void*>(g_next_address);
  g_next_address += 16;
  auto [it, inserted] = m_routes.emplace(addr, peer_state{route, {}, {}, false, 0});
  join_site(addr, it->second);
  usrsctp_register_address(addr);
  return addr;
}

void usrsctp_stack::update_route(void* addr, const conn_route& route) {
  if (auto it = m_routes.find(addr); it != m_routes.end()) {
    leave_site(addr, it->second);
    it->second.route = route;
    join_site(addr, it->second);
  }
}

void usrsctp_stack::remove_address(void* addr) {
  if (auto it = m_routes.find(addr); it != m_routes.end()) {
    leave_site(addr, it->second);
    m_routes.erase(it);
    usrsctp_deregister_address(addr);
  }
}

std::string usrsctp_stack::site_key(const conn_route& route) {
  std::string key = std::to_string(route.fd);
  if (route.to_len == 0) return key;  // a connected socket: its own path
  key += '/';
  if (route.to.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(route.to).sin_addr;
    key.append(reinterpret_cast<const char*>(&a), sizeof a);
  } else if (route.to.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(route.to).sin6_addr;
    key.append(reinterpret_cast<const char*>(&a), sizeof a);
  }
  return key;
}

void usrsctp_stack::join_site(void* addr, peer_state& peer) {
  if (!m_tuning.flight_cap) return;
  peer.site = site_key(peer.route);
  m_sites[peer.site].members.push_back(addr);
}

void usrsctp_stack::leave_site(void* addr, peer_state& peer) {
  const auto it = m_sites.find(peer.site);
  if (it == m_sites.end()) return;
  site_state& site = it->second;
  std::erase(site.members, addr);
  std::erase_if(site.held, [&](const held_packet& h) {
    if (h.addr != addr) return false;
    site.held_bytes -= h.bytes.size();
    return true;
  });
  if (site.members.empty()) m_sites.erase(it);
}

std::size_t usrsctp_stack::in_flight(const site_state& site) const {
  std::size_t n = 0;
  for (void* a : site.members)
    if (const auto it = m_routes.find(a); it != m_routes.end())
      n += it->second.probe.in_flight_bytes();
  return n;
}

namespace {

/// At trace level, one line per SCTP packet of an association: direction, steady-clock time
/// (s), address token, length, the TSNs of its DATA and the acks of its SACK (the record the
/// loss-repair measurements in docs/benchmarks.md were read from).
void trace_packet(const char* direction, void* addr, std::span<const std::byte> packet) {
  if (!spdlog::should_log(spdlog::level::trace)) return;
  sctp_wire::packet_summary p;
  sctp_wire::summarize(packet, p);
  std::string gaps;
  for (std::size_t i = 0; i < p.gap_count; ++i)
    gaps += fmt::format(" {}-{}", p.gaps[i].first, p.gaps[i].last);
  spdlog::trace(
      "usrsctp packet {} {:.4f} {} {} bytes, DATA {} TSN {}-{}, SACK {} cum {} gaps{}", direction,
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
      addr, packet.size(), p.data, p.first_tsn, p.last_tsn, p.sack, p.cum_tsn, gaps);
}

}  // namespace

void usrsctp_stack::input(void* addr, const void* data, std::size_t length) {
  const std::span packet(static_cast<const std::byte*>(data), length);
  trace_packet("in", addr, packet);
  ++m_counters.packets_in;
  // Before usrsctp reads it: what usrsctp sends in reply (a fast retransmission) is then seen
  // against this SACK. The entry may be gone after usrsctp_conninput (an upcall may close the
  // association), so nothing of it is kept across the call.
  const auto now = std::chrono::steady_clock::now();
  std::string site;
  if (m_tuning.loss_repair || m_tuning.flight_cap) {
    if (auto it = m_routes.find(addr); it != m_routes.end()) {
      sctp_loss_probe& probe = it->second.probe;
      const std::uint64_t delivered = probe.delivered_bytes();
      const std::uint64_t samples = probe.rtt_samples();
      probe.on_received(packet, now);
      if (const auto s = m_sites.find(it->second.site); s != m_sites.end()) {
        site = it->second.site;
        site_state& st = s->second;
        if (probe.rtt_samples() != samples) st.cap.on_rtt(probe.latest_rtt(), now);
        st.cap.on_delivered(probe.delivered_bytes() - delivered, st.bound || !st.held.empty(), now);
        st.bound = false;
      }
    }
  }
  usrsctp_conninput(addr, data, length, 0);
  // What the SACK acknowledged leaves room under the cap (the entry may be gone by now).
  if (!site.empty()) {
    if (const auto s = m_sites.find(site); s != m_sites.end()) release(s->second, now);
  }
}

bool usrsctp_stack::send_packet(const conn_route& r, const void* data, std::size_t length) {
  ssize_t n;
  if (r.to_len == 0) {
    n = ::send(r.fd, data, length, MSG_DONTWAIT | MSG_NOSIGNAL);
  } else {
    n = ::sendto(r.fd, data, length, MSG_DONTWAIT | MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&r.to), r.to_len);
  }
  if (n < 0) {
    // A full socket buffer is a queue drop, as in a router: SCTP retransmits. Other errors
    // (ECONNREFUSED from an earlier ICMP) surface on the socket's receive side too.
    ++m_counters.send_dropped;
    return false;
  }
  ++m_counters.packets_out;
  return true;
}

int usrsctp_stack::conn_output(void* addr, void* buffer, std::size_t length, std::uint8_t,
                               std::uint8_t) {
  usrsctp_stack* s = g_stack;
  if (s == nullptr) return 0;
  const auto it = s->m_routes.find(addr);
  if (it == s->m_routes.end()) {
    ++s->m_counters.no_route_dropped;
    return 0;
  }
  const std::span packet(static_cast<const std::byte*>(buffer), length);
  const auto now = std::chrono::steady_clock::now();
  peer_state& peer = it->second;
  if (s->m_tuning.flight_cap) {
    sctp_wire::packet_summary p;
    if (sctp_wire::summarize(packet, p) && p.data) {
      // New TSNs wait for the cap; SCTP's retransmissions (all TSNs sent before) go at once.
      const bool new_data = !peer.any_data || sctp_wire::tsn_before(peer.high_tsn, p.last_tsn);
      if (new_data) peer.high_tsn = p.last_tsn;
      peer.any_data = true;
      s->send_data(addr, peer, packet, new_data, now);
      return 0;
    }
  }
  trace_packet("out", addr, packet);
  // Recorded whether or not the socket took it: a packet dropped here is lost like one
  // dropped on the path, and repaired the same way.
  if (s->m_tuning.loss_repair || s->m_tuning.flight_cap) peer.probe.on_sent(packet, now);
  s->send_packet(peer.route, buffer, length);
  return 0;
}

void usrsctp_stack::send_data(void* addr, peer_state& peer, std::span<const std::byte> packet,
                              bool new_data, std::chrono::steady_clock::time_point now) {
  const auto it = m_sites.find(peer.site);
  if (new_data && it != m_sites.end()) {
    site_state& site = it->second;
    const std::size_t cap = site.cap.cap();
    if (!site.held.empty() || in_flight(site) >= cap) {
      // Held, up to max_held_bytes: SCTP's windows grow while nothing is lost, and the
      // packets they send beyond the cap wait here rather than in the path's queue. Past
      // the bound the oldest held packet is dropped, which SCTP takes as a loss and halves
      // its window for; dropped from the head (as CoDel does), SCTP learns of it from the
      // next packets' SACKs, not after the whole held queue has left.
      while (!site.held.empty() && site.held_bytes + packet.size() > max_held_bytes) {
        site.held_bytes -= site.held.front().bytes.size();
        site.held.pop_front();
        ++m_counters.cap_dropped;
      }
      if (spdlog::should_log(spdlog::level::trace))
        spdlog::trace(
            "usrsctp flight cap: {} bytes in flight, cap {}, {} bytes held, bandwidth {:.0f} B/s, "
            "RTprop {} us",
            in_flight(site), cap, site.held_bytes, site.cap.bottleneck_bandwidth(),
            std::chrono::duration_cast<std::chrono::microseconds>(site.cap.rtprop()).count());
      site.held.push_back(held_packet{addr, {packet.begin(), packet.end()}});
      site.held_bytes += packet.size();
      site.bound = true;
      ++m_counters.cap_held;
      return;
    }
  }
  trace_packet("out", addr, packet);
  peer.probe.on_sent(packet, now);
  send_packet(peer.route, packet.data(), packet.size());
}

void usrsctp_stack::release(site_state& site, std::chrono::steady_clock::time_point now) {
  while (!site.held.empty()) {
    held_packet& h = site.held.front();
    const auto it = m_routes.find(h.addr);
    if (it != m_routes.end()) {
      if (in_flight(site) >= site.cap.cap()) return;
      trace_packet("out", h.addr, h.bytes);
      it->second.probe.on_sent(h.bytes, now);
      send_packet(it->second.route, h.bytes.data(), h.bytes.size());
    }
    site.held_bytes -= h.bytes.size();
    site.held.pop_front();
  }
}

void usrsctp_stack::repair_losses(std::chrono::steady_clock::time_point now) {
  for (auto& [addr, peer] : m_routes) {
    for (const auto packet : peer.probe.due(now)) {
      trace_packet("repair", addr, packet);
      ++m_counters.loss_repairs;
      send_packet(peer.route, packet.data(), packet.size());
    }
  }
}

void usrsctp_stack::do_tick() {
  m_timer.expires_after(tick_interval);
  m_timer.async_wait([this, alive = m_alive](const boost::system::error_code& ec) {
    if (ec || !*alive) return;
    const auto now = std::chrono::steady_clock::now();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - m_last_tick);
    if (ms.count() > 0) {
      m_last_tick += ms;
      usrsctp_handle_timers(static_cast<std::uint32_t>(ms.count()));
    }
    if (m_tuning.loss_repair) repair_losses(now);
    for (auto& [key, site] : m_sites) release(site, now);
    do_tick();
  });
}

}  // namespace mcdist::unicast
