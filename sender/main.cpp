// mcdist-send: distribute a file set over IP multicast, reliably, at a configured rate.

#include "common/logging.hpp"
#include "common/units.hpp"
#include "common/wire.hpp"
#include "sender/io/file_hasher.hpp"
#include "sender/io/file_set.hpp"
#include "sender/io/sender_app.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <random>

namespace {

/// Exit statuses (documented in --help and the README).
enum exit_status : int {
  exit_ok = 0,              ///< every receiver completed
  exit_incomplete = 1,      ///< some receiver failed or did not register
  exit_usage = 2,           ///< bad command line or file set
  exit_runtime = 3,         ///< could not run: socket, file read, interrupted
};

constexpr const char* footer = R"(
RATE is in bit/s with an optional SI suffix: 500M, 1.5G, 100000; "max" sends unpaced. The rate
counts whole IP packets (IPv4 + UDP + mcdist headers), which is what the link carries. Unpaced
sending outruns receivers on a fast path and costs repairs: a paced rate just under what the
slowest receiver sustains is faster (loopback here: 1 GB in 2.1 s at 4G, 5.6 s unpaced).
DURATION takes a unit: 250ms, 2s, 1m.

Closed group (--receivers a,b,c): the session starts as soon as every listed receiver has
registered (or --register-timeout passes; the missing ones are reported failed). Open group (no
--receivers): whoever registers within --register-window takes part.

Files are sent as one session: the manifest (path, size, mtime, mode, SHA-256) is announced once,
pass 1 sends every block of every file back to back, later passes only the blocks receivers
NAKed. Receivers that already hold an identical file (same size and SHA-256) skip it. Files
larger than --prehash-max are hashed while pass 1 runs and their digests follow the manifest.
Digests are remembered in each file's user.mcdist.sha256 xattr (trusted while size and mtime are
unchanged), so a resend knows them at once and skips what receivers hold.

Exit status: 0 every receiver completed; 1 some receiver failed or never registered;
2 usage error (bad option, missing file); 3 runtime error (socket, a file changed while being
sent, interrupted).

Examples:
  mcdist-send --interface 127.0.0.1 --rate 500M --receivers site-a,site-b products/
  mcdist-send -g 239.192.0.9:5000 -i 10.0.0.5 --ttl 16 --rate 350M --summary-json out.json obs/*.bufr
  mcdist-send --only site-b products/T_ABCD01.grib            (resend to one site over multicast)
  mcdist-send --only site-b --unicast --fallback tcp products/  (resend to one site over TCP)

Authentication (docs/security.md): with --key the session is signed. Announces, digests and
the session end carry an Ed25519 signature, markers and data blocks an AES-256-GCM tag under a
session key that each registering site receives sealed under a key agreed with its own site key
(X25519); NAKs and COMPLETEs are authenticated by the site. Receivers that list this sender's
public key in trusted_senders accept nothing else. Make keys with mcdist-keygen.

Confidentiality: with --encrypt (and --key, --site-keys) the manifest (names, sizes, mtimes),
the digest lists and the data are encrypted under the session key, which only the pinned sites
receive: anyone else on the path sees the session id, the sender, the data headers (file and
block indexes, so the count of files and their sizes from the blocks sent) and the markers,
never a name, a digest or a byte of content. The unicast fallback is off for such a session.

Unicast fallback: a receiver whose NAKs exceed --fallback-nak-ratio of the data sent, or that
still misses data after --fallback-after-passes passes, is told to fetch the rest of the set
over unicast (it connects to this sender, so receivers behind firewalls work), and the others
go on as if it were not there. With --unicast-rate, a set small enough that unicast beats a
multicast pass goes unicast from the start. Every decision is logged and shown in the summary.
)";

}  // namespace

int main(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();
  CLI::App app{
      "mcdist-send - announce a file set and multicast it reliably, at a configured rate, in "
      "NAK-collected passes, to mcdistd receivers.",
      "mcdist-send"};
  app.footer(footer);
  app.get_formatter()->column_width(34);

  std::vector<std::string> paths;
  std::string group = "239.192.0.1:4711";
  std::string interface = "0.0.0.0";
  std::string rate = "100M";
  std::vector<std::string> receivers;
  std::vector<std::string> only;
  std::string register_window = "2s";
  std::string register_timeout = "30s";
  std::string receiver_timeout = "10s";
  std::string block_size = "1400";
  std::string prehash_max = "16M";
  std::uint32_t max_passes = 100;
  int ttl = 1;
  std::uint16_t port = 0;
  std::string summary_json_path;
  std::string session_hex;
  std::string log_level = "info";
  std::string name;
  bool quiet = false;
  bool no_progress = false;
  bool no_digest_cache = false;
  std::string fallback = "auto";
  double fallback_nak_ratio = 0.05;
  std::uint32_t fallback_after_passes = 10;
  bool force_unicast = false;
  std::string unicast_rate = "0";
  std::string unicast_max_rate = "0";
  double unicast_threshold = 1.0;
  std::uint16_t unicast_port = 0;
  std::uint32_t tcp_connections = 0;
  std::string tcp_congestion;
  std::string key_file;
  std::string site_keys_file;
  bool encrypt = false;
  std::string channel;
  std::uint64_t channel_seq = 0;
  std::string catch_up;

  app.add_option("PATH", paths, "Files and directories to send (directories recursively, "
                                "relative paths kept)")
      ->required();
  app.add_option("-g,--group", group, "Multicast group and port")
      ->capture_default_str()
      ->type_name("ADDR:PORT");
  app.add_option("-i,--interface", interface,
                 "Local address multicast leaves from; 127.0.0.1 for loopback")
      ->capture_default_str()
      ->type_name("ADDR");
  app.add_option("-r,--rate", rate, "Multicast rate in bit/s (k, M, G suffixes; max = unpaced)")
      ->capture_default_str()
      ->type_name("RATE");
  app.add_option("--receivers", receivers, "Closed group: the receiver ids that must take part")
      ->delimiter(',')
      ->type_name("ID,...");
  app.add_option("--only", only,
                 "Resend: only these receiver ids take part, every other receiver ignores the "
                 "session; the session waits for these ids as a closed group (--register-timeout)")
      ->delimiter(',')
      ->type_name("ID,...");
  app.add_option("--register-window", register_window,
                 "Open group: how long registrations are accepted")
      ->capture_default_str()
      ->type_name("DURATION");
  app.add_option("--register-timeout", register_timeout,
                 "Closed group: longest wait for every listed receiver")
      ->capture_default_str()
      ->type_name("DURATION");
  app.add_option("--receiver-timeout", receiver_timeout,
                 "Fail a receiver silent this long while the sender asks for its status")
      ->capture_default_str()
      ->type_name("DURATION");
  app.add_option("-b,--block-size", block_size, "Payload bytes per data datagram")
      ->capture_default_str()
      ->type_name("BYTES");
  app.add_option("--max-passes", max_passes, "Passes before incomplete receivers are failed")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--prehash-max", prehash_max,
                 "Hash files up to this size before the announce; larger ones during pass 1")
      ->capture_default_str()
      ->type_name("BYTES");
  app.add_option("--ttl", ttl, "Multicast TTL (hops)")->capture_default_str()->check(CLI::Range(0, 255));
  app.add_option("--port", port, "Local UDP port for receivers' replies (0 = any)")
      ->capture_default_str();
  app.add_option("--summary-json", summary_json_path,
                 "Write the end-of-session summary as JSON to this file")
      ->type_name("FILE");
  app.add_option("--session-id", session_hex, "Session id, 8 hex digits (default: random)")->type_name("HEX");
  app.add_option("--name", name, "Sender name shown in receivers' logs (default: host name)")
      ->type_name("NAME");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str()
      ->type_name("LEVEL");
  app.add_flag("-q,--quiet", quiet, "Only warnings and errors; no progress line");
  app.add_flag("--no-progress", no_progress, "No progress line even on a terminal");
  app.add_option("--fallback", fallback,
                 "Unicast fallback: auto (SCTP over UDP, multi-socket TCP on long paths), sctp, "
                 "tcp, sctp-kernel or off")
      ->capture_default_str()
      ->type_name("MODE")
      ->check(CLI::IsMember({"auto", "sctp", "tcp", "sctp-kernel", "off"}));
  app.add_option("--fallback-nak-ratio", fallback_nak_ratio,
                 "Move a receiver to unicast when its NAKed blocks exceed this fraction of the "
                 "data sent")
      ->capture_default_str()
      ->type_name("FRACTION")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--fallback-after-passes", fallback_after_passes,
                 "Move a receiver still missing data after this many passes to unicast")
      ->capture_default_str()
      ->type_name("N")
      ->check(CLI::Range(1u, 100000u));
  app.add_flag("--unicast", force_unicast,
               "Serve every receiver over unicast from the start (with --only: a manual resend "
               "over unicast); the transport follows --fallback");
  app.add_option("--unicast-rate", unicast_rate,
                 "This sender's unicast capacity for the small-set cost model: a set goes unicast "
                 "from the start when that is cheaper than a multicast pass (0 = off)")
      ->capture_default_str()
      ->type_name("RATE");
  app.add_option("--unicast-threshold", unicast_threshold,
                 "Go unicast from the start when unicast cost < this x multicast cost")
      ->capture_default_str()
      ->type_name("X");
  app.add_option("--unicast-port", unicast_port,
                 "Port of the unicast fallback listeners (UDP for SCTP, and TCP; 0 = any)")
      ->capture_default_str()
      ->type_name("PORT");
  app.add_option("--tcp-connections", tcp_connections,
                 "TCP connections per receiver in a TCP fallback (0 = automatic: enough that their "
                 "initial windows cover the receiver's rate x RTT, 4 to 8; the rate is "
                 "--unicast-max-rate, else --rate)")
      ->capture_default_str()
      ->type_name("N")
      ->check(CLI::Range(0u, 64u));
  app.add_option("--unicast-max-rate", unicast_max_rate,
                 "Most bit/s sent to one receiver over TCP (paced; counts IP packets like "
                 "--rate), e.g. the site's link rate so the fallback does not overflow its queue "
                 "(0 = no cap)")
      ->capture_default_str()
      ->type_name("RATE");
  app.add_option("--tcp-congestion", tcp_congestion,
                 "TCP congestion control of fallback connections (bbr, cubic; default: the "
                 "system's)")
      ->type_name("NAME");
  app.add_option("--key", key_file,
                 "Sign the session with this sender key (made by mcdist-keygen, mode 0600): "
                 "receivers that trust its public key accept products from this sender only, "
                 "every datagram is authenticated and data blocks carry a tag")
      ->type_name("FILE");
  app.add_option("--site-keys", site_keys_file,
                 "With --key: only the sites listed here may register, each proving its own key "
                 "(lines \"SITE-ID mcdist-ed25519:BASE64\" or \"SITE-ID KEYFILE\")")
      ->type_name("FILE");
  app.add_flag("--encrypt", encrypt,
               "Encrypt the session (needs --key and --site-keys): the manifest (names, sizes), "
               "digest lists and data are readable only by the pinned sites; AES-256-GCM, "
               "XChaCha20-Poly1305 (docs/security.md). The unicast fallback is off for it");
  app.add_option("--channel", channel,
                 "Channel name carried in the announce (letters, digits, - _ . : @ /); with "
                 "--channel-seq receivers track the channel's sessions and report the ones they "
                 "never completed")
      ->type_name("NAME");
  app.add_option("--channel-seq", channel_seq,
                 "This session's sequence number on --channel (1, 2, ...; 0 = unsequenced). The "
                 "feed daemon numbers its sessions itself; this is for tests and scripts")
      ->type_name("N");
  app.add_option("--catch-up", catch_up,
                 "This unsequenced session carries again the products of these session numbers "
                 "of --channel (e.g. 3-4,7); a receiver that completes it stops reporting them "
                 "missing. Usually with --only SITE")
      ->type_name("N-M,...");
  app.add_flag("--no-digest-cache", no_digest_cache,
               "Neither read nor write the SHA-256 kept in the files' user.mcdist.sha256 xattr");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? exit_ok : exit_usage;
  }

  auto usage_error = [](const std::string& msg) {
    std::cerr << "mcdist-send: " << msg << "\n";
    return exit_usage;
  };

  mcdist::sender::sender_config cfg;
  mcdist::sender::app_options opts;
  const auto g = mcdist::parse_endpoint(group);
  if (!g || !g->is_multicast()) {
    return usage_error("--group " + group + " is not a multicast ADDR:PORT (e.g. 239.192.0.1:4711)");
  }
  opts.group = *g;
  const auto itf = mcdist::parse_address(interface);
  if (!itf || itf->v6 != g->v6) {
    return usage_error("--interface " + interface + " is not a local address of the group's family");
  }
  opts.interface = *itf;
  opts.interface.port = port;
  opts.ttl = ttl;
  const auto r = mcdist::parse_rate(rate);
  if (!r) return usage_error("--rate " + rate + " is not a rate (e.g. 500M, 1G, max)");
  cfg.rate_bps = *r;
  const auto bs = mcdist::parse_size(block_size);
  if (!bs || *bs < mcdist::wire::min_block_size || *bs > mcdist::wire::max_block_size) {
    return usage_error("--block-size must be " + std::to_string(mcdist::wire::min_block_size) +
                       ".." + std::to_string(mcdist::wire::max_block_size) + " bytes");
  }
  cfg.block_size = static_cast<std::uint32_t>(*bs);
  const auto ph = mcdist::parse_size(prehash_max);
  if (!ph) return usage_error("--prehash-max " + prehash_max + " is not a size");
  for (auto [text, out, opt] :
       {std::tuple{&register_window, &cfg.register_window, "--register-window"},
        std::tuple{&register_timeout, &cfg.register_timeout, "--register-timeout"},
        std::tuple{&receiver_timeout, &cfg.receiver_timeout, "--receiver-timeout"}}) {
    const auto d = mcdist::parse_duration(*text);
    if (!d) return usage_error(std::string(opt) + " " + *text + " is not a duration (e.g. 2s)");
    *out = *d;
  }
  cfg.max_passes = max_passes;
  cfg.fallback = fallback == "off"           ? mcdist::sender::fallback_mode::off
                 : fallback == "sctp"        ? mcdist::sender::fallback_mode::sctp
                 : fallback == "tcp"         ? mcdist::sender::fallback_mode::tcp
                 : fallback == "sctp-kernel" ? mcdist::sender::fallback_mode::sctp_kernel
                                             : mcdist::sender::fallback_mode::automatic;
  cfg.fallback_nak_ratio = fallback_nak_ratio;
  cfg.fallback_after_passes = fallback_after_passes;
  cfg.force_unicast = force_unicast;
  const auto ur = mcdist::parse_rate(unicast_rate);
  if (!ur) return usage_error("--unicast-rate " + unicast_rate + " is not a rate");
  cfg.unicast_rate_bps = *ur;
  cfg.unicast_threshold = unicast_threshold;
  cfg.tcp_connections = tcp_connections;
  if (encrypt) {
    // The unicast fallback does not encrypt its records (docs/security.md "Encrypted
    // sessions"): never plaintext over it.
    if (force_unicast || (app.count("--fallback") > 0 && fallback != "off")) {
      return usage_error("--encrypt: the unicast fallback does not encrypt its records, so an "
                         "encrypted session cannot use it (no --unicast; --fallback off)");
    }
    cfg.fallback = mcdist::sender::fallback_mode::off;
  }
  if (force_unicast && cfg.fallback == mcdist::sender::fallback_mode::off) {
    return usage_error("--unicast needs a fallback transport; not with --fallback off");
  }
  opts.unicast_port = unicast_port;
  opts.tcp_congestion = tcp_congestion;
  const auto umr = mcdist::parse_rate(unicast_max_rate);
  if (!umr) return usage_error("--unicast-max-rate " + unicast_max_rate + " is not a rate");
  cfg.unicast_max_rate_bps = *umr;
  cfg.receivers = receivers;
  cfg.only_receivers = only;
  if (!channel.empty() && !mcdist::wire::valid_channel_name(channel)) {
    return usage_error("--channel " + channel + " is not 1 to 64 letters, digits or - _ . : @ /");
  }
  if (channel_seq > 0 && channel.empty()) return usage_error("--channel-seq needs --channel");
  cfg.channel = channel;
  cfg.channel_seq = channel_seq;
  if (!catch_up.empty()) {
    if (channel.empty() || channel_seq > 0) {
      return usage_error("--catch-up needs --channel and no --channel-seq (a catch-up session is "
                         "unsequenced)");
    }
    std::string_view rest = catch_up;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      const auto dash = item.find('-');
      std::uint64_t first = 0;
      std::uint64_t last = 0;
      const auto a = item.substr(0, dash);
      const auto b = dash == std::string_view::npos ? a : item.substr(dash + 1);
      const auto [pa, ea] = std::from_chars(a.data(), a.data() + a.size(), first);
      const auto [pb, eb] = std::from_chars(b.data(), b.data() + b.size(), last);
      if (ea != std::errc{} || eb != std::errc{} || pa != a.data() + a.size() ||
          pb != b.data() + b.size()) {
        return usage_error("--catch-up " + catch_up + ": '" + std::string(item) +
                           "' is not N or N-M");
      }
      cfg.catch_up_seqs.emplace_back(first, last);
    }
    if (!mcdist::wire::valid_seq_ranges(cfg.catch_up_seqs, UINT64_MAX)) {
      return usage_error("--catch-up " + catch_up + ": at most " +
                         std::to_string(mcdist::wire::max_seq_ranges) +
                         " ascending, disjoint ranges of numbers from 1");
    }
  }
  if (session_hex.empty()) {
    std::random_device rd;
    cfg.session = mcdist::session_id{rd() | 1u};
  } else {
    try {
      std::size_t used = 0;
      const auto v = std::stoul(session_hex, &used, 16);
      if (used != session_hex.size() || v == 0 || v > 0xffffffffu) throw std::invalid_argument("");
      cfg.session = mcdist::session_id{static_cast<std::uint32_t>(v)};
    } catch (const std::exception&) {
      return usage_error("--session-id must be 1 to 8 hex digits, not 0");
    }
  }
  try {
    if (!key_file.empty()) opts.identity = mcdist::crypto::read_secret_key_file(key_file);
    if (!site_keys_file.empty()) {
      if (key_file.empty()) return usage_error("--site-keys needs --key (only a signed session checks site keys)");
      opts.site_keys = mcdist::sender::read_site_keys(site_keys_file);
      for (const auto& id : receivers) {
        if (!opts.site_keys.count(id)) {
          return usage_error("--receivers lists " + id + ", whose key is not in " + site_keys_file);
        }
      }
    }
  } catch (const mcdist::crypto::key_error& e) {
    return usage_error(e.what());
  }
  if (encrypt && (key_file.empty() || site_keys_file.empty())) {
    return usage_error("--encrypt needs --key (a signed session) and --site-keys (the sites that "
                       "may read it, each proving its key): without them anyone could register "
                       "and get the session key");
  }
  opts.encrypt = encrypt;
  if (name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    name = host;
  }
  cfg.sender_name = name;

  mcdist::log_options lo;
  try {
    lo.level = quiet ? spdlog::level::warn : mcdist::parse_log_level(log_level);
  } catch (const std::exception& e) {
    return usage_error(e.what());
  }
  opts.progress = !quiet && !no_progress && ::isatty(STDERR_FILENO);
  lo.clear_progress_line = opts.progress;
  auto log = mcdist::make_logger("mcdist-send", lo);

  std::vector<mcdist::sender::source_file> files;
  try {
    files = mcdist::sender::collect_files(paths, [&](const std::string& w) { log->warn("{}", w); });
    if (files.empty()) return usage_error("no files to send in " + paths.front());
    // Without a multicast pass there is no in-band hashing: hash everything first.
    const std::uint64_t prehash_limit = force_unicast ? UINT64_MAX : *ph;
    mcdist::sender::prehash(files, prehash_limit, force_unicast ? UINT64_MAX : std::uint64_t{1} << 30,
                            std::max(1u, std::thread::hardware_concurrency()), !no_digest_cache);
  } catch (const mcdist::sender::file_set_error& e) {
    return usage_error(e.what());
  }
  if (!summary_json_path.empty()) opts.summary_json = summary_json_path;
  opts.digest_cache = !no_digest_cache;

  // Pacing wakes the network thread every few hundred microseconds; the default 50 us timer
  // slack would make each wake-up late by that much.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  try {
    boost::asio::io_context io(1);
    mcdist::sender::sender_app sender(io, opts, cfg, std::move(files), log, started);
    const auto result = sender.run();
    std::cout << mcdist::sender::format_summary(result) << std::flush;
    if (opts.summary_json) {
      std::ofstream out(*opts.summary_json);
      out << mcdist::sender::summary_json(result);
      if (!out) {
        log->error("cannot write the summary to {}", *opts.summary_json);
        return exit_runtime;
      }
    }
    if (!result.error.empty()) {
      std::cerr << "mcdist-send: session did not complete: " << result.error << "\n";
      return exit_runtime;
    }
    if (!result.succeeded) {
      std::size_t bad = 0;
      std::string names;
      for (const auto& rr : result.report.receivers) {
        if (rr.state == mcdist::sender::receiver_report::state_t::completed ||
            rr.state == mcdist::sender::receiver_report::state_t::unicast) {
          continue;
        }
        ++bad;
        names += (names.empty() ? "" : ", ") + rr.id + (rr.reason.empty() ? "" : " (" + rr.reason + ")");
      }
      if (result.report.receivers.empty()) names = "no receiver registered";
      std::cerr << "mcdist-send: " << bad << " of " << result.report.receivers.size()
                << " receivers did not complete: " << names << "\n";
      return exit_incomplete;
    }
    return exit_ok;
  } catch (const std::system_error& e) {
    log->error("{}", e.what());
    return exit_runtime;
  } catch (const std::invalid_argument& e) {
    return usage_error(e.what());
  }
}
