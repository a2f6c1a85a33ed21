// End-of-run (and periodic) statistics of mcdist-linkem: a snapshot of the forwarder's
// counters, formatted as a human table or as JSON for scripts.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tests/linkem/core/forwarder.hpp"
#include "tests/linkem/core/link_model.hpp"

namespace mcdist::linkem {

/// Counters of one link direction.
struct direction_stats {
  std::string params;  ///< link_params::describe()
  std::array<std::uint64_t, k_link_counter_count> values{};
  std::uint64_t in_flight = 0;  ///< datagrams still queued when the snapshot was taken

  [[nodiscard]] std::uint64_t get(link_counter c) const noexcept {
    return values[static_cast<std::size_t>(c)];
  }
};

/// Counters of one emulated host.
struct host_stats {
  std::string name;     ///< "h0"
  std::string netns;    ///< namespace name
  std::string address;  ///< dotted quad
  direction_stats up;
  direction_stats down;
  /// Frames the host's kernel dropped because the emulator did not read them in time
  /// (TUN tx_dropped), if known.
  std::optional<std::uint64_t> tun_tx_dropped;
  /// How the host's frames were dated (--ingress-stamp tap), if a tap ran: frames dated by
  /// the tap, frames that kept their read time, tap records without a frame (the device
  /// dropped it), tap records lost (the tap's buffer or queue was full), and the longest
  /// time a frame waited on the device before the emulator read it, microseconds.
  struct ingress {
    std::uint64_t tapped = 0;
    std::uint64_t read_stamped = 0;
    std::uint64_t skipped = 0;
    std::uint64_t lost = 0;
    std::uint64_t max_wait_us = 0;
  };
  std::optional<ingress> ingress_stamps;
};

/// Snapshot of a whole run.
struct run_stats {
  std::vector<host_stats> hosts;
  std::array<std::uint64_t, k_global_counter_count> global{};
  std::array<std::uint64_t, k_lateness_buckets> lateness{};  ///< release lateness histogram
  std::uint64_t pool_reserved_bytes = 0;
  std::uint64_t pool_peak_bytes = 0;
  double elapsed_seconds = 0;
};

/// Copies the counters out of a forwarder. in_flight is filled only if
/// include_in_flight (the ring sizes may only be read by the forwarding thread or after
/// it stopped).
/// @param names, netns, addresses per host, same length as host_count()
run_stats snapshot_stats(const forwarder& fwd, const std::vector<std::string>& names,
                         const std::vector<std::string>& netns,
                         const std::vector<std::string>& addresses, bool include_in_flight);

/// Multi-line human table: one row per host and direction, then the switch counters.
std::string format_stats_table(const run_stats& stats);

/// JSON object: {"elapsed_s":..,"hosts":[{"name":..,"up":{...},"down":{...}}],"switch":{...}}
std::string format_stats_json(const run_stats& stats);

/// Escapes a string for inclusion in JSON (quotes included).
std::string json_quote(const std::string& s);

}  // namespace mcdist::linkem
