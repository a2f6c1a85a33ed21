// Server side of multi-socket TCP (XFTP, Allman, Ostermann & Kruse, section 3): a client opens
// n persistent connections, each starting with a hello carrying the same token and client nonce;
// they form one session. Connection 0 also carries control. Every connection runs its own
// writer that pulls the next record from the session whenever its last write completed, i.e.
// whenever its socket buffer had room: records go to whichever connection can take them, and a
// slow connection simply takes fewer.

#include "common/net/udp.hpp"
#include "common/packet.hpp"
#include "common/unicast/hello_proof.hpp"
#include "common/unicast/io/server_session.hpp"
#include "common/unicast/io/tcp_endpoint.hpp"
#include "common/unicast/io/tcp_info.hpp"
#include "common/unicast/send_queue.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <deque>

namespace mcdist::unicast {

namespace asio = boost::asio;
using asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

/// Bytes read per read call on the server: it only receives control frames, and a request
/// frame is at most 40 KiB.
constexpr std::size_t server_read_buffer = 64 << 10;

class tcp_session;

class tcp_server_conn final : public std::enable_shared_from_this<tcp_server_conn>,
                              private frame_handler {
 public:
  tcp_server_conn(std::shared_ptr<server_state> state, tcp::socket s)
      : m_state(std::move(state)), m_socket(std::move(s)), m_reader(false),
        m_hello_timer(m_state->io), m_wake(m_state->io), m_drain(m_state->io) {
    boost::system::error_code ec;
    const auto ep = m_socket.remote_endpoint(ec);
    if (!ec) m_remote = from_tcp(ep);
  }

  void start() {
    const auto ticket = m_state->begin_handshake(m_remote, [w = weak_from_this()] {
      if (auto c = w.lock()) c->close(true);
    });
    if (!ticket) {
      // Refused for its source's limit: a reset, so no TIME_WAIT is left on our side however
      // fast a flood reconnects.
      close(true);
      return;
    }
    m_ticket = *ticket;
    m_in_handshake = true;
    m_hello_timer.expires_after(m_state->options.hello_timeout);
    m_hello_timer.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
      auto c = w.lock();
      if (!c || ec || !c->m_in_handshake) return;
      ++c->m_state->counters.hello_timeouts;
      spdlog::debug("unicast: no hello from {} over TCP within the hello timeout",
                    c->m_remote.to_string());
      c->close(true);
    });
    // The server speaks first: this connection's challenge. 24 bytes into the empty send
    // buffer of a fresh connection: the write completes at once.
    m_challenge = make_challenge();
    std::vector<std::byte> frame;
    append_frame(frame, m_challenge);
    boost::system::error_code ec;
    asio::write(m_socket, asio::buffer(frame), ec);
    if (ec) {
      close(true);
      return;
    }
    asio::co_spawn(m_state->io, read_loop(shared_from_this()), asio::detached);
  }

  /// Starts the writer once the connection belongs to a session.
  void attach(const std::shared_ptr<tcp_session>& s, std::size_t index);

  /// Paces this connection at `bps` bit/s of IP packets (SO_MAX_PACING_RATE, which counts TCP
  /// payload and header bytes: scaled by 1448/1500 for a 1500-byte packet with 52 bytes of
  /// IPv4 + TCP headers and timestamps), and the connection's send queue follows that rate
  /// (record_wait). Best effort: a failure is logged once.
  void pace(std::uint64_t bps) {
    const std::uint64_t bytes_per_s = bps / 8 * packet::tcp_mss_ethernet / packet::ethernet_mtu;
    const auto v = static_cast<unsigned>(std::min<std::uint64_t>(bytes_per_s, ~0u - 1));
    if (::setsockopt(m_socket.native_handle(), SOL_SOCKET, SO_MAX_PACING_RATE, &v, sizeof v) != 0) {
      if (m_state->pacing_failure_log.tick())
        spdlog::warn("unicast: cannot pace TCP connection: {}",
                     std::error_code(errno, std::generic_category()).message());
      return;
    }
    m_paced_bytes_per_s = std::max<std::uint64_t>(bytes_per_s, 1);
  }

  /// How long the writer waits before it takes another record (send_queue.hpp): while its
  /// unsent queue holds more than its rule allows at the rate it drains (the sender's pacing
  /// rate, else the kernel's), the time to drain to half of that; nullopt to take one now.
  std::optional<std::chrono::microseconds> record_wait() {
    if (m_paced_bytes_per_s) return paced_queue.wait(unsent(), m_paced_bytes_per_s);
    return unpaced_queue.wait(unsent(), kernel_pacing_rate(m_socket.native_handle()));
  }

  void queue_control(std::vector<std::byte> frame) {
    m_control.push_back(std::move(frame));
    wake();
  }

  void wake() {
    m_wake.cancel();
    m_drain.cancel();
  }

  /// Closes the socket: with an RST (`abort`) or after a FIN.
  void close(bool abort) {
    end_handshake();
    if (m_closed) return;
    m_closed = true;
    m_hello_timer.cancel();
    m_wake.cancel();
    m_drain.cancel();
    boost::system::error_code ignored;
    if (abort) {
      m_socket.set_option(tcp::socket::linger(true, 0), ignored);
    } else {
      m_socket.shutdown(tcp::socket::shutdown_both, ignored);
    }
    m_socket.close(ignored);
  }

  const endpoint& remote() const noexcept { return m_remote; }

  /// Bytes in the socket's send queue not yet acknowledged by the client (SIOCOUTQ).
  std::uint64_t unacked() {
    if (m_closed) return 0;
    int n = 0;
    if (::ioctl(m_socket.native_handle(), SIOCOUTQ, &n) != 0 || n < 0) return 0;
    return static_cast<std::uint64_t>(n);
  }

  /// Bytes in the socket's send queue not yet sent (SIOCOUTQNSD); 0 on error.
  std::uint64_t unsent() {
    if (m_closed) return 0;
    int n = 0;
    if (::ioctl(m_socket.native_handle(), SIOCOUTQNSD, &n) != 0 || n < 0) return 0;
    return static_cast<std::uint64_t>(n);
  }

 private:
  void end_handshake() {
    if (!m_in_handshake) return;
    m_in_handshake = false;
    m_state->end_handshake(m_ticket);
    m_hello_timer.cancel();
  }

  static asio::awaitable<void> read_loop(std::shared_ptr<tcp_server_conn> self);
  static asio::awaitable<void> write_loop(std::shared_ptr<tcp_server_conn> self);

  std::error_code on_control(frame_type type, std::span<const std::byte> body) override;
  std::error_code on_data(file_index, std::uint64_t, std::span<const std::byte>) override {
    return error::protocol_violation;  // unreachable: the reader refuses data frames
  }
  std::error_code on_hello(std::span<const std::byte> body);

  std::shared_ptr<server_state> m_state;
  tcp::socket m_socket;
  endpoint m_remote;
  frame_reader m_reader;
  asio::steady_timer m_hello_timer;
  asio::steady_timer m_wake;   ///< a writer with nothing to send waits on it; wake() cancels
  asio::steady_timer m_drain;  ///< the writer waits on it for its unsent queue to drain
  std::uint64_t m_paced_bytes_per_s = 0;  ///< payload bytes/s of the pacing; 0 = unpaced
  std::weak_ptr<tcp_session> m_session;
  std::size_t m_index = 0;
  std::deque<std::vector<std::byte>> m_control;
  std::vector<std::byte> m_out;
  std::optional<refuse> m_refuse;  ///< set when the hello was refused
  challenge m_challenge;           ///< sent first; a signed session's hello proves over it
  /// Encrypted sessions: this connection's record keys, one per direction (record_seal.hpp).
  std::unique_ptr<frame_sealer> m_sealer;
  std::unique_ptr<frame_opener> m_opener;
  std::string m_detail;
  handshake_gate::ticket m_ticket = 0;  ///< its slot while m_in_handshake
  bool m_in_handshake = false;
  bool m_closed = false;
  bool m_late = false;  ///< its hello came after its client's session ended: close it
};

class tcp_session final : public server_session {
 public:
  tcp_session(std::shared_ptr<server_state> state, const client_grant& grant, endpoint remote,
              std::size_t connections, std::uint64_t nonce)
      : server_session(state, grant, transport_kind::tcp, remote, connections,
                       state->options.tcp_active_files, nonce),
        m_conns(connections) {}

  /// Adds connection `index`. @return false when that index is taken already.
  bool attach(const std::shared_ptr<tcp_server_conn>& c, std::size_t index) {
    if (index >= m_conns.size() || m_conns[index]) return false;
    m_conns[index] = c;
    auto self = std::static_pointer_cast<tcp_session>(shared_from_this());
    if (index == 0) {
      welcome w;
      w.record_size = m_state->options.record_size;
      w.streams = 0;
      w.connection_count = static_cast<std::uint8_t>(m_conns.size());
      std::vector<std::byte> f;
      append_frame(f, w);
      c->queue_control(std::move(f));
    }
    if (const auto cap = m_state->options.tcp_max_rate_bps; cap > 0) {
      c->pace(cap / m_conns.size());
    }
    c->attach(self, index);
    return true;
  }

  std::error_code control(std::size_t index, frame_type type, std::span<const std::byte> body,
                          std::string& detail) {
    if (index != 0) {
      detail = "control frame on TCP connection " + std::to_string(index) + " (only 0 carries it)";
      return error::protocol_violation;
    }
    return handle_control(type, body, detail);
  }

  bool bye() const noexcept { return bye_received(); }

  /// The next record for a writer, filled into `buf`.
  std::optional<record> take(std::vector<std::byte>& buf, std::error_code& ec,
                             frame_sealer* sealer) {
    auto r = next_record();
    if (r) ec = fill_record(*r, buf, sealer);
    return r;
  }
  void sent(const record& r) { record_sent(r); }
  /// True while records are left to hand out.
  bool pending() const noexcept { return has_pending(); }

  /// A connection ended (EOF or error) or failed.
  void connection_ended(std::size_t index, const std::error_code& ec, const std::string& what) {
    if (finished()) return;
    if (bye_received()) return finish({}, {}, true);
    finish(error::connection_lost, "TCP connection " + std::to_string(index) + " of " +
                                       std::to_string(m_conns.size()) + " from " +
                                       m_info.remote.to_string() + ": " + what +
                                       (ec ? ": " + ec.message() : std::string()));
  }

 private:
  void close_transport(bool graceful) override {
    for (auto& c : m_conns)
      if (c) c->close(!graceful);
  }

  void on_new_requests() override {
    for (auto& c : m_conns)
      if (c) c->wake();
  }

  std::uint64_t transport_backlog() override {
    std::uint64_t b = 0;
    for (auto& c : m_conns)
      if (c) b += c->unacked();
    return b;
  }

  std::vector<std::shared_ptr<tcp_server_conn>> m_conns;
};

void tcp_server_conn::attach(const std::shared_ptr<tcp_session>& s, std::size_t index) {
  m_session = s;
  m_index = index;
  asio::co_spawn(m_state->io, write_loop(shared_from_this()), asio::detached);
}

asio::awaitable<void> tcp_server_conn::read_loop(std::shared_ptr<tcp_server_conn> self) {
  std::vector<std::byte> buf(server_read_buffer);
  for (;;) {
    auto [ec, n] = co_await self->m_socket.async_read_some(asio::buffer(buf), use_tuple);
    if (self->m_closed) co_return;
    if (ec) {
      auto s = self->m_session.lock();
      if (s) {
        s->connection_ended(self->m_index,
                            ec == asio::error::eof ? std::error_code{} : std::error_code(ec),
                            ec == asio::error::eof ? "closed by the client" : "receive failed");
      } else {
        self->close(true);
      }
      co_return;
    }
    self->m_detail.clear();
    const auto fec = self->m_reader.feed(std::span(buf).first(n), *self);
    if (self->m_late) {
      self->close(false);
      co_return;
    }
    if (self->m_refuse) {
      // Tell the client why, then close. The hello timer still bounds this write.
      std::vector<std::byte> out;
      append_frame(out, *self->m_refuse);
      auto [wec, wn] = co_await asio::async_write(self->m_socket, asio::buffer(out), use_tuple);
      (void)wec;
      (void)wn;
      self->close(false);
      co_return;
    }
    if (fec) {
      self->m_state->count_error(fec);
      auto s = self->m_session.lock();
      if (s && !s->finished()) {
        s->finish(fec, self->m_detail.empty()
                           ? "bad frame on TCP connection " + std::to_string(self->m_index) + ": " +
                                 fec.message()
                           : self->m_detail);
      } else {
        if (self->m_state->dropped_connection_log.tick())
          spdlog::warn("unicast: dropped TCP connection from {}: {}", self->m_remote.to_string(),
                       self->m_detail.empty() ? fec.message() : self->m_detail);
      }
      self->close(true);
      co_return;
    }
  }
}

asio::awaitable<void> tcp_server_conn::write_loop(std::shared_ptr<tcp_server_conn> self) {
  for (;;) {
    if (self->m_closed) co_return;
    auto s = self->m_session.lock();
    if (!s || s->finished()) co_return;
    std::optional<record> rec;
    if (!self->m_control.empty()) {
      self->m_out = std::move(self->m_control.front());
      self->m_control.pop_front();
      // Sealed here, in the order frames go out: the sequence numbers follow the stream.
      if (self->m_sealer) self->m_out = self->m_sealer->seal_copy(0, self->m_out);
    } else if (const auto wait = s->pending() ? self->record_wait() : std::nullopt) {
      // Records go to a connection just before it can send them (send_queue.hpp): wait until
      // its queue has drained (the kernel gives no event for it), then look again.
      s.reset();
      self->m_drain.expires_after(*wait);
      co_await self->m_drain.async_wait(use_tuple);
      continue;
    } else {
      std::error_code ec;
      rec = s->take(self->m_out, ec, self->m_sealer.get());
      if (ec) {
        s->finish(error::source_failed,
                  "reading file " + std::to_string(rec->file.value) + ": " + ec.message());
        co_return;
      }
      if (!rec) {
        s.reset();
        self->m_wake.expires_at(asio::steady_timer::time_point::max());
        co_await self->m_wake.async_wait(use_tuple);
        continue;
      }
    }
    s.reset();
    auto [ec, n] = co_await asio::async_write(self->m_socket, asio::buffer(self->m_out), use_tuple);
    (void)n;
    if (self->m_closed) co_return;
    s = self->m_session.lock();
    if (!s) co_return;
    if (ec) {
      s->connection_ended(self->m_index, ec, "send failed");
      co_return;
    }
    if (rec) s->sent(*rec);
  }
}

std::error_code tcp_server_conn::on_control(frame_type type, std::span<const std::byte> body) {
  if (m_refuse) return error::protocol_violation;  // nothing after a refused hello
  if (m_late) return {};                           // read_loop closes it after this read
  if (auto s = m_session.lock()) {
    auto ec = s->control(m_index, type, body, m_detail);
    if (!ec && s->bye()) {
      s->finish({}, {}, true);
      return {};
    }
    return ec;
  }
  if (m_closed) return error::aborted;
  if (type != frame_type::hello) {
    m_detail = "first frame is " + std::string(to_string(type)) + ", not hello";
    return error::protocol_violation;
  }
  return on_hello(body);
}

std::error_code tcp_server_conn::on_hello(std::span<const std::byte> body) {
  hello h;
  if (auto ec = decode(body, h)) {
    m_detail = "malformed hello: " + ec.message();
    return ec;
  }
  refuse why;
  const client_grant* g = m_state->authenticate(h, m_challenge, m_remote, why);
  if (g == nullptr) {
    m_refuse = why;
    end_handshake();
    return {};
  }
  std::shared_ptr<tcp_session> s;
  if (auto it = m_state->sessions.find(h.token); it != m_state->sessions.end()) {
    auto existing = std::dynamic_pointer_cast<tcp_session>(it->second);
    if (existing && existing->nonce() == h.client_nonce &&
        existing->info().connections == h.connection_count)
      s = existing;
  }
  const bool fresh = !s;
  if (fresh && m_state->is_late(h)) {
    ++m_state->counters.late_hellos;
    spdlog::debug(
        "unicast: receiver '{}': a TCP connection from {} came up after its session "
        "ended; closed",
        h.receiver_id, m_remote.to_string());
    m_late = true;
    end_handshake();
    return {};
  }
  if (g->seal_records) {
    // From here on both directions are sealed under this connection's keys.
    const auto keys = derive_seal_keys(*g->proof_key, m_challenge, h);
    m_sealer = std::make_unique<frame_sealer>(keys.to_client);
    m_opener = std::make_unique<frame_opener>(keys.to_server);
    m_reader.set_opener(m_opener.get());
  }
  if (fresh) {
    s = std::make_shared<tcp_session>(m_state, *g, m_remote, h.connection_count, h.client_nonce);
  }
  end_handshake();
  if (fresh) {
    s->begin();
    if (s->finished()) return error::aborted;
  }
  if (!s->attach(shared_from_this(), h.connection_index)) {
    m_refuse =
        refuse{refuse_reason::bad_hello,
               "connection index " + std::to_string(h.connection_index) + " already connected"};
    return {};
  }
  return {};
}

}  // namespace

class tcp_listener : public std::enable_shared_from_this<tcp_listener> {
 public:
  tcp_listener(std::weak_ptr<server_state> state, asio::io_context& io)
      : m_state(std::move(state)), m_acceptor(io), m_backoff(io) {}

  std::error_code open(const endpoint& local, std::string& detail) {
    boost::system::error_code ec;
    const auto ep = to_tcp(local);
    m_acceptor.open(ep.protocol(), ec);
    if (!ec) m_acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) m_acceptor.bind(ep, ec);
    if (!ec) m_acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      detail = "TCP listener on " + local.to_string() + ": " + ec.message();
      return ec;
    }
    m_local = from_tcp(m_acceptor.local_endpoint(ec));
    return {};
  }

  void start(asio::io_context& io) {
    asio::co_spawn(io, accept_loop(shared_from_this()), asio::detached);
  }

  void close() {
    m_closed = true;
    boost::system::error_code ignored;
    m_acceptor.close(ignored);
    m_backoff.cancel();
  }

  endpoint local() const { return m_local; }

 private:
  static asio::awaitable<void> accept_loop(std::shared_ptr<tcp_listener> self) {
    for (;;) {
      auto [ec, sock] = co_await self->m_acceptor.async_accept(use_tuple);
      if (self->m_closed) co_return;
      auto st = self->m_state.lock();
      if (!st || st->stopped) co_return;
      if (ec) {
        // EMFILE and friends: back off instead of spinning on the error.
        spdlog::warn("unicast: TCP accept on {}: {}", self->m_local.to_string(), ec.message());
        self->m_backoff.expires_after(std::chrono::milliseconds(100));
        co_await self->m_backoff.async_wait(use_tuple);
        continue;
      }
      ++st->counters.connections_accepted;
      boost::system::error_code ignored;
      sock.set_option(tcp::no_delay(true), ignored);
      if (st->options.tcp_buffer_bytes > 0) {
        sock.set_option(asio::socket_base::send_buffer_size(st->options.tcp_buffer_bytes), ignored);
        sock.set_option(asio::socket_base::receive_buffer_size(st->options.tcp_buffer_bytes),
                        ignored);
      }
      if (!st->options.tcp_congestion.empty()) {
        const auto& cc = st->options.tcp_congestion;
        if (::setsockopt(sock.native_handle(), IPPROTO_TCP, TCP_CONGESTION, cc.data(),
                         static_cast<socklen_t>(cc.size())) != 0) {
          if (st->congestion_failure_log.tick())
            spdlog::warn("unicast: TCP congestion control '{}' not available: {}", cc,
                         std::error_code(errno, std::generic_category()).message());
        }
      }
      std::make_shared<tcp_server_conn>(st, std::move(sock))->start();
    }
  }

  std::weak_ptr<server_state> m_state;
  tcp::acceptor m_acceptor;
  asio::steady_timer m_backoff;
  endpoint m_local;
  bool m_closed = false;
};

std::shared_ptr<tcp_listener> open_tcp_listener(std::shared_ptr<server_state> state,
                                                const endpoint& local, std::error_code& ec,
                                                std::string& detail) {
  auto l = std::make_shared<tcp_listener>(state, state->io);
  if ((ec = l->open(local, detail))) return nullptr;
  l->start(state->io);
  return l;
}

endpoint tcp_listener_endpoint(const tcp_listener& l) { return l.local(); }

void close_tcp_listener(tcp_listener& l) { l.close(); }

}  // namespace mcdist::unicast
