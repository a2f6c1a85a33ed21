// The impairment pipeline of one direction of one emulated link, in virtual time.
//
// Order of application follows dummynet (L. Rizzo, "Dummynet: a simple approach to the
// evaluation of network protocols", ACM CCR 27(1), 1997; ipfw(8) "pipe"): a packet
// first enters a drop-tail queue drained at the configured bit rate, then spends the
// propagation delay in the delay line, then is subject to random loss. Loss therefore
// happens after the packet has used its share of the bandwidth, as on a real lossy
// channel. Duplication and reordering (not in dummynet; semantics as in netem) are
// applied to packets that survive the loss.
//
// No clocks and no I/O: the caller passes the arrival time and gets back when (and
// whether) the packet leaves the link, so tests drive it with virtual time.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "tests/linkem/core/counter.hpp"
#include "tests/linkem/core/loss_model.hpp"
#include "tests/linkem/core/ring.hpp"

namespace mcdist::linkem {

/// Default queue length in packets: dummynet's default of 50 slots (ipfw(8), "queue").
inline constexpr std::uint32_t k_default_queue_packets = 50;

/// Default extra delay of a reordered packet. Long enough to be overtaken by the next
/// packets at any rate above ~12 Mbit/s with 1500-byte packets.
inline constexpr std::chrono::nanoseconds k_default_reorder_delay = std::chrono::milliseconds(1);

/// Limit of the drop-tail queue in front of the rate limiter: either a number of packets
/// (dummynet "queue 50") or a number of bytes (dummynet "queue 64Kbytes").
struct queue_limit {
  std::uint32_t packets = k_default_queue_packets;  ///< used when bytes == 0
  std::uint64_t bytes = 0;                          ///< if > 0, limit in bytes instead
};

/// Impairments of one link direction. All zero means a transparent wire.
struct link_params {
  std::chrono::nanoseconds delay{0};  ///< one-way propagation delay of this direction
  double loss_rate = 0;               ///< long-run fraction of packets lost, [0, 1]
  std::optional<double> mean_burst;   ///< if set: Gilbert–Elliott, mean burst (packets)
  double rate_bps = 0;                ///< serialisation rate, bit/s; 0 = unlimited
  queue_limit queue;                  ///< drop-tail limit; only used when rate_bps > 0
  double reorder_rate = 0;            ///< fraction of packets held back, [0, 1]
  std::chrono::nanoseconds reorder_delay = k_default_reorder_delay;  ///< extra hold
  double duplicate_rate = 0;  ///< fraction of packets delivered twice, [0, 1]

  /// True if the direction does nothing to packets (no delay, loss, rate, reorder, dup).
  [[nodiscard]] bool is_transparent() const noexcept;
  /// Checks ranges and feasibility; throws config_error naming the field.
  void validate() const;
  /// One-line human description, e.g. "delay=350ms loss=0.001 rate=10Mbit/s queue=50".
  [[nodiscard]] std::string describe() const;
};

/// Per-direction counters. "Packets" are IP datagrams as they would be on the wire: a
/// GSO super-packet of 45 UDP segments counts 45.
enum class link_counter : std::uint8_t {
  packets_in,       ///< datagrams offered to this direction
  bytes_in,         ///< their IP bytes
  delivered,        ///< datagrams that left this direction (including duplicates)
  bytes_delivered,  ///< their IP bytes
  dropped_loss,     ///< lost by the loss process
  dropped_queue,    ///< refused by the full drop-tail queue
  dropped_other,    ///< no buffer memory or TUN write failure
  duplicated,       ///< extra copies created
  reordered,        ///< datagrams held back by reorder_delay
  count_
};
inline constexpr std::size_t k_link_counter_count = static_cast<std::size_t>(link_counter::count_);

/// Name of a counter as used in the stats table and JSON ("packets_in", ...).
std::string_view link_counter_name(link_counter c) noexcept;

/// Counters of one direction; written by the forwarding thread only.
struct link_counters {
  std::array<counter, k_link_counter_count> values;
  void add(link_counter c, std::uint64_t n = 1) noexcept {
    values[static_cast<std::size_t>(c)].add(n);
  }
  [[nodiscard]] std::uint64_t get(link_counter c) const noexcept {
    return values[static_cast<std::size_t>(c)].value();
  }
};

/// Outcome of offering one datagram to a link direction.
struct admission {
  enum class verdict : std::uint8_t { deliver, drop_queue, drop_loss };
  verdict result = verdict::deliver;
  std::chrono::nanoseconds due{0};  ///< when the datagram leaves the direction (deliver)
  bool reordered = false;           ///< due includes the reorder delay
  bool duplicate = false;           ///< deliver a second copy at the same time
};

/// One direction of a link: rate limiter with drop-tail queue, delay, loss, duplication,
/// reordering. Arrival times must be non-decreasing; an earlier time is treated as the
/// latest one seen (the forwarder can be a few microseconds out of order across hosts).
///
/// Rate model (dummynet): a datagram of L bytes arriving at t starts transmission at
/// max(t, end of previous transmission) and finishes L*8/rate later. It occupies a queue
/// slot from arrival until its transmission finishes, so the queue length at t is the
/// number of admitted datagrams whose transmission ends after t (the one being sent
/// included, as in dummynet). A datagram that finds the queue full is dropped.
class link_direction {
 public:
  /// @param params validated parameters
  /// @param seed seed of this direction; loss, duplication and reordering draw from three
  ///        engines derived from it, so enabling one does not change the others' pattern
  link_direction(const link_params& params, std::uint64_t seed);

  /// Offers one datagram.
  /// @param now arrival time (ns on any fixed epoch)
  /// @param wire_bytes IP total length of the datagram, bytes
  /// @return verdict, and departure time if delivered. Updates counters.
  admission admit(std::chrono::nanoseconds now, std::uint32_t wire_bytes);

  /// Number of datagrams in the queue (not yet fully transmitted) at time now.
  [[nodiscard]] std::size_t queue_length(std::chrono::nanoseconds now);

  [[nodiscard]] const link_params& params() const noexcept { return m_params; }
  [[nodiscard]] bool is_transparent() const noexcept { return m_transparent; }
  link_counters& counters() noexcept { return m_counters; }
  [[nodiscard]] const link_counters& counters() const noexcept { return m_counters; }

 private:
  struct in_queue {
    std::int64_t end_ps;  ///< transmission end, picoseconds
    std::uint32_t bytes;
  };
  void drain(std::int64_t now_ps);

  link_params m_params;
  bool m_transparent;
  std::mt19937_64 m_loss_rng;
  std::mt19937_64 m_dup_rng;
  std::mt19937_64 m_reorder_rng;
  loss_process m_loss;
  double m_ps_per_byte = 0;     ///< serialisation time per byte, picoseconds
  std::int64_t m_epoch_ns = 0;  ///< first arrival; origin of the picosecond clock
  bool m_have_epoch = false;
  std::int64_t m_free_at_ps = 0;  ///< when the transmitter becomes idle, ps since epoch
  std::int64_t m_last_arrival_ns = 0;
  ring<in_queue> m_queue;  ///< datagrams not yet fully transmitted, FIFO
  std::uint64_t m_queued_bytes = 0;
  link_counters m_counters;
};

}  // namespace mcdist::linkem
