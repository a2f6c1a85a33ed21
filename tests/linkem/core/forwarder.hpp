// The forwarding engine of mcdist-linkem: a virtual switch joining N emulated hosts,
// each attached by a link with an "up" (host → network) and a "down" (network → host)
// direction, each direction a link_direction (rate + queue → delay → loss).
//
// Frames enter with on_frame(host, frame, now), the time they were read from the host's
// TUN device. Each wire datagram (each segment of a GSO super-packet) is admitted to the
// sender's up direction, and when it leaves it (its due time) it is switched — unicast
// to the host owning the destination address, multicast to the hosts whose IGMP reports
// joined the group — and admitted to each receiver's down direction at that same
// virtual time. When it leaves a down direction it is written to the receiver's TUN
// through packet_sink. Consecutive segments of one GSO super-packet that leave a down
// direction together are written as one GSO frame again, so the receiving kernel sees
// few large frames (cheap) yet every wire datagram had its own loss and rate decision.
//
// Pure: time comes in as arguments, output goes to the sink. The TUN/epoll shell calls
// run_due(now) whenever next_due() has passed.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tests/linkem/core/counter.hpp"
#include "tests/linkem/core/igmp.hpp"
#include "tests/linkem/core/link_model.hpp"
#include "tests/linkem/core/packet.hpp"
#include "tests/linkem/core/packet_pool.hpp"
#include "tests/linkem/core/ring.hpp"

namespace mcdist::linkem {

/// Most emulated hosts: host indexes are 16-bit in the buffers, and one /24 holds 253
/// hosts; 1000 leaves room for larger prefixes while keeping the per-event scans over
/// all links cheap.
inline constexpr std::size_t k_max_hosts = 1000;

/// Receives the frames the forwarder delivers.
class packet_sink {
 public:
  virtual ~packet_sink() = default;
  /// Writes one frame to host `host`'s TUN device. The concatenation of `parts` is the
  /// frame: virtio_net_hdr + IPv4 datagram (possibly a GSO super-packet).
  /// @return true if the device accepted it
  virtual bool write_frame(std::size_t host, std::span<const std::span<const std::byte>> parts) = 0;
};

/// Static description of the emulated network.
struct forwarder_config {
  std::uint32_t network = 0;                     ///< subnet address, host byte order
  std::uint32_t netmask = 0;                     ///< subnet mask, host byte order
  std::vector<std::uint32_t> addresses;          ///< address of host i, host byte order
  std::vector<link_params> up;                   ///< host i → network, one per host
  std::vector<link_params> down;                 ///< network → host i, one per host
  bool flood_multicast = false;                  ///< deliver multicast to all other hosts
  std::uint64_t seed = 1;                        ///< run seed; each direction derives its own
  std::uint64_t max_buffer_bytes = 1ULL << 30U;  ///< packet memory cap, bytes
};

/// Switch-wide counters (not attributable to one link direction).
enum class global_counter : std::uint8_t {
  frames_read,          ///< frames handed to on_frame
  frames_written,       ///< frames written to TUN devices (a GSO frame counts once)
  not_ipv4,             ///< dropped: IPv6 or other non-IPv4 frames
  malformed,            ///< dropped: failed header checks
  unsupported_gso,      ///< dropped: GSO type we do not handle
  unknown_destination,  ///< dropped: unicast to an address no host owns
  no_members,           ///< dropped: multicast to a group no other host joined
  igmp_messages,        ///< IGMP messages snooped (not forwarded)
  igmp_joins,           ///< membership joins learnt
  igmp_leaves,          ///< membership leaves learnt
  write_errors,         ///< TUN writes that failed
  buffer_exhausted,     ///< datagrams dropped because the packet memory cap was reached
  releases,             ///< runs written to TUN devices with their due time passed
  lateness_total_us,    ///< sum over releases of (write time - due time), microseconds
  lateness_max_us,      ///< largest single (write time - due time), microseconds
  count_
};
inline constexpr std::size_t k_global_counter_count =
    static_cast<std::size_t>(global_counter::count_);
std::string_view global_counter_name(global_counter c) noexcept;

/// Upper bounds (microseconds, exclusive) of the release-lateness histogram buckets; a
/// last bucket holds everything slower. Lateness is write time minus due time: the
/// emulator's own timing error, added to every configured delay.
inline constexpr std::array<std::uint32_t, 10> k_lateness_bounds_us = {
    10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};
inline constexpr std::size_t k_lateness_buckets = k_lateness_bounds_us.size() + 1;

/// Direction of a host's link.
enum class direction : std::uint8_t { up, down };

class forwarder {
 public:
  /// @throws config_error if the configuration is inconsistent (sizes, host count)
  forwarder(const forwarder_config& config, packet_sink& sink);

  /// A buffer large enough for any frame a TUN device can return; empty if the memory
  /// cap is reached (the caller should then read into scratch memory and drop, counting
  /// buffer_exhausted via count_exhausted()).
  buffer_handle acquire_read_buffer();

  /// Hands over one frame read from host `host`'s TUN device.
  /// @param frame buffer holding `frame->length` bytes: virtio_net_hdr + IPv4
  /// @param now when the frame was read (ns, same epoch as run_due)
  /// The forwarder keeps `frame` (leaving it empty) only for frames too large to copy;
  /// otherwise it copies into a right-sized pool buffer and the caller may reuse `frame`.
  void on_frame(std::size_t host, buffer_handle& frame, std::chrono::nanoseconds now);

  /// Counts a frame that could not be read into pool memory.
  void count_exhausted(std::size_t host);

  /// Moves every datagram whose due time is <= now one stage on: out of up directions
  /// into the switch and down directions, out of down directions into the sink.
  void run_due(std::chrono::nanoseconds now);

  /// Earliest due time of any queued datagram; nullopt if nothing is queued.
  [[nodiscard]] std::optional<std::chrono::nanoseconds> next_due() const noexcept;

  [[nodiscard]] std::size_t host_count() const noexcept { return m_hosts.size(); }
  [[nodiscard]] const link_counters& counters(std::size_t host, direction dir) const noexcept;
  [[nodiscard]] std::uint64_t counter_value(global_counter c) const noexcept {
    return m_global[static_cast<std::size_t>(c)].value();
  }
  /// Datagrams queued in a direction (admitted, not yet delivered). Forwarding thread only.
  [[nodiscard]] std::size_t in_flight(std::size_t host, direction dir) const noexcept;
  [[nodiscard]] const membership_table& memberships() const noexcept { return m_members; }
  /// Releases whose lateness fell in bucket i (see k_lateness_bounds_us).
  [[nodiscard]] std::uint64_t lateness_bucket(std::size_t i) const noexcept {
    return m_lateness[i].value();
  }
  [[nodiscard]] const packet_pool& pool() const noexcept { return m_pool; }
  /// Host owning address `addr` (host byte order), if any.
  [[nodiscard]] std::optional<std::size_t> host_of(std::uint32_t addr) const noexcept;

 private:
  /// One wire datagram waiting in a direction: a segment of a shared frame buffer.
  struct queued_segment {
    buffer_handle buf;
    std::int64_t due_ns = 0;
    std::uint16_t segment = 0;
  };
  /// In-order (FIFO by due time) and reordered datagrams of one direction. Both rings
  /// are sorted by due time because the delay of each is constant.
  struct direction_state {
    link_direction link;
    ring<queued_segment> fifo;
    ring<queued_segment> late;  ///< reordered: due includes reorder_delay
    direction_state(const link_params& params, std::uint64_t seed) : link(params, seed) {}
    [[nodiscard]] std::optional<std::int64_t> front_due() const noexcept;
    [[nodiscard]] std::size_t size() const noexcept { return fifo.size() + late.size(); }
  };
  struct host_state {
    direction_state up;
    direction_state down;
    host_state(const link_params& up_params, std::uint64_t up_seed, const link_params& down_params,
               std::uint64_t down_seed)
        : up(up_params, up_seed), down(down_params, down_seed) {}
  };

  void count(global_counter c, std::uint64_t n = 1) noexcept {
    m_global[static_cast<std::size_t>(c)].add(n);
  }
  void drop_exhausted(std::size_t host, std::uint16_t datagrams);
  void snoop_igmp(std::size_t host, const packet_buffer& frame);
  static void enqueue(direction_state& d, const buffer_handle& buf, std::uint16_t segment,
                      std::uint32_t wire_bytes, std::int64_t now_ns);
  void release_up(std::int64_t now_ns);
  void route(queued_segment&& seg);
  void flush_down(std::size_t host, std::int64_t now_ns);
  void write_run(std::size_t host, ring<queued_segment>& r, std::int64_t now_ns);

  packet_pool m_pool;  // first: destroyed after the rings that hold its buffers
  packet_sink& m_sink;
  std::uint32_t m_network;
  std::uint32_t m_netmask;
  bool m_flood_multicast;
  std::vector<std::unique_ptr<host_state>> m_hosts;  // not movable: atomic counters
  std::unordered_map<std::uint32_t, std::uint16_t> m_host_by_address;
  membership_table m_members;
  std::array<counter, k_global_counter_count> m_global;
  std::array<counter, k_lateness_buckets> m_lateness;
  std::vector<membership_change> m_igmp_scratch;
  std::vector<std::uint16_t> m_targets_scratch;
  std::array<std::byte, k_max_run_header> m_header_scratch{};
};

}  // namespace mcdist::linkem
