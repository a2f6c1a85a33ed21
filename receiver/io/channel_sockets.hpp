#pragma once
/// @file
/// mcdistd's channel sockets: one multicast socket per channel index, joined on the interface
/// resolved at start, with per channel the datagrams read, those from another host than a
/// source-specific channel's source (dropped here: a kernel that filters them keeps this at 0),
/// the SO_RXQ_OVFL count last seen, and whether a reload retired the channel (it takes no new
/// session, and its socket is closed once its sessions ended). Indexes are never reused: the
/// engine's sessions, the store's destination roots, the keyrings and the status board name a
/// channel by index, so a removed channel keeps its index and a new one takes the next.
/// Runs on the daemon's io thread.

#include "common/endpoint.hpp"
#include "common/net/udp.hpp"
#include "receiver/io/daemon_config.hpp"

#include <nlohmann/json_fwd.hpp>

#include <boost/asio/io_context.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace mcdist::receiver {

/// The channel sockets by index.
class channel_sockets {
 public:
  /// @param iface  where every channel is joined (a restart-only setting)
  /// @param receive_buffer_bytes  SO_RCVBUF of each socket (socket_buffer)
  channel_sockets(boost::asio::io_context& io, net::resolved_interface iface,
                  int receive_buffer_bytes);

  const net::resolved_interface& interface() const noexcept { return m_interface; }
  /// Opens and joins channel `ch` as the next index. @return its index
  /// @throws std::system_error when the socket cannot be opened or the group joined
  std::size_t open(const channel_config& ch);
  /// Binds and joins a socket for `ch` once and closes it: a reload fails whole before it
  /// changes anything when a group cannot be joined. @throws std::system_error as open
  void probe(const channel_config& ch);

  std::size_t size() const noexcept { return m_sockets.size(); }
  net::udp::socket& socket(std::size_t index) { return m_sockets[index]; }
  bool is_open(std::size_t index) const { return m_sockets[index].is_open(); }
  /// Leaves channel `index`'s group; its pending wait ends with an error.
  void close(std::size_t index);
  /// Cancels every socket's pending wait (the daemon stops).
  void cancel_all();

  /// True when a reload removed (or replaced) channel `index`.
  bool retired(std::size_t index) const { return m_retired[index]; }
  void retire(std::size_t index) { m_retired[index] = true; }
  /// Per index: retired (the status page leaves these out).
  const std::vector<bool>& retired_flags() const noexcept { return m_retired; }
  /// Channels not retired.
  std::size_t live() const noexcept;

  /// A datagram from `from` read on channel `index`: counted. @return false when it is from
  /// another host than the channel's source (counted as off-source: drop it)
  bool admit(std::size_t index, const endpoint& from);
  /// The socket's drop count (batch_receiver::socket_drops) with a datagram of channel
  /// `index`. @return true when it rose since the last one: datagrams before this were lost
  bool drops_rose(std::size_t index, std::uint32_t socket_drops);

  /// The status file's "channel_sockets": per index name, group, source, retired, datagrams
  /// and off-source datagrams. @param channels  the daemon's channels, by the same index
  nlohmann::json status(const std::vector<channel_config>& channels) const;

 private:
  /// The socket options that join `ch` on the interface.
  net::channel_socket_options options(const channel_config& ch) const;

  boost::asio::io_context& m_io;
  net::resolved_interface m_interface;
  int m_receive_buffer;
  /// A deque so a reload adds sockets without moving those with waits pending.
  std::deque<net::udp::socket> m_sockets;
  /// Per index: the channel's source (source-specific multicast), as opened.
  std::vector<std::optional<endpoint>> m_sources;
  std::vector<bool> m_retired;
  std::vector<std::uint64_t> m_datagrams;
  std::vector<std::uint64_t> m_off_source;
  std::vector<std::uint32_t> m_socket_drops;
};

}  // namespace mcdist::receiver
