#include "feed/product_server.hpp"

#include "common/catch_up_index.hpp"
#include "common/net/udp.hpp"
#include "common/path_check.hpp"
#include "common/sys/digest_xattr.hpp"
#include "common/sys/path_walk.hpp"
#include "common/sys/unique_fd.hpp"
#include "common/wis2/wis2_publisher.hpp"
#include "feed/journal.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <list>
#include <map>
#include <thread>

namespace mcdist::feed {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
/// After a failed accept (EMFILE), before the next: no spinning on a descriptor shortage.
constexpr auto accept_backoff = std::chrono::milliseconds(100);
/// Seconds a client told 503 waits before it asks again (Retry-After, RFC 9110 10.2.3).
constexpr const char* retry_after_seconds = "5";
constexpr const char* server_name = "mcdist";
/// Largest id in /products/ID/NAME, digits (an int64).
constexpr std::size_t max_id_digits = 18;
/// Hex digits of a nonce: catch_up::max_nonce_bytes bytes.
constexpr std::size_t max_nonce_hex = 2 * catch_up::max_nonce_bytes;

std::uint64_t unix_ms_now() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

/// A response whose body is either text in memory or an open file.
struct answer {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  unique_fd file;  ///< valid: stream `size` bytes of it instead of body
  std::uint64_t size = 0;
  bool cacheable = false;  ///< a file of a product id never changes
};

answer text(unsigned status, std::string body) {
  answer a;
  a.status = status;
  a.body = std::move(body);
  return a;
}

}  // namespace

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const auto v = catch_up::parse_hex(s.substr(i + 1, 2));
    if (!v || (*v)[0] == 0) return std::nullopt;
    out += static_cast<char>((*v)[0]);
    i += 2;
  }
  return out;
}

struct product_server::impl : std::enable_shared_from_this<impl> {
  /// One connection, whatever its stream: what eviction and stop() need.
  struct conn_base {
    virtual ~conn_base() = default;
    virtual void close() = 0;
    bool waiting = true;  ///< awaiting (part of) a request: may be evicted
  };
  template <class Stream>
  struct conn : conn_base {
    template <class... Args>
    explicit conn(Args&&... args) : stream(std::forward<Args>(args)...) {}
    void close() override { beast::get_lowest_layer(stream).close(); }
    Stream stream;
  };

  impl(product_server_options o, std::shared_ptr<spdlog::logger> l)
      : opts(std::move(o)), log(std::move(l)), acceptor(io), guard(io.get_executor()) {}

  product_server_options opts;
  std::shared_ptr<spdlog::logger> log;
  asio::io_context io{1};
  tcp::acceptor acceptor;
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  std::optional<asio::ssl::context> tls;
  unique_fd retained;
  std::unique_ptr<hub_journal> journal;  ///< opened on the server's thread, read-only
  std::list<std::shared_ptr<conn_base>> conns;
  std::size_t downloads = 0;
  std::map<std::int64_t, sha256_digest> digests;  ///< by product id (digest_cache_entries)
  product_server_stats stats;
  std::thread thread;
  bool stopped = false;

  bool evict_one() {
    const auto it =
        std::find_if(conns.begin(), conns.end(), [](const auto& c) { return c->waiting; });
    if (it == conns.end()) return false;
    (*it)->close();
    conns.erase(it);
    return true;
  }

  void shutdown() {
    if (stopped) return;
    stopped = true;
    boost::system::error_code ignored;
    acceptor.close(ignored);
    for (auto& c : conns) c->close();
    conns.clear();
    guard.reset();
  }

  hub_journal& db() {
    if (!journal) journal = open_hub_journal(opts.journal.string(), true);
    return *journal;
  }

  bool known_channel(std::string_view ch) const {
    return std::find(opts.channels.begin(), opts.channels.end(), ch) != opts.channels.end();
  }

  /// Opens the retained copy of `p` (CHANNEL/ID/NAME below the retained directory, no link
  /// followed) if it is a regular file with the journal's size and mtime. @return why not
  std::string open_retained(const product& p, unique_fd& fd, struct stat& st) const {
    const std::string rel = p.channel + "/" + std::to_string(p.id) + "/" + p.name;
    if (check_relative_path(rel)) return "its retained path is not a valid relative path";
    int raw = -1;
    if (const int e = open_below(retained.get(), rel, raw)) {
      return std::string("cannot open its retained copy: ") + std::strerror(e);
    }
    fd = unique_fd(raw);
    if (::fstat(fd.get(), &st) != 0) return std::string("fstat: ") + std::strerror(errno);
    if (!S_ISREG(st.st_mode)) return "its retained copy is not a regular file";
    if (static_cast<std::uint64_t>(st.st_size) != p.size || mtime_ns_of(st) != p.mtime_ns) {
      return "its retained copy changed since it was sent";
    }
    return {};
  }

  /// The SHA-256 of an open retained file: cache, digest xattr, else hashed here.
  std::optional<sha256_digest> digest_of(const product& p, int fd) {
    if (const auto it = digests.find(p.id); it != digests.end()) return it->second;
    auto d = read_digest_xattr(fd, p.size, p.mtime_ns);
    if (!d) {
      sha256_hasher h;
      std::vector<std::byte> buf(opts.limits.chunk_bytes);
      std::uint64_t off = 0;
      while (off < p.size) {
        const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return std::nullopt;
        h.update(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n)));
        off += static_cast<std::uint64_t>(n);
      }
      d = h.finish();
    }
    if (digests.size() >= opts.limits.digest_cache_entries) digests.erase(digests.begin());
    digests.emplace(p.id, *d);
    return d;
  }

  answer catch_up_index(std::string_view rest, std::string_view query) {
    const auto slash = rest.rfind('/');
    if (slash == std::string_view::npos) return text(404, "404 Not Found: /catch-up/CHANNEL/SEQ\n");
    const auto channel = percent_decode(rest.substr(0, slash));
    const auto seq_text = rest.substr(slash + 1);
    std::uint64_t seq = 0;
    const auto [ptr, ec] = std::from_chars(seq_text.data(), seq_text.data() + seq_text.size(), seq);
    if (!channel || ec != std::errc{} || ptr != seq_text.data() + seq_text.size() || seq == 0) {
      return text(404, "404 Not Found: /catch-up/CHANNEL/SEQ with SEQ >= 1\n");
    }
    constexpr std::string_view key = "nonce=";
    if (query.substr(0, key.size()) != key || query.size() - key.size() > max_nonce_hex) {
      return text(400, "400 Bad Request: ?nonce=HEX (up to 64 bytes) is required\n");
    }
    const auto nonce = catch_up::parse_hex(query.substr(key.size()));
    if (!nonce || nonce->empty()) return text(400, "400 Bad Request: the nonce is not hex\n");
    if (!known_channel(*channel)) return text(404, "404 Not Found: no such channel\n");
    auto& j = db();
    if (!j.batch_session_ended(*channel, seq)) {
      return text(404, "404 Not Found: no ended session of that number is retained\n");
    }
    catch_up::index ix;
    ix.channel = *channel;
    ix.seq = seq;
    ix.nonce = *nonce;
    for (const auto& p : j.products_of_seqs(*channel, seq, seq)) {
      // A newer version went out since: a site must not be given the older one.
      if (j.superseded(p)) continue;
      unique_fd fd;
      struct stat st {};
      if (const auto why = open_retained(p, fd, st); !why.empty()) {
        log->warn("products: {} of {} {} left out of its catch-up index: {}", printable(p.name),
                  p.channel, seq, why);
        continue;
      }
      const auto d = digest_of(p, fd.get());
      if (!d) {
        log->warn("products: {} of {} {}: cannot read its retained copy to hash it",
                  printable(p.name), p.channel, seq);
        continue;
      }
      catch_up::product e;
      e.name = p.name;
      e.size = p.size;
      e.mtime_ns = p.mtime_ns;
      e.mode = st.st_mode & 07777;
      e.sha256 = *d;
      e.path = "products/" + std::to_string(p.id) + "/" + percent_encode_path(p.name);
      if (e.path.size() > catch_up::max_path_bytes) continue;
      ix.products.push_back(std::move(e));
    }
    ix.hub_unix_ms = unix_ms_now();
    answer a;
    a.content_type = "application/x-protobuf";
    a.body = catch_up::encode_index(ix, opts.key ? &*opts.key : nullptr);
    stats.indexes.fetch_add(1, std::memory_order_relaxed);
    return a;
  }

  answer file_of(const product& p) {
    answer a;
    struct stat st {};
    if (const auto why = open_retained(p, a.file, st); !why.empty()) {
      return text(404, "404 Not Found: " + why + "\n");
    }
    a.size = p.size;
    a.content_type = std::string(guess_media_type(p.name));
    return a;
  }

  answer product_by_id(std::string_view rest) {
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos || slash == 0 || slash > max_id_digits) {
      return text(404, "404 Not Found: /products/ID/NAME\n");
    }
    std::int64_t id = 0;
    const auto ids = rest.substr(0, slash);
    const auto [ptr, ec] = std::from_chars(ids.data(), ids.data() + ids.size(), id);
    const auto name = percent_decode(rest.substr(slash + 1));
    if (ec != std::errc{} || ptr != ids.data() + ids.size() || id <= 0 || !name ||
        check_relative_path(*name)) {
      return text(404, "404 Not Found: /products/ID/NAME\n");
    }
    const auto p = db().get(id);
    if (!p || p->state != product_state::sent || !p->retained_path || p->name != *name ||
        !known_channel(p->channel)) {
      return text(404, "404 Not Found: no such retained product\n");
    }
    auto a = file_of(*p);
    a.cacheable = a.status == 200;
    return a;
  }

  answer data_by_name(std::string_view rest) {
    const auto name = percent_decode(rest);
    if (!name || check_relative_path(*name)) return text(404, "404 Not Found: /data/NAME\n");
    std::optional<product> best;
    for (const auto& ch : opts.channels) {
      auto p = db().newest_retained(ch, *name);
      if (p && (!best || p->id > best->id)) best = std::move(p);
    }
    if (!best) return text(404, "404 Not Found: no retained product of that name\n");
    return file_of(*best);
  }

  answer route(std::string_view target) {
    const auto qm = target.find('?');
    const auto path = target.substr(0, qm);
    const auto query = qm == std::string_view::npos ? std::string_view() : target.substr(qm + 1);
    constexpr std::string_view catch_up_prefix = "/catch-up/";
    constexpr std::string_view products_prefix = "/products/";
    constexpr std::string_view data_prefix = "/data/";
    if (path.starts_with(catch_up_prefix)) {
      return catch_up_index(path.substr(catch_up_prefix.size()), query);
    }
    if (path.starts_with(products_prefix))
      return product_by_id(path.substr(products_prefix.size()));
    if (path.starts_with(data_prefix)) return data_by_name(path.substr(data_prefix.size()));
    return text(404,
                "404 Not Found: try /catch-up/CHANNEL/SEQ?nonce=HEX, /products/ID/NAME or "
                "/data/NAME\n");
  }

  template <class Stream>
  static asio::awaitable<bool> write_text(std::shared_ptr<impl> self, Stream& s, const answer& a,
                                          unsigned version, bool keep, bool head) {
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(a.status), version};
    res.set(bhttp::field::server, server_name);
    res.set(bhttp::field::content_type, a.content_type);
    res.set(bhttp::field::cache_control, "no-store");
    if (a.status == 503) res.set(bhttp::field::retry_after, retry_after_seconds);
    if (a.status == 405) res.set(bhttp::field::allow, "GET, HEAD");
    res.keep_alive(keep);
    res.content_length(a.body.size());
    if (!head) res.body() = a.body;
    beast::get_lowest_layer(s).expires_after(self->opts.limits.idle_timeout);
    if (head) {
      bhttp::response_serializer<bhttp::string_body> sr{res};
      auto [ec, n] = co_await bhttp::async_write_header(s, sr, use_tuple);
      co_return !ec;
    }
    auto [ec, n] = co_await bhttp::async_write(s, res, use_tuple);
    co_return !ec;
  }

  /// Streams a.file: a chunk read, a chunk written, each write with its own idle timeout.
  template <class Stream>
  static asio::awaitable<bool> write_file(std::shared_ptr<impl> self, Stream& s, answer& a,
                                          unsigned version, bool keep, bool head) {
    bhttp::response<bhttp::buffer_body> res{bhttp::status::ok, version};
    res.set(bhttp::field::server, server_name);
    res.set(bhttp::field::content_type, a.content_type);
    res.set(bhttp::field::cache_control, a.cacheable ? "max-age=86400, immutable" : "no-cache");
    res.keep_alive(keep);
    res.content_length(a.size);
    res.body().data = nullptr;
    res.body().more = !head && a.size > 0;
    bhttp::response_serializer<bhttp::buffer_body> sr{res};
    auto& lowest = beast::get_lowest_layer(s);
    lowest.expires_after(self->opts.limits.idle_timeout);
    {
      auto [ec, n] = co_await bhttp::async_write_header(s, sr, use_tuple);
      if (ec) co_return false;
    }
    if (head || a.size == 0) co_return true;
    self->stats.downloads.fetch_add(1, std::memory_order_relaxed);
    std::vector<char> buf(self->opts.limits.chunk_bytes);
    std::uint64_t off = 0;
    while (off < a.size) {
      const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), a.size - off));
      const ssize_t n = ::pread(a.file.get(), buf.data(), want, static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // Truncated under us: the response cannot be completed; the client sees a short body
        // and its SHA-256 check fails.
        self->log->warn("products: read of a retained file failed at byte {} of {}", off, a.size);
        co_return false;
      }
      off += static_cast<std::uint64_t>(n);
      res.body().data = buf.data();
      res.body().size = static_cast<std::size_t>(n);
      res.body().more = off < a.size;
      lowest.expires_after(self->opts.limits.idle_timeout);
      auto [ec, w] = co_await bhttp::async_write(s, sr, use_tuple);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) co_return false;
      self->stats.bytes.fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
    }
    if (!sr.is_done()) {
      res.body().data = nullptr;
      res.body().size = 0;
      res.body().more = false;
      auto [ec, w] = co_await bhttp::async_write(s, sr, use_tuple);
      if (ec) co_return false;
    }
    co_return true;
  }

  template <class Stream>
  static asio::awaitable<void> serve(std::shared_ptr<impl> self, std::shared_ptr<conn<Stream>> c) {
    auto& s = c->stream;
    auto& lowest = beast::get_lowest_layer(s);
    if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
      lowest.expires_after(self->opts.limits.request_timeout);
      auto [ec] = co_await s.async_handshake(asio::ssl::stream_base::server, use_tuple);
      if (ec) {
        self->stats.refused.fetch_add(1, std::memory_order_relaxed);
        if (!self->stopped) self->forget(c);
        co_return;
      }
    }
    beast::flat_buffer buffer(self->opts.limits.max_header_bytes);
    for (std::size_t n = 0; n < self->opts.limits.max_requests_per_connection; ++n) {
      bhttp::request_parser<bhttp::empty_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(self->opts.limits.max_header_bytes));
      parser.body_limit(0);
      c->waiting = true;
      lowest.expires_after(self->opts.limits.request_timeout);
      auto [ec, got] = co_await bhttp::async_read(s, buffer, parser, use_tuple);
      c->waiting = false;
      if (self->stopped) co_return;
      if (ec) {
        if (ec != bhttp::error::end_of_stream && ec != asio::error::eof &&
            ec != asio::error::operation_aborted && ec != beast::error::timeout) {
          self->stats.refused.fetch_add(1, std::memory_order_relaxed);
          answer a = text(400, "400 Bad Request\n");
          co_await write_text(self, s, a, 11, false, false);
        }
        break;
      }
      const auto& req = parser.get();
      const bool head = req.method() == bhttp::verb::head;
      const bool keep = req.keep_alive() && n + 1 < self->opts.limits.max_requests_per_connection;
      answer a;
      if (req.method() != bhttp::verb::get && !head) {
        self->stats.refused.fetch_add(1, std::memory_order_relaxed);
        a = text(405, "405 Method Not Allowed: GET or HEAD only\n");
      } else {
        try {
          a = self->route(req.target());
        } catch (const std::exception& e) {
          self->log->warn("products: {} failed: {}", std::string(req.target()), e.what());
          a = text(500, "500 Internal Server Error\n");
        }
      }
      if (a.status == 404) self->stats.not_found.fetch_add(1, std::memory_order_relaxed);
      bool ok = false;
      if (a.file) {
        if (!head && self->downloads >= self->opts.limits.max_downloads) {
          self->stats.busy.fetch_add(1, std::memory_order_relaxed);
          a = text(503, "503 Service Unavailable: too many downloads; retry\n");
          ok = co_await write_text(self, s, a, req.version(), keep, head);
        } else {
          ++self->downloads;
          ok = co_await write_file(self, s, a, req.version(), keep, head);
          --self->downloads;
        }
      } else {
        ok = co_await write_text(self, s, a, req.version(), keep, head);
      }
      if (!ok || !keep || self->stopped) break;
    }
    if (!self->stopped) {
      if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
        lowest.expires_after(std::chrono::seconds(1));
        co_await s.async_shutdown(use_tuple);
      }
      c->close();
      self->forget(c);
    }
  }

  void forget(const std::shared_ptr<conn_base>& c) { conns.remove(c); }

  static asio::awaitable<void> accept_loop(std::shared_ptr<impl> self) {
    while (!self->stopped) {
      auto [ec, sock] = co_await self->acceptor.async_accept(use_tuple);
      if (self->stopped || ec == asio::error::operation_aborted) co_return;
      if (ec) {
        asio::steady_timer t(self->io, accept_backoff);
        co_await t.async_wait(use_tuple);
        continue;
      }
      if (self->conns.size() >= self->opts.limits.max_connections && !self->evict_one()) {
        boost::system::error_code ignored;
        sock.close(ignored);
        continue;
      }
      if (self->tls) {
        using stream = beast::ssl_stream<beast::tcp_stream>;
        auto c = std::make_shared<conn<stream>>(std::move(sock), *self->tls);
        self->conns.push_back(c);
        asio::co_spawn(self->io, serve<stream>(self, c), asio::detached);
      } else {
        auto c = std::make_shared<conn<beast::tcp_stream>>(std::move(sock));
        self->conns.push_back(c);
        asio::co_spawn(self->io, serve<beast::tcp_stream>(self, c), asio::detached);
      }
    }
  }
};

product_server::product_server(product_server_options opts, std::shared_ptr<spdlog::logger> log)
    : m_impl(std::make_shared<impl>(std::move(opts), std::move(log))) {
  auto& i = *m_impl;
  if (!i.opts.tls_cert.empty()) {
    i.tls.emplace(asio::ssl::context::tls_server);
    // TLS 1.2 and 1.3 only (RFC 8996 deprecates 1.0 and 1.1).
    i.tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
    boost::system::error_code ec;
    i.tls->use_certificate_chain_file(i.opts.tls_cert.string(), ec);
    if (ec) {
      throw std::runtime_error("products_tls_cert = \"" + i.opts.tls_cert.string() +
                               "\": cannot load the PEM certificate chain: " + ec.message());
    }
    i.tls->use_private_key_file(i.opts.tls_key.string(), asio::ssl::context::pem, ec);
    if (ec) {
      throw std::runtime_error("products_tls_key = \"" + i.opts.tls_key.string() +
                               "\": cannot load the PEM private key: " + ec.message());
    }
  }
  std::error_code dec;
  std::filesystem::create_directories(i.opts.retained_dir, dec);
  const int fd = ::open(i.opts.retained_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    throw std::runtime_error("retained = \"" + i.opts.retained_dir.string() +
                             "\": cannot open it for the product server: " + std::strerror(errno));
  }
  i.retained = unique_fd(fd);
  const auto u = net::to_asio(i.opts.at);  // the address and port, as a TCP endpoint
  const tcp::endpoint ep(u.address(), u.port());
  auto& a = i.acceptor;
  boost::system::error_code ec;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw std::system_error(ec, "products_http: cannot listen on " + i.opts.at.to_string());
  }
}

product_server::~product_server() { stop(); }

void product_server::start() {
  auto self = m_impl;
  asio::co_spawn(self->io, impl::accept_loop(self), asio::detached);
  self->thread = std::thread([self] {
    try {
      self->io.run();
    } catch (const std::exception& e) {
      self->log->error("products: the server's thread stopped: {}", e.what());
    }
  });
  self->log->info("products on {}://{}/ (/catch-up/, /products/, /data/); indexes {}",
                  self->tls ? "https" : "http", local_endpoint().to_string(),
                  self->opts.key ? "signed" : "UNSIGNED (the feed has no key)");
}

void product_server::stop() {
  auto self = m_impl;
  if (!self) return;
  if (self->thread.joinable()) {
    asio::post(self->io, [self] { self->shutdown(); });
    // Coroutines still suspended (a download mid-write) end with the context.
    asio::post(self->io, [self] { self->io.stop(); });
    self->thread.join();
  } else {
    self->shutdown();
  }
}

endpoint product_server::local_endpoint() const {
  boost::system::error_code ec;
  const auto ep = m_impl->acceptor.local_endpoint(ec);
  endpoint e;
  if (ec) return e;
  e.port = ep.port();
  if (ep.address().is_v6()) {
    e.v6 = true;
    const auto b = ep.address().to_v6().to_bytes();
    std::copy(b.begin(), b.end(), e.addr.begin());
  } else {
    const auto b = ep.address().to_v4().to_bytes();
    std::copy(b.begin(), b.end(), e.addr.begin());
  }
  return e;
}

const product_server_stats& product_server::stats() const noexcept { return m_impl->stats; }

}  // namespace mcdist::feed
