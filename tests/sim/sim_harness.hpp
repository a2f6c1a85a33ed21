#pragma once
/// @file
/// Deterministic simulation of one sender and many receivers over an in-memory multicast
/// network with per-link delay, loss, duplication and reordering (DESIGN.md "tests/"). Virtual
/// time only: a 700 ms RTT run of many passes takes milliseconds of wall time, and every run
/// repeats exactly from its seed.

#include "common/endpoint.hpp"
#include "common/manifest.hpp"
#include "common/sha256.hpp"
#include "common/time.hpp"
#include "receiver/core/receiver_engine.hpp"
#include "sender/core/sender_session.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <vector>

namespace mcdist::sim {

/// One direction of a link.
struct link_model {
  duration delay = std::chrono::milliseconds(1);  ///< one-way base delay
  double loss = 0;          ///< probability a datagram is dropped
  double duplicate = 0;     ///< probability a datagram is delivered twice
  double reorder = 0;       ///< probability a datagram is held back by reorder_delay
  duration reorder_delay = std::chrono::microseconds(500);
};

/// A receiver of the simulated group.
struct receiver_spec {
  std::string id;
  link_model down;  ///< sender -> receiver (multicast and unicast)
  link_model up;    ///< receiver -> sender
  /// Files (by manifest index) this receiver already holds identically at the start.
  std::vector<std::uint32_t> held;
  /// Virtual time storage needs to verify and deliver one file.
  duration store_time = std::chrono::microseconds(200);
  /// Stop (crash) the receiver at this time and restart it from its last checkpoint after
  /// restart_after; zero = never.
  duration crash_at{};
  duration restart_after = std::chrono::milliseconds(100);
  /// Drop every write_block with this probability (storage back-pressure).
  double storage_refuse = 0;
  /// Throughput of this receiver's unicast fallback path, bit/s (modelled as a reliable pipe
  /// that needs two round trips to connect).
  double unicast_rate_bps = 50e6;
};

/// A file of the simulated set: its bytes and whether its digest is in the manifest.
struct sim_file {
  std::string path;
  std::vector<std::byte> data;
  bool digest_in_manifest = true;
};

/// Builds `count` files of sizes drawn from `sizes`, random content, nested paths.
std::vector<sim_file> make_files(std::mt19937_64& rng, std::size_t count,
                                 const std::vector<std::uint64_t>& sizes);

/// Outcome of a simulated run.
struct sim_result {
  bool sender_done = false;
  bool succeeded = false;
  sender::session_report report;
  duration elapsed{};
  /// Per receiver id: delivered files (path -> bytes).
  std::map<std::string, std::map<std::string, std::vector<std::byte>>> delivered;
  std::map<std::string, receiver::receiver_stats> receiver_stats;
  /// SHA-256 over the ordered log of every network event: equal for equal seeds.
  sha256_digest trace;
  std::uint64_t events = 0;
  std::uint64_t unicast_to_sender = 0;
  /// Per receiver id: bytes delivered over the simulated unicast fallback.
  std::map<std::string, std::uint64_t> unicast_bytes;
};

/// Simulation settings.
struct sim_config {
  sender::sender_config sender;
  std::vector<receiver_spec> receivers;
  std::uint64_t seed = 1;
  /// Digests of files flagged !digest_in_manifest become known this long after start, in
  /// index order, spaced by this too.
  duration hash_delay = std::chrono::milliseconds(5);
  /// Give up (the run failed to terminate) after this much virtual time.
  duration limit = std::chrono::hours(2);
  /// Emit a receiver datagram that is garbage with this probability per sender datagram.
  double garbage = 0;
};

/// Runs the simulation to completion (sender done and receivers idle) or the time limit.
sim_result run(const sim_config& cfg, const std::vector<sim_file>& files);

}  // namespace mcdist::sim
