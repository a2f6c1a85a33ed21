#include "common/unicast/io/tcp_info.hpp"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace mcdist::unicast {

std::uint64_t kernel_pacing_rate(int fd) noexcept {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return 0;
  // An older kernel fills less of the struct than this header declares.
  if (len < offsetof(tcp_info, tcpi_pacing_rate) + sizeof ti.tcpi_pacing_rate) return 0;
  if (ti.tcpi_pacing_rate == ~std::uint64_t{0}) return 0;
  return ti.tcpi_pacing_rate;
}

}  // namespace mcdist::unicast
