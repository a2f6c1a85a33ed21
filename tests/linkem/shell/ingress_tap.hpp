// The packet tap that dates a host's outgoing frames (core/ingress_stamper.hpp says why).
//
// One AF_PACKET socket per host, opened inside the host's namespace and bound to its TUN
// device, with a classic BPF filter that keeps outgoing frames only (PACKET_OUTGOING: what
// the host's kernel hands to the device; the frames the emulator writes back come in as
// PACKET_HOST or PACKET_MULTICAST) and only their first tap_record::k_head_bytes bytes. The
// kernel dates each frame when it taps it (dev_queue_xmit_nit, CLOCK_REALTIME, reported by
// SO_TIMESTAMPNS); drain() converts to CLOCK_MONOTONIC with the offset between the clocks at
// the time it drains.
#pragma once

#include <array>
#include <string>

#include "tests/linkem/core/ingress_stamper.hpp"
#include "tests/linkem/shell/netns.hpp"
#include "tests/linkem/shell/system.hpp"

namespace mcdist::linkem {

class ingress_tap {
 public:
  /// Receive buffer of the tap socket, bytes. The kernel charges each record the whole
  /// frame's truesize (the record is a clone that shares the frame's data): a 64 KB GSO frame
  /// costs ~66 KB, so 32 MiB hold ~30 MB of traffic, 120 ms at 2 Gbit/s. A hold-up longer than
  /// that loses records; those frames keep their read times.
  static constexpr int k_receive_buffer = 32 << 20;

  /// Opens the tap on `ifname` in `ns`.
  /// @throws setup_error if the socket cannot be opened, bound or filtered
  ingress_tap(const named_netns& ns, const std::string& ifname);

  /// Moves every record waiting on the socket into `to`, in order. Non-blocking.
  /// @return records moved
  std::size_t drain(ingress_stamper& to);

  /// Records the kernel dropped because the socket buffer was full (PACKET_STATISTICS),
  /// since the tap opened. Forwarding thread, or after it ended.
  std::uint64_t kernel_drops() noexcept;

 private:
  unique_fd m_fd;
  int m_ifindex = 0;          ///< the TUN device's index in its namespace
  std::uint64_t m_drops = 0;  ///< sum of PACKET_STATISTICS reads (each read resets them)
};

}  // namespace mcdist::linkem
