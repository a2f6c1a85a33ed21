#include "tests/linkem/shell/tun_device.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tests/linkem/core/packet.hpp"

namespace mcdist::linkem {
namespace {

// UDP segmentation offload flags, Linux 6.2 uapi/linux/if_tun.h (absent from older
// headers such as Debian 12's).
constexpr unsigned k_tun_f_uso4 = 0x20;
constexpr unsigned k_tun_f_uso6 = 0x40;

void set_ifreq_name(ifreq& ifr, const std::string& name) {
  std::memset(&ifr, 0, sizeof ifr);
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
}

sockaddr_in make_sockaddr(std::uint32_t addr) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(addr);
  return sin;
}

void ioctl_or_throw(int fd, unsigned long request, void* arg, const std::string& what) {
  if (::ioctl(fd, request, arg) != 0) {
    throw setup_error(exit_runtime, errno_message(what));
  }
}

void set_up(int sock, const std::string& name, short extra_flags) {
  ifreq ifr{};
  set_ifreq_name(ifr, name);
  ioctl_or_throw(sock, SIOCGIFFLAGS, &ifr, "SIOCGIFFLAGS " + name);
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | extra_flags);
  ioctl_or_throw(sock, SIOCSIFFLAGS, &ifr, "bring up " + name);
}

void add_route(int sock, const std::string& dev, std::uint32_t dst, std::uint32_t mask) {
  rtentry rt{};
  const sockaddr_in d = make_sockaddr(dst);
  const sockaddr_in m = make_sockaddr(mask);
  std::memcpy(&rt.rt_dst, &d, sizeof d);
  std::memcpy(&rt.rt_genmask, &m, sizeof m);
  rt.rt_flags = RTF_UP;
  std::string devname = dev;  // rt_dev is a non-const char*
  rt.rt_dev = devname.data();
  if (::ioctl(sock, SIOCADDRT, &rt) != 0 && errno != EEXIST) {
    throw setup_error(exit_runtime, errno_message("add route via " + dev));
  }
}

void write_sysctl(const std::string& path, const std::string& value) {
  std::ofstream f(path);
  f << value;  // best effort: absent (e.g. IPv6 disabled in the kernel) is fine
}

}  // namespace

unique_fd create_tun(const named_netns& ns, const tun_options& options, tun_info& info) {
  const netns_scope in_ns(ns.fd());

  unique_fd fd(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    throw setup_error(exit_no_tun, errno_message("TUN devices unavailable: open /dev/net/tun"));
  }
  ifreq ifr{};
  set_ifreq_name(ifr, options.ifname);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI | IFF_VNET_HDR;
  if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0) {
    throw setup_error(exit_no_tun, errno_message("TUN devices unavailable: TUNSETIFF " +
                                                 options.ifname + " in " + ns.name()));
  }
  int vnet_size = static_cast<int>(k_vnet_header_size);
  ioctl_or_throw(fd.get(), TUNSETVNETHDRSZ, &vnet_size, "TUNSETVNETHDRSZ");

  info = tun_info{};
  if (options.offload) {
    // Ask for the most, fall back step by step: USO needs Linux 6.2.
    const unsigned base = TUN_F_CSUM;
    const unsigned tso = TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
    const unsigned uso = k_tun_f_uso4 | k_tun_f_uso6;
    if (::ioctl(fd.get(), TUNSETOFFLOAD, base | tso | uso) == 0) {
      info = {true, true, true};
    } else if (::ioctl(fd.get(), TUNSETOFFLOAD, base | tso) == 0) {
      info = {true, true, false};
    } else if (::ioctl(fd.get(), TUNSETOFFLOAD, base) == 0) {
      info = {true, false, false};
    }
  }

  unique_fd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) {
    throw setup_error(exit_runtime, errno_message("socket in " + ns.name()));
  }
  set_up(sock.get(), "lo", 0);

  set_ifreq_name(ifr, options.ifname);
  const sockaddr_in addr = make_sockaddr(options.address);
  std::memcpy(&ifr.ifr_addr, &addr, sizeof addr);
  ioctl_or_throw(sock.get(), SIOCSIFADDR, &ifr, "set address of " + options.ifname);

  set_ifreq_name(ifr, options.ifname);
  const std::uint32_t mask = options.prefix_len == 0 ? 0 : ~0U << (32U - options.prefix_len);
  const sockaddr_in netmask = make_sockaddr(mask);
  std::memcpy(&ifr.ifr_netmask, &netmask, sizeof netmask);
  ioctl_or_throw(sock.get(), SIOCSIFNETMASK, &ifr, "set netmask of " + options.ifname);

  set_ifreq_name(ifr, options.ifname);
  ifr.ifr_mtu = static_cast<int>(options.mtu);
  ioctl_or_throw(sock.get(), SIOCSIFMTU, &ifr, "set MTU of " + options.ifname);

  set_ifreq_name(ifr, options.ifname);
  ifr.ifr_qlen = static_cast<int>(options.txqueuelen);
  ioctl_or_throw(sock.get(), SIOCSIFTXQLEN, &ifr, "set txqueuelen of " + options.ifname);

  // Before the device is up, so that no router solicitation or MLD report is sent.
  write_sysctl("/proc/sys/net/ipv6/conf/" + options.ifname + "/disable_ipv6", "1");

  set_up(sock.get(), options.ifname, IFF_MULTICAST);

  // The kernel adds the subnet route itself when the address is configured on the up
  // device; only the multicast range needs an explicit route.
  add_route(sock.get(), options.ifname, 0xE0000000U, 0xF0000000U);  // 224.0.0.0/4
  return fd;
}

std::optional<std::uint64_t> read_tx_dropped(const named_netns& ns, const std::string& ifname) {
  try {
    const netns_scope in_ns(ns.fd());
    std::ifstream dev("/proc/thread-self/net/dev");
    std::string line;
    while (std::getline(dev, line)) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) {
        continue;
      }
      std::string name = line.substr(0, colon);
      name.erase(0, name.find_first_not_of(' '));
      if (name != ifname) {
        continue;
      }
      // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets
      // errs drop ...
      std::istringstream fields(line.substr(colon + 1));
      std::uint64_t v = 0;
      for (int i = 0; i < 12 && (fields >> v); ++i) {
        if (i == 11) {
          return v;
        }
      }
    }
  } catch (const setup_error&) {
  }
  return std::nullopt;
}

}  // namespace mcdist::linkem
