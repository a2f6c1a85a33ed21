/// @file
/// `sim`: runs one simulated session (tests/sim/sim_harness.hpp) with many receivers and a
/// chosen loss model, and prints per pass what the sender received and sent.
///
///   sim --receivers 1000 --model independent --loss 1e-2
///   sim --receivers 10000 --model correlated --loss 1e-3 --files 4 --size 1000000
///
/// Loss models (downstream, sender -> receiver):
///   independent  each receiver loses each datagram with probability --loss
///   correlated   one shared link loses --loss of the datagrams: every receiver the same ones
///   burst        each receiver's own Gilbert chain, mean loss --loss, mean burst --burst
/// --lossy K puts K receivers (spread over the group) at --lossy-loss (default 10 %).
/// --up-loss applies to every receiver's upstream path (NAK, status, COMPLETE, REGISTER).
/// --fec-k K codes blocks in FEC blocks of K sources (interleaving --fec-depth) so that NAKs ask
/// for parity by count; --fec-overhead F sends F x the sources as proactive parity in pass 1.
/// --decode-sample N: only the first N receivers run the parity codec; the others decode by
/// count (sim::receiver_spec::decode_by_count), for thousands of receivers with GF(2^16) FEC
/// blocks (default: every receiver decodes for real).

#include "tests/sim/sim_harness.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace mcdist;
using namespace std::chrono_literals;

namespace {

struct options {
  std::size_t receivers = 1000;
  std::string model = "independent";
  double loss = 1e-3;
  double burst = 4;
  std::size_t lossy = 0;
  double lossy_loss = 0.10;
  double up_loss = 0;
  std::size_t files = 10;
  std::uint64_t size = 400'000;
  std::uint64_t rate_bps = 100'000'000;
  int delay_ms = 10;
  int spread_ms = 10;
  std::uint64_t seed = 1;
  std::string fallback = "auto";
  std::uint32_t fec_k = 0;
  std::uint32_t fec_depth = 1;
  double fec_overhead = 0;
  std::size_t decode_sample = static_cast<std::size_t>(-1);
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: sim [--receivers N] [--model independent|correlated|burst] [--loss P]\n"
               "           [--burst L] [--lossy K] [--lossy-loss P] [--up-loss P] [--files N]\n"
               "           [--size BYTES] [--rate BPS] [--delay MS] [--spread MS] [--seed S]\n"
               "           [--fallback auto|off] [--fec-k K] [--fec-depth D] [--fec-overhead F]\n"
               "           [--decode-sample N]\n");
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage();
    const char* v = argv[++i];
    if (a == "--receivers")
      o.receivers = std::strtoull(v, nullptr, 10);
    else if (a == "--model")
      o.model = v;
    else if (a == "--loss")
      o.loss = std::strtod(v, nullptr);
    else if (a == "--burst")
      o.burst = std::strtod(v, nullptr);
    else if (a == "--lossy")
      o.lossy = std::strtoull(v, nullptr, 10);
    else if (a == "--lossy-loss")
      o.lossy_loss = std::strtod(v, nullptr);
    else if (a == "--up-loss")
      o.up_loss = std::strtod(v, nullptr);
    else if (a == "--files")
      o.files = std::strtoull(v, nullptr, 10);
    else if (a == "--size")
      o.size = std::strtoull(v, nullptr, 10);
    else if (a == "--rate")
      o.rate_bps = std::strtoull(v, nullptr, 10);
    else if (a == "--delay")
      o.delay_ms = std::atoi(v);
    else if (a == "--spread")
      o.spread_ms = std::atoi(v);
    else if (a == "--seed")
      o.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--fallback")
      o.fallback = v;
    else if (a == "--fec-k")
      o.fec_k = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    else if (a == "--fec-depth")
      o.fec_depth = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    else if (a == "--fec-overhead")
      o.fec_overhead = std::strtod(v, nullptr);
    else if (a == "--decode-sample")
      o.decode_sample = std::strtoull(v, nullptr, 10);
    else
      usage();
  }
  if (o.receivers == 0 || o.files == 0 ||
      (o.model != "independent" && o.model != "correlated" && o.model != "burst") ||
      (o.fallback != "auto" && o.fallback != "off") || o.lossy > o.receivers) {
    usage();
  }
  return o;
}

/// Peak resident set size of this process, MB.
double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  std::mt19937_64 rng(o.seed);
  const auto files = sim::make_files(rng, o.files, {o.size});
  sim::sim_config cfg;
  cfg.seed = o.seed;
  cfg.trace = false;
  cfg.sender.rate_bps = o.rate_bps;
  cfg.sender.register_timeout = 60s;
  cfg.sender.fallback =
      o.fallback == "off" ? sender::fallback_mode::off : sender::fallback_mode::automatic;
  cfg.sender.fec_k = o.fec_k;
  cfg.sender.fec_depth = o.fec_depth;
  cfg.sender.fec_overhead = o.fec_overhead;
  if (o.model == "correlated") cfg.common.loss = o.loss;
  const std::size_t lossy_every = o.lossy ? o.receivers / o.lossy : 0;
  for (std::size_t i = 0; i < o.receivers; ++i) {
    sim::receiver_spec s;
    s.id = "r" + std::to_string(i);
    s.decode_by_count = i >= o.decode_sample;
    s.down.delay = std::chrono::milliseconds(
        o.delay_ms + static_cast<int>(i * 7 % static_cast<std::size_t>(o.spread_ms + 1)));
    s.up.delay = s.down.delay;
    s.up.loss = o.up_loss;
    if (o.model == "independent") s.down.loss = o.loss;
    if (o.model == "burst") {
      s.down.loss = o.loss;
      s.down.burst = o.burst;
    }
    if (lossy_every && i % lossy_every == lossy_every / 2 && i / lossy_every < o.lossy) {
      s.down.loss = o.lossy_loss;
      s.down.burst = 1;
    }
    cfg.sender.receivers.push_back(s.id);
    cfg.receivers.push_back(std::move(s));
  }
  const auto wall0 = std::chrono::steady_clock::now();
  const auto r = sim::run(cfg, files);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  std::size_t complete = 0;
  for (const auto& [id, d] : r.delivered) complete += d.size() == files.size();
  std::size_t unicast = 0;
  for (const auto& rep : r.report.receivers) {
    unicast += rep.state == sender::receiver_report::state_t::completed && is_unicast(rep.path);
  }
  std::printf(
      "receivers %zu  model %s  loss %g%s  lossy %zu at %g  up-loss %g  files %zu x %llu B"
      "  rate %.0f Mbit/s  seed %llu\n",
      o.receivers, o.model.c_str(), o.loss,
      o.model == "burst" ? (" burst " + std::to_string(o.burst)).c_str() : "", o.lossy,
      o.lossy_loss, o.up_loss, o.files, static_cast<unsigned long long>(o.size),
      static_cast<double>(o.rate_bps) / 1e6, static_cast<unsigned long long>(o.seed));
  std::printf("%4s %9s %9s %9s %9s %8s %9s %10s %9s %9s %9s %9s %9s %10s\n", "pass", "data",
              "repair", "parity", "lost", "lost-FEC", "NAK", "NAK-blocks", "status", "COMPLETE",
              "REGISTER", "other", "ctl-sent", "cpu-ms");
  sim::pass_stats total;
  for (const auto& p : r.passes) {
    std::printf(
        "%4u %9llu %9llu %9llu %9llu %8llu %9llu %10llu %9llu %9llu %9llu %9llu %9llu %10.1f\n",
        p.pass, static_cast<unsigned long long>(p.data_datagrams),
        static_cast<unsigned long long>(p.repair_datagrams),
        static_cast<unsigned long long>(p.parity_datagrams),
        static_cast<unsigned long long>(p.lost_datagrams),
        static_cast<unsigned long long>(p.lost_fec_blocks), static_cast<unsigned long long>(p.naks),
        static_cast<unsigned long long>(p.nak_blocks), static_cast<unsigned long long>(p.status),
        static_cast<unsigned long long>(p.completes), static_cast<unsigned long long>(p.registers),
        static_cast<unsigned long long>(p.other), static_cast<unsigned long long>(p.control_sent),
        p.sender_cpu_s * 1e3);
    total.data_datagrams += p.data_datagrams;
    total.repair_datagrams += p.repair_datagrams;
    total.lost_datagrams += p.lost_datagrams;
    total.lost_fec_blocks += p.lost_fec_blocks;
    total.parity_datagrams += p.parity_datagrams;
    total.naks += p.naks;
    total.nak_blocks += p.nak_blocks;
    total.status += p.status;
    total.completes += p.completes;
    total.registers += p.registers;
    total.other += p.other;
    total.control_sent += p.control_sent;
    total.sender_cpu_s += p.sender_cpu_s;
  }
  std::printf(
      " sum %9llu %9llu %9llu %9llu %8llu %9llu %10llu %9llu %9llu %9llu %9llu %9llu %10.1f\n",
      static_cast<unsigned long long>(total.data_datagrams),
      static_cast<unsigned long long>(total.repair_datagrams),
      static_cast<unsigned long long>(total.parity_datagrams),
      static_cast<unsigned long long>(total.lost_datagrams),
      static_cast<unsigned long long>(total.lost_fec_blocks),
      static_cast<unsigned long long>(total.naks),
      static_cast<unsigned long long>(total.nak_blocks),
      static_cast<unsigned long long>(total.status),
      static_cast<unsigned long long>(total.completes),
      static_cast<unsigned long long>(total.registers),
      static_cast<unsigned long long>(total.other),
      static_cast<unsigned long long>(total.control_sent), total.sender_cpu_s * 1e3);
  const auto& l = r.losses;
  // Repairs: blocks sent again plus parity sent for NAKs (proactive parity is overhead).
  const std::uint64_t proactive = r.report.proactive_parity;
  total.repair_datagrams += total.parity_datagrams - std::min(total.parity_datagrams, proactive);
  std::printf(
      "parity datagrams %llu (proactive %llu, for NAKs %llu); repairs (blocks again + "
      "parity for NAKs) %llu\n",
      static_cast<unsigned long long>(total.parity_datagrams),
      static_cast<unsigned long long>(proactive),
      static_cast<unsigned long long>(total.parity_datagrams -
                                      std::min(total.parity_datagrams, proactive)),
      static_cast<unsigned long long>(total.repair_datagrams));
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  std::printf(
      "first transmissions %llu; lost: shared link %llu, union %llu (%.2f %%), largest "
      "single receiver %llu (%s), mean per receiver %.1f\n",
      static_cast<unsigned long long>(l.original_blocks),
      static_cast<unsigned long long>(l.common_lost), static_cast<unsigned long long>(l.union_lost),
      100 * ratio(static_cast<double>(l.union_lost), static_cast<double>(l.original_blocks)),
      static_cast<unsigned long long>(l.max_receiver_lost), l.max_receiver.c_str(),
      ratio(static_cast<double>(l.total_receiver_lost), static_cast<double>(o.receivers)));
  std::printf(
      "repairs / union %.2f, repairs / largest single loss %.2f; NAK datagrams per lost "
      "block (union) %.2f, NAK-named blocks per lost block %.2f; control datagrams "
      "received per pass %.0f\n",
      ratio(static_cast<double>(total.repair_datagrams), static_cast<double>(l.union_lost)),
      ratio(static_cast<double>(total.repair_datagrams), static_cast<double>(l.max_receiver_lost)),
      ratio(static_cast<double>(total.naks), static_cast<double>(l.union_lost)),
      ratio(static_cast<double>(total.nak_blocks), static_cast<double>(l.union_lost)),
      ratio(static_cast<double>(total.received()),
            static_cast<double>(r.report.passes ? r.report.passes : 1)));
  const auto& c = r.report.control;
  std::printf(
      "NAK datagrams per distinct lost datagram %.2f; repair adverts %llu carrying %llu "
      "blocks; blocks named that were not wanted already %llu of %llu\n",
      ratio(static_cast<double>(total.naks), static_cast<double>(total.lost_datagrams)),
      static_cast<unsigned long long>(c.adverts),
      static_cast<unsigned long long>(c.advertised_blocks),
      static_cast<unsigned long long>(c.nak_new_blocks),
      static_cast<unsigned long long>(c.nak_blocks));
  if (o.fec_k > 0) {
    // The bound on feedback with parity: NAK and status datagrams per pass against
    // 2 x the FEC blocks that lost something per pass, plus the status replies.
    const double passes = r.report.passes ? r.report.passes : 1;
    std::printf(
        "per pass: NAK datagrams %.1f + status %.1f, against 2 x lost FEC blocks %.1f + "
        "status %.1f; decoded by count at %zu of %zu receivers\n",
        static_cast<double>(total.naks) / passes, static_cast<double>(total.status) / passes,
        2.0 * static_cast<double>(total.lost_fec_blocks) / passes,
        static_cast<double>(total.status) / passes,
        o.decode_sample < o.receivers ? o.receivers - o.decode_sample : 0, o.receivers);
  }
  if (!r.fec_named_naks.empty()) {
    // Which sites NAKed blocks by name instead of by count, and how many: a few sites naming
    // most of the set look different from many naming a few.
    std::vector<std::pair<std::string, sim::sim_result::named_naks>> named(r.fec_named_naks.begin(),
                                                                           r.fec_named_naks.end());
    std::sort(named.begin(), named.end(),
              [](const auto& a, const auto& b) { return a.second.blocks > b.second.blocks; });
    std::uint64_t blocks = 0;
    for (const auto& [id, n] : named) blocks += n.blocks;
    std::printf("FEC sites that NAKed blocks by name: %zu, naming %llu blocks; most:", named.size(),
                static_cast<unsigned long long>(blocks));
    for (std::size_t i = 0; i < named.size() && i < 5; ++i) {
      const auto& st = r.receiver_stats.at(named[i].first);
      std::printf(
          " %s %llu (first in pass %u; NAK datagrams %llu; parity kept %llu, recovered %llu)",
          named[i].first.c_str(), static_cast<unsigned long long>(named[i].second.blocks),
          named[i].second.first_pass, static_cast<unsigned long long>(st.naks_sent),
          static_cast<unsigned long long>(st.parity_blocks),
          static_cast<unsigned long long>(st.blocks_recovered));
    }
    std::printf("\n");
  }
  std::printf(
      "complete %zu/%zu (unicast %zu), succeeded %s, passes %u, virtual %.2f s, wall %.1f "
      "s, sender core CPU %.2f s, peak RSS %.0f MB, mismatched finalizations %llu\n",
      complete, o.receivers, unicast, r.succeeded ? "yes" : "no", r.report.passes,
      to_seconds(r.elapsed), wall, total.sender_cpu_s, peak_rss_mb(),
      static_cast<unsigned long long>(r.corrupt_files));
  return r.succeeded && complete == o.receivers ? 0 : 1;
}
