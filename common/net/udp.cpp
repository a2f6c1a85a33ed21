#include "common/net/udp.hpp"

#include <arpa/inet.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef IPV6_MULTICAST_ALL
#define IPV6_MULTICAST_ALL 29  // Linux 4.20
#endif

namespace mcdist::net {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

void set_int(int fd, int level, int name, int value, const char* what) {
  if (::setsockopt(fd, level, name, &value, sizeof value) != 0) fail(what);
}

/// Sets a buffer size, beyond net.core.*mem_max when we may (root: the FORCE variant).
void set_buffer(int fd, int name, int force_name, int bytes) {
  if (::setsockopt(fd, SOL_SOCKET, force_name, &bytes, sizeof bytes) != 0) {
    ::setsockopt(fd, SOL_SOCKET, name, &bytes, sizeof bytes);
  }
}

socklen_t to_sockaddr(const endpoint& e, sockaddr_storage& ss) {
  std::memset(&ss, 0, sizeof ss);
  if (e.v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(e.port);
    std::memcpy(&a->sin6_addr, e.addr.data(), 16);
    return sizeof(sockaddr_in6);
  }
  auto* a = reinterpret_cast<sockaddr_in*>(&ss);
  a->sin_family = AF_INET;
  a->sin_port = htons(e.port);
  std::memcpy(&a->sin_addr, e.addr.data(), 4);
  return sizeof(sockaddr_in);
}

/// An IPv6 multicast address's scope, its fourth nibble (RFC 4291 section 2.7).
unsigned multicast_scope_v6(const endpoint& group) { return group.addr[1] & 0x0f; }
/// Scopes up to this one (1 interface-local, 2 link-local) need an interface to mean anything.
constexpr unsigned link_local_scope = 2;

}  // namespace

endpoint from_sockaddr(const sockaddr_storage& ss) {
  endpoint e;
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    e.v6 = true;
    e.port = ntohs(a->sin6_port);
    std::memcpy(e.addr.data(), &a->sin6_addr, 16);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    e.port = ntohs(a->sin_port);
    std::memcpy(e.addr.data(), &a->sin_addr, 4);
  }
  return e;
}

udp::endpoint to_asio(const endpoint& e) {
  if (e.v6) {
    boost::asio::ip::address_v6::bytes_type b;
    std::memcpy(b.data(), e.addr.data(), 16);
    return {boost::asio::ip::address_v6(b), e.port};
  }
  boost::asio::ip::address_v4::bytes_type b;
  std::memcpy(b.data(), e.addr.data(), 4);
  return {boost::asio::ip::address_v4(b), e.port};
}

endpoint from_asio(const udp::endpoint& e) {
  endpoint out;
  out.port = e.port();
  if (e.address().is_v6()) {
    out.v6 = true;
    const auto b = e.address().to_v6().to_bytes();
    std::memcpy(out.addr.data(), b.data(), 16);
  } else {
    const auto b = e.address().to_v4().to_bytes();
    std::memcpy(out.addr.data(), b.data(), 4);
  }
  return out;
}

udp::socket open_sender_socket(boost::asio::io_context& io, const sender_socket_options& o) {
  udp::socket s(io);
  const auto local = to_asio(o.interface);
  s.open(local.protocol());
  const int fd = s.native_handle();
  set_buffer(fd, SO_SNDBUF, SO_SNDBUFFORCE, o.send_buffer);
  set_buffer(fd, SO_RCVBUF, SO_RCVBUFFORCE, o.receive_buffer);
  boost::system::error_code ec;
  s.bind(local, ec);
  if (ec) {
    throw std::system_error(ec.value(), std::generic_category(),
                            "cannot bind the sender socket to " + o.interface.to_string());
  }
  if (o.interface.v6) {
    set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, o.ttl, "IPV6_MULTICAST_HOPS");
    set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, 1, "IPV6_MULTICAST_LOOP");
    // Without it IPv6 multicast follows the route to the group, whatever address is bound.
    if (o.interface_index != 0) {
      const int index = static_cast<int>(o.interface_index);
      if (::setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, &index, sizeof index) != 0) {
        fail("IPV6_MULTICAST_IF index " + std::to_string(o.interface_index));
      }
    }
  } else {
    // ip_mreqn: the index picks the device, the address the source; with index 0 the kernel
    // finds the device that holds the address (and the wildcard resets to the route's).
    ip_mreqn m{};
    std::memcpy(&m.imr_address, o.interface.addr.data(), 4);
    m.imr_ifindex = static_cast<int>(o.interface_index);
    if (::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &m, sizeof m) != 0) {
      fail("IP_MULTICAST_IF " + o.interface.address_string() + " index " +
           std::to_string(o.interface_index));
    }
    const unsigned char ttl = static_cast<unsigned char>(o.ttl);
    if (::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl) != 0) {
      fail("IP_MULTICAST_TTL");
    }
    const unsigned char loop = 1;
    if (::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop) != 0) {
      fail("IP_MULTICAST_LOOP");
    }
  }
  s.non_blocking(true);
  return s;
}

udp::socket open_channel_socket(boost::asio::io_context& io, const channel_socket_options& o) {
  udp::socket s(io);
  auto group = to_asio(o.group);
  if (o.group.v6 && multicast_scope_v6(o.group) <= link_local_scope) {
    // The kernel refuses to bind an interface- or link-local scope address without its scope.
    auto a = group.address().to_v6();
    a.scope_id(o.interface_index);
    group.address(a);
  }
  s.open(group.protocol());
  const int fd = s.native_handle();
  set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
  set_buffer(fd, SO_RCVBUF, SO_RCVBUFFORCE, o.receive_buffer);
  boost::system::error_code ec;
  s.bind(group, ec);
  if (ec) {
    throw std::system_error(ec.value(), std::generic_category(),
                            "cannot bind to channel " + o.group.to_string());
  }
  const std::string where =
      o.group.address_string() + (o.source ? " from source " + o.source->address_string() : "") +
      " on " + o.interface.address_string() +
      (o.interface_index ? " (index " + std::to_string(o.interface_index) + ")" : "");
  if (o.source && !o.group.v6 && o.interface_index == 0 &&
      std::any_of(o.interface.addr.begin(), o.interface.addr.begin() + 4,
                  [](std::uint8_t b) { return b != 0; })) {
    // MCAST_JOIN_SOURCE_GROUP names the interface by index only. An IPv4 address no interface
    // lists (127.0.0.2) has none: IP_ADD_SOURCE_MEMBERSHIP names it by address, and the kernel
    // finds its device as IP_ADD_MEMBERSHIP does.
    ip_mreq_source m{};
    std::memcpy(&m.imr_multiaddr, o.group.addr.data(), 4);
    std::memcpy(&m.imr_interface, o.interface.addr.data(), 4);
    std::memcpy(&m.imr_sourceaddr, o.source->addr.data(), 4);
    if (::setsockopt(fd, IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP, &m, sizeof m) != 0) {
      fail("cannot join " + where);
    }
  } else if (o.source) {
    group_source_req r{};
    r.gsr_interface = o.interface_index;
    endpoint g = o.group;
    g.port = 0;
    endpoint src = *o.source;
    src.port = 0;
    to_sockaddr(g, r.gsr_group);
    to_sockaddr(src, r.gsr_source);
    if (::setsockopt(fd, o.group.v6 ? IPPROTO_IPV6 : IPPROTO_IP, MCAST_JOIN_SOURCE_GROUP, &r,
                     sizeof r) != 0) {
      fail("cannot join " + where);
    }
  } else if (o.group.v6) {
    ipv6_mreq m{};
    std::memcpy(&m.ipv6mr_multiaddr, o.group.addr.data(), 16);
    m.ipv6mr_interface = o.interface_index;
    if (::setsockopt(fd, IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
      fail("cannot join " + where);
    }
  } else {
    ip_mreqn m{};
    std::memcpy(&m.imr_multiaddr, o.group.addr.data(), 4);
    std::memcpy(&m.imr_address, o.interface.addr.data(), 4);
    m.imr_ifindex = static_cast<int>(o.interface_index);
    if (::setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
      fail("cannot join " + where);
    }
  }
  if (o.group.v6) {
    // Best effort (Linux 4.20 and later): without it the socket would also read the groups
    // other sockets of this host joined on its port.
    const int zero = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, &zero, sizeof zero);
  } else {
    set_int(fd, IPPROTO_IP, IP_MULTICAST_ALL, 0, "IP_MULTICAST_ALL");
  }
  if (o.gro) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof one);  // best effort
  }
  {
    // Best effort: each datagram then carries the socket's drop count and the time the kernel
    // received it (batch_receiver).
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one);
    ::setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
  }
  s.non_blocking(true);
  return s;
}

udp::socket open_unicast_socket(boost::asio::io_context& io, const endpoint& local,
                                int buffer_bytes) {
  udp::socket s(io);
  const auto ep = to_asio(local);
  s.open(ep.protocol());
  set_buffer(s.native_handle(), SO_RCVBUF, SO_RCVBUFFORCE, buffer_bytes);
  set_buffer(s.native_handle(), SO_SNDBUF, SO_SNDBUFFORCE, buffer_bytes);
  boost::system::error_code ec;
  s.bind(ep, ec);
  if (ec) {
    throw std::system_error(ec.value(), std::generic_category(),
                            "cannot bind a unicast socket to " + local.to_string());
  }
  s.non_blocking(true);
  return s;
}

namespace {
/// Control bytes per message: UDP_GRO's segment size, SO_RXQ_OVFL's count, SO_TIMESTAMPNS.
constexpr std::size_t control_space =
    CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(std::uint32_t)) + CMSG_SPACE(sizeof(timespec));
}  // namespace

batch_receiver::batch_receiver(std::size_t batch, std::size_t buffer_bytes)
    : m_batch(batch), m_buffer_bytes(buffer_bytes), m_storage(batch * buffer_bytes),
      m_control(batch * control_space), m_names(batch * sizeof(sockaddr_storage)),
      m_headers(batch * sizeof(mmsghdr)), m_iovecs(batch * sizeof(iovec)) {}

std::size_t batch_receiver::drain(
    int fd, std::size_t max_datagrams,
    const std::function<void(std::span<const std::byte>, const endpoint&)>& fn, std::error_code& ec,
    std::size_t max_bytes) {
  auto* hdrs = reinterpret_cast<mmsghdr*>(m_headers.data());
  auto* iovs = reinterpret_cast<iovec*>(m_iovecs.data());
  auto* names = reinterpret_cast<sockaddr_storage*>(m_names.data());
  std::size_t delivered = 0;
  std::size_t bytes = 0;
  while (delivered < max_datagrams && bytes < max_bytes) {
    const std::size_t batch =
        std::clamp<std::size_t>((max_bytes - bytes) / m_buffer_bytes, 1, m_batch);
    for (std::size_t i = 0; i < batch; ++i) {
      iovs[i].iov_base = m_storage.data() + i * m_buffer_bytes;
      iovs[i].iov_len = m_buffer_bytes;
      std::memset(&hdrs[i], 0, sizeof(mmsghdr));
      hdrs[i].msg_hdr.msg_iov = &iovs[i];
      hdrs[i].msg_hdr.msg_iovlen = 1;
      hdrs[i].msg_hdr.msg_name = &names[i];
      hdrs[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
      hdrs[i].msg_hdr.msg_control = m_control.data() + i * control_space;
      hdrs[i].msg_hdr.msg_controllen = control_space;
    }
    const int n = ::recvmmsg(fd, hdrs, static_cast<unsigned>(batch), MSG_DONTWAIT, nullptr);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        ec = std::error_code(errno, std::generic_category());
      }
      return delivered;
    }
    // The kernel dates datagrams in real time; the offset to the steady clock, read now that
    // they are all in, converts the dates (both clocks are slewed alike by NTP; a step of the
    // real-time clock in between shows as a date out of range, which is dropped).
    const auto read_at = std::chrono::steady_clock::now();
    const std::int64_t steady_minus_real =
        std::chrono::duration_cast<std::chrono::nanoseconds>(read_at.time_since_epoch()).count() -
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count();
    for (int i = 0; i < n; ++i) {
      const auto& mh = hdrs[i].msg_hdr;
      std::size_t segment = 0;
      m_drops = 0;  // the kernel adds SO_RXQ_OVFL only once the count is above 0
      m_arrival.reset();
      for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(const_cast<msghdr*>(&mh), c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
          int v = 0;
          std::memcpy(&v, CMSG_DATA(c), sizeof v);
          if (v > 0) segment = static_cast<std::size_t>(v);
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL &&
                   c->cmsg_len >= CMSG_LEN(sizeof(std::uint32_t))) {
          std::memcpy(&m_drops, CMSG_DATA(c), sizeof m_drops);
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
                   c->cmsg_len >= CMSG_LEN(sizeof(timespec))) {
          timespec ts{};
          std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
          const auto at = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(
              std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec + steady_minus_real));
          if (at <= read_at + std::chrono::milliseconds(1) &&
              at >= read_at - std::chrono::seconds(10)) {
            m_arrival = std::min(at, read_at);
          }
        }
      }
      const endpoint from = from_sockaddr(names[i]);
      const std::byte* base = m_storage.data() + static_cast<std::size_t>(i) * m_buffer_bytes;
      std::size_t len = hdrs[i].msg_len;
      if ((mh.msg_flags & MSG_TRUNC) != 0) len = 0;  // larger than any datagram we accept
      bytes += len;
      if (segment == 0 || segment >= len) {
        fn({base, len}, from);
        ++delivered;
      } else {
        for (std::size_t off = 0; off < len; off += segment) {
          fn({base + off, std::min(segment, len - off)}, from);
          ++delivered;
        }
      }
    }
    if (static_cast<std::size_t>(n) < batch) return delivered;
  }
  return delivered;
}

double receive_buffer_fill(int fd) noexcept {
  std::uint32_t mem[SK_MEMINFO_VARS] = {};
  socklen_t len = sizeof mem;
  if (::getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mem, &len) != 0 ||
      len < (SK_MEMINFO_RCVBUF + 1) * sizeof(std::uint32_t) || mem[SK_MEMINFO_RCVBUF] == 0) {
    return 0;
  }
  return static_cast<double>(mem[SK_MEMINFO_RMEM_ALLOC]) /
         static_cast<double>(mem[SK_MEMINFO_RCVBUF]);
}

std::size_t batch_sender::max_segments(std::size_t segment) noexcept {
  // The kernel's UDP_MAX_SEGMENTS is 64 on older kernels; the payload of one GSO send must fit
  // an IPv4 datagram (65507 bytes).
  return std::max<std::size_t>(1, std::min<std::size_t>(64, 65000 / segment));
}

std::size_t batch_sender::send(int fd, const endpoint& to, std::span<const gso_run> runs,
                               std::error_code& ec) {
  if (!m_gso) return send_plain(fd, to, runs, ec);
  std::size_t sent = 0;
  sockaddr_storage ss;
  const socklen_t len = to_sockaddr(to, ss);
  constexpr std::size_t max_batch = 64;
  constexpr std::size_t control_bytes = CMSG_SPACE(sizeof(std::uint16_t));
  std::size_t first = 0;
  while (first < runs.size()) {
    std::array<mmsghdr, max_batch> hdrs{};
    std::array<iovec, max_batch> iovs{};
    alignas(cmsghdr) std::array<char, max_batch * control_bytes> control{};
    const std::size_t n = std::min(max_batch, runs.size() - first);
    for (std::size_t i = 0; i < n; ++i) {
      const gso_run& r = runs[first + i];
      iovs[i] = {const_cast<std::byte*>(r.bytes.data()), r.bytes.size()};
      msghdr& mh = hdrs[i].msg_hdr;
      mh.msg_name = &ss;
      mh.msg_namelen = len;
      mh.msg_iov = &iovs[i];
      mh.msg_iovlen = 1;
      if (r.count() < 2) continue;  // one datagram: no segmentation to ask for
      mh.msg_control = control.data() + i * control_bytes;
      mh.msg_controllen = control_bytes;
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
      const auto seg16 = static_cast<std::uint16_t>(r.segment);
      std::memcpy(CMSG_DATA(c), &seg16, sizeof seg16);
    }
    // Fewer messages than asked means the next one failed; sending from it again returns
    // its error (sendmmsg(2)).
    const int k = ::sendmmsg(fd, hdrs.data(), static_cast<unsigned>(n), 0);
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return sent;
      if (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOPROTOOPT) {
        m_gso = false;  // no GSO on this path: fall back for good
        return sent + send_plain(fd, to, runs.subspan(first), ec);
      }
      ec = std::error_code(errno, std::generic_category());
      return sent;
    }
    if (k == 0) return sent;  // not documented for n > 0; never spin on it
    for (std::size_t i = 0; i < static_cast<std::size_t>(k); ++i) sent += runs[first + i].count();
    first += static_cast<std::size_t>(k);
  }
  return sent;
}

std::size_t batch_sender::send_plain(int fd, const endpoint& to, std::span<const gso_run> runs,
                                     std::error_code& ec) {
  // Every datagram of every run, in order, through send_many (64 per sendmmsg call).
  m_datagrams.clear();
  for (const gso_run& r : runs) {
    for (std::size_t off = 0; off < r.bytes.size(); off += r.segment)
      m_datagrams.push_back(r.bytes.subspan(off, std::min(r.segment, r.bytes.size() - off)));
  }
  return send_many(fd, to, m_datagrams, ec);
}

std::size_t send_many(int fd, const endpoint& to,
                      std::span<const std::span<const std::byte>> datagrams, std::error_code& ec) {
  sockaddr_storage ss;
  const socklen_t len = to_sockaddr(to, ss);
  constexpr std::size_t max_batch = 64;
  std::size_t sent = 0;
  while (sent < datagrams.size()) {
    mmsghdr hdrs[max_batch];
    iovec iovs[max_batch];
    const std::size_t n = std::min(max_batch, datagrams.size() - sent);
    for (std::size_t i = 0; i < n; ++i) {
      const auto d = datagrams[sent + i];
      iovs[i] = {const_cast<std::byte*>(d.data()), d.size()};
      std::memset(&hdrs[i], 0, sizeof(mmsghdr));
      hdrs[i].msg_hdr.msg_name = &ss;
      hdrs[i].msg_hdr.msg_namelen = len;
      hdrs[i].msg_hdr.msg_iov = &iovs[i];
      hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    const int r = ::sendmmsg(fd, hdrs, static_cast<unsigned>(n), 0);
    if (r < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) {
        ec = std::error_code(errno, std::generic_category());
      }
      return sent;
    }
    sent += static_cast<std::size_t>(r);
    if (static_cast<std::size_t>(r) < n) return sent;
  }
  return sent;
}

bool send_one(int fd, const endpoint& to, std::span<const std::byte> datagram,
              std::error_code& ec) {
  sockaddr_storage ss;
  const socklen_t len = to_sockaddr(to, ss);
  if (::sendto(fd, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&ss), len) <
      0) {
    ec = std::error_code(errno, std::generic_category());
    return false;
  }
  return true;
}

}  // namespace mcdist::net
