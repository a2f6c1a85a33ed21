#pragma once
/// @file
/// Deterministic simulation of one sender and many receivers over an in-memory multicast
/// network with per-link delay, loss, duplication and reordering (docs/architecture.md "Layers").
/// Virtual time only: a 700 ms RTT run of many passes takes milliseconds of wall time, and every
/// run repeats exactly from its seed.

#include "common/endpoint.hpp"
#include "common/manifest.hpp"
#include "common/sha256.hpp"
#include "common/time.hpp"
#include "receiver/core/receiver_engine.hpp"
#include "sender/core/relay_gate.hpp"
#include "sender/core/sender_session.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace mcdist::sim {

/// One direction of a link.
///
/// Loss is independent per datagram (Bernoulli) when `burst` <= 1, and otherwise follows the
/// two-state Gilbert model (E. N. Gilbert, "Capacity of a burst-noise channel", 1960: the
/// Gilbert-Elliott model with no loss in the good state and certain loss in the bad one): the
/// link enters the bad state with probability p = loss * r / (1 - loss) per datagram and
/// leaves it with r = 1 / burst, so the long-run loss rate is `loss` and a loss burst is
/// `burst` datagrams long on average (geometrically distributed). Needs p <= 1, i.e.
/// burst >= loss / (1 - loss); beyond that p is taken as 1 and the loss rate is higher.
struct link_model {
  duration delay = std::chrono::milliseconds(1);  ///< one-way base delay
  double loss = 0;                                ///< long-run fraction of datagrams dropped
  double burst = 1;      ///< mean loss burst length, datagrams (<= 1: independent loss)
  double duplicate = 0;  ///< probability a datagram is delivered twice
  double reorder = 0;    ///< probability a datagram is held back by reorder_delay
  duration reorder_delay = std::chrono::microseconds(500);
};

/// Loss state of one link direction: link_model's Gilbert chain (stateless for independent
/// loss).
struct loss_chain {
  bool bad = false;  ///< in the bad (losing) state
  /// True if the next datagram over `l` is lost; advances the chain. Draws from `rng`.
  bool lost(const link_model& l, std::mt19937_64& rng);
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
  /// Its storage does not decode (storage_port::decodes_parity false, like mcdistd's
  /// file_store today): it must NAK block by block.
  bool refuse_parity = false;
  /// Its storage decodes by count: any n distinct blocks of the MDS code give the n sources
  /// (common/fec/fec.hpp), so it writes the reference blocks (zeros when a source it read back was
  /// wrong, as a real decode's output would be) instead of running the codec. For thousands of
  /// receivers with GF(2^16) FEC blocks, where one real decode costs ~0.1 s of CPU; the
  /// protocol's counts do not depend on it. The codec is checked by the receivers that decode
  /// for real and by its unit tests.
  bool decode_by_count = false;
  /// This receiver relays the session into a group of its own (sender/core/relay_gate.hpp,
  /// docs/relays-design.md): upstream it takes part like any receiver; downstream it runs the
  /// same session for the receivers whose `upstream` names it, with a sender_session whose
  /// blocks come from what it holds (its closed group: those receivers).
  bool relay = false;
  /// The id of the relay whose group this receiver joins; empty: the sender's group. Its
  /// `down` and `up` links are then those to and from the relay.
  std::string upstream;
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

/// What the sender received and sent in one pass (pass 0: before pass 1, the announcement and
/// registration). Datagrams the sender received are counted when they arrive, against the pass
/// in force then.
struct pass_stats {
  std::uint32_t pass = 0;
  std::uint64_t data_datagrams = 0;    ///< data datagrams sent, repairs included
  std::uint64_t repair_datagrams = 0;  ///< data datagrams of a block sent before
  /// Data datagrams of this pass that at least one receiver lost: the pass's distinct losses,
  /// what its NAKs (after suppression) should be bounded by.
  std::uint64_t lost_datagrams = 0;
  std::uint64_t parity_datagrams = 0;  ///< parity datagrams (in data_datagrams too)
  /// FEC blocks of which at least one receiver lost a data or parity datagram of this pass (0
  /// without FEC): the pass's distinct losses when NAKs report FEC blocks by count.
  std::uint64_t lost_fec_blocks = 0;
  std::uint64_t naks = 0;          ///< NAK datagrams received that name blocks
  std::uint64_t nak_blocks = 0;    ///< blocks those NAKs name (a block named twice: twice)
  std::uint64_t status = 0;        ///< NAK datagrams naming no block (status replies)
  std::uint64_t completes = 0;     ///< COMPLETE datagrams received
  std::uint64_t registers = 0;     ///< REGISTER datagrams received
  std::uint64_t other = 0;         ///< any other datagram received
  std::uint64_t control_sent = 0;  ///< control datagrams sent (multicast or unicast)
  double sender_cpu_s = 0;         ///< thread CPU time inside the sender core's calls
  /// Datagrams received, all kinds.
  std::uint64_t received() const noexcept { return naks + status + completes + registers + other; }
};

/// Losses of the blocks' first transmissions (what repair has to make good).
struct loss_stats {
  std::uint64_t original_blocks = 0;  ///< data datagrams sent for the first time
  /// First transmissions lost at the shared link (sim_config::common): every receiver.
  std::uint64_t common_lost = 0;
  /// First transmissions lost by at least one receiver: what resending exactly the blocks
  /// named must cover.
  std::uint64_t union_lost = 0;
  /// The most first transmissions any single receiver lost: what parity repairs need.
  std::uint64_t max_receiver_lost = 0;
  std::string max_receiver;               ///< who lost them
  std::uint64_t total_receiver_lost = 0;  ///< summed over receivers
};

/// Outcome of a simulated run.
struct sim_result {
  bool sender_done = false;
  bool succeeded = false;
  sender::session_report report;
  duration elapsed{};
  /// Per receiver id: delivered files, by path. A receiver's storage keeps no copy of the
  /// bytes: it compares every write with the reference file (sim_file::data, held once) and a
  /// file counts as delivered only when every byte of it was written, the last write of each
  /// byte matched the reference, and the digest the engine expected is the reference's, so a
  /// delivered file is byte-identical to the sent one. Files held from the start count.
  std::map<std::string, std::set<std::string>> delivered;
  std::map<std::string, receiver::receiver_stats> receiver_stats;
  /// SHA-256 over the ordered log of every network event: equal for equal seeds.
  sha256_digest trace;
  std::uint64_t events = 0;
  std::uint64_t unicast_to_sender = 0;
  /// Per receiver id: bytes delivered over the simulated unicast fallback.
  std::map<std::string, std::uint64_t> unicast_bytes;
  /// Per pass, in order: pass 0 (registration) first.
  std::vector<pass_stats> passes;
  /// Per receiver id that NAKed blocks by name in a FEC session (rather than by count, when
  /// parity can no longer make a FEC block whole): the blocks it named, over the session, and
  /// the pass of its first such NAK. Empty without FEC. Tells a site that NAKs most of the set
  /// apart from many sites each naming a few.
  struct named_naks {
    std::uint64_t blocks = 0;
    std::uint32_t first_pass = 0;
  };
  std::map<std::string, named_naks> fec_named_naks;
  loss_stats losses;
  /// A relay (receiver_spec::relay): its downstream session and what crossed its links.
  struct relay_stats {
    sender::session_report report;  ///< the downstream session's report
    bool done = false;
    bool succeeded = false;
    /// Datagrams of the sender (data, parity and control) its upstream link dropped.
    std::uint64_t upstream_lost = 0;
    /// Of those, data and parity datagrams: the losses its own NAKs have to make good.
    std::uint64_t upstream_data_lost = 0;
    /// Blocks or parity it sent without holding them (every source, for parity): a gate bug.
    std::uint64_t unheld_sends = 0;
    /// From the start of the run: when it sent its first data datagram downstream, and when
    /// it held every file (its last delivery). Cut-through: the first is well before the second.
    duration first_sent{};
    duration all_held{};
  };
  std::map<std::string, relay_stats> relays;
  /// Datagrams that reached the sender's address, by the id of the receiver that sent them.
  std::map<std::string, std::uint64_t> to_sender_by;
  /// Finalizations whose content differed from the reference (all receivers): the engine was
  /// told digest_mismatch and fetched the file again. Garbage datagrams and crashes cause
  /// them (a restored checkpoint can claim blocks the crash lost before they were written).
  std::uint64_t corrupt_files = 0;
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
  /// The shared path every multicast datagram of the sender crosses before the group fans out
  /// (an uplink fade): its loss is fully correlated, every receiver loses the same datagrams.
  /// Its delay adds to each receiver's.
  link_model common{.delay = duration::zero()};
  /// Hash every delivery into sim_result::trace (costs about a tenth of the run time at
  /// thousands of receivers).
  bool trace = true;
};

/// Runs the simulation to completion (sender done and receivers idle) or the time limit.
sim_result run(const sim_config& cfg, const std::vector<sim_file>& files);

}  // namespace mcdist::sim
