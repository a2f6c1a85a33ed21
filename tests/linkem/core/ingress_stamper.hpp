// Arrival times of the frames a host hands to its TUN device, from a packet tap.
//
// The forwarding thread reads a frame some time after the host's kernel queued it on the
// TUN device: tens of microseconds normally, but 5-30 ms when the thread is held up (on a
// kernel without preemption a FIFO thread waits for another task's long system call; on a
// virtual machine the hypervisor takes the CPU). Stamped with the read time, everything that
// queued meanwhile reaches the emulated link at once, and its drop-tail queue drops what a
// real router, which does not pause, would have forwarded: a 200 ms hold-up of a 30 Mbit/s
// flow into a 50 Mbit/s link with a 20-packet queue cost 521 datagrams.
//
// A packet socket on the device (AF_PACKET, outgoing frames only) records the time each frame
// was handed to the driver (the kernel's dev_queue_xmit_nit, just before tun_net_xmit), in
// the order the device takes them. This matcher pairs those records with the frames read
// from the device, in order: a record whose header does not match the frame read is a frame
// the device dropped (its transmit queue was full) and is skipped. A frame without a record
// (the tap's socket buffer overflowed) keeps its read time.
//
// Pure: no clocks, no I/O. Times are nanoseconds on the caller's clock (CLOCK_MONOTONIC).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "tests/linkem/core/counter.hpp"
#include "tests/linkem/core/ring.hpp"

namespace mcdist::linkem {

/// What a tap recorded of one outgoing frame.
struct tap_record {
  /// Bytes of the IP packet's head kept to tell frames apart: the IPv4 header (length, id,
  /// checksum) and the first bytes of the UDP or TCP header and payload (ports, TCP sequence,
  /// mcdist's session and sequence number).
  static constexpr std::size_t k_head_bytes = 48;

  std::int64_t at_ns = 0;     ///< when the frame was handed to the device
  std::uint32_t length = 0;   ///< the IP packet's length (a GSO super-packet's whole length)
  std::uint8_t head_len = 0;  ///< bytes of head that are valid, min(length, k_head_bytes)
  std::array<std::byte, k_head_bytes> head{};
};

/// Counters of one host's stamper; written by the forwarding thread only.
struct ingress_counters {
  counter tapped;        ///< frames stamped with their tap time
  counter read_stamped;  ///< frames that kept their read time (no matching record)
  counter skipped;       ///< records without a frame (dropped by the device's queue)
  counter overflowed;    ///< records discarded because the matcher's queue was full
  counter max_wait_us;   ///< longest read time - tap time, microseconds
};

/// Pairs tap records with frames read from one host's TUN device.
class ingress_stamper {
 public:
  /// Records a frame may be looked for past before it is taken as one the tap missed.
  static constexpr std::size_t k_search_depth = 256;
  /// A record this much older than a frame read is of a frame the device dropped (no frame
  /// waits that long on the device unless the emulator stopped): it is discarded then, so a
  /// run of more than k_search_depth drops cannot keep later frames from their records.
  static constexpr std::int64_t k_stale_ns = 1'000'000'000;

  /// @param capacity records kept; beyond it the oldest is discarded (counted as overflowed)
  explicit ingress_stamper(std::size_t capacity = 16384);

  /// Adds a record; records must come in the order the tap saw them.
  void on_tap(const tap_record& r);

  /// The arrival time of `ip_packet`, read from the device at `read_ns`: settle(take(...)).
  std::int64_t stamp(std::span<const std::byte> ip_packet, std::int64_t read_ns);

  /// The time of the first queued record that matches `ip_packet`, read at `read_ns` (length
  /// and head), which is removed with the records before it (frames the device dropped);
  /// nullopt if none of the next k_search_depth records matches. Records made more than
  /// k_stale_ns before `read_ns` are discarded first (counted as skipped).
  std::optional<std::int64_t> take(std::span<const std::byte> ip_packet, std::int64_t read_ns);

  /// The arrival time of a frame read at `read_ns` whose record gave `tapped` (nullopt: none
  /// did, the frame keeps its read time): never later than `read_ns`, never earlier than the
  /// previous arrival time, so arrivals stay in order. Counts the frame.
  std::int64_t settle(std::optional<std::int64_t> tapped, std::int64_t read_ns);

  [[nodiscard]] const ingress_counters& counters() const noexcept { return m_counters; }
  [[nodiscard]] std::size_t queued() const noexcept { return m_records.size(); }

 private:
  static bool matches(const tap_record& r, std::span<const std::byte> ip_packet) noexcept;

  ring<tap_record> m_records;
  std::size_t m_capacity;
  std::int64_t m_last_ns = 0;
  ingress_counters m_counters;
};

}  // namespace mcdist::linkem
