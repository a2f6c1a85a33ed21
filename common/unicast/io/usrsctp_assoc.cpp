// usrsctp associations over our own UDP sockets (RFC 6951 encapsulation without usrsctp's
// threads): the client's connected UDP socket, the server's listening UDP socket with its table
// of peers (one AF_CONN address per UDP source).

#include "common/net/udp.hpp"
#include "common/unicast/error.hpp"
#include "common/unicast/io/sctp_assoc.hpp"

#include <boost/asio/ip/udp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>
#include <usrsctp.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <unordered_map>

namespace mcdist::unicast {

namespace {

/// SCTP_GET_SNDBUF_USE of usrsctp's netinet/sctp.h (as in FreeBSD's), which usrsctp.h does not
/// export, and its struct sctp_sockstat: the bytes an association holds for its peer
/// (asoc.total_output_queue_size: unacknowledged + not yet sent) and the bytes received but not
/// yet read.
constexpr int sctp_get_sndbuf_use = 0x00001101;
struct sndbuf_use {
  sctp_assoc_t assoc_id;
  std::uint32_t total_sndbuf;
  std::uint32_t total_recv_buf;
};

using udp = boost::asio::ip::udp;
using steady = std::chrono::steady_clock;

std::error_code errno_code(int e) { return {e, std::generic_category()}; }

conn_route route_to(int fd, const std::optional<udp::endpoint>& to) {
  conn_route r;
  r.fd = fd;
  if (to) {
    std::memcpy(&r.to, to->data(), to->size());
    r.to_len = static_cast<socklen_t>(to->size());
  }
  return r;
}

template <class T>
int set_opt(struct socket* so, int level, int name, const T& value) {
  return usrsctp_setsockopt(so, level, name, &value, sizeof value) == 0 ? 0 : errno;
}

/// Applies the per-association settings to a socket before it listens or connects, or right
/// after accept. @return 0 or errno, with `step` naming the option that failed.
int configure(struct socket* so, const sctp_socket_options& o, bool before_association,
              std::string& step, void* peer = nullptr) {
  if (usrsctp_set_non_blocking(so, 1) != 0) {
    step = "setting non-blocking mode";
    return errno;
  }
  const linger no_linger{0, 0};
  if (int e = set_opt(so, SOL_SOCKET, SO_LINGER, no_linger)) {
    step = "SO_LINGER";
    return e;
  }
  const int nodelay = 1;  // control frames (hello, requests, acks) must not wait for Nagle
  if (int e = set_opt(so, IPPROTO_SCTP, SCTP_NODELAY, nodelay)) {
    step = "SCTP_NODELAY";
    return e;
  }
  const int rcvinfo = 1;
  if (int e = set_opt(so, IPPROTO_SCTP, SCTP_RECVRCVINFO, rcvinfo)) {
    step = "SCTP_RECVRCVINFO";
    return e;
  }
  // Level 0: a partly delivered message blocks every other message until it is complete, so
  // the next piece received always continues the same message (and stream).
  const int interleave = 0;
  if (int e = set_opt(so, IPPROTO_SCTP, SCTP_FRAGMENT_INTERLEAVE, interleave)) {
    step = "SCTP_FRAGMENT_INTERLEAVE";
    return e;
  }
  sctp_paddrparams pp{};
  pp.spp_assoc_id = before_association ? SCTP_FUTURE_ASSOC : 0;
  if (!before_association) {
    // An established association wants the path named (AF_CONN, the peer's address).
    sockaddr_conn sc{};
    sc.sconn_family = AF_CONN;
    sc.sconn_port = htons(client_sctp_port);
    sc.sconn_addr = peer;
    std::memcpy(&pp.spp_address, &sc, sizeof sc);
  }
  pp.spp_flags = SPP_PMTUD_DISABLE;
  pp.spp_pathmtu = o.path_mtu;
  if (int e = set_opt(so, IPPROTO_SCTP, SCTP_PEER_ADDR_PARAMS, pp)) {
    step = "SCTP_PEER_ADDR_PARAMS (path MTU)";
    return e;
  }
  if (!before_association) return 0;
  const int buf = o.buffer_bytes;
  if (int e = set_opt(so, SOL_SOCKET, SO_SNDBUF, buf)) {
    step = "SO_SNDBUF";
    return e;
  }
  if (int e = set_opt(so, SOL_SOCKET, SO_RCVBUF, buf)) {
    step = "SO_RCVBUF";
    return e;
  }
  sctp_assoc_value ss{};
  ss.assoc_id = SCTP_FUTURE_ASSOC;
  ss.assoc_value = o.stream_scheduler;
  if (int e = set_opt(so, IPPROTO_SCTP, SCTP_PLUGGABLE_SS, ss)) {
    step = "SCTP_PLUGGABLE_SS";
    return e;
  }
  sctp_initmsg im{};
  im.sinit_num_ostreams = o.streams;
  im.sinit_max_instreams = o.streams;
  if (int e = set_opt(so, IPPROTO_SCTP, SCTP_INITMSG, im)) {
    step = "SCTP_INITMSG";
    return e;
  }
  if (o.initial_rto_ms > 0) {
    sctp_rtoinfo rto{};
    rto.srto_assoc_id = SCTP_FUTURE_ASSOC;
    rto.srto_initial = o.initial_rto_ms;  // min and max 0: unchanged
    if (int e = set_opt(so, IPPROTO_SCTP, SCTP_RTOINFO, rto)) {
      step = "SCTP_RTOINFO";
      return e;
    }
  }
  return 0;
}

/// Opens a non-blocking UDP socket bound to `local` with large buffers (the SCTP window in
/// flight crosses it as datagrams). @return errno-style error with `step`.
std::error_code open_udp(udp::socket& s, const udp::endpoint& local, std::string& step) {
  boost::system::error_code ec;
  s.open(local.protocol(), ec);
  if (ec) {
    step = "opening a UDP socket";
    return ec;
  }
  // Best effort: 4 MiB is net.core.[rw]mem_max on Debian; root may force more.
  const int bytes = 8 << 20;
  for (int opt : {SO_SNDBUFFORCE, SO_RCVBUFFORCE}) {
    if (::setsockopt(s.native_handle(), SOL_SOCKET, opt, &bytes, sizeof bytes) != 0) {
      const int plain = opt == SO_SNDBUFFORCE ? SO_SNDBUF : SO_RCVBUF;
      ::setsockopt(s.native_handle(), SOL_SOCKET, plain, &bytes, sizeof bytes);
    }
  }
  s.non_blocking(true, ec);
  s.bind(local, ec);
  if (ec) {
    step = "binding UDP " + net::from_asio(local).to_string();
    return ec;
  }
  return {};
}

/// Process-wide upcall: usrsctp calls it from inside its own functions, so it only posts.
void upcall(struct socket*, void* arg, int);

/// Things an upcall can wake: a posted, coalesced call of `fire()`.
struct upcall_target {
  virtual ~upcall_target() = default;
  virtual void on_upcall() = 0;
};

void upcall(struct socket*, void* arg, int) { static_cast<upcall_target*>(arg)->on_upcall(); }

class usrsctp_listener_state;

/// A UDP socket connected to the server, owned by a client association.
struct client_udp {
  explicit client_udp(boost::asio::io_context& io) : socket(io) {}
  udp::socket socket;
  std::array<std::byte, max_sctp_datagram> buffer{};
};

class usrsctp_assoc final : public sctp_assoc, private upcall_target {
 public:
  usrsctp_assoc(std::shared_ptr<usrsctp_stack> stack, struct socket* so, void* addr,
                endpoint remote, std::shared_ptr<usrsctp_listener_state> listener,
                std::unique_ptr<client_udp> own_udp);
  ~usrsctp_assoc() override { release(true); }

  void set_ready_handler(std::function<void()> fn) override { m_ready = std::move(fn); }

  std::error_code connect_status() override {
    if (m_udp_error) return m_udp_error;
    if (m_so == nullptr) return error::aborted;
    int so_error = 0;
    socklen_t len = sizeof so_error;
    if (usrsctp_getsockopt(m_so, SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 && so_error != 0)
      return errno_code(so_error);
    sctp_status st{};
    len = sizeof st;
    if (usrsctp_getsockopt(m_so, IPPROTO_SCTP, SCTP_STATUS, &st, &len) != 0) {
      // No association any more (usrsctp says EINVAL): it came up and was already shut down
      // and freed by usrsctp's own thread, e.g. a server that refused a hello sent with the
      // COOKIE ECHO, before this thread looked. What the server sent is still readable, so
      // report it up and let the reader find the refusal and the end. (Treated as "in
      // progress", the client waited for its connect time-out: integration_auth_fallback
      // failed that way about once in four runs on a loaded machine.)
      const int e = errno;
      if (e == EINVAL || e == ENOTCONN) return {};
      return std::make_error_code(std::errc::operation_in_progress);
    }
    // Up, or up and already being shut down by the server (a refusal that came with the
    // COOKIE ACK): what it sent before is readable either way.
    if (st.sstat_state == SCTP_ESTABLISHED || st.sstat_state == SCTP_SHUTDOWN_RECEIVED ||
        st.sstat_state == SCTP_SHUTDOWN_ACK_SENT || st.sstat_state == SCTP_SHUTDOWN_PENDING ||
        st.sstat_state == SCTP_SHUTDOWN_SENT)
      return {};
    if (st.sstat_state == SCTP_COOKIE_WAIT || st.sstat_state == SCTP_COOKIE_ECHOED)
      return std::make_error_code(std::errc::operation_in_progress);
    return std::make_error_code(std::errc::connection_refused);
  }

  std::error_code send(std::uint16_t stream, std::span<const std::byte> message) override {
    if (m_udp_error) return m_udp_error;
    if (m_so == nullptr) return error::aborted;
    sctp_sndinfo si{};
    si.snd_sid = stream;
    si.snd_flags = SCTP_EOR;
    const ssize_t n = usrsctp_sendv(m_so, message.data(), message.size(), nullptr, 0, &si,
                                    sizeof si, SCTP_SENDV_SNDINFO, 0);
    if (n < 0) {
      const int e = errno;
      if (e == EWOULDBLOCK || e == EAGAIN)
        return std::make_error_code(std::errc::operation_would_block);
      return errno_code(e);
    }
    if (static_cast<std::size_t>(n) != message.size()) {
      // Non-blocking usrsctp takes a message whole or not at all; anything else would cut a
      // frame, so treat it as fatal rather than send a torn frame.
      return std::make_error_code(std::errc::message_size);
    }
    return {};
  }

  std::error_code receive(std::span<std::byte> buffer, received& out) override {
    if (m_udp_error) return m_udp_error;
    if (m_so == nullptr) return error::aborted;
    sctp_rcvinfo ri{};
    socklen_t info_len = sizeof ri;
    unsigned int info_type = 0;
    int flags = 0;
    sockaddr_conn from{};
    socklen_t from_len = sizeof from;
    const ssize_t n =
        usrsctp_recvv(m_so, buffer.data(), buffer.size(), reinterpret_cast<sockaddr*>(&from),
                      &from_len, &ri, &info_len, &info_type, &flags);
    if (n < 0) {
      const int e = errno;
      if (e == EWOULDBLOCK || e == EAGAIN)
        return std::make_error_code(std::errc::operation_would_block);
      return errno_code(e);
    }
    out = {};
    out.bytes = static_cast<std::size_t>(n);
    out.end_of_message = (flags & MSG_EOR) != 0;
    out.notification = (flags & MSG_NOTIFICATION) != 0;
    if (info_type == SCTP_RECVV_RCVINFO) {
      out.stream = ri.rcv_sid;
      m_last_stream = ri.rcv_sid;
    } else {
      out.stream = m_last_stream;
    }
    return {};
  }

  void want_write() override {}

  void shutdown_send() override {
    if (m_so != nullptr) usrsctp_shutdown(m_so, SHUT_WR);
  }

  void abort() override { release(true); }
  void close() override { release(false); }

  std::string describe() override {
    if (m_so == nullptr) return "closed";
    sctp_status st{};
    socklen_t len = sizeof st;
    if (usrsctp_getsockopt(m_so, IPPROTO_SCTP, SCTP_STATUS, &st, &len) != 0) return "no status";
    // The stack's counters are process-wide (all associations of this usrsctp instance).
    sctpstat ss{};
    usrsctp_get_stat(&ss);
    return describe_sctp_status(st) + "; usrsctp: T3 timeouts " +
           std::to_string(ss.sctps_timodata) + ", fast retransmits " +
           std::to_string(ss.sctps_sendfastretrans) + ", retransmitted chunks " +
           std::to_string(ss.sctps_sendretransdata) + ", duplicate chunks received " +
           std::to_string(ss.sctps_recvdupdata) + ", loss repairs " +
           std::to_string(m_stack->counters().loss_repairs) + ", packets held for the flight cap " +
           std::to_string(m_stack->counters().cap_held) + " (dropped " +
           std::to_string(m_stack->counters().cap_dropped) + ")";
  }

  std::uint64_t backlog() override {
    if (m_so == nullptr) return 0;
    sctp_status st{};
    socklen_t len = sizeof st;
    if (usrsctp_getsockopt(m_so, IPPROTO_SCTP, SCTP_STATUS, &st, &len) != 0) return 0;
    return std::uint64_t{st.sstat_unackdata} + st.sstat_penddata;
  }

  std::optional<send_queue_state> send_queue() override {
    if (m_so == nullptr) return std::nullopt;
    sctp_status st{};
    socklen_t len = sizeof st;
    if (usrsctp_getsockopt(m_so, IPPROTO_SCTP, SCTP_STATUS, &st, &len) != 0) return std::nullopt;
    sndbuf_use use{};
    use.assoc_id = st.sstat_assoc_id;
    len = sizeof use;
    if (usrsctp_getsockopt(m_so, IPPROTO_SCTP, sctp_get_sndbuf_use, &use, &len) != 0)
      return std::nullopt;
    return send_queue_state{use.total_sndbuf, st.sstat_primary.spinfo_cwnd};
  }

  std::uint16_t outbound_streams() override {
    if (m_so == nullptr) return 0;
    sctp_status st{};
    socklen_t len = sizeof st;
    if (usrsctp_getsockopt(m_so, IPPROTO_SCTP, SCTP_STATUS, &st, &len) != 0) return 0;
    return st.sstat_outstrms;
  }

  endpoint remote() const override { return m_remote; }

  /// Starts reading the client's UDP socket (client side only).
  void start_udp();

 private:
  void on_upcall() override {
    if (m_posted) return;
    m_posted = true;
    boost::asio::post(m_stack->io(), [this, alive = m_alive] {
      if (!*alive) return;
      m_posted = false;
      if (m_ready) m_ready();
    });
  }

  void release(bool abort);
  void do_udp_wait();

  std::shared_ptr<usrsctp_stack> m_stack;
  struct socket* m_so;
  void* m_addr;  ///< our AF_CONN address (client) or the peer's (server)
  endpoint m_remote;
  std::shared_ptr<usrsctp_listener_state> m_listener;  ///< server side: the peer table
  std::unique_ptr<client_udp> m_udp;                   ///< client side: our UDP socket
  std::function<void()> m_ready;
  std::shared_ptr<bool> m_alive = std::make_shared<bool>(true);
  bool m_posted = false;
  std::uint16_t m_last_stream = 0;
  std::error_code m_udp_error;
};

/// The server's UDP port: peers by UDP source, the usrsctp listening socket, accepts.
class usrsctp_listener_state final : public std::enable_shared_from_this<usrsctp_listener_state>,
                                     private upcall_target {
 public:
  usrsctp_listener_state(boost::asio::io_context& io, std::shared_ptr<usrsctp_stack> stack,
                         const sctp_socket_options& options, const sctp_listener_limits& limits)
      : m_io(io), m_stack(std::move(stack)), m_options(options), m_limits(limits), m_udp(io),
        m_sweep(io), m_receiver(32, max_sctp_datagram) {}

  ~usrsctp_listener_state() override {
    *m_alive = false;
    close_listening();
    for (auto& [ep, p] : m_peers) m_stack->remove_address(p.addr);
    m_peers.clear();
  }

  std::error_code open(const endpoint& local, std::string& detail) {
    std::string step;
    if (auto ec = open_udp(m_udp, net::to_asio(local), step)) {
      detail = step + ": " + ec.message();
      return ec;
    }
    m_local = net::from_asio(m_udp.local_endpoint());
    m_listen = usrsctp_socket(AF_CONN, SOCK_STREAM, IPPROTO_SCTP, nullptr, nullptr, 0, nullptr);
    if (m_listen == nullptr) {
      const auto ec = errno_code(errno);
      detail = "creating the usrsctp listening socket: " + ec.message();
      return ec;
    }
    if (int e = configure(m_listen, m_options, true, step)) {
      detail =
          "configuring the usrsctp listening socket (" + step + "): " + errno_code(e).message();
      return errno_code(e);
    }
    sockaddr_conn sc{};
    sc.sconn_family = AF_CONN;
    sc.sconn_port = htons(server_sctp_port);
    sc.sconn_addr = nullptr;  // wildcard: every registered peer address
    if (usrsctp_bind(m_listen, reinterpret_cast<sockaddr*>(&sc), sizeof sc) != 0) {
      const auto ec = errno_code(errno);
      detail = "binding the usrsctp listening socket: " + ec.message();
      return ec;
    }
    if (usrsctp_listen(m_listen,
                       static_cast<int>(std::min<std::size_t>(m_limits.max_peers, 1024))) != 0) {
      const auto ec = errno_code(errno);
      detail = "listening on the usrsctp socket: " + ec.message();
      return ec;
    }
    usrsctp_set_upcall(m_listen, &upcall, static_cast<upcall_target*>(this));
    do_udp_wait();
    do_sweep();
    return {};
  }

  void set_accept_handler(std::function<void(std::unique_ptr<sctp_assoc>)> fn) {
    m_accept = std::move(fn);
  }

  void close_listening() {
    if (m_listen != nullptr) {
      usrsctp_set_upcall(m_listen, nullptr, nullptr);
      usrsctp_close(m_listen);
      m_listen = nullptr;
    }
    m_accept = nullptr;
  }

  /// An accepted association was closed: keep its peer a while, then forget it. One that was
  /// aborted is forgotten at once: the ABORT freed the association, so no SHUTDOWN exchange
  /// is left to carry, and a server that aborts a flood's associations as fast as they come
  /// (refused or evicted before their hello) would otherwise fill the peer table with them
  /// for `linger` and drop every site's INIT (max_peers).
  void release_peer(void* addr, bool aborted) {
    const auto it = m_by_addr.find(addr);
    if (it == m_by_addr.end()) return;
    auto pit = m_peers.find(it->second);
    if (pit == m_peers.end()) return;
    if (aborted) {
      ++m_counters.peers_aborted;
      m_stack->remove_address(addr);
      m_peers.erase(pit);
      m_by_addr.erase(it);
      return;
    }
    pit->second.state = peer_state::lingering;
    pit->second.since = steady::now();
  }

  endpoint local() const { return m_local; }
  sctp_listener_counters counters() const { return m_counters; }

 private:
  enum class peer_state : std::uint8_t { handshaking, active, lingering };
  struct peer {
    void* addr = nullptr;
    peer_state state = peer_state::handshaking;
    steady::time_point since;
  };

  void on_upcall() override {
    if (m_accept_posted) return;
    m_accept_posted = true;
    boost::asio::post(m_io, [w = weak_from_this()] {
      if (auto self = w.lock()) {
        self->m_accept_posted = false;
        self->do_accept();
      }
    });
  }

  void do_accept() {
    while (m_listen != nullptr) {
      sockaddr_conn from{};
      socklen_t len = sizeof from;
      struct socket* so = usrsctp_accept(m_listen, reinterpret_cast<sockaddr*>(&from), &len);
      if (so == nullptr) return;  // EWOULDBLOCK, or an aborted pending association
      const auto it = m_by_addr.find(from.sconn_addr);
      std::string step;
      if (it == m_by_addr.end() || !m_accept ||
          configure(so, m_options, false, step, from.sconn_addr) != 0) {
        const linger no_linger{1, 0};
        set_opt(so, SOL_SOCKET, SO_LINGER, no_linger);
        usrsctp_close(so);
        continue;
      }
      auto& p = m_peers.at(it->second);
      p.state = peer_state::active;
      p.since = steady::now();
      auto a = std::make_unique<usrsctp_assoc>(m_stack, so, p.addr, it->second, shared_from_this(),
                                               nullptr);
      m_accept(std::move(a));
    }
  }

  void do_udp_wait() {
    m_udp.async_wait(udp::socket::wait_read,
                     [w = weak_from_this()](const boost::system::error_code& ec) {
                       auto self = w.lock();
                       if (!self || ec) return;
                       self->on_udp_readable();
                     });
  }

  void on_udp_readable() {
    std::error_code ec;
    // Bounded per wake-up so the listener cannot starve the sessions' own handlers.
    constexpr std::size_t per_wakeup = 256;
    m_receiver.drain(
        m_udp.native_handle(), per_wakeup,
        [this](std::span<const std::byte> d, const endpoint& from) { on_datagram(d, from); }, ec);
    if (ec && ec != std::errc::connection_refused)
      spdlog::debug("sctp listener {}: UDP receive: {}", m_local.to_string(), ec.message());
    do_udp_wait();
  }

  void on_datagram(std::span<const std::byte> d, const endpoint& from) {
    ++m_counters.datagrams;
    // SCTP common header (12) + one chunk header (4) at least (RFC 9260 section 3).
    if (d.size() < 16) {
      ++m_counters.dropped_short;
      return;
    }
    auto it = m_peers.find(from);
    if (it == m_peers.end()) {
      // Only an INIT (verification tag 0, first chunk type 1) may create state for a new
      // source; everything else from unknown sources is dropped before usrsctp sees it.
      const bool init = d[4] == std::byte{0} && d[5] == std::byte{0} && d[6] == std::byte{0} &&
                        d[7] == std::byte{0} && d[12] == std::byte{1};
      if (!init) {
        ++m_counters.dropped_unknown;
        return;
      }
      if (m_peers.size() >= m_limits.max_peers) {
        ++m_counters.dropped_peer_limit;
        return;
      }
      peer p;
      p.addr = m_stack->add_address(route_to(m_udp.native_handle(), net::to_asio(from)));
      p.since = steady::now();
      it = m_peers.emplace(from, p).first;
      m_by_addr.emplace(p.addr, from);
    }
    m_stack->input(it->second.addr, d.data(), d.size());
  }

  void do_sweep() {
    m_sweep.expires_after(std::chrono::seconds(1));
    m_sweep.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
      auto self = w.lock();
      if (!self || ec) return;
      self->sweep();
      self->do_sweep();
    });
  }

  void sweep() {
    const auto now = steady::now();
    for (auto it = m_peers.begin(); it != m_peers.end();) {
      const peer& p = it->second;
      const bool expired =
          (p.state == peer_state::handshaking && now - p.since > m_limits.handshake_timeout) ||
          (p.state == peer_state::lingering && now - p.since > m_limits.linger);
      if (!expired) {
        ++it;
        continue;
      }
      if (p.state == peer_state::handshaking) ++m_counters.peers_expired;
      m_stack->remove_address(p.addr);
      m_by_addr.erase(p.addr);
      it = m_peers.erase(it);
    }
  }

  boost::asio::io_context& m_io;
  std::shared_ptr<usrsctp_stack> m_stack;
  sctp_socket_options m_options;
  sctp_listener_limits m_limits;
  udp::socket m_udp;
  boost::asio::steady_timer m_sweep;
  net::batch_receiver m_receiver;
  endpoint m_local;
  struct socket* m_listen = nullptr;
  std::function<void(std::unique_ptr<sctp_assoc>)> m_accept;
  std::unordered_map<endpoint, peer> m_peers;
  std::unordered_map<void*, endpoint> m_by_addr;
  sctp_listener_counters m_counters;
  std::shared_ptr<bool> m_alive = std::make_shared<bool>(true);
  bool m_accept_posted = false;
};

usrsctp_assoc::usrsctp_assoc(std::shared_ptr<usrsctp_stack> stack, struct socket* so, void* addr,
                             endpoint remote, std::shared_ptr<usrsctp_listener_state> listener,
                             std::unique_ptr<client_udp> own_udp)
    : m_stack(std::move(stack)), m_so(so), m_addr(addr), m_remote(remote),
      m_listener(std::move(listener)), m_udp(std::move(own_udp)) {
  usrsctp_set_upcall(m_so, &upcall, static_cast<upcall_target*>(this));
}

void usrsctp_assoc::release(bool abort) {
  *m_alive = false;
  m_ready = nullptr;
  if (m_so != nullptr) {
    usrsctp_set_upcall(m_so, nullptr, nullptr);
    if (abort) {
      // SO_LINGER {1, 0}: close sends an ABORT and frees the association at once (RFC 6458
      // section 8.1.4 semantics), so no state lingers after us.
      const linger l{1, 0};
      set_opt(m_so, SOL_SOCKET, SO_LINGER, l);
    }
    usrsctp_close(m_so);  // may emit packets through conn_output: our route still exists
    m_so = nullptr;
  }
  if (m_udp) {
    m_stack->remove_address(m_addr);
    boost::system::error_code ignored;
    m_udp->socket.close(ignored);
    m_udp.reset();
  }
  if (m_listener) {
    m_listener->release_peer(m_addr, abort);
    m_listener.reset();
  }
}

void usrsctp_assoc::start_udp() { do_udp_wait(); }

void usrsctp_assoc::do_udp_wait() {
  if (!m_udp) return;
  m_udp->socket.async_wait(
      udp::socket::wait_read, [this, alive = m_alive](const boost::system::error_code& ec) {
        if (!*alive || ec || !m_udp) return;
        // Bounded per wake-up, like the listener.
        for (int i = 0; i < 256 && m_udp; ++i) {
          boost::system::error_code rec;
          const std::size_t n = m_udp->socket.receive(boost::asio::buffer(m_udp->buffer), 0, rec);
          if (rec == boost::asio::error::would_block) break;
          if (rec) {
            // ECONNREFUSED: ICMP port unreachable for our last packet.
            m_udp_error = rec;
            on_upcall();
            return;
          }
          if (n < 16) continue;
          m_stack->input(m_addr, m_udp->buffer.data(), n);
        }
        do_udp_wait();
      });
}

class usrsctp_listener final : public sctp_listener {
 public:
  explicit usrsctp_listener(std::shared_ptr<usrsctp_listener_state> s) : m_state(std::move(s)) {}
  ~usrsctp_listener() override { close(); }
  void set_accept_handler(std::function<void(std::unique_ptr<sctp_assoc>)> fn) override {
    if (m_state) m_state->set_accept_handler(std::move(fn));
  }
  endpoint local() const override { return m_local_cache(); }
  void close() override {
    if (m_state) {
      m_last_local = m_state->local();
      m_last_counters = m_state->counters();
      m_state->close_listening();
      m_state.reset();
    }
  }
  sctp_listener_counters counters() const override {
    return m_state ? m_state->counters() : m_last_counters;
  }

 private:
  endpoint m_local_cache() const { return m_state ? m_state->local() : m_last_local; }
  std::shared_ptr<usrsctp_listener_state> m_state;
  endpoint m_last_local;
  sctp_listener_counters m_last_counters;
};

}  // namespace

std::unique_ptr<sctp_listener> open_usrsctp_listener(boost::asio::io_context& io,
                                                     const endpoint& local,
                                                     const sctp_socket_options& options,
                                                     const usrsctp_tuning& tuning,
                                                     const sctp_listener_limits& limits,
                                                     std::error_code& ec, std::string& detail) {
  auto stack = usrsctp_stack::acquire(io, tuning, ec);
  if (!stack) {
    detail = "SCTP over UDP listener on " + local.to_string() + ": " + ec.message();
    return nullptr;
  }
  auto state = std::make_shared<usrsctp_listener_state>(io, stack, options, limits);
  std::string step;
  if ((ec = state->open(local, step))) {
    detail = "SCTP over UDP listener on " + local.to_string() + ": " + step;
    return nullptr;
  }
  return std::make_unique<usrsctp_listener>(std::move(state));
}

std::unique_ptr<sctp_assoc> usrsctp_connect(boost::asio::io_context& io, const endpoint& remote,
                                            const std::optional<endpoint>& local,
                                            const sctp_socket_options& options,
                                            const usrsctp_tuning& tuning, std::error_code& ec,
                                            std::string& detail) {
  const std::string where = "SCTP over UDP to " + remote.to_string();
  auto stack = usrsctp_stack::acquire(io, tuning, ec);
  if (!stack) {
    detail = where + ": " + ec.message();
    return nullptr;
  }
  auto u = std::make_unique<client_udp>(io);
  const auto peer = net::to_asio(remote);
  const udp::endpoint any = local
                                ? net::to_asio(*local)
                                : udp::endpoint(peer.address().is_v6() ? udp::v6() : udp::v4(), 0);
  std::string step;
  if ((ec = open_udp(u->socket, any, step))) {
    detail = where + ": " + step + ": " + ec.message();
    return nullptr;
  }
  boost::system::error_code bec;
  u->socket.connect(peer, bec);  // the kernel then drops datagrams from anyone else
  if (bec) {
    ec = bec;
    detail = where + ": connecting the UDP socket: " + ec.message();
    return nullptr;
  }
  struct socket* so =
      usrsctp_socket(AF_CONN, SOCK_STREAM, IPPROTO_SCTP, nullptr, nullptr, 0, nullptr);
  if (so == nullptr) {
    ec = errno_code(errno);
    detail = where + ": creating the usrsctp socket: " + ec.message();
    return nullptr;
  }
  if (int e = configure(so, options, true, step)) {
    usrsctp_close(so);
    ec = errno_code(e);
    detail = where + ": configuring the usrsctp socket (" + step + "): " + ec.message();
    return nullptr;
  }
  void* addr = stack->add_address(route_to(u->socket.native_handle(), std::nullopt));
  auto a = std::make_unique<usrsctp_assoc>(stack, so, addr, remote, nullptr, std::move(u));
  sockaddr_conn sc{};
  sc.sconn_family = AF_CONN;
  sc.sconn_port = htons(client_sctp_port);
  sc.sconn_addr = addr;
  if (usrsctp_bind(so, reinterpret_cast<sockaddr*>(&sc), sizeof sc) != 0) {
    ec = errno_code(errno);
    detail = where + ": binding the usrsctp socket: " + ec.message();
    return nullptr;
  }
  a->start_udp();
  sc.sconn_port = htons(server_sctp_port);
  if (usrsctp_connect(so, reinterpret_cast<sockaddr*>(&sc), sizeof sc) != 0 &&
      errno != EINPROGRESS) {
    ec = errno_code(errno);
    detail = where + ": starting the association: " + ec.message();
    return nullptr;
  }
  ec.clear();
  return a;
}

}  // namespace mcdist::unicast
