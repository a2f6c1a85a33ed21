#include "feed/control_server.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <list>
#include <system_error>
#include <vector>

namespace mcdist::feed {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

/// After a failed accept (EMFILE) wait this long before the next, so a descriptor shortage does
/// not spin the io thread (as common/http/server.cpp).
constexpr auto accept_backoff = std::chrono::milliseconds(100);

/// Socket file mode: owner and group read/write, nobody else (connect() needs write permission).
constexpr mode_t socket_mode = 0660;

[[noreturn]] void fail_errno(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

gid_t group_id(const std::string& name, const std::filesystem::path& path) {
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  const int rc = ::getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found);
  if (rc != 0 || !found)
    throw std::runtime_error("control socket " + path.string() + ": group '" + name +
                             "' does not exist (control_group in the configuration; create it "
                             "with groupadd or leave control_group out)");
  return found->gr_gid;
}

std::optional<std::uint32_t> peer_uid(local::socket& s) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return std::nullopt;
  return static_cast<std::uint32_t>(cred.uid);
}

}  // namespace

struct control_server::impl {
  struct conn {
    explicit conn(local::socket s) : sock(std::move(s)), timer(sock.get_executor()) {}
    local::socket sock;
    asio::steady_timer timer;
    std::chrono::steady_clock::time_point deadline;
    /// Awaiting a request line (none yet, or part of one): may be evicted. False from a whole
    /// line until its answer is written.
    bool waiting = true;
    /// Since when it has been waiting (accept, or its last answer written).
    std::chrono::steady_clock::time_point idle_since = std::chrono::steady_clock::now();
    bool closed = false;

    void close() {
      if (closed) return;
      closed = true;
      boost::system::error_code ignored;
      sock.shutdown(local::socket::shutdown_both, ignored);
      sock.close(ignored);
      timer.cancel();
    }
  };

  impl(asio::io_context& io_, control_handler& h_, control_limits l,
       std::shared_ptr<spdlog::logger> lg)
      : io(io_), acceptor(io_), h(&h_), limits(l), log(std::move(lg)) {}

  asio::io_context& io;
  local::acceptor acceptor;
  control_handler* h;
  control_limits limits;
  std::shared_ptr<spdlog::logger> log;
  std::filesystem::path path;
  dev_t dev = 0;
  ino_t ino = 0;
  bool stopped = false;
  std::uint64_t bad = 0;
  std::list<std::shared_ptr<conn>> conns;

  void forget(const std::shared_ptr<conn>& c) { conns.remove(c); }

  /// Closes the connection that has waited longest for a request line, to make room for a new
  /// one. @return false if every connection has a request under way (none is closed).
  bool evict_idlest() {
    auto idlest = conns.end();
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      if ((*it)->waiting && (idlest == conns.end() || (*it)->idle_since < (*idlest)->idle_since))
        idlest = it;
    }
    if (idlest == conns.end()) return false;
    (*idlest)->close();  // its serve() and watchdog see `closed` and end
    conns.erase(idlest);
    return true;
  }

  void stop() {
    if (stopped) return;
    stopped = true;
    boost::system::error_code ignored;
    acceptor.close(ignored);
    for (auto& c : conns) c->close();
    conns.clear();
    h = nullptr;
    // Remove the file only if it is still ours (not one a second daemon made since).
    struct stat st {};
    if (!path.empty() && ::lstat(path.c_str(), &st) == 0 && st.st_dev == dev && st.st_ino == ino)
      ::unlink(path.c_str());
  }

  static asio::awaitable<void> accept_loop(std::shared_ptr<impl> self) {
    while (!self->stopped) {
      auto [ec, sock] = co_await self->acceptor.async_accept(use_tuple);
      if (self->stopped || ec == asio::error::operation_aborted) co_return;
      if (ec) {
        if (self->log) self->log->debug("control: accept failed: {}", ec.message());
        asio::steady_timer t(self->io, accept_backoff);
        co_await t.async_wait(use_tuple);
        continue;
      }
      if (self->conns.size() >= self->limits.max_connections) {
        if (!self->evict_idlest()) {
          if (self->log)
            self->log->debug("control: connection refused, {} open and busy", self->conns.size());
          boost::system::error_code ignored;
          sock.close(ignored);
          continue;
        }
        if (self->log)
          self->log->debug("control: closed the connection idle longest for a new one");
      }
      auto c = std::make_shared<conn>(std::move(sock));
      self->conns.push_back(c);
      c->deadline = c->idle_since + self->limits.first_request_timeout;
      asio::co_spawn(self->io, watchdog(self, c), asio::detached);
      asio::co_spawn(self->io, serve(self, c), asio::detached);
    }
  }

  /// Closes the connection when its deadline passes (a request or an answer taking too long).
  static asio::awaitable<void> watchdog(std::shared_ptr<impl> self, std::shared_ptr<conn> c) {
    while (!c->closed && !self->stopped) {
      c->timer.expires_at(c->deadline);
      co_await c->timer.async_wait(use_tuple);
      if (c->closed || self->stopped) co_return;
      if (c->deadline <= std::chrono::steady_clock::now()) {
        ++self->bad;
        if (self->log) self->log->debug("control: connection timed out");
        c->close();
        self->forget(c);  // now, not when serve() notices: its slot is free at once
        co_return;
      }
    }
  }

  /// Starts the handler's answer to one request line (control_protocol answer_async) and
  /// completes `handler` with it through the io_context (posted: a handler that answers at once
  /// does not resume the waiting coroutine from inside its own initiation).
  struct answer_initiation {
    std::shared_ptr<impl> self;
    std::string line;
    std::optional<std::uint32_t> uid;

    template <class Handler>
    void operator()(Handler handler) {
      auto shared = std::make_shared<Handler>(std::move(handler));
      auto& ctx = self->io;
      answer_async(*self->h, line, uid, [&ctx, shared](nlohmann::json j) {
        asio::post(ctx, [shared, j = std::move(j)]() mutable { (*shared)(std::move(j)); });
      });
    }
  };

  static asio::awaitable<void> serve(std::shared_ptr<impl> self, std::shared_ptr<conn> c) {
    const auto uid = peer_uid(c->sock);
    // One byte more than the longest line, for its '\n'.
    std::string buf;
    auto dyn = asio::dynamic_buffer(buf, max_request_bytes + 1);
    for (bool first = true;; first = false) {
      c->waiting = true;
      // The first request's deadline (first_request_timeout) runs from the accept.
      if (!first) {
        c->idle_since = std::chrono::steady_clock::now();
        c->deadline = c->idle_since + self->limits.request_timeout;
        c->timer.cancel();  // the watchdog re-arms with the new deadline
      }
      auto [ec, n] = co_await asio::async_read_until(c->sock, dyn, '\n', use_tuple);
      if (self->stopped || c->closed) co_return;
      c->waiting = false;
      std::string out;
      bool last = false;
      if (ec == asio::error::not_found) {
        // The buffer is full without a newline: answer once, then close (the rest of the line
        // would be read as a next request).
        ++self->bad;
        out = to_line({{"ok", false},
                       {"error", "request line longer than " + std::to_string(max_request_bytes) +
                                     " bytes"}});
        last = true;
      } else if (ec) {
        break;  // end of stream, reset, or closed by the watchdog
      } else {
        std::string line(buf.data(), n - 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        dyn.consume(n);
        // The answer may come later (the daemon runs journal queries on a worker thread): the
        // client's deadline does not run meanwhile, the daemon's own time is not its fault.
        c->deadline = std::chrono::steady_clock::time_point::max();
        c->timer.cancel();
        // (A named initiation and awaitable: GCC 12 mis-destroys a lambda's captures inside
        // a co_await expression.)
        auto pending = asio::async_initiate<decltype(asio::use_awaitable), void(nlohmann::json)>(
            answer_initiation{self, std::move(line), uid}, asio::use_awaitable);
        const nlohmann::json a = co_await std::move(pending);
        if (self->stopped || c->closed) co_return;
        if (!a.value("ok", false)) {
          ++self->bad;
          if (self->log) self->log->debug("control: {}", a.value("error", std::string()));
        }
        out = to_line(a);
      }
      c->deadline = std::chrono::steady_clock::now() + self->limits.write_timeout;
      c->timer.cancel();
      auto [wec, written] = co_await asio::async_write(c->sock, asio::buffer(out), use_tuple);
      (void)written;
      if (self->stopped || c->closed) co_return;
      if (wec || last) break;  // a client gone mid-answer: EPIPE (no SIGPIPE, MSG_NOSIGNAL)
      if (buf.capacity() > 4 * max_request_bytes) buf.shrink_to_fit();
    }
    c->close();
    self->forget(c);
  }
};

control_server::control_server(asio::io_context& io, const control_socket_options& opts,
                               control_handler& handler, control_limits limits,
                               std::shared_ptr<spdlog::logger> log)
    : m_impl(std::make_shared<impl>(io, handler, limits, std::move(log))) {
  const auto& path = opts.path;
  const std::string where = "control socket " + path.string();
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      fail_errno(EEXIST, where +
                             " exists and is not a socket: not removing it; fix "
                             "control_socket in the configuration");
    local::socket probe(io);
    boost::system::error_code ec;
    probe.connect(local::endpoint(path.string()), ec);
    if (!ec) fail_errno(EADDRINUSE, where + " is in use: another mcdist-feed is running with it");
    ::unlink(path.c_str());  // left by a daemon that crashed
  }
  const std::optional<gid_t> gid =
      opts.group.empty() ? std::nullopt : std::optional<gid_t>(group_id(opts.group, path));

  auto& a = m_impl->acceptor;
  boost::system::error_code ec;
  a.open(local(), ec);
  if (!ec) {
    // The file bind() creates gets 0777 & ~umask: tighten the umask for that one call so the
    // socket is never wider than socket_mode (umask is per process: this runs at start-up,
    // before the daemon has other threads that create files).
    const mode_t old = ::umask(0117);
    a.bind(local::endpoint(path.string()), ec);
    ::umask(old);
  }
  if (ec) throw std::system_error(ec, "cannot bind " + where);
  try {
    if (::chmod(path.c_str(), socket_mode) != 0) fail_errno(errno, "cannot chmod " + where);
    if (gid && ::chown(path.c_str(), static_cast<uid_t>(-1), *gid) != 0)
      fail_errno(errno, "cannot give " + where + " to group '" + opts.group +
                            "' (the daemon's user must be a member of it)");
    a.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw std::system_error(ec, "cannot listen on " + where);
  } catch (...) {
    ::unlink(path.c_str());
    throw;
  }
  if (::lstat(path.c_str(), &st) == 0) {
    m_impl->dev = st.st_dev;
    m_impl->ino = st.st_ino;
  }
  m_impl->path = path;
}

control_server::~control_server() { m_impl->stop(); }

void control_server::start() {
  if (m_impl->stopped) return;
  asio::co_spawn(m_impl->io, impl::accept_loop(m_impl), asio::detached);
}

void control_server::stop() { m_impl->stop(); }

const std::filesystem::path& control_server::path() const noexcept { return m_impl->path; }

std::size_t control_server::connections() const noexcept { return m_impl->conns.size(); }

std::uint64_t control_server::bad_requests() const noexcept { return m_impl->bad; }

}  // namespace mcdist::feed
