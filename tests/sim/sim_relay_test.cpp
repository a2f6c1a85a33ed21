// Relays in virtual time (docs/relays-design.md): a hub, relays that are ordinary sites upstream
// and run the same session for their own group from what they hold (sender/core/relay_gate.hpp),
// and stock sites behind them. What a relay must do is counted exactly here: every site gets
// every file byte for byte, the hub hears only from its own receivers, a relay never sends a
// block it does not hold, and a loss on the hub's link costs one repair upstream however many
// sites are below.
#include "tests/sim/sim_harness.hpp"

#include <catch2/catch.hpp>

#include <numeric>

using namespace mcdist;
using namespace std::chrono_literals;

namespace {

sim::receiver_spec node(std::string id, duration one_way, double down_loss,
                        std::string upstream = {}) {
  sim::receiver_spec s;
  s.id = std::move(id);
  s.down.delay = one_way;
  s.down.loss = down_loss;
  s.up.delay = one_way;
  s.upstream = std::move(upstream);
  return s;
}

/// A hub, `relays` relays 350 ms away (700 ms RTT, `hub_loss` towards each) and `per_relay`
/// sites 5 ms behind each relay (`site_loss` towards each). With `direct`, the same sites join
/// the hub's group instead, each 355 ms away with both losses on its link: the group the relays
/// replace.
sim::sim_config topology(int relays, int per_relay, double hub_loss, double site_loss,
                         bool direct = false) {
  sim::sim_config cfg;
  cfg.sender.rate_bps = 50'000'000;
  for (int r = 0; r < relays; ++r) {
    const std::string rid = "relay" + std::to_string(r);
    if (!direct) {
      auto rs = node(rid, 350ms, hub_loss);
      rs.relay = true;
      cfg.receivers.push_back(rs);
      cfg.sender.receivers.push_back(rid);
    }
    for (int i = 0; i < per_relay; ++i) {
      const std::string id = rid + "-site" + std::to_string(i);
      if (direct) {
        // 1 - (1 - a)(1 - b): the two links' losses in a row.
        cfg.receivers.push_back(node(id, 355ms, 1 - (1 - hub_loss) * (1 - site_loss)));
        cfg.sender.receivers.push_back(id);
      } else {
        cfg.receivers.push_back(node(id, 5ms, site_loss, rid));
      }
    }
  }
  return cfg;
}

void require_all_delivered(const sim::sim_result& r, const std::vector<sim::sim_file>& files) {
  for (const auto& [id, delivered] : r.delivered) {
    INFO("receiver " << id);
    REQUIRE(delivered.size() == files.size());
  }
}

/// The properties every relayed run must have.
void require_relayed(const sim::sim_result& r, const std::vector<sim::sim_file>& files,
                     const sim::sim_config& cfg) {
  REQUIRE(r.sender_done);
  REQUIRE(r.succeeded);
  require_all_delivered(r, files);
  REQUIRE(r.corrupt_files == 0);
  // The hub's receivers are its relays, all completed; no site below a relay reached it.
  std::vector<std::string> hub_receivers;
  for (const auto& rep : r.report.receivers) {
    REQUIRE(rep.state == sender::receiver_report::state_t::completed);
    hub_receivers.push_back(rep.id);
  }
  REQUIRE(hub_receivers == cfg.sender.receivers);
  for (const auto& [id, n] : r.to_sender_by) {
    INFO("sent to the hub: " << id);
    REQUIRE(std::find(hub_receivers.begin(), hub_receivers.end(), id) != hub_receivers.end());
  }
  for (const auto& [id, rel] : r.relays) {
    INFO("relay " << id);
    REQUIRE(rel.done);
    REQUIRE(rel.succeeded);
    REQUIRE(rel.unheld_sends == 0);
    // Cut-through: the relay's sites had data long before the relay held the whole session.
    REQUIRE(rel.first_sent > duration::zero());
    REQUIRE(rel.first_sent < rel.all_held);
    for (const auto& rep : rel.report.receivers) {
      REQUIRE(rep.state == sender::receiver_report::state_t::completed);
    }
  }
}

/// Blocks the hub's receiver `id` NAKed (a block named twice counts twice).
std::uint64_t hub_blocks_naked(const sim::sim_result& r, const std::string& id) {
  for (const auto& rep : r.report.receivers) {
    if (rep.id == id) return rep.blocks_naked;
  }
  return 0;
}

}  // namespace

TEST_CASE("relays carry a session to their sites and repair their losses from what they hold",
          "[sim][relay]") {
  std::mt19937_64 rng(5);
  const auto files = sim::make_files(rng, 60, {0, 1, 1400, 9000, 40000, 300000});
  for (const std::uint64_t seed : {1, 2, 3, 4, 5}) {
    INFO("seed " << seed);
    auto cfg = topology(2, 4, 1e-3, 1e-2);
    cfg.seed = seed;
    const auto r = sim::run(cfg, files);
    require_relayed(r, files, cfg);
    for (const auto& [id, rel] : r.relays) {
      INFO("relay " << id);
      // Its sites' losses were repaired by the relay, none by the hub.
      REQUIRE(rel.report.control.naks > 0);
      REQUIRE(rel.report.repair_datagrams > 0);
      // Each block the hub's link took from the relay is asked for upstream once: the relay's
      // NAKs name no more blocks than it lost there, though its four sites lost ten times as
      // many on their own links.
      REQUIRE(hub_blocks_naked(r, id) <= rel.upstream_data_lost);
      REQUIRE(rel.report.control.nak_blocks > hub_blocks_naked(r, id));
    }
  }
}

TEST_CASE("a relay holds back what the hub's link lost and sends it once the hub's repair is in",
          "[sim][relay]") {
  // 5 % towards the relays: many blocks are lost upstream while the relay's own pass 1 runs,
  // so its sweep skips them and its later passes wait for the hub's repairs.
  std::mt19937_64 rng(9);
  const auto files = sim::make_files(rng, 30, {1400, 20000, 200000});
  for (const std::uint64_t seed : {11, 12, 13}) {
    INFO("seed " << seed);
    auto cfg = topology(2, 3, 0.05, 0.01);
    cfg.seed = seed;
    const auto r = sim::run(cfg, files);
    require_relayed(r, files, cfg);
    for (const auto& [id, rel] : r.relays) {
      INFO("relay " << id);
      REQUIRE(rel.upstream_data_lost > 0);
      REQUIRE(hub_blocks_naked(r, id) <= rel.upstream_data_lost);
    }
  }
}

TEST_CASE("relays of a session with parity encode it only from FEC blocks they hold whole",
          "[sim][relay]") {
  std::mt19937_64 rng(13);
  const auto files = sim::make_files(rng, 40, {1400, 30000, 250000});
  for (const std::uint64_t seed : {21, 22, 23}) {
    INFO("seed " << seed);
    auto cfg = topology(2, 4, 0.01, 0.02);
    cfg.seed = seed;
    cfg.sender.fec_k = 32;
    cfg.sender.fec_overhead = 0.05;
    const auto r = sim::run(cfg, files);
    require_relayed(r, files, cfg);
    for (const auto& [id, rel] : r.relays) {
      INFO("relay " << id);
      REQUIRE(rel.report.parity_datagrams > 0);
      REQUIRE(hub_blocks_naked(r, id) <= rel.upstream_data_lost);
    }
  }
}

TEST_CASE("the hub hears from its relays, not from every site below them", "[sim][relay]") {
  std::mt19937_64 rng(17);
  const auto files = sim::make_files(rng, 40, {1400, 9000, 100000});
  auto relayed_cfg = topology(2, 8, 1e-3, 1e-2);
  auto direct_cfg = topology(2, 8, 1e-3, 1e-2, true);
  relayed_cfg.seed = direct_cfg.seed = 31;
  const auto relayed = sim::run(relayed_cfg, files);
  const auto direct = sim::run(direct_cfg, files);
  require_relayed(relayed, files, relayed_cfg);
  REQUIRE(direct.succeeded);
  const auto sum = [](const sim::sim_result& r) {
    std::uint64_t n = 0;
    for (const auto& [id, c] : r.to_sender_by) n += c;
    return n;
  };
  const auto repairs = [](const sim::sim_result& r) { return r.report.repair_datagrams; };
  // Sixteen sites at 1 % each name their own losses to the hub; two relays name only what
  // the hub's link lost. The counts, not their ratio, are what a seed can move.
  CAPTURE(sum(relayed), sum(direct), repairs(relayed), repairs(direct));
  REQUIRE(sum(relayed) < sum(direct));
  REQUIRE(repairs(relayed) < repairs(direct));
}
