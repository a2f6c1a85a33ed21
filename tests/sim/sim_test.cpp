#include "tests/sim/sim_harness.hpp"

#include "common/packet.hpp"
#include "common/wire.hpp"
#include "sender/core/fallback_policy.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace std::chrono_literals;

namespace {

/// Every receiver must hold every file, byte for byte (the harness counts a file delivered
/// only when every byte written matched the sent file; see sim_result::delivered).
void require_all_delivered(const sim::sim_result& r, const std::vector<sim::sim_file>& files) {
  for (const auto& [id, delivered] : r.delivered) {
    INFO("receiver " << id);
    REQUIRE(delivered.size() == files.size());
    for (const auto& f : files) {
      INFO("file " << f.path);
      REQUIRE(delivered.count(f.path) == 1);
    }
  }
}

sim::receiver_spec rx(std::string id, double loss, duration one_way = 1ms) {
  sim::receiver_spec s;
  s.id = std::move(id);
  s.down.loss = loss;
  s.down.delay = one_way;
  s.up.loss = loss;
  s.up.delay = one_way;
  return s;
}

}  // namespace

TEST_CASE("a clean group gets every file in one pass", "[sim]") {
  std::mt19937_64 rng(7);
  const auto files = sim::make_files(rng, 40, {0, 1, 1399, 1400, 1401, 10000, 150000});
  sim::sim_config cfg;
  cfg.sender.rate_bps = 100'000'000;
  cfg.sender.receivers = {"a", "b", "c"};
  for (const auto& id : cfg.sender.receivers) cfg.receivers.push_back(rx(id, 0));
  const auto r = sim::run(cfg, files);
  REQUIRE(r.sender_done);
  REQUIRE(r.succeeded);
  REQUIRE(r.report.passes == 1);
  REQUIRE(r.report.repair_datagrams == 0);
  require_all_delivered(r, files);
  for (const auto& rep : r.report.receivers) {
    REQUIRE(rep.state == sender::receiver_report::state_t::completed);
    REQUIRE(rep.files_stored == files.size());
  }
}

TEST_CASE(
    "sixty receivers with loss up to 20 %, duplication and reordering all complete, "
    "and the run repeats exactly from its seed",
    "[sim]") {
  std::mt19937_64 rng(11);
  auto files = sim::make_files(rng, 60, {0, 1, 1400, 5000, 30000, 200000});
  // Large files announce their digest later, as the real sender does for big files.
  for (std::size_t i = 0; i < files.size(); i += 5) files[i].digest_in_manifest = false;
  sim::sim_config cfg;
  cfg.seed = 99;
  cfg.garbage = 0.001;
  cfg.sender.rate_bps = 200'000'000;
  const double losses[] = {0, 0.001, 0.01, 0.05, 0.1, 0.2};
  for (int i = 0; i < 60; ++i) {
    auto s = rx("site" + std::to_string(i), losses[i % 6], std::chrono::milliseconds(1 + i % 40));
    s.down.duplicate = 0.01;
    s.down.reorder = 0.02;
    s.down.reorder_delay = 2ms;
    if (i % 10 == 3) s.held = {1, 2, 3};
    cfg.sender.receivers.push_back(s.id);
    cfg.receivers.push_back(s);
  }
  const auto r1 = sim::run(cfg, files);
  REQUIRE(r1.sender_done);
  REQUIRE(r1.succeeded);
  require_all_delivered(r1, files);
  REQUIRE(r1.report.passes > 1);
  std::uint64_t garbage_dropped = 0;
  for (const auto& [id, st] : r1.receiver_stats) garbage_dropped += st.drops.total();
  REQUIRE(garbage_dropped > 0);
  for (const auto& rep : r1.report.receivers) {
    if (rep.id == "site3") REQUIRE(rep.files_held == 3);
  }

  const auto r2 = sim::run(cfg, files);
  REQUIRE(r2.trace == r1.trace);
  REQUIRE(r2.events == r1.events);
  REQUIRE(r2.report.passes == r1.report.passes);

  cfg.seed = 100;
  const auto r3 = sim::run(cfg, files);
  REQUIRE(r3.succeeded);
  REQUIRE(r3.trace != r1.trace);
}

TEST_CASE("a geostationary hop with 1e-3 loss costs about one RTT of repair", "[sim]") {
  std::mt19937_64 rng(3);
  const auto files = sim::make_files(rng, 4, {2'000'000});
  sim::sim_config cfg;
  cfg.sender.rate_bps = 50'000'000;
  cfg.sender.receivers = {"clean", "sat"};
  cfg.receivers = {rx("clean", 0, 35ms), rx("sat", 1e-3, 350ms)};
  const auto r = sim::run(cfg, files);
  REQUIRE(r.succeeded);
  require_all_delivered(r, files);
  // 8 MB at 50 Mbit/s is ~1.33 s of pass 1; repairs should add a few RTTs, not a pass each.
  const double datagram =
      wire::default_block_size + wire::data_header_size + packet::ipv4_udp_overhead;
  const double bytes_time = 8e6 * 8 * (datagram / wire::default_block_size) / 50e6;
  REQUIRE(to_seconds(r.elapsed) < bytes_time + 4 * 0.7);
}

TEST_CASE("a receiver that crashes mid-session resumes from its checkpoint", "[sim]") {
  std::mt19937_64 rng(5);
  const auto files = sim::make_files(rng, 12, {400'000});
  sim::sim_config cfg;
  cfg.sender.rate_bps = 10'000'000;  // ~4 s of data, so the crash lands mid-pass
  cfg.sender.receivers = {"steady", "crashy"};
  auto crashy = rx("crashy", 0.01);
  crashy.crash_at = 2500ms;
  crashy.restart_after = 300ms;
  cfg.receivers = {rx("steady", 0.01), crashy};
  const auto r = sim::run(cfg, files);
  REQUIRE(r.succeeded);
  require_all_delivered(r, files);
}

TEST_CASE("storage back-pressure only costs repairs", "[sim]") {
  std::mt19937_64 rng(8);
  const auto files = sim::make_files(rng, 10, {50'000});
  sim::sim_config cfg;
  cfg.sender.receivers = {"slowdisk"};
  auto s = rx("slowdisk", 0);
  s.storage_refuse = 0.05;
  cfg.receivers = {s};
  const auto r = sim::run(cfg, files);
  REQUIRE(r.succeeded);
  require_all_delivered(r, files);
  REQUIRE(r.report.repair_datagrams > 0);
  REQUIRE(r.receiver_stats.at("slowdisk").drops[errc::storage_full] > 0);
}

TEST_CASE("a closed-group member that never registers is reported failed; the rest complete",
          "[sim]") {
  std::mt19937_64 rng(9);
  const auto files = sim::make_files(rng, 5, {3000});
  sim::sim_config cfg;
  cfg.sender.receivers = {"here", "absent"};
  cfg.sender.register_timeout = 2s;
  cfg.receivers = {rx("here", 0)};
  const auto r = sim::run(cfg, files);
  REQUIRE(r.sender_done);
  REQUIRE_FALSE(r.succeeded);
  for (const auto& rep : r.report.receivers) {
    if (rep.id == "here") REQUIRE(rep.state == sender::receiver_report::state_t::completed);
    if (rep.id == "absent") REQUIRE(rep.state == sender::receiver_report::state_t::failed);
  }
  REQUIRE(r.delivered.at("here").size() == files.size());
}

TEST_CASE("a receiver whose link dies is failed by silence and does not hold the others", "[sim]") {
  std::mt19937_64 rng(10);
  const auto files = sim::make_files(rng, 5, {100'000});
  sim::sim_config cfg;
  cfg.sender.receivers = {"ok", "dead"};
  cfg.sender.receiver_timeout = 3s;
  auto dead = rx("dead", 0);
  dead.up.loss = 1.0;  // it registers? no: its REGISTER never arrives
  cfg.receivers = {rx("ok", 0), dead};
  cfg.sender.register_timeout = 1s;
  const auto r = sim::run(cfg, files);
  REQUIRE(r.sender_done);
  REQUIRE_FALSE(r.succeeded);
  REQUIRE(r.delivered.at("ok").size() == files.size());
}

TEST_CASE("an open group registers whoever answers within the window", "[sim]") {
  std::mt19937_64 rng(12);
  const auto files = sim::make_files(rng, 8, {20'000});
  sim::sim_config cfg;
  cfg.sender.register_window = 500ms;
  cfg.receivers = {rx("x", 0.05), rx("y", 0.05), rx("z", 0)};
  const auto r = sim::run(cfg, files);
  REQUIRE(r.succeeded);
  REQUIRE(r.report.receivers.size() == 3);
  require_all_delivered(r, files);
}

TEST_CASE("a resend restricted to chosen receivers leaves the others out", "[sim]") {
  std::mt19937_64 rng(13);
  const auto files = sim::make_files(rng, 3, {5000});
  sim::sim_config cfg;
  cfg.sender.register_window = 300ms;
  cfg.sender.only_receivers = {"b"};
  cfg.receivers = {rx("a", 0), rx("b", 0)};
  const auto r = sim::run(cfg, files);
  REQUIRE(r.succeeded);
  REQUIRE(r.report.receivers.size() == 1);
  REQUIRE(r.delivered.at("a").empty());
  REQUIRE(r.delivered.at("b").size() == files.size());
}

TEST_CASE(
    "a receiver at 10 % loss is moved to unicast and the others finish as if it were "
    "not there",
    "[sim][fallback]") {
  std::mt19937_64 rng(21);
  const auto files = sim::make_files(rng, 40, {10'000, 500'000, 2'000'000});
  auto config = [](std::vector<sim::receiver_spec> rx_specs, sender::fallback_mode mode) {
    sim::sim_config cfg;
    cfg.seed = 77;
    cfg.sender.rate_bps = 100'000'000;
    cfg.sender.fallback = mode;
    for (const auto& r : rx_specs) cfg.sender.receivers.push_back(r.id);
    cfg.receivers = std::move(rx_specs);
    return cfg;
  };
  auto clean_a = rx("a", 0.001, 35ms);
  auto clean_b = rx("b", 0.001, 35ms);
  auto lossy = rx("lossy", 0.10, 35ms);
  lossy.unicast_rate_bps = 20e6;

  const auto alone = sim::run(config({clean_a, clean_b}, sender::fallback_mode::automatic), files);
  REQUIRE(alone.succeeded);
  const auto with =
      sim::run(config({clean_a, clean_b, lossy}, sender::fallback_mode::automatic), files);
  REQUIRE(with.succeeded);
  require_all_delivered(with, files);
  std::map<std::string, duration> t_alone;
  for (const auto& r : alone.report.receivers) t_alone[r.id] = r.completion_time;
  for (const auto& r : with.report.receivers) {
    INFO(r.id << " " << to_seconds(r.completion_time) << " s");
    if (r.id == "lossy") {
      REQUIRE(r.state == sender::receiver_report::state_t::completed);
      REQUIRE(is_unicast(r.path));
      REQUIRE(r.fallback_reason.find("NAK ratio") != std::string::npos);
      REQUIRE(with.unicast_bytes.at("lossy") > 0);
    } else {
      REQUIRE(r.state == sender::receiver_report::state_t::completed);
      REQUIRE(r.path == delivery_path::multicast);
      REQUIRE(to_seconds(r.completion_time) <= 1.1 * to_seconds(t_alone.at(r.id)));
    }
  }
  // Without the policy the lossy receiver stays in the group and costs it repair traffic.
  const auto without =
      sim::run(config({clean_a, clean_b, lossy}, sender::fallback_mode::off), files);
  REQUIRE(without.succeeded);
  REQUIRE(without.report.repair_datagrams > with.report.repair_datagrams);
}

TEST_CASE("forced unicast serves every receiver without a multicast pass", "[sim][fallback]") {
  std::mt19937_64 rng(22);
  const auto files = sim::make_files(rng, 10, {0, 1, 30'000});
  sim::sim_config cfg;
  cfg.sender.force_unicast = true;
  cfg.sender.receivers = {"x", "y"};
  cfg.receivers = {rx("x", 0.02), rx("y", 0.0)};
  const auto r = sim::run(cfg, files);
  REQUIRE(r.succeeded);
  require_all_delivered(r, files);
  REQUIRE(r.report.data_datagrams == 0);
  for (const auto& rep : r.report.receivers) {
    REQUIRE(rep.state == sender::receiver_report::state_t::completed);
    REQUIRE(is_unicast(rep.path));
    REQUIRE(rep.fallback_reason == "unicast requested by the operator");
  }
}

TEST_CASE("the small-set cost model picks unicast only when it is cheaper", "[sim][fallback]") {
  std::mt19937_64 rng(23);
  const auto files = sim::make_files(rng, 5, {20'000});
  sim::sim_config cfg;
  cfg.sender.rate_bps = 1'000'000;            // a slow multicast channel: 0.8 s for the set
  cfg.sender.unicast_rate_bps = 100'000'000;  // fast unicast paths
  cfg.sender.receivers = {"p", "q"};
  cfg.receivers = {rx("p", 0), rx("q", 0)};
  const auto fast_unicast = sim::run(cfg, files);
  REQUIRE(fast_unicast.succeeded);
  require_all_delivered(fast_unicast, files);
  for (const auto& rep : fast_unicast.report.receivers) {
    REQUIRE(rep.state == sender::receiver_report::state_t::completed);
    REQUIRE(is_unicast(rep.path));
    REQUIRE(rep.fallback_reason.find("small set") != std::string::npos);
  }
  cfg.sender.unicast_rate_bps = 1'000'000;  // unicast no faster than multicast: stay multicast
  const auto multicast = sim::run(cfg, files);
  REQUIRE(multicast.succeeded);
  for (const auto& rep : multicast.report.receivers) {
    REQUIRE(rep.state == sender::receiver_report::state_t::completed);
  }
}

TEST_CASE(
    "a receiver on a long path goes to multi-socket TCP with enough connections to fill "
    "its link in the first round trip",
    "[sim][fallback]") {
  std::mt19937_64 rng(24);
  const auto files = sim::make_files(rng, 4, {100'000});
  sim::sim_config cfg;
  cfg.sender.force_unicast = true;
  cfg.sender.rate_bps = 1'000'000;
  cfg.sender.unicast_max_rate_bps = 1'536'000;  // Allman et al.'s T1
  cfg.sender.receivers = {"sat", "near"};
  cfg.receivers = {rx("sat", 0, 295ms), rx("near", 0, 5ms)};
  auto r = sim::run(cfg, files);
  REQUIRE(r.succeeded);
  require_all_delivered(r, files);
  std::map<std::string, sender::receiver_report> by_id;
  for (const auto& rep : r.report.receivers) by_id[rep.id] = rep;
  // 590 ms x 1.536 Mbit/s = 113 kB: 8 initial windows of 14.5 kB. The near receiver's path
  // (10 ms) is below the long-path RTT, so it gets SCTP over
  // fallback_policy::short_path_sctp_associations (two).
  REQUIRE(by_id.at("sat").path == delivery_path::tcp);
  REQUIRE(by_id.at("sat").fallback_connections == 8);
  REQUIRE(by_id.at("near").path == delivery_path::sctp_udp);
  REQUIRE(by_id.at("near").fallback_connections ==
          sender::fallback_policy::short_path_sctp_associations);
  // An operator's --tcp-connections wins.
  cfg.sender.tcp_connections = 3;
  r = sim::run(cfg, files);
  REQUIRE(r.succeeded);
  for (const auto& rep : r.report.receivers)
    if (rep.id == "sat") REQUIRE(rep.fallback_connections == 3);
}

// ---- Scale: many receivers, loss models, per-pass sender counters ----

namespace {

/// Sums the per-pass counters.
sim::pass_stats totals(const sim::sim_result& r) {
  sim::pass_stats t;
  for (const auto& p : r.passes) {
    t.data_datagrams += p.data_datagrams;
    t.repair_datagrams += p.repair_datagrams;
    t.lost_datagrams += p.lost_datagrams;
    t.naks += p.naks;
    t.nak_blocks += p.nak_blocks;
    t.status += p.status;
    t.completes += p.completes;
    t.registers += p.registers;
    t.other += p.other;
  }
  return t;
}

/// A group of `n` receivers at one-way delays 5..15 ms.
sim::sim_config group(std::size_t n, double loss) {
  sim::sim_config cfg;
  cfg.seed = 4242;
  cfg.trace = false;
  cfg.sender.rate_bps = 100'000'000;
  cfg.sender.fallback = sender::fallback_mode::off;
  for (std::size_t i = 0; i < n; ++i) {
    auto s = rx("r" + std::to_string(i), 0, std::chrono::milliseconds(5 + i % 11));
    s.down.loss = loss;
    cfg.sender.receivers.push_back(s.id);
    cfg.receivers.push_back(std::move(s));
  }
  return cfg;
}

}  // namespace

TEST_CASE("the Gilbert chain keeps the mean loss and the mean burst length", "[sim][scale]") {
  std::mt19937_64 rng(1);
  sim::link_model l;
  l.loss = 0.01;
  l.burst = 4;
  sim::loss_chain c;
  std::uint64_t lost = 0;
  std::uint64_t bursts = 0;
  bool prev = false;
  constexpr std::uint64_t n = 2'000'000;
  for (std::uint64_t i = 0; i < n; ++i) {
    const bool x = c.lost(l, rng);
    lost += x;
    bursts += x && !prev;
    prev = x;
  }
  const double mean = static_cast<double>(lost) / n;
  const double burst = static_cast<double>(lost) / static_cast<double>(bursts);
  INFO("mean loss " << mean << ", mean burst " << burst);
  REQUIRE(mean > 0.009);
  REQUIRE(mean < 0.011);
  REQUIRE(burst > 3.6);
  REQUIRE(burst < 4.4);
  // Independent loss has bursts of 1 / (1 - p).
  l.burst = 1;
  lost = bursts = 0;
  prev = false;
  for (std::uint64_t i = 0; i < n; ++i) {
    const bool x = c.lost(l, rng);
    lost += x;
    bursts += x && !prev;
    prev = x;
  }
  REQUIRE(static_cast<double>(lost) / static_cast<double>(bursts) < 1.05);
}

TEST_CASE(
    "300 receivers with independent loss and three at 10 % all complete; resending the "
    "blocks named costs at least the union of the losses",
    "[sim][scale]") {
  std::mt19937_64 rng(31);
  const auto files = sim::make_files(rng, 8, {1, 60'000});
  auto cfg = group(300, 0.01);
  for (const std::size_t i : {50, 150, 250}) cfg.receivers[i].down.loss = 0.10;
  const auto r = sim::run(cfg, files);
  REQUIRE(r.succeeded);
  require_all_delivered(r, files);
  REQUIRE(r.corrupt_files == 0);
  const auto t = totals(r);
  // The per-pass counters add up to the sender's own.
  REQUIRE(t.data_datagrams == r.report.data_datagrams);
  REQUIRE(t.repair_datagrams == r.report.repair_datagrams);
  REQUIRE(r.losses.original_blocks + t.repair_datagrams == t.data_datagrams);
  REQUIRE(t.registers >= 300);
  REQUIRE(t.completes >= 300);
  // The lossiest receiver is one of the three, and the union of 300 receivers' losses far
  // exceeds any one receiver's: 1 - 0.99^297 * 0.9^3 ~ 96 % of the blocks.
  const auto& l = r.losses;
  REQUIRE((l.max_receiver == "r50" || l.max_receiver == "r150" || l.max_receiver == "r250"));
  REQUIRE(l.union_lost > 3 * l.max_receiver_lost);
  REQUIRE(l.common_lost == 0);
  // Today a repair resends exactly the blocks named, so every block anyone lost is sent again:
  // repairs >= the union (parity repairs will bring this to about the largest single loss).
  REQUIRE(t.repair_datagrams >= l.union_lost);
}

TEST_CASE(
    "fully correlated loss: every receiver loses the same blocks, and the NAKs per lost "
    "block stay below a constant at 1,000 and 10,000 receivers",
    "[sim][scale]") {
  // An uplink fade: the shared link loses blocks for everyone. Without suppression every
  // receiver named every lost block (1,000 block requests per lost block at 1,000 receivers,
  // docs/benchmarks.md "Scale: baseline"); the exponential backoff and the repair adverts keep
  // it to a few, whatever the group size.
  for (const std::size_t n : {std::size_t{1000}, std::size_t{10000}}) {
    INFO(n << " receivers");
    std::mt19937_64 rng(32);
    const auto files = sim::make_files(rng, n > 1000 ? 2 : 4, {60'000});
    auto cfg = group(n, 0);
    cfg.common.loss = 0.05;
    const auto r = sim::run(cfg, files);
    REQUIRE(r.succeeded);
    require_all_delivered(r, files);
    const auto& l = r.losses;
    REQUIRE(l.common_lost > 0);
    REQUIRE(l.union_lost == l.common_lost);
    REQUIRE(l.total_receiver_lost == n * l.common_lost);
    const auto t = totals(r);
    // One repair per lost block serves everyone ...
    REQUIRE(t.repair_datagrams >= l.union_lost);
    REQUIRE(t.repair_datagrams <= 2 * l.union_lost);
    // ... and a handful of receivers ask for each.
    REQUIRE(t.nak_blocks <= 10 * l.union_lost);
    REQUIRE(t.naks <= 10 * l.union_lost);
  }
}

TEST_CASE(
    "independent loss at 1,000 receivers: the NAKs the sender reads stay within twice the "
    "distinct losses",
    "[sim][scale]") {
  std::mt19937_64 rng(33);
  const auto files = sim::make_files(rng, 4, {60'000});
  for (const double loss : {1e-3, 1e-2}) {
    INFO("loss " << loss);
    auto cfg = group(1000, loss);
    const auto r = sim::run(cfg, files);
    REQUIRE(r.succeeded);
    require_all_delivered(r, files);
    const auto t = totals(r);
    // Data datagrams some receiver lost, per pass and in all: the distinct losses.
    REQUIRE(t.lost_datagrams >= r.losses.union_lost);
    REQUIRE(t.naks <= 2 * t.lost_datagrams);
    // Status replies: at most one per incomplete receiver per status request, and sampled.
    REQUIRE(t.status <= 1000 * r.report.passes);
    // Every receiver registers and completes about once.
    REQUIRE(t.completes <= 1100);
  }
}

TEST_CASE(
    "with 1 % loss on every receiver's NAKs, status replies and COMPLETEs, every receiver "
    "still completes",
    "[sim][scale]") {
  std::mt19937_64 rng(34);
  const auto files = sim::make_files(rng, 4, {60'000});
  auto cfg = group(1000, 1e-3);
  for (auto& s : cfg.receivers) s.up.loss = 0.01;
  const auto r = sim::run(cfg, files);
  REQUIRE(r.succeeded);
  require_all_delivered(r, files);
  REQUIRE(r.corrupt_files == 0);
}
