#pragma once
/// @file
/// UDP socket plumbing shared by the two shells: multicast set-up, batched receive with
/// recvmmsg and UDP GRO, batched send with UDP GSO (Linux 4.18+, "UDP GSO" commit: one
/// sendmsg carries up to 64 KiB of equal-sized datagrams), endpoint conversion. The sockets are
/// Asio sockets so the shells can async_wait on them; the hot path uses the native handle.

#include "common/endpoint.hpp"

#include <boost/asio/ip/udp.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

namespace mcdist::net {

using udp = boost::asio::ip::udp;

/// Converts between our endpoint and Asio's.
udp::endpoint to_asio(const endpoint& e);
endpoint from_asio(const udp::endpoint& e);
/// The endpoint a recvfrom(2) or recvmmsg(2) filled in (AF_INET or AF_INET6).
endpoint from_sockaddr(const sockaddr_storage& ss);

/// Options for the sender's socket.
struct sender_socket_options {
  endpoint interface;         ///< local address bound, the source of every datagram; port 0 = any
  int ttl = 1;                ///< IP_MULTICAST_TTL; 1 keeps traffic on the local network
  int send_buffer = 8 << 20;  ///< SO_SNDBUF(FORCE), bytes
  int receive_buffer = 8 << 20;  ///< SO_RCVBUF(FORCE), bytes: NAKs of hundreds of receivers
  /// Index of the interface multicast leaves by (interface.hpp resolve_interface); 0: the
  /// kernel picks by `interface`'s address (IPv4) or by route (IPv6, and the wildcard).
  unsigned interface_index = 0;
};

/// Opens and binds the sender's socket: multicast out through the configured interface
/// (IPv4 IP_MULTICAST_IF with an ip_mreqn of the address and the index, IPv6
/// IPV6_MULTICAST_IF with the index; RFC 3493 section 5.2), loopback of our own multicast on
/// (receivers on this host must see it), unicast control in.
/// @throws std::system_error naming the failing step
udp::socket open_sender_socket(boost::asio::io_context& io, const sender_socket_options& o);

/// Options for a receiver's channel socket.
struct channel_socket_options {
  endpoint group;      ///< multicast group + port
  endpoint interface;  ///< local address to join on
  int receive_buffer =
      32 << 20;     ///< bytes; absorbs bursts while storage catches up (mcdistd: socket_buffer)
  bool gro = true;  ///< ask for UDP GRO (coalesced datagrams)
  /// Index of the interface to join on (interface.hpp resolve_interface); 0: the kernel picks
  /// by `interface`'s address (IPv4) or by route.
  unsigned interface_index = 0;
  /// Source-specific join (S,G): only datagrams from this address reach the socket.
  std::optional<endpoint> source;
};

/// Opens a socket bound to group:port with SO_REUSEADDR (several daemons on one host each get
/// a copy) and joins the group on the configured interface: any-source (IPv4 IP_ADD_MEMBERSHIP
/// with an ip_mreqn of address and index, IPv6 IPV6_ADD_MEMBERSHIP with the index), or with
/// `source` set source-specific, MCAST_JOIN_SOURCE_GROUP (RFC 3678 section 5.2, the
/// protocol-independent API; IGMPv3 RFC 3376 / MLDv2 RFC 3810 carry the source filter to the
/// routers) and, for IPv4 with an address the kernel must look up itself (index 0),
/// IP_ADD_SOURCE_MEMBERSHIP (RFC 3678 section 4.1.3). The kernel then filters by source: a
/// datagram to the group from another host never reaches the socket. IP_MULTICAST_ALL and
/// IPV6_MULTICAST_ALL off: the socket sees only its own memberships, not another socket's
/// joins of other groups on this port. An IPv6 group of interface- or link-local scope
/// (ffx1::, ffx2::) is bound with the interface index as its scope id, which the kernel needs.
/// @throws std::system_error naming the failing step
udp::socket open_channel_socket(boost::asio::io_context& io, const channel_socket_options& o);

/// Opens a unicast socket on `local` (port 0 = ephemeral) for control traffic.
udp::socket open_unicast_socket(boost::asio::io_context& io, const endpoint& local,
                                int buffer_bytes = 4 << 20);

/// Reads every datagram queued on `fd` (non-blocking) with recvmmsg, splitting GRO-coalesced
/// buffers at their segment size, and calls `fn(datagram, from)` for each. Stops when the
/// socket is drained or after `max_datagrams`.
class batch_receiver {
 public:
  /// @param batch        messages per recvmmsg call
  /// @param buffer_bytes bytes per message buffer: 65536 when GRO is on, else the largest datagram
  batch_receiver(std::size_t batch, std::size_t buffer_bytes);

  /// @param max_bytes  stop once this many bytes were read (checked per recvmmsg call, which
  ///                   then asks for no more messages than fit, at one buffer each)
  /// @return datagrams delivered; sets `ec` on a socket error other than EAGAIN
  std::size_t drain(int fd, std::size_t max_datagrams,
                    const std::function<void(std::span<const std::byte>, const endpoint&)>& fn,
                    std::error_code& ec, std::size_t max_bytes = SIZE_MAX);

  /// During `fn`: the socket's count of datagrams its kernel dropped for a full receive buffer,
  /// as of the moment the datagram being delivered was queued (SO_RXQ_OVFL, which
  /// open_channel_socket turns on; 0 when the socket has dropped none or does not ask). A count
  /// higher than the previous datagram's means datagrams were lost just before this one.
  std::uint32_t socket_drops() const noexcept { return m_drops; }

  /// During `fn`: when the kernel received the datagram being delivered, on the steady clock
  /// (SO_TIMESTAMPNS, which open_channel_socket turns on: the kernel dates it in real time, and
  /// this converts it with the two clocks' offset read once per recvmmsg); nothing when the
  /// socket does not ask, or the date is more than 10 s old (the real-time clock was set).
  /// A receiver that reads in batches, when its thread gets the CPU, would otherwise date a
  /// whole batch at its read: a receive rate measured over 10 ms then counts a batch read late
  /// in the next window (docs/design-notes.md "Rate auto").
  std::optional<std::chrono::steady_clock::time_point> arrival() const noexcept {
    return m_arrival;
  }

 private:
  std::size_t m_batch;
  std::size_t m_buffer_bytes;
  std::vector<std::byte> m_storage;
  std::vector<std::byte> m_control;
  std::vector<char> m_names;
  std::vector<char> m_headers;
  std::vector<char> m_iovecs;
  std::uint32_t m_drops = 0;
  std::optional<std::chrono::steady_clock::time_point> m_arrival;
};

/// The share of `fd`'s receive buffer its queued datagrams take, 0 to 1 (SO_MEMINFO: the
/// kernel's receive-queue bytes, skb overhead included, over the buffer size); 0 when the
/// kernel does not say.
double receive_buffer_fill(int fd) noexcept;

/// Datagrams laid out back to back in `bytes`, each `segment` bytes except possibly the last:
/// what one UDP GSO send carries (at most batch_sender::max_segments(segment) of them).
struct gso_run {
  std::span<const std::byte> bytes;
  std::size_t segment = 0;
  /// Datagrams in the run.
  std::size_t count() const noexcept {
    return segment ? (bytes.size() + segment - 1) / segment : 0;
  }
};

/// Sends datagrams to one destination, several per system call: with UDP GSO where the kernel
/// takes it, else with sendmmsg.
class batch_sender {
 public:
  /// @param gso  false: never ask for GSO (as after the kernel refused it once)
  explicit batch_sender(bool gso = true) noexcept : m_gso(gso) {}

  /// Sends `runs` in order: with GSO, one message per run and up to 64 runs per sendmmsg(2)
  /// call (a run goes whole or not at all), so the short last block of each small file does
  /// not cost a system call of its own; without GSO, every datagram of every run through
  /// send_many (64 per sendmmsg call).
  /// @return datagrams sent, counted from the first run's first (fewer when the socket's
  ///         buffer is full: EAGAIN, ENOBUFS, ec stays clear); sets ec on other errors.
  std::size_t send(int fd, const endpoint& to, std::span<const gso_run> runs, std::error_code& ec);

  /// Largest number of segments one call may carry with GSO (64 KiB of payload in all).
  static std::size_t max_segments(std::size_t segment) noexcept;

  bool gso() const noexcept { return m_gso; }

 private:
  std::size_t send_plain(int fd, const endpoint& to, std::span<const gso_run> runs,
                         std::error_code& ec);
  bool m_gso = true;
  std::vector<std::span<const std::byte>> m_datagrams;  ///< send_plain's, kept for its capacity
};

/// Sends one datagram (control traffic). @return false and sets ec on failure (EAGAIN incl.).
bool send_one(int fd, const endpoint& to, std::span<const std::byte> datagram, std::error_code& ec);

/// Sends datagrams of any sizes to one destination, up to 64 per sendmmsg(2) call (a relay's
/// forwarded datagrams, whose sizes differ).
/// @return datagrams sent, in order: fewer when the socket's buffer is full (EAGAIN, ENOBUFS;
///         ec stays clear) or on another error (ec set)
std::size_t send_many(int fd, const endpoint& to,
                      std::span<const std::span<const std::byte>> datagrams, std::error_code& ec);

}  // namespace mcdist::net
