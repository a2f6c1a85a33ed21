// Client side of multi-socket TCP (XFTP): n connections opened at once, each with its own
// hello; connection 0 also carries the requests (sent right behind its hello, without waiting
// for the welcome or for the other connections) and the acks. Connection indexes are given in
// the order the connections come up, so connection 0 is the first one established: a SYN lost
// on one connection (1 s before Linux sends it again) delays that connection only, not the
// requests. Records arrive on any connection and are placed by their offset. In a signed
// session each connection first reads the server's challenge and proves the site key over it
// in its hello (common/unicast/hello_proof.hpp).

#include "common/net/udp.hpp"
#include "common/unicast/io/client_core.hpp"
#include "common/unicast/io/tcp_endpoint.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

namespace mcdist::unicast {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

/// Bytes per read call: several records at once, so a 10 Gbit/s stream costs few wake-ups.
constexpr std::size_t client_read_buffer = 256 << 10;

class tcp_client final : public client_impl {
 public:
  tcp_client(asio::io_context& io, client_options o, client_events e)
      : client_impl(io, std::move(o), std::move(e)), m_wake(io), m_resume(io), m_credentials(io) {
    const std::size_t n = client_connection_count(transport_kind::tcp, m_options.tcp_connections);
    for (std::size_t i = 0; i < n; ++i) m_conns.push_back(std::make_unique<conn>(*this, i, io));
  }

  void start() override {
    begin_connect();
    for (std::size_t i = 0; i < m_conns.size(); ++i) open(i);
  }

 private:
  struct conn final : frame_handler {
    conn(tcp_client& o, std::size_t i, asio::io_context& io)
        : owner(o), slot(i), socket(io), reader(true), buffer(client_read_buffer) {}
    std::error_code on_control(frame_type type, std::span<const std::byte> body) override {
      // A refused hello is answered on every connection, and every connection starts with a
      // challenge; anything else only on connection 0.
      if (index != 0 && type != frame_type::refuse && type != frame_type::challenge) {
        owner.m_detail = owner.where() + ": control frame on TCP connection " +
                         std::to_string(index) + " (only 0 carries it)";
        return error::protocol_violation;
      }
      return owner.handle_control(type, body);
    }
    std::error_code on_data(file_index f, std::uint64_t off,
                            std::span<const std::byte> b) override {
      return owner.deliver(f, off, b, index, index);
    }
    tcp_client& owner;
    std::size_t slot;       ///< place in m_conns
    std::size_t index = 0;  ///< the connection index of its hello (0: the control connection)
    tcp::socket socket;
    frame_reader reader;
    std::vector<std::byte> buffer;
    challenge server_challenge;  ///< read before the hello in a signed session
    /// Encrypted sessions: this connection's record keys (record_seal.hpp); only connection
    /// 0 sends anything after its hello.
    std::unique_ptr<frame_sealer> sealer;
    std::unique_ptr<frame_opener> opener;
    bool ended = false;
  };

  void open(std::size_t i) {
    asio::co_spawn(m_io, run(std::static_pointer_cast<tcp_client>(shared_from_this()), i),
                   asio::detached);
  }

  bool grow_transport(std::size_t count) override {
    if (count < m_conns.size()) return false;
    // No connection has passed the wait for the credentials, so none has said hello or read
    // the count yet: the new ones simply join them.
    while (m_conns.size() < count) {
      m_conns.push_back(std::make_unique<conn>(*this, m_conns.size(), m_io));
      if (started()) open(m_conns.size() - 1);
    }
    return true;
  }

  std::string conn_name(std::size_t i) const {
    return where() + " (connection " + std::to_string(i) + " of " + std::to_string(m_conns.size()) +
           ")";
  }

  static asio::awaitable<void> run(std::shared_ptr<tcp_client> self, std::size_t i) {
    conn& c = *self->m_conns[i];
    const auto remote = to_tcp(self->m_options.server);
    boost::system::error_code bec;
    c.socket.open(remote.protocol(), bec);
    if (!bec && self->m_options.local) c.socket.bind(to_tcp(*self->m_options.local), bec);
    if (bec) {
      self->fail(bec, self->conn_name(i) + ": opening the socket: " + bec.message());
      co_return;
    }
    auto [ec] = co_await c.socket.async_connect(remote, use_tuple);
    if (self->dead()) co_return;
    if (ec && self->m_next_index > 0) {
      // Others are up and carry the session; this one is left out.
      spdlog::debug("unicast client {}: {}: connect: {}; going on without it", self->where(),
                    self->conn_name(i), ec.message());
      self->connection_ended(i, {});
      co_return;
    }
    if (ec) {
      self->fail(ec, self->conn_name(i) + ": connect: " + ec.message());
      co_return;
    }
    self->transport_up();
    boost::system::error_code ignored;
    c.socket.set_option(tcp::no_delay(true), ignored);
    if (self->m_options.tcp_buffer_bytes > 0) {
      c.socket.set_option(asio::socket_base::send_buffer_size(self->m_options.tcp_buffer_bytes),
                          ignored);
      c.socket.set_option(asio::socket_base::receive_buffer_size(self->m_options.tcp_buffer_bytes),
                          ignored);
    }
    // Opened while the site registers (client_options::await_credentials): the hello waits
    // for the token of the FALLBACK order.
    while (self->awaiting_credentials()) {
      self->m_credentials.expires_at(asio::steady_timer::time_point::max());
      co_await self->m_credentials.async_wait(use_tuple);
      if (self->dead()) co_return;
    }
    const auto count = static_cast<std::uint8_t>(self->m_conns.size());
    const challenge* proved = nullptr;
    if (self->proves()) {
      // Signed session: the server's first frame is this connection's challenge.
      std::array<std::byte, frame_header_size + challenge_body_size> first{};
      auto [rec, rn] = co_await asio::async_read(c.socket, asio::buffer(first), use_tuple);
      (void)rn;
      if (self->dead()) co_return;
      if (rec) {
        self->fail(error::connection_lost,
                   self->conn_name(i) + ": waiting for the server's challenge: " + rec.message());
        co_return;
      }
      frame_header fh;
      auto dec = decode_frame_header(first, fh);
      if (!dec && (fh.type != frame_type::challenge || fh.length != challenge_body_size))
        dec = error::protocol_violation;
      if (!dec) dec = decode(std::span(first).subspan(frame_header_size), c.server_challenge);
      if (dec) {
        self->fail(dec, self->conn_name(i) + ": the server's first frame is not a challenge");
        co_return;
      }
      proved = &c.server_challenge;
    }
    // Indexes in the order connections come up: the first carries control.
    const std::size_t index = self->m_next_index++;
    c.index = index;
    if (proved && self->seals()) {
      // Everything after this connection's hello is sealed, both ways, under its index's keys.
      const auto keys =
          self->record_keys(static_cast<std::uint8_t>(index), count, c.server_challenge);
      c.opener = std::make_unique<frame_opener>(keys.to_client);
      c.reader.set_opener(c.opener.get());
      if (index == 0) c.sealer = std::make_unique<frame_sealer>(keys.to_server);
    }
    if (index == 0) {
      // Its hello goes ahead of every queued request.
      self->m_control = i;
      self->connected(self->make_hello(0, count, proved));
      asio::co_spawn(self->m_io, control_writer(self), asio::detached);
    } else {
      auto frame = self->make_hello(static_cast<std::uint8_t>(index), count, proved);
      auto [wec, wn] = co_await asio::async_write(c.socket, asio::buffer(frame), use_tuple);
      (void)wn;
      if (self->dead()) co_return;
      if (wec) {
        self->fail(wec, self->conn_name(i) + ": sending hello: " + wec.message());
        co_return;
      }
    }
    if (index == 0) self->flush_control();
    for (;;) {
      while (self->paused() && !self->dead()) {
        self->m_resume.expires_at(asio::steady_timer::time_point::max());
        co_await self->m_resume.async_wait(use_tuple);
      }
      if (self->dead()) co_return;
      auto [rec, n] = co_await c.socket.async_read_some(asio::buffer(c.buffer), use_tuple);
      if (self->dead()) co_return;
      if (rec) {
        self->connection_ended(i, rec);
        co_return;
      }
      self->touch();
      const auto fec = c.reader.feed(std::span(c.buffer).first(n), c);
      if (self->dead()) co_return;
      if (fec) {
        self->fail(fec, self->m_detail.empty()
                            ? self->conn_name(i) + ": bad frame: " + fec.message()
                            : self->m_detail);
        co_return;
      }
      self->after_batch();
    }
  }

  /// Writes the outbox on connection 0 (the first established), in order, until the bye is
  /// written.
  static asio::awaitable<void> control_writer(std::shared_ptr<tcp_client> self) {
    conn& c = *self->m_conns[self->m_control];
    for (;;) {
      if (self->dead()) co_return;
      if (self->m_outbox.empty()) {
        if (self->closing() && self->m_outbox.empty()) {
          // The bye is out. The server closes every connection when it reads it; closing ours
          // first could let a FIN on another connection overtake the bye, which the server
          // must take for a cut.
          co_return;
        }
        self->m_wake.expires_at(asio::steady_timer::time_point::max());
        co_await self->m_wake.async_wait(use_tuple);
        continue;
      }
      // Every frame queued goes in one write, so the hello and the requests behind it leave
      // in one segment rather than one each (TCP_NODELAY): on Ladha & Amer's 3 % link each
      // segment lost at the start cost ~0.5 s (the client has nothing more to send, so only
      // a probe timeout repairs it), and three segments lose one three times as often.
      self->m_writing.clear();
      while (!self->m_outbox.empty()) {
        auto frame = std::move(self->m_outbox.front());
        self->m_outbox.pop_front();
        if (c.sealer) seal_outgoing(*c.sealer, frame, 0);
        self->m_writing.insert(self->m_writing.end(), frame.begin(), frame.end());
      }
      auto [ec, n] = co_await asio::async_write(c.socket, asio::buffer(self->m_writing), use_tuple);
      (void)n;
      if (self->dead()) co_return;
      if (ec) {
        self->fail(ec, self->conn_name(self->m_control) + ": sending control: " + ec.message());
        co_return;
      }
    }
  }

  /// Connection `i` ended (`ec`), or never came up while others did (no `ec`).
  void connection_ended(std::size_t i, const boost::system::error_code& ec) {
    conn& c = *m_conns[i];
    if (!ec) {
      c.ended = true;
      if (closing() &&
          std::all_of(m_conns.begin(), m_conns.end(), [](const auto& k) { return k->ended; }))
        closed_ok();
      return;
    }
    if (closing()) {
      // After our bye the server closes every connection: that is the polite end.
      c.ended = true;
      if (std::all_of(m_conns.begin(), m_conns.end(), [](const auto& k) { return k->ended; }))
        closed_ok();
      return;
    }
    const bool eof = ec == asio::error::eof;
    fail(error::connection_lost, conn_name(i) + ": " +
                                     (eof ? std::string("closed by the server") : ec.message()) +
                                     (c.reader.at_boundary() ? "" : " in the middle of a frame"));
  }

  void flush_control() override { m_wake.cancel(); }

  void credentials_ready() override { m_credentials.cancel(); }

  void transport_resume() override { m_resume.cancel(); }

  void transport_abort() override {
    m_wake.cancel();
    m_resume.cancel();
    m_credentials.cancel();
    for (auto& c : m_conns) {
      boost::system::error_code ignored;
      if (c->socket.is_open()) {
        c->socket.set_option(tcp::socket::linger(true, 0), ignored);
        c->socket.close(ignored);
      }
    }
  }

  std::vector<std::unique_ptr<conn>> m_conns;
  asio::steady_timer m_wake;
  asio::steady_timer m_resume;       ///< readers wait on it while paused
  asio::steady_timer m_credentials;  ///< connections wait on it for set_credentials()
  std::vector<std::byte> m_writing;
  std::size_t m_next_index = 0;  ///< connection index of the next connection to come up
  std::size_t m_control = 0;     ///< slot of connection 0
};

}  // namespace

std::shared_ptr<client_impl> make_tcp_client(asio::io_context& io, client_options o,
                                             client_events e) {
  return std::make_shared<tcp_client>(io, std::move(o), std::move(e));
}

}  // namespace mcdist::unicast
