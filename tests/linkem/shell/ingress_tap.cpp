#include "tests/linkem/shell/ingress_tap.hpp"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <time.h>

#include <cerrno>
#include <cstring>

namespace mcdist::linkem {
namespace {

/// Frames taken from the socket per recvmmsg.
constexpr unsigned k_batch = 64;

/// ns of a timespec.
std::int64_t to_ns(const timespec& t) noexcept {
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

/// CLOCK_MONOTONIC - CLOCK_REALTIME now, ns.
std::int64_t monotonic_minus_realtime() noexcept {
  timespec r{};
  timespec m{};
  ::clock_gettime(CLOCK_REALTIME, &r);
  ::clock_gettime(CLOCK_MONOTONIC, &m);
  return to_ns(m) - to_ns(r);
}

void set_or_throw(int fd, int level, int name, const void* value, socklen_t len,
                  const std::string& what) {
  if (::setsockopt(fd, level, name, value, len) != 0) {
    throw setup_error(exit_runtime, errno_message("ingress tap: " + what));
  }
}

}  // namespace

ingress_tap::ingress_tap(const named_netns& ns, const std::string& ifname) {
  const netns_scope in_ns(ns.fd());
  m_fd = unique_fd(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  if (!m_fd) {
    throw setup_error(exit_runtime, errno_message("ingress tap: AF_PACKET socket in " + ns.name()));
  }
  // Outgoing frames only, cut to the head the matcher compares (the filter runs before the
  // frame is queued, so the rest costs nothing). Classic BPF: load the packet type, keep
  // PACKET_OUTGOING.
  std::array<sock_filter, 4> code = {{
      {BPF_LD | BPF_B | BPF_ABS, 0, 0, static_cast<std::uint32_t>(SKF_AD_OFF + SKF_AD_PKTTYPE)},
      {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, PACKET_OUTGOING},
      {BPF_RET | BPF_K, 0, 0, static_cast<std::uint32_t>(tap_record::k_head_bytes)},
      {BPF_RET | BPF_K, 0, 0, 0},
  }};
  sock_fprog prog{static_cast<unsigned short>(code.size()), code.data()};
  set_or_throw(m_fd.get(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog, "SO_ATTACH_FILTER");
  const int on = 1;
  set_or_throw(m_fd.get(), SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on, "SO_TIMESTAMPNS");
  // The filter cut the frame: its whole length comes in the auxiliary data (tp_len).
  set_or_throw(m_fd.get(), SOL_PACKET, PACKET_AUXDATA, &on, sizeof on, "PACKET_AUXDATA");
  const int buffer = k_receive_buffer;
  if (::setsockopt(m_fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer) != 0) {
    set_or_throw(m_fd.get(), SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer, "SO_RCVBUF");
  }
  m_ifindex = static_cast<int>(::if_nametoindex(ifname.c_str()));
  if (m_ifindex == 0) {
    throw setup_error(exit_runtime, errno_message("ingress tap: no device " + ifname));
  }
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = m_ifindex;
  if (::bind(m_fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    throw setup_error(exit_runtime, errno_message("ingress tap: bind to " + ifname));
  }
}

std::size_t ingress_tap::drain(ingress_stamper& to) {
  std::array<std::array<std::byte, tap_record::k_head_bytes>, k_batch> heads{};
  std::array<std::array<char, CMSG_SPACE(sizeof(timespec)) + CMSG_SPACE(sizeof(tpacket_auxdata))>,
             k_batch>
      controls{};
  std::array<sockaddr_ll, k_batch> from{};
  std::array<iovec, k_batch> iov{};
  std::array<mmsghdr, k_batch> msgs{};
  std::size_t moved = 0;
  const std::int64_t offset = monotonic_minus_realtime();
  for (;;) {
    for (unsigned i = 0; i < k_batch; ++i) {
      iov[i] = {heads[i].data(), heads[i].size()};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_control = controls[i].data();
      msgs[i].msg_hdr.msg_controllen = controls[i].size();
      msgs[i].msg_hdr.msg_name = &from[i];
      msgs[i].msg_hdr.msg_namelen = sizeof from[i];
    }
    const int n = ::recvmmsg(m_fd.get(), msgs.data(), k_batch, MSG_DONTWAIT, nullptr);
    if (n <= 0) {
      return moved;
    }
    for (int i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (from[k].sll_pkttype != PACKET_OUTGOING || from[k].sll_ifindex != m_ifindex) {
        // The filter and the bind keep these out; this is a frame of any device of the
        // namespace (lo) queued before they took effect.
        continue;
      }
      tap_record r;
      r.head_len = static_cast<std::uint8_t>(std::min<std::size_t>(msgs[k].msg_len, r.head.size()));
      std::memcpy(r.head.data(), heads[k].data(), r.head_len);
      for (cmsghdr* c = CMSG_FIRSTHDR(&msgs[k].msg_hdr); c != nullptr;
           c = CMSG_NXTHDR(&msgs[k].msg_hdr, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
          timespec t{};
          std::memcpy(&t, CMSG_DATA(c), sizeof t);
          r.at_ns = to_ns(t) + offset;
        } else if (c->cmsg_level == SOL_PACKET && c->cmsg_type == PACKET_AUXDATA) {
          tpacket_auxdata aux{};
          std::memcpy(&aux, CMSG_DATA(c), sizeof aux);
          r.length = aux.tp_len;
        }
      }
      if (r.at_ns == 0 || r.length == 0) {
        continue;  // undated: the frame keeps its read time
      }
      to.on_tap(r);
      ++moved;
    }
    if (static_cast<unsigned>(n) < k_batch) {
      return moved;
    }
  }
}

std::uint64_t ingress_tap::kernel_drops() noexcept {
  // PACKET_STATISTICS resets the counters on every read: keep the sum.
  tpacket_stats st{};
  socklen_t len = sizeof st;
  if (::getsockopt(m_fd.get(), SOL_PACKET, PACKET_STATISTICS, &st, &len) != 0) {
    return m_drops;
  }
  m_drops += st.tp_drops;
  return m_drops;
}

}  // namespace mcdist::linkem
