// One run of mcdist-linkem: create the namespaces and TUN devices, forward on a thread
// of its own, run the per-host commands, stop on their completion or a signal, print
// the statistics and remove everything it created.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tests/linkem/core/link_model.hpp"
#include "tests/linkem/core/scenario.hpp"

namespace mcdist::linkem {

/// Everything a run needs, after the command line and scenario file were merged.
struct run_options {
  std::size_t hosts = 2;
  ipv4_prefix prefix = parse_ipv4_prefix("10.77.0.0/24");
  std::string ifname = "mle0";
  std::uint32_t mtu = 1500;          ///< bytes
  std::uint32_t txqueuelen = 10000;  ///< packets
  std::uint64_t seed = 1;
  bool flood_multicast = false;
  bool offload = true;
  std::uint64_t max_memory = 1ULL << 30U;  ///< packet memory cap, bytes
  std::vector<link_params> up;             ///< per host
  std::vector<link_params> down;           ///< per host
  std::vector<run_spec> runs;
  std::vector<bool> main_host;  ///< per host: its commands are main
  std::string run_id;           ///< default: our pid
  std::string netns_prefix = "mle";
  std::optional<std::string> log_dir;
  std::optional<std::string> env_file;
  std::optional<std::string> stats_json;
  bool print_env = false;
  bool quiet = false;
  std::optional<std::chrono::nanoseconds> duration;  ///< normal end after this
  std::optional<std::chrono::nanoseconds> timeout;   ///< failure if mains still run
  std::chrono::nanoseconds kill_timeout = std::chrono::seconds(2);
  std::optional<std::chrono::nanoseconds> stats_interval;
  int realtime_priority = 10;  ///< SCHED_FIFO priority of forwarding; 0 = off
  /// Date each frame by the time its host handed it to the TUN device (an AF_PACKET tap,
  /// ingress_tap.hpp) rather than by the time the forwarding thread read it.
  bool ingress_tap = true;
};

/// Runs the emulator. Signals SIGINT, SIGTERM, SIGHUP and SIGCHLD must already be
/// blocked in every thread (main() does it first thing), so that they are only ever
/// received through the control loop's signalfd and the clean-up always runs.
/// @return process exit code (see exit_code)
int run_emulator(const run_options& options);

/// Namespace name of host i: "<prefix>-<run_id>-h<i>".
std::string netns_name(const run_options& options, std::size_t host);

}  // namespace mcdist::linkem
