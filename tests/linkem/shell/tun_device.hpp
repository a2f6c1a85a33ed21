// TUN device of one emulated host: created inside the host's network namespace by the
// emulator process, which keeps the file descriptor (a TUN fd stays bound to its device
// whatever namespace the reader is in), so one process in the root namespace forwards
// for all hosts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tests/linkem/shell/netns.hpp"
#include "tests/linkem/shell/system.hpp"

namespace mcdist::linkem {

/// How to create and configure a host's TUN device.
struct tun_options {
  std::string ifname = "mle0";   ///< device name inside the namespace
  std::uint32_t address = 0;     ///< host address, host byte order
  std::uint8_t prefix_len = 24;  ///< subnet prefix length, bits
  std::uint32_t mtu = 1500;      ///< bytes
  /// Device transmit queue, packets: frames the host's kernel may queue towards the
  /// emulator before it drops (TUN tx_dropped). Larger than Linux's default 500 so that
  /// bursts from a GSO sender survive a scheduling hiccup of the forwarding thread.
  std::uint32_t txqueuelen = 10000;
  /// Negotiate checksum and segmentation offload (TUNSETOFFLOAD) so that the host's
  /// kernel hands over GSO super-packets with partial checksums.
  bool offload = true;
};

/// What a created device supports.
struct tun_info {
  bool csum_offload = false;  ///< TUN_F_CSUM accepted
  bool tso = false;           ///< TUN_F_TSO4/6 accepted
  bool uso = false;           ///< TUN_F_USO4/6 accepted (Linux >= 6.2)
};

/// Creates the TUN device in `ns` with IFF_TUN | IFF_NO_PI | IFF_VNET_HDR, brings up lo
/// and the device with the MULTICAST flag, assigns address/prefix, adds routes for the
/// subnet and for 224.0.0.0/4, and disables IPv6 on it (the emulator forwards IPv4).
/// @return non-blocking, close-on-exec descriptor of the device
/// @throws setup_error (exit_no_tun if the device cannot be created)
unique_fd create_tun(const named_netns& ns, const tun_options& options, tun_info& info);

/// TUN tx_dropped counter of `ifname` in `ns` (frames the host's kernel dropped because
/// the emulator did not read them in time), read from /proc/net/dev of that namespace.
std::optional<std::uint64_t> read_tx_dropped(const named_netns& ns, const std::string& ifname);

}  // namespace mcdist::linkem
