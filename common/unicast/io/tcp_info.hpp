#pragma once
/// @file
/// What the kernel reports of one TCP connection's sending (TCP_INFO, Linux), for the
/// multi-socket server's send queue (common/unicast/send_queue.hpp). A file of its own because
/// <linux/tcp.h>, which has the fields, cannot be included beside <netinet/tcp.h>.

#include <cstdint>

namespace mcdist::unicast {

/// The rate the kernel paces socket `fd` at, bytes/s (tcpi_pacing_rate, Linux 3.15+; computed
/// for every congestion control: BBR's pacing rate, else 2 x or 1.2 x cwnd / srtt).
/// @return 0 when unknown: not a TCP socket, an old kernel, or no rate set yet (~0, unlimited)
std::uint64_t kernel_pacing_rate(int fd) noexcept;

}  // namespace mcdist::unicast
