// The scenario language of mcdist-linkem: host selectors, link specifications, run
// specifications and the TOML scenario file. Start-up code: errors throw config_error
// with a message for the operator.
//
// Link specification (command line --link, or a string in the TOML "links" array):
//
//     SELECTOR:KEY=VALUE[,KEY=VALUE...]
//
//   SELECTOR  comma-separated items, each "hN", "hN-hM" (inclusive range) or "all",
//             optionally suffixed ".up" (host → network) or ".down" (network → host);
//             without suffix both directions are set.
//   KEY       delay=DURATION      one-way delay of each selected direction (350ms)
//             loss=PROB           loss probability (1e-3, 0.1%)
//             burst=PACKETS       mean loss burst length: Gilbert–Elliott with the
//                                 given loss rate (requires loss > 0)
//             rate=BITRATE        serialisation rate (10Mbit, 1.5Gbit/s, 0 = unlimited)
//             queue=N|SIZE        drop-tail queue: packets (50) or bytes (64KB)
//             reorder=PROB        fraction of packets held back by reorder_delay
//             reorder_delay=DUR   extra delay of a reordered packet (default 1ms)
//             dup=PROB            fraction of packets delivered twice
//
// Later specifications override earlier ones key by key.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tests/linkem/core/link_model.hpp"

namespace mcdist::linkem {

/// Directions and hosts a selector names.
struct link_selector {
  std::vector<std::size_t> hosts;  ///< ascending, unique
  bool up = true;
  bool down = true;
};

/// Parses a host name "hN" (N < host_count).
/// @throws config_error naming the valid range
std::size_t parse_host_name(std::string_view name, std::size_t host_count);

/// Name of host i: "h<i>".
std::string host_name(std::size_t i);

/// Parses a selector such as "h2", "h1-h3.up", "all.down", "h1,h4".
link_selector parse_selector(std::string_view text, std::size_t host_count);

/// Sets one key of a link direction from its textual value (see the file comment).
/// @throws config_error for unknown keys or bad values
void apply_link_setting(link_params& params, std::string_view key, std::string_view value);

/// Applies one "SELECTOR:KEY=VALUE,..." specification to per-host up and down
/// parameters (both vectors have host_count elements).
void apply_link_spec(std::string_view spec, std::vector<link_params>& up,
                     std::vector<link_params>& down);

/// A command to run inside one host's namespace.
struct run_spec {
  std::size_t host = 0;
  std::string command;  ///< passed to /bin/sh -c
};

/// Parses "hN:COMMAND".
run_spec parse_run_spec(std::string_view text, std::size_t host_count);

/// An IPv4 prefix such as 10.77.0.0/24.
struct ipv4_prefix {
  std::uint32_t network = 0;  ///< host byte order, host bits cleared
  std::uint8_t length = 24;   ///< prefix length, bits
  [[nodiscard]] std::uint32_t netmask() const noexcept {
    return length == 0 ? 0 : ~0U << (32U - length);
  }
  /// Usable host addresses (excluding network and broadcast).
  [[nodiscard]] std::uint64_t capacity() const noexcept {
    const std::uint64_t size = 1ULL << (32U - length);
    return size > 2 ? size - 2 : 0;
  }
  /// Address of emulated host i: network + i + 1.
  [[nodiscard]] std::uint32_t host_address(std::size_t i) const noexcept {
    return network + static_cast<std::uint32_t>(i) + 1;
  }
};

/// Parses "a.b.c.d/len" (len 8..30).
ipv4_prefix parse_ipv4_prefix(std::string_view text);
/// Parses dotted-quad "a.b.c.d" to host byte order.
std::uint32_t parse_ipv4(std::string_view text);
/// True for addresses that cannot be an emulated host's: 0/8, 127/8, 224/4 and above.
bool is_multicast_or_reserved(std::uint32_t addr) noexcept;
/// Formats a host-byte-order address as dotted quad.
std::string format_ipv4(std::uint32_t addr);

/// Contents of a TOML scenario file. Every field is optional so that command-line
/// options can override the file.
///
///     hosts = 3
///     prefix = "10.77.0.0/24"
///     seed = 42
///     flood_multicast = false
///     duration = "30s"
///     links = ["all:delay=10ms"]          # spec strings, applied first
///     [link.h2]                           # table form: both directions of h2
///     delay = "350ms"
///     loss = 1e-3
///     [link.h2.down]                      # one direction
///     rate = "20Mbit"
///     [[run]]
///     host = "h0"
///     command = "uftp -I mle0 ..."
///     main = true
struct scenario_file {
  std::optional<std::size_t> hosts;
  std::optional<std::string> prefix;
  std::optional<std::uint64_t> seed;
  std::optional<bool> flood_multicast;
  std::optional<std::string> ifname;
  std::optional<std::uint32_t> mtu;
  std::optional<std::string> run_id;
  std::optional<std::string> log_dir;
  std::optional<std::string> stats_json;
  std::optional<std::string> env_file;
  std::optional<std::chrono::nanoseconds> duration;
  std::vector<std::string> links;  ///< link spec strings, in file order
  std::vector<std::string> runs;   ///< "hN:COMMAND" strings, in file order
  std::vector<std::string> mains;  ///< host names whose commands end the run
};

/// Parses TOML scenario text. Unknown keys are errors (they are usually typos).
/// @param source_name file name for error messages
scenario_file parse_scenario_toml(std::string_view text, std::string_view source_name);

/// Reads and parses a scenario file.
scenario_file load_scenario_file(const std::string& path);

}  // namespace mcdist::linkem
