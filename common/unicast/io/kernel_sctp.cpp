// Kernel SCTP (lksctp, IP protocol 132) behind the sctp_assoc interface: one-to-one style
// sockets (SOCK_STREAM, RFC 6458 section 3), streams chosen per message with an SCTP_SNDINFO
// control message, stream of received data from SCTP_RCVINFO. Only the kernel's socket API is
// used (the headers of libsctp-dev, no library calls), so a host without SCTP fails at socket()
// with EPROTONOSUPPORT, which becomes error::kernel_sctp_unavailable.
//
// This file must not include usrsctp.h: both define the RFC 6458 structures.

#include "common/net/udp.hpp"
#include "common/unicast/error.hpp"
#include "common/unicast/io/sctp_assoc.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <netinet/in.h>
#include <netinet/sctp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mcdist::unicast {

namespace {

using boost::asio::posix::stream_descriptor;

std::error_code errno_code(int e) { return {e, std::generic_category()}; }

/// socket() errors that mean "this kernel has no SCTP".
bool no_kernel_sctp(int e) {
  return e == EPROTONOSUPPORT || e == ESOCKTNOSUPPORT || e == EAFNOSUPPORT || e == EPFNOSUPPORT;
}

template <class T>
int set_opt(int fd, int level, int name, const T& v) {
  return ::setsockopt(fd, level, name, &v, sizeof v) == 0 ? 0 : errno;
}

/// Creates and configures a non-blocking one-to-one SCTP socket.
int open_socket(const endpoint& for_address, const sctp_socket_options& o, std::error_code& ec,
                std::string& step) {
  const int fd = ::socket(for_address.v6 ? AF_INET6 : AF_INET,
                          SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_SCTP);
  if (fd < 0) {
    const int e = errno;
    ec = no_kernel_sctp(e) ? make_error_code(error::kernel_sctp_unavailable) : errno_code(e);
    step = "socket(IPPROTO_SCTP): " + errno_code(e).message();
    return -1;
  }
  sctp_initmsg im{};
  im.sinit_num_ostreams = o.streams;
  im.sinit_max_instreams = o.streams;
  const int one = 1;
  const int buf = o.buffer_bytes;
  int e = 0;
  if ((e = set_opt(fd, IPPROTO_SCTP, SCTP_INITMSG, im)))
    step = "SCTP_INITMSG";
  else if ((e = set_opt(fd, IPPROTO_SCTP, SCTP_NODELAY, one)))
    step = "SCTP_NODELAY";
  else if ((e = set_opt(fd, IPPROTO_SCTP, SCTP_RECVRCVINFO, one)))
    step = "SCTP_RECVRCVINFO";
  else if ((e = set_opt(fd, SOL_SOCKET, SO_SNDBUF, buf)))
    step = "SO_SNDBUF";
  else if ((e = set_opt(fd, SOL_SOCKET, SO_RCVBUF, buf)))
    step = "SO_RCVBUF";
  if (e == 0 && o.initial_rto_ms > 0) {
    sctp_rtoinfo rto{};
    rto.srto_initial = o.initial_rto_ms;  // min and max 0: unchanged
    if ((e = set_opt(fd, IPPROTO_SCTP, SCTP_RTOINFO, rto))) step = "SCTP_RTOINFO";
  }
  if (e != 0) {
    ::close(fd);
    ec = errno_code(e);
    step += ": " + ec.message();
    return -1;
  }
  return fd;
}

class kernel_assoc final : public sctp_assoc {
 public:
  kernel_assoc(boost::asio::io_context& io, int fd, endpoint remote, bool connecting)
      : m_fd(io, fd), m_remote(remote), m_connecting(connecting) {}
  ~kernel_assoc() override { release(true); }

  void set_ready_handler(std::function<void()> fn) override {
    m_ready = std::move(fn);
    arm(stream_descriptor::wait_read, m_read_armed);
    if (m_connecting) arm(stream_descriptor::wait_write, m_write_armed);
  }

  std::error_code connect_status() override {
    if (!m_fd.is_open()) return error::aborted;
    int so_error = 0;
    socklen_t len = sizeof so_error;
    if (::getsockopt(m_fd.native_handle(), SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 &&
        so_error != 0)
      return errno_code(so_error);
    sockaddr_storage peer{};
    len = sizeof peer;
    if (::getpeername(m_fd.native_handle(), reinterpret_cast<sockaddr*>(&peer), &len) != 0)
      return std::make_error_code(std::errc::operation_in_progress);
    m_connecting = false;
    return {};
  }

  std::error_code send(std::uint16_t stream, std::span<const std::byte> message) override {
    if (!m_fd.is_open()) return error::aborted;
    iovec iov{const_cast<std::byte*>(message.data()), message.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(sctp_sndinfo))]{};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = IPPROTO_SCTP;
    c->cmsg_type = SCTP_SNDINFO;
    c->cmsg_len = CMSG_LEN(sizeof(sctp_sndinfo));
    sctp_sndinfo si{};
    si.snd_sid = stream;
    std::memcpy(CMSG_DATA(c), &si, sizeof si);
    const ssize_t n = ::sendmsg(m_fd.native_handle(), &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      const int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK)
        return std::make_error_code(std::errc::operation_would_block);
      return errno_code(e);
    }
    if (static_cast<std::size_t>(n) != message.size())
      return std::make_error_code(std::errc::message_size);
    return {};
  }

  std::error_code receive(std::span<std::byte> buffer, received& out) override {
    if (!m_fd.is_open()) return error::aborted;
    iovec iov{buffer.data(), buffer.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(sctp_rcvinfo)) + 64]{};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(m_fd.native_handle(), &mh, MSG_DONTWAIT);
    if (n < 0) {
      const int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK)
        return std::make_error_code(std::errc::operation_would_block);
      return errno_code(e);
    }
    out = {};
    out.bytes = static_cast<std::size_t>(n);
    out.end_of_message = (mh.msg_flags & MSG_EOR) != 0;
    out.notification = (mh.msg_flags & MSG_NOTIFICATION) != 0;
    out.stream = m_last_stream;
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level == IPPROTO_SCTP && c->cmsg_type == SCTP_RCVINFO &&
          c->cmsg_len >= CMSG_LEN(sizeof(sctp_rcvinfo))) {
        sctp_rcvinfo ri{};
        std::memcpy(&ri, CMSG_DATA(c), sizeof ri);
        out.stream = m_last_stream = ri.rcv_sid;
      }
    }
    return {};
  }

  void want_write() override { arm(stream_descriptor::wait_write, m_write_armed); }

  void shutdown_send() override {
    if (m_fd.is_open()) ::shutdown(m_fd.native_handle(), SHUT_WR);
  }
  void abort() override { release(true); }
  void close() override { release(false); }

  std::string describe() override {
    if (!m_fd.is_open()) return "closed";
    sctp_status st{};
    socklen_t len = sizeof st;
    if (::getsockopt(m_fd.native_handle(), IPPROTO_SCTP, SCTP_STATUS, &st, &len) != 0)
      return "no status";
    return describe_sctp_status(st);
  }

  std::uint64_t backlog() override {
    if (!m_fd.is_open()) return 0;
    sctp_status st{};
    socklen_t len = sizeof st;
    if (::getsockopt(m_fd.native_handle(), IPPROTO_SCTP, SCTP_STATUS, &st, &len) != 0) return 0;
    return std::uint64_t{st.sstat_unackdata} + st.sstat_penddata;
  }

  /// Linux reports no per-association send queue through SCTP_STATUS, so a kernel client
  /// uses one association (client_options::sctp_associations).
  std::optional<send_queue_state> send_queue() override { return std::nullopt; }

  std::uint16_t outbound_streams() override {
    if (!m_fd.is_open()) return 0;
    sctp_status st{};
    socklen_t len = sizeof st;
    if (::getsockopt(m_fd.native_handle(), IPPROTO_SCTP, SCTP_STATUS, &st, &len) != 0) return 0;
    return st.sstat_outstrms;
  }

  endpoint remote() const override { return m_remote; }

 private:
  void arm(stream_descriptor::wait_type w, bool& armed) {
    if (armed || !m_fd.is_open()) return;
    armed = true;
    m_fd.async_wait(w, [this, &armed, alive = m_alive](const boost::system::error_code& ec) {
      if (!*alive) return;
      armed = false;
      if (ec) return;
      if (m_ready) m_ready();
      // Level-triggered: the handler drained what it could; wait for more to read.
      if (*alive) arm(stream_descriptor::wait_read, m_read_armed);
    });
  }

  void release(bool abort) {
    *m_alive = false;
    m_ready = nullptr;
    if (!m_fd.is_open()) return;
    if (abort) {
      const linger l{1, 0};  // close sends an ABORT (RFC 6458 section 8.1.4)
      set_opt(m_fd.native_handle(), SOL_SOCKET, SO_LINGER, l);
    }
    boost::system::error_code ignored;
    m_fd.close(ignored);
  }

  stream_descriptor m_fd;
  endpoint m_remote;
  bool m_connecting;
  std::function<void()> m_ready;
  std::shared_ptr<bool> m_alive = std::make_shared<bool>(true);
  bool m_read_armed = false;
  bool m_write_armed = false;
  std::uint16_t m_last_stream = 0;
};

endpoint from_sockaddr(const sockaddr_storage& ss) {
  boost::asio::ip::tcp::endpoint ep;
  std::memcpy(ep.data(), &ss,
              ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
  return net::from_asio(boost::asio::ip::udp::endpoint(ep.address(), ep.port()));
}

boost::asio::ip::tcp::endpoint to_sockaddr(const endpoint& e) {
  const auto u = net::to_asio(e);
  return {u.address(), u.port()};
}

class kernel_listener final : public sctp_listener {
 public:
  kernel_listener(boost::asio::io_context& io, int fd, endpoint local, const sctp_socket_options& o)
      : m_io(io), m_fd(io, fd), m_local(local), m_options(o) {}
  ~kernel_listener() override { close(); }

  void set_accept_handler(std::function<void(std::unique_ptr<sctp_assoc>)> fn) override {
    m_accept = std::move(fn);
    do_wait();
  }
  endpoint local() const override { return m_local; }
  void close() override {
    *m_alive = false;
    boost::system::error_code ignored;
    m_fd.close(ignored);
  }
  sctp_listener_counters counters() const override { return {}; }

 private:
  void do_wait() {
    m_fd.async_wait(
        stream_descriptor::wait_read, [this, alive = m_alive](const boost::system::error_code& ec) {
          if (!*alive || ec) return;
          for (;;) {
            sockaddr_storage peer{};
            socklen_t len = sizeof peer;
            const int fd = ::accept4(m_fd.native_handle(), reinterpret_cast<sockaddr*>(&peer), &len,
                                     SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) break;
            const int one = 1;
            set_opt(fd, IPPROTO_SCTP, SCTP_NODELAY, one);
            set_opt(fd, IPPROTO_SCTP, SCTP_RECVRCVINFO, one);
            auto a = std::make_unique<kernel_assoc>(m_io, fd, from_sockaddr(peer), false);
            if (m_accept) m_accept(std::move(a));
            if (!*alive) return;
          }
          do_wait();
        });
  }

  boost::asio::io_context& m_io;
  stream_descriptor m_fd;
  endpoint m_local;
  sctp_socket_options m_options;
  std::function<void(std::unique_ptr<sctp_assoc>)> m_accept;
  std::shared_ptr<bool> m_alive = std::make_shared<bool>(true);
};

}  // namespace

std::unique_ptr<sctp_listener> open_kernel_sctp_listener(boost::asio::io_context& io,
                                                         const endpoint& local,
                                                         const sctp_socket_options& options,
                                                         std::error_code& ec, std::string& detail) {
  const std::string where = "kernel SCTP listener on " + local.to_string();
  std::string step;
  const int fd = open_socket(local, options, ec, step);
  if (fd < 0) {
    detail = where + ": " + (ec == error::kernel_sctp_unavailable ? ec.message() : step);
    return nullptr;
  }
  const int one = 1;
  set_opt(fd, SOL_SOCKET, SO_REUSEADDR, one);
  const auto sa = to_sockaddr(local);
  if (::bind(fd, sa.data(), static_cast<socklen_t>(sa.size())) != 0 || ::listen(fd, 128) != 0) {
    ec = errno_code(errno);
    ::close(fd);
    detail = where + ": bind/listen: " + ec.message();
    return nullptr;
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  ec.clear();
  return std::make_unique<kernel_listener>(io, fd, from_sockaddr(bound), options);
}

std::unique_ptr<sctp_assoc> kernel_sctp_connect(boost::asio::io_context& io, const endpoint& remote,
                                                const std::optional<endpoint>& local,
                                                const sctp_socket_options& options,
                                                std::error_code& ec, std::string& detail) {
  const std::string where = "kernel SCTP to " + remote.to_string();
  std::string step;
  const int fd = open_socket(remote, options, ec, step);
  if (fd < 0) {
    detail = where + ": " + (ec == error::kernel_sctp_unavailable ? ec.message() : step);
    return nullptr;
  }
  if (local) {
    const auto la = to_sockaddr(*local);
    if (::bind(fd, la.data(), static_cast<socklen_t>(la.size())) != 0) {
      ec = errno_code(errno);
      ::close(fd);
      detail = where + ": binding " + local->to_string() + ": " + ec.message();
      return nullptr;
    }
  }
  const auto ra = to_sockaddr(remote);
  if (::connect(fd, ra.data(), static_cast<socklen_t>(ra.size())) != 0 && errno != EINPROGRESS) {
    ec = errno_code(errno);
    ::close(fd);
    detail = where + ": connect: " + ec.message();
    return nullptr;
  }
  ec.clear();
  return std::make_unique<kernel_assoc>(io, fd, remote, true);
}

}  // namespace mcdist::unicast
