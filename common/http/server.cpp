#include "common/http/server.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <list>
#include <system_error>

namespace mcdist::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

/// After a failed accept (EMFILE: out of descriptors) wait this long before the next, so a
/// descriptor shortage does not spin the io thread.
constexpr auto accept_backoff = std::chrono::milliseconds(100);

/// Server header: names the program, no version (nothing for a scanner to match).
constexpr const char* server_name = "mcdist";

tcp::endpoint to_tcp(const endpoint& e) {
  if (e.v6) {
    asio::ip::address_v6::bytes_type b{};
    std::copy(e.addr.begin(), e.addr.end(), b.begin());
    return {asio::ip::address_v6(b), e.port};
  }
  asio::ip::address_v4::bytes_type b{};
  std::copy(e.addr.begin(), e.addr.begin() + 4, b.begin());
  return {asio::ip::address_v4(b), e.port};
}

endpoint from_tcp(const tcp::endpoint& t) {
  endpoint e;
  e.port = t.port();
  if (t.address().is_v6()) {
    e.v6 = true;
    const auto b = t.address().to_v6().to_bytes();
    std::copy(b.begin(), b.end(), e.addr.begin());
  } else {
    const auto b = t.address().to_v4().to_bytes();
    std::copy(b.begin(), b.end(), e.addr.begin());
  }
  return e;
}

}  // namespace

struct server::impl {
  struct conn {
    explicit conn(tcp::socket s) : stream(std::move(s)) {}
    beast::tcp_stream stream;
    bool waiting = true;  ///< awaiting (part of) a request: may be evicted
  };

  impl(asio::io_context& io_, handler h_, server_limits l, std::shared_ptr<spdlog::logger> lg)
      : io(io_), acceptor(io_), h(std::move(h_)), limits(l), log(std::move(lg)) {}

  asio::io_context& io;
  tcp::acceptor acceptor;
  handler h;
  server_limits limits;
  std::shared_ptr<spdlog::logger> log;
  bool stopped = false;
  std::list<std::shared_ptr<conn>> conns;  ///< accept order, oldest first

  void forget(const std::shared_ptr<conn>& c) { conns.remove(c); }

  /// Closes the oldest connection still waiting for its request. @return false if none is.
  bool evict_one() {
    const auto it =
        std::find_if(conns.begin(), conns.end(), [](const auto& c) { return c->waiting; });
    if (it == conns.end()) return false;
    (*it)->stream.close();
    conns.erase(it);
    return true;
  }

  void stop() {
    if (stopped) return;
    stopped = true;
    boost::system::error_code ignored;
    acceptor.close(ignored);
    for (auto& c : conns) c->stream.close();
    conns.clear();
    h = nullptr;
  }

  static asio::awaitable<void> accept_loop(std::shared_ptr<impl> self) {
    while (!self->stopped) {
      auto [ec, sock] = co_await self->acceptor.async_accept(use_tuple);
      if (self->stopped || ec == asio::error::operation_aborted) co_return;
      if (ec) {
        if (self->log) self->log->debug("http: accept failed: {}", ec.message());
        asio::steady_timer t(self->io, accept_backoff);
        co_await t.async_wait(use_tuple);
        continue;
      }
      if (self->conns.size() >= self->limits.max_connections && !self->evict_one()) {
        boost::system::error_code ignored;
        sock.close(ignored);
        continue;
      }
      auto c = std::make_shared<conn>(std::move(sock));
      self->conns.push_back(c);
      asio::co_spawn(self->io, serve(self, c), asio::detached);
    }
  }

  /// The response to a request the parser refused, or 0 to close without one.
  static unsigned status_for(const boost::system::error_code& ec) {
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message) return 0;
    if (ec == bhttp::error::header_limit) return 431;
    if (ec == bhttp::error::body_limit) return 413;
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category()) return 400;
    return 0;
  }

  static asio::awaitable<void> write_error(std::shared_ptr<impl> self, std::shared_ptr<conn> c,
                                           unsigned status) {
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), 11};
    res.set(bhttp::field::server, server_name);
    res.set(bhttp::field::content_type, "text/plain; charset=utf-8");
    res.keep_alive(false);
    res.body() =
        std::to_string(status) + " " + std::string(bhttp::obsolete_reason(res.result())) + "\n";
    res.prepare_payload();
    c->stream.expires_after(self->limits.write_timeout);
    co_await bhttp::async_write(c->stream, res, use_tuple);
  }

  static asio::awaitable<void> serve(std::shared_ptr<impl> self, std::shared_ptr<conn> c) {
    beast::flat_buffer buffer(self->limits.max_header_bytes + self->limits.max_body_bytes);
    for (std::size_t n = 0; n < self->limits.max_requests_per_connection; ++n) {
      bhttp::request_parser<bhttp::string_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(self->limits.max_header_bytes));
      parser.body_limit(self->limits.max_body_bytes);
      c->waiting = true;
      c->stream.expires_after(self->limits.request_timeout);
      auto [ec, got] = co_await bhttp::async_read(c->stream, buffer, parser, use_tuple);
      c->waiting = false;
      if (self->stopped) co_return;
      if (ec) {
        if (const unsigned st = status_for(ec); st != 0) co_await write_error(self, c, st);
        break;
      }
      const auto& req = parser.get();
      const bool head = req.method() == bhttp::verb::head;
      const bool keep = req.keep_alive() && n + 1 < self->limits.max_requests_per_connection;
      response r;
      if (req.method() != bhttp::verb::get && !head) {
        r = {405, "text/plain; charset=utf-8", "405 Method Not Allowed: GET or HEAD only\n"};
      } else {
        request q;
        q.method = head ? "HEAD" : "GET";
        const std::string_view target = req.target();
        const auto qm = target.find('?');
        q.path = std::string(target.substr(0, qm));
        if (qm != std::string_view::npos) q.query = std::string(target.substr(qm + 1));
        try {
          r = self->h(q);
        } catch (const std::exception& e) {
          if (self->log) self->log->warn("http: {} {} failed: {}", q.method, q.path, e.what());
          r = {500, "text/plain; charset=utf-8", "500 Internal Server Error\n"};
        }
      }
      c->stream.expires_after(self->limits.write_timeout);
      boost::system::error_code wec;
      if (head) {
        bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(r.status), req.version()};
        res.set(bhttp::field::server, server_name);
        res.set(bhttp::field::content_type, r.content_type);
        res.set(bhttp::field::cache_control, "no-store");
        res.content_length(r.body.size());
        res.keep_alive(keep);
        std::tie(wec, std::ignore) = co_await bhttp::async_write(c->stream, res, use_tuple);
      } else {
        bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status),
                                                req.version()};
        res.set(bhttp::field::server, server_name);
        res.set(bhttp::field::content_type, r.content_type);
        res.set(bhttp::field::cache_control, "no-store");
        if (r.status == 405) res.set(bhttp::field::allow, "GET, HEAD");
        res.keep_alive(keep);
        res.body() = std::move(r.body);
        res.prepare_payload();
        std::tie(wec, std::ignore) = co_await bhttp::async_write(c->stream, res, use_tuple);
      }
      if (wec || !keep || self->stopped) break;
    }
    if (!self->stopped) {
      boost::system::error_code ignored;
      c->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
      c->stream.close();
      self->forget(c);
    }
  }
};

server::server(asio::io_context& io, const endpoint& at, handler h, server_limits limits,
               std::shared_ptr<spdlog::logger> log)
    : m_impl(std::make_shared<impl>(io, std::move(h), limits, std::move(log))) {
  const auto ep = to_tcp(at);
  auto& a = m_impl->acceptor;
  boost::system::error_code ec;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) return;
  throw std::system_error(ec, "cannot listen for HTTP on " + at.to_string());
}

server::~server() { m_impl->stop(); }

void server::start() {
  if (m_impl->stopped) return;
  asio::co_spawn(m_impl->io, impl::accept_loop(m_impl), asio::detached);
}

void server::stop() { m_impl->stop(); }

endpoint server::local_endpoint() const {
  boost::system::error_code ec;
  const auto ep = m_impl->acceptor.local_endpoint(ec);
  return ec ? endpoint{} : from_tcp(ep);
}

std::size_t server::connections() const noexcept { return m_impl->conns.size(); }

}  // namespace mcdist::http
