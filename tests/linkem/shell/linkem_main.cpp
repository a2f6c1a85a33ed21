// mcdist-linkem: userspace link emulator for testing mcdist over emulated WAN and
// satellite links (network namespaces + TUN devices, no netem needed).

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "tests/linkem/core/scenario.hpp"
#include "tests/linkem/core/units.hpp"
#include "tests/linkem/shell/emulator.hpp"
#include "tests/linkem/shell/netns.hpp"
#include "tests/linkem/shell/system.hpp"

namespace {

using namespace mcdist::linkem;

constexpr const char* k_description =
    R"(mcdist-linkem - userspace link emulator (delay, loss, burst loss, rate, reordering,
duplication) between emulated hosts in network namespaces.

Creates one network namespace per host (h0, h1, ...), each with a TUN device holding the
host's address, and forwards every IPv4 packet between them in userspace: unicast to the
host owning the destination, multicast to the hosts that joined the group (IGMPv2/v3
snooping). UDP, multicast, TCP and SCTP-over-UDP work unchanged. Each host's link has an
"up" direction (host -> network) and a "down" direction (network -> host), impaired
separately, applied in dummynet order: rate + drop-tail queue -> delay -> loss.)";

constexpr const char* k_footer = R"(
LINK SPECIFICATION (--link, repeatable; later ones override earlier ones key by key)
  SELECTOR:KEY=VALUE[,KEY=VALUE...]
  SELECTOR   hN | hN-hM | all, comma-separated; suffix .up or .down for one direction
             (no suffix: both directions)
  delay=DUR          one-way delay of each selected direction: 350ms, 1.5s, 200us
  loss=PROB          random loss probability: 1e-3, 0.1%
  burst=N            mean loss burst length in packets: Gilbert-Elliott model with
                     long-run loss rate 'loss' (simple Gilbert: loss only in Bad state)
  rate=BITRATE       serialisation rate: 10Mbit, 1.5Gbit/s, 64kbit, 10MB/s (0 = none)
  queue=N|SIZE       drop-tail queue in front of the rate limiter: packets (default 50,
                     as dummynet) or bytes (64KB, 1MiB)
  reorder=PROB       fraction of packets held back by reorder_delay
  reorder_delay=DUR  extra delay of a reordered packet (default 1ms)
  dup=PROB           fraction of packets delivered twice
  A packet from hA to hB crosses hA.up then hB.down, so 'h2:delay=350ms' gives a
  700 ms round trip between h0 and h2 (plus h0's own delays).

RUN SPECIFICATION (--run, repeatable)
  HOST:COMMAND       runs '/bin/sh -c COMMAND' inside HOST's namespace. Environment:
                     MLE_HOST, MLE_INDEX, MLE_ADDR, MLE_NETNS (this host), MLE_IFNAME,
                     MLE_HOSTS, MLE_PREFIX, MLE_RUN_ID, MLE_H<i>_ADDR, MLE_H<i>_NETNS.
  Output lines are prefixed "[hN] " (or go to --log-dir/hN.log). The run ends when all
  main commands exited (default: all commands are main; --main selects hosts), when a
  main command fails, on SIGINT/SIGTERM, or after --duration. Remaining commands get
  SIGTERM, then SIGKILL after --kill-timeout. Without --run the emulator only forwards
  until killed; use 'ip netns exec <netns> CMD' from a script (see --env-file).

SCENARIO FILE (--config, TOML; command-line options override it)
  hosts = 3
  seed = 42
  links = ["all:delay=10ms"]      # spec strings, applied first
  [link.h2]                       # both directions of h2
  delay = "350ms"
  loss = 1e-3
  [link.h2.down]                  # one direction
  rate = "20Mbit"
  [[run]]
  host = "h0"
  command = "uftp -I $MLE_IFNAME -H $MLE_H1_ADDR,$MLE_H2_ADDR file"
  main = true
  Other keys: prefix, flood_multicast, ifname, mtu, run_id, log_dir, stats_json,
  env_file, duration.

OUTPUT
  stdout: "linkem: run-id=... hosts=..." and one "linkem: host=hN netns=NAME addr=A.B.C.D
  up=... down=..." line per host, the --print-env block (KEY=VALUE lines ending with
  MLE_READY=1), "linkem: ready", the commands' prefixed output, and at the end the
  statistics table (per host and direction: packets in, delivered, lost, queue drops,
  duplicated, reordered, bytes). Logs go to stderr.

EXIT STATUS
  0 success (main commands exited 0, or forward-only run ended by signal/--duration)
  1 a main command failed, or --timeout expired
  2 usage or scenario error
  3 not root: CAP_SYS_ADMIN/CAP_NET_ADMIN missing
  4 network namespaces unavailable
  5 TUN devices unavailable (/dev/net/tun)
  6 other runtime error
  128+N  ended by signal N while main commands were still running

EXAMPLES
  # GEO satellite receiver h2 (700 ms RTT, 1e-3 loss) and terrestrial h1 (70 ms RTT)
  mcdist-linkem --hosts 3 --link 'h2:delay=350ms,loss=1e-3' --link 'h1:delay=35ms' \
      --main h0 --run 'h0:uftp -I mle0 -R 100000 /data/file' \
      --run 'h1:uftpd -d -I mle0 -D /tmp/h1' --run 'h2:uftpd -d -I mle0 -D /tmp/h2'
  # forward only; a script runs the programs
  mcdist-linkem --hosts 2 --link h1:delay=35ms --env-file /tmp/mle.env &
  . /tmp/mle.env; ip netns exec $MLE_H1_NETNS ...
  # remove namespaces left by a crashed run
  mcdist-linkem --cleanup
)";

/// Smallest --max-memory: a few 1 MiB chunks per buffer size class, so that at least a
/// few hundred frames can be in flight.
constexpr std::uint64_t k_min_memory = 16ULL << 20U;

std::string default_run_id() { return std::to_string(::getpid()); }

bool valid_token(const std::string& s, std::size_t max_len) {
  if (s.empty() || s.size() > max_len) {
    return false;
  }
  for (const char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-')) {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // Block the signals that end a run before anything else, so that they are only ever
  // consumed by the control loop (signalfd) and clean-up always runs. Threads created
  // later inherit the mask.
  sigset_t sigs;
  ::sigemptyset(&sigs);
  for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) {
    ::sigaddset(&sigs, s);
  }
  ::pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto logger = spdlog::stderr_color_mt("linkem");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("linkem: %^%l%$: %v");

  CLI::App app{k_description, "mcdist-linkem"};
  app.footer(k_footer);
  app.get_formatter()->column_width(34);

  std::size_t hosts = 2;
  std::string prefix = "10.77.0.0/24";
  std::uint64_t seed = 1;
  std::string config_path;
  std::vector<std::string> links;
  std::vector<std::string> runs;
  std::vector<std::string> mains;
  std::string ifname = "mle0";
  std::uint32_t mtu = 1500;
  std::uint32_t txqueuelen = 10000;
  std::string run_id;
  std::string netns_prefix = "mle";
  std::string log_dir;
  std::string env_file;
  std::string stats_json;
  std::string duration;
  std::string timeout;
  std::string kill_timeout = "2s";
  std::string stats_interval;
  std::string max_memory = "1GiB";
  int realtime_priority = 10;
  std::string ingress_stamp = "tap";
  bool flood_multicast = false;
  bool no_offload = false;
  bool print_env = false;
  bool quiet = false;
  bool verbose = false;
  bool cleanup = false;
  bool force = false;

  auto* hosts_opt = app.add_option("-n,--hosts", hosts, "number of emulated hosts h0..h(N-1)")
                        ->check(CLI::Range(1, 1000));
  app.add_option("-c,--config", config_path, "TOML scenario file (see SCENARIO FILE)");
  app.add_option("-l,--link", links, "link specification SELECTOR:KEY=VALUE,... (repeatable)");
  app.add_option("-r,--run", runs, "HOST:COMMAND to run in HOST's namespace (repeatable)");
  app.add_option("-m,--main", mains, "host whose commands end the run when done (repeatable)");
  auto* prefix_opt = app.add_option("--prefix", prefix,
                                    "IPv4 subnet of the hosts; host i gets "
                                    "network+i+1")
                         ->capture_default_str();
  auto* seed_opt =
      app.add_option("--seed", seed, "seed of all random impairments")->capture_default_str();
  auto* flood_opt = app.add_flag("--flood-multicast", flood_multicast,
                                 "deliver multicast to all other hosts, ignore IGMP");
  auto* ifname_opt = app.add_option("--ifname", ifname, "TUN device name in each namespace")
                         ->capture_default_str();
  auto* mtu_opt = app.add_option("--mtu", mtu, "MTU of the TUN devices, bytes")
                      ->check(CLI::Range(576, 65535))
                      ->capture_default_str();
  app.add_option("--txqueuelen", txqueuelen, "TUN transmit queue, packets")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_flag("--no-offload", no_offload,
               "do not negotiate checksum/TSO/USO offload with the TUN devices");
  app.add_option("--rt-priority", realtime_priority,
                 "SCHED_FIFO priority of the forwarding thread (1-99), so that CPU load from "
                 "the hosts' programs cannot delay packets; 0 = normal scheduling")
      ->check(CLI::Range(0, 99))
      ->capture_default_str();
  app.add_option("--ingress-stamp", ingress_stamp,
                 "when a frame enters its host's up link: 'tap', the time the host's kernel "
                 "handed it to the TUN device (a packet socket on the device dates it), or "
                 "'read', the time the forwarding thread read it (frames that queued while "
                 "the thread was held up then arrive together, and a small queue drops them)")
      ->check(CLI::IsMember({"tap", "read"}))
      ->capture_default_str();
  app.add_option("--max-memory", max_memory, "cap on packet buffer memory (e.g. 512MiB)")
      ->capture_default_str();
  auto* run_id_opt =
      app.add_option("--run-id", run_id, "run id used in namespace names (default: pid)");
  app.add_option("--netns-prefix", netns_prefix, "namespace name prefix: PREFIX-RUNID-hN")
      ->capture_default_str();
  auto* log_dir_opt = app.add_option("--log-dir", log_dir,
                                     "write each command's output to DIR/hN.log instead of "
                                     "relaying it");
  auto* env_file_opt = app.add_option(
      "--env-file", env_file, "write MLE_* shell variables to FILE once ready (removed at exit)");
  app.add_flag("--print-env", print_env, "print the MLE_* variables on stdout once ready");
  auto* stats_json_opt =
      app.add_option("--stats-json", stats_json, "write final counters as JSON to FILE");
  app.add_option("--stats-interval", stats_interval, "log a progress line every DURATION");
  auto* duration_opt = app.add_option("--duration", duration,
                                      "end the run after DURATION (normal "
                                      "end, exit 0)");
  app.add_option("--timeout", timeout, "fail (exit 1) if main commands still run after DURATION");
  app.add_option("--kill-timeout", kill_timeout, "SIGTERM-to-SIGKILL grace for commands")
      ->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "no statistics table, warnings only");
  app.add_flag("-v,--verbose", verbose, "debug logging");
  app.add_flag("--cleanup", cleanup,
               "remove namespaces PREFIX-* left by crashed runs (runs alive are kept) and exit");
  app.add_flag("--force", force, "with --cleanup: also remove namespaces of live runs");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? exit_ok : exit_usage;
  }
  spdlog::set_level(verbose ? spdlog::level::debug
                            : (quiet ? spdlog::level::warn : spdlog::level::info));

  if (cleanup) {
    if (!current_privileges().sys_admin) {
      spdlog::error("--cleanup needs root (CAP_SYS_ADMIN to unmount namespaces)");
      return exit_no_privilege;
    }
    const int removed = cleanup_stale(netns_prefix, force);
    std::printf("linkem: removed %d namespace(s)\n", removed);
    return exit_ok;
  }

  run_options opt;
  try {
    scenario_file file;
    if (!config_path.empty()) {
      file = load_scenario_file(config_path);
    }
    // Command line overrides the file.
    opt.hosts = hosts_opt->count() > 0 ? hosts : file.hosts.value_or(hosts);
    opt.prefix = parse_ipv4_prefix(prefix_opt->count() > 0 ? prefix : file.prefix.value_or(prefix));
    if (opt.hosts > opt.prefix.capacity()) {
      throw config_error(std::to_string(opt.hosts) + " hosts do not fit in prefix /" +
                         std::to_string(opt.prefix.length));
    }
    opt.seed = seed_opt->count() > 0 ? seed : file.seed.value_or(seed);
    opt.flood_multicast = flood_opt->count() > 0 ? true : file.flood_multicast.value_or(false);
    opt.ifname = ifname_opt->count() > 0 ? ifname : file.ifname.value_or(ifname);
    if (opt.ifname.empty() || opt.ifname.size() > 15 || !valid_token(opt.ifname, 15)) {
      throw config_error("--ifname must be 1-15 characters [A-Za-z0-9_.-]");
    }
    opt.mtu = mtu_opt->count() > 0 ? mtu : file.mtu.value_or(mtu);
    opt.txqueuelen = txqueuelen;
    opt.offload = !no_offload;
    opt.realtime_priority = realtime_priority;
    opt.ingress_tap = ingress_stamp == "tap";
    opt.max_memory = parse_byte_size(max_memory);
    if (opt.max_memory < k_min_memory) {
      throw config_error("--max-memory must be at least 16 MiB");
    }
    opt.run_id = run_id_opt->count() > 0 ? run_id : file.run_id.value_or(default_run_id());
    if (!valid_token(opt.run_id, 32)) {
      throw config_error("--run-id must be 1-32 characters [A-Za-z0-9_.-]");
    }
    if (!valid_token(netns_prefix, 32)) {
      throw config_error("--netns-prefix must be 1-32 characters [A-Za-z0-9_.-]");
    }
    opt.netns_prefix = netns_prefix;
    if (log_dir_opt->count() > 0 || file.log_dir) {
      opt.log_dir = log_dir_opt->count() > 0 ? log_dir : *file.log_dir;
    }
    if (env_file_opt->count() > 0 || file.env_file) {
      opt.env_file = env_file_opt->count() > 0 ? env_file : *file.env_file;
    }
    if (stats_json_opt->count() > 0 || file.stats_json) {
      opt.stats_json = stats_json_opt->count() > 0 ? stats_json : *file.stats_json;
    }
    opt.print_env = print_env;
    opt.quiet = quiet;
    if (duration_opt->count() > 0) {
      opt.duration = parse_duration(duration);
    } else {
      opt.duration = file.duration;
    }
    if (!timeout.empty()) {
      opt.timeout = parse_duration(timeout);
    }
    opt.kill_timeout = parse_duration(kill_timeout);
    if (!stats_interval.empty()) {
      opt.stats_interval = parse_duration(stats_interval);
      if (opt.stats_interval->count() < 1'000'000) {
        throw config_error("--stats-interval must be at least 1ms");
      }
    }

    opt.up.assign(opt.hosts, link_params{});
    opt.down.assign(opt.hosts, link_params{});
    for (const auto& spec : file.links) {
      apply_link_spec(spec, opt.up, opt.down);
    }
    for (const auto& spec : links) {
      apply_link_spec(spec, opt.up, opt.down);
    }

    std::vector<std::string> all_runs = file.runs;
    all_runs.insert(all_runs.end(), runs.begin(), runs.end());
    for (const auto& r : all_runs) {
      opt.runs.push_back(parse_run_spec(r, opt.hosts));
    }
    std::vector<std::string> all_mains = file.mains;
    all_mains.insert(all_mains.end(), mains.begin(), mains.end());
    opt.main_host.assign(opt.hosts, all_mains.empty());
    for (const auto& m : all_mains) {
      const std::size_t h = parse_host_name(m, opt.hosts);
      const bool has_command = std::any_of(opt.runs.begin(), opt.runs.end(),
                                           [h](const run_spec& r) { return r.host == h; });
      if (!has_command) {
        throw config_error("--main " + m + " but no --run command for " + m);
      }
      opt.main_host[h] = true;
    }
  } catch (const config_error& e) {
    spdlog::error("{}", e.what());
    return exit_usage;
  }

  try {
    return run_emulator(opt);
  } catch (const setup_error& e) {
    spdlog::error("{}", e.what());
    return e.code();
  } catch (const config_error& e) {
    spdlog::error("{}", e.what());
    return exit_usage;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return exit_runtime;
  }
}
