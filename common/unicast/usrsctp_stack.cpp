#include "common/unicast/usrsctp_stack.hpp"

#include "common/unicast/error.hpp"
#include "common/unicast/sctp_packet.hpp"

#include <spdlog/spdlog.h>
#include <usrsctp.h>

#include <cerrno>
#include <cstdarg>
#include <span>

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
  m_routes.emplace(addr, peer_state{route, {}});
  usrsctp_register_address(addr);
  return addr;
}

void usrsctp_stack::update_route(void* addr, const conn_route& route) {
  if (auto it = m_routes.find(addr); it != m_routes.end()) it->second.route = route;
}

void usrsctp_stack::remove_address(void* addr) {
  if (m_routes.erase(addr) != 0) usrsctp_deregister_address(addr);
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
  if (m_tuning.loss_repair) {
    if (auto it = m_routes.find(addr); it != m_routes.end())
      it->second.probe.on_received(packet, std::chrono::steady_clock::now());
  }
  usrsctp_conninput(addr, data, length, 0);
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
  trace_packet("out", addr, packet);
  // Recorded whether or not the socket took it: a packet dropped here is lost like one
  // dropped on the path, and repaired the same way.
  if (s->m_tuning.loss_repair) it->second.probe.on_sent(packet, std::chrono::steady_clock::now());
  s->send_packet(it->second.route, buffer, length);
  return 0;
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
    do_tick();
  });
}

}  // namespace mcdist::unicast
