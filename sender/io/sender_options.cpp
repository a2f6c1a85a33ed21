#include "sender/io/sender_options.hpp"

#include "common/fec/fec.hpp"
#include "common/net/interface.hpp"
#include "common/sys/key_file.hpp"
#include "common/sys/logging.hpp"
#include "common/units.hpp"
#include "common/version.hpp"
#include "common/wire.hpp"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string_view>
#include <tuple>

namespace mcdist::sender {

namespace {

constexpr const char* footer = R"(
RATE is in bit/s with an optional SI suffix: 500M, 1.5G, 100000; "max" sends unpaced. The rate
counts whole IP packets (IPv4 + UDP + mcdist headers), which is what the link carries. Unpaced
sending outruns receivers on a fast path and costs repairs: a paced rate just under what the
slowest receiver sustains is faster (loopback here: 1 GB in 2.1 s at 4G, 5.6 s unpaced).
--rate auto lets the receivers set the rate (TFMCC, RFC 4654): it starts at 10M, doubles every
GRTT but never above twice the lowest rate the receivers report receiving at, until a receiver
reports loss, then follows the lowest TCP-friendly rate a receiver on multicast reports (from
its loss event rate and RTT: the higher of Reno's rate, RFC 5348's equation, and CUBIC's, RFC
8312 section 5.1, as a Linux TCP flow would take; after a loss no more than 0.95 of what got
through to it until its loss history says more), never above --rate-max. A receiver that
cannot keep up (its socket buffer half full or dropping) reports what it takes in, and the
rate stays below that (docs/design-notes.md "Receiver overrun"). Receivers moved to unicast
no longer hold it back. docs/benchmarks.md "Rate auto" has what it reaches against fixed
rates, UFTP's TFMCC and a TCP flow.
DURATION takes a unit: 250ms, 2s, 1m.

Closed group (--receivers a,b,c): the session starts as soon as every listed receiver has
registered (or --register-timeout passes; the missing ones are reported failed). Open group (no
--receivers): whoever registers within --register-window takes part.

Relays (--relays a,b): receivers that relay the session into a group of their own (mcdistd
relay_group). A silent relay is failed after 60 s instead of --receiver-timeout (a restart takes
longer). A signed session (--key) whose --site-keys pins a relay delegates it a key of its own,
with which it serves the session to the sites behind it; they still check every announce, digest
list and file against this sender's key. A relay behind a relay is delegated the same way when it
is listed and pinned here: it asks through the relays in front of it.

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
never a name, a digest or a byte of content. Its unicast fallback is sealed too: after the
hello every frame (records, requests, acks) is AES-256-GCM under keys only that site and this
sender hold; an observer sees frame sizes and timing, never a byte of a record.

Unicast fallback: a receiver whose NAKs exceed --fallback-nak-ratio of the data sent while
another receiver on multicast stays below it, or that still misses data after
--fallback-after-passes passes, is told to fetch the rest of the set over unicast (it connects
to this sender, so receivers behind firewalls work), and the others go on as if it were not
there. The only receiver left on multicast is not moved for its NAKs (no one else would be
spared its repairs), only after the passes. With --unicast-rate, a set small enough that
unicast beats a multicast pass goes unicast from the start. Every decision is logged and shown
in the summary.
)";

/// --catch-up N-M,...: inclusive ranges of channel sequence numbers.
/// @throws usage_error naming the bad item
std::vector<wire::seq_span> parse_catch_up(const std::string& text) {
  std::vector<wire::seq_span> out;
  std::string_view rest = text;
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
      throw usage_error("--catch-up " + text + ": '" + std::string(item) + "' is not N or N-M");
    }
    out.emplace_back(first, last);
  }
  return out;
}

}  // namespace

void add_sender_options(CLI::App& app, sender_cli& c) {
  app.footer(footer);
  app.get_formatter()->column_width(34);
  app.add_option("PATH", c.paths,
                 "Files and directories to send (directories recursively, "
                 "relative paths kept)")
      ->required();
  app.add_option("-g,--group", c.group, "Multicast group and port")
      ->capture_default_str()
      ->type_name("ADDR:PORT");
  app.add_option("-i,--interface", c.interface,
                 "Interface multicast leaves by, a name (eth1) or a local address; named, the "
                 "session's source address is its first address of the group's family (the "
                 "`source` of sites that join source-specific). 127.0.0.1 for loopback; "
                 "default: where the route to the group points")
      ->type_name("NAME|ADDR");
  app.add_option("-r,--rate", c.rate,
                 "Multicast rate in bit/s (k, M, G suffixes; max = unpaced; auto = set by the "
                 "receivers' loss reports, TFMCC, up to --rate-max)")
      ->capture_default_str()
      ->type_name("RATE");
  app.add_option("--rate-max", c.rate_max, "With --rate auto: the highest rate it may reach")
      ->capture_default_str()
      ->type_name("RATE");
  app.add_option("--receivers", c.receivers, "Closed group: the receiver ids that must take part")
      ->delimiter(',')
      ->type_name("ID,...");
  app.add_option("--relays", c.relays,
                 "Receivers that relay the session to sites behind them (mcdistd relay_group): "
                 "failed after 60 s of silence, and in a signed session delegated when "
                 "--site-keys pins them")
      ->delimiter(',')
      ->type_name("ID,...");
  app.add_option("--only", c.only,
                 "Resend: only these receiver ids take part, every other receiver ignores the "
                 "session; the session waits for these ids as a closed group (--register-timeout)")
      ->delimiter(',')
      ->type_name("ID,...");
  app.add_option("--register-window", c.register_window,
                 "Open group: how long registrations are accepted")
      ->capture_default_str()
      ->type_name("DURATION");
  app.add_option("--register-timeout", c.register_timeout,
                 "Closed group: longest wait for every listed receiver")
      ->capture_default_str()
      ->type_name("DURATION");
  app.add_option("--receiver-timeout", c.receiver_timeout,
                 "Fail a receiver silent this long while the sender asks for its status")
      ->capture_default_str()
      ->type_name("DURATION");
  app.add_option("-b,--block-size", c.block_size, "Payload bytes per data datagram")
      ->capture_default_str()
      ->type_name("BYTES");
  app.add_option("--max-passes", c.max_passes, "Passes before incomplete receivers are failed")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--prehash-max", c.prehash_max,
                 "Hash files up to this size before the announce; larger ones during pass 1")
      ->capture_default_str()
      ->type_name("BYTES");
  app.add_option("--ttl", c.ttl, "Multicast TTL (hops)")
      ->capture_default_str()
      ->check(CLI::Range(0, 255));
  app.add_option("--port", c.port, "Local UDP port for receivers' replies (0 = any)")
      ->capture_default_str();
  app.add_option("--summary-json", c.summary_json_path,
                 "Write the end-of-session summary as JSON to this file")
      ->type_name("FILE");
  app.add_option("--session-id", c.session_hex, "Session id, 8 hex digits (default: random)")
      ->type_name("HEX");
  app.add_option("--name", c.name, "Sender name shown in receivers' logs (default: host name)")
      ->type_name("NAME");
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str()
      ->type_name("LEVEL");
  app.add_flag("-q,--quiet", c.quiet, "Only warnings and errors; no progress line");
  app.add_flag("--no-progress", c.no_progress, "No progress line even on a terminal");
  app.add_option("--fec-k", c.fec_k,
                 "Parity repairs: code blocks in FEC blocks of this many sources (Reed-Solomon; "
                 "0 = off) so that one repair datagram serves different losses at different "
                 "sites. Up to 254: GF(2^8), fast (several GB/s). 255 to 4096: GF(2^16), about "
                 "3 GB/s of sources per parity block; larger FEC blocks bring the parity for "
                 "many sites close to the largest single site's loss (docs/design-notes.md "
                 "\"FEC block size and the repair floor\"). auto: 200 here, where no loss is "
                 "measured before the session; a hub's channel chooses each session's k from "
                 "the loss its sites reported")
      ->capture_default_str()
      ->type_name("K|auto");
  app.add_option("--fec-depth", c.fec_depth,
                 "With --fec-k: interleaving depth; a burst of this many lost datagrams takes at "
                 "most one block of each FEC block")
      ->capture_default_str()
      ->type_name("D")
      ->check(CLI::Range(1u, 64u));
  app.add_option("--fec-overhead", c.fec_overhead,
                 "With --fec-k: proactive parity sent in pass 1, as a share of the data (3% or "
                 "0.03), so most sites finish without a repair round trip")
      ->capture_default_str()
      ->type_name("SHARE");
  app.add_option("--silent-passes", c.silent_passes,
                 "Silent session for one-way links (docs/design-notes.md \"Silent sessions\"): "
                 "no registration, no NAKs, the sites never transmit; send this many passes (the "
                 "first with --fec-overhead parity, each later one fresh parity of the same share, "
                 "or the files again without --fec-k) and end; with --key every block is checked "
                 "at the sites against signed block digests. 0 = a normal session")
      ->capture_default_str()
      ->type_name("N")
      ->check(CLI::Range(0u, 64u));
  app.add_option("--fallback", c.fallback,
                 "Unicast fallback: auto (SCTP over UDP, multi-socket TCP on long paths), sctp, "
                 "tcp, sctp-kernel or off")
      ->capture_default_str()
      ->type_name("MODE")
      ->check(CLI::IsMember({"auto", "sctp", "tcp", "sctp-kernel", "off"}));
  app.add_option("--fallback-nak-ratio", c.fallback_nak_ratio,
                 "Move a receiver to unicast when its NAKed blocks exceed this fraction of the "
                 "data sent and another receiver on multicast is below it (whom its repairs "
                 "would cost)")
      ->capture_default_str()
      ->type_name("FRACTION")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--fallback-after-passes", c.fallback_after_passes,
                 "Move a receiver still missing data after this many passes to unicast")
      ->capture_default_str()
      ->type_name("N")
      ->check(CLI::Range(1u, 100000u));
  app.add_flag("--unicast", c.force_unicast,
               "Serve every receiver over unicast from the start (with --only: a manual resend "
               "over unicast); the transport follows --fallback");
  app.add_option("--unicast-rate", c.unicast_rate,
                 "This sender's unicast capacity for the small-set cost model: a set goes unicast "
                 "from the start when that is cheaper than a multicast pass (0 = off)")
      ->capture_default_str()
      ->type_name("RATE");
  app.add_option("--unicast-threshold", c.unicast_threshold,
                 "Go unicast from the start when unicast cost < this x multicast cost")
      ->capture_default_str()
      ->type_name("X");
  app.add_option("--unicast-port", c.unicast_port,
                 "Port of the unicast fallback listeners (UDP for SCTP, and TCP; 0 = any)")
      ->capture_default_str()
      ->type_name("PORT");
  app.add_option("--tcp-connections", c.tcp_connections,
                 "TCP connections per receiver in a TCP fallback (0 = automatic: enough that their "
                 "initial windows cover the receiver's rate x RTT, 4 to 8; the rate is "
                 "--unicast-max-rate, else --rate)")
      ->capture_default_str()
      ->type_name("N")
      ->check(CLI::Range(0u, 64u));
  app.add_option("--sctp-associations", c.sctp_associations,
                 "SCTP associations per receiver in an SCTP fallback over UDP (0 = automatic: two "
                 "up to 200 ms RTT, beyond it the rule of --tcp-connections); records go to "
                 "whichever association has room in its congestion window, so a loss slows one of "
                 "them, not the receiver's transfer. Kernel SCTP uses one")
      ->capture_default_str()
      ->type_name("N")
      ->check(CLI::Range(0u, 16u));
  app.add_option("--unicast-max-rate", c.unicast_max_rate,
                 "Most bit/s sent to one receiver over TCP (paced; counts IP packets like "
                 "--rate), e.g. the site's link rate so the fallback does not overflow its queue "
                 "(0 = no cap)")
      ->capture_default_str()
      ->type_name("RATE");
  app.add_option("--tcp-congestion", c.tcp_congestion,
                 "TCP congestion control of fallback connections (bbr, cubic; default: the "
                 "system's)")
      ->type_name("NAME");
  app.add_option("--key", c.key_file,
                 "Sign the session with this sender key (made by mcdist-keygen, mode 0600): "
                 "receivers that trust its public key accept products from this sender only, "
                 "every datagram is authenticated and data blocks carry a tag")
      ->type_name("FILE");
  app.add_option("--site-keys", c.site_keys_file,
                 "With --key: only the sites listed here may register, each proving its own key "
                 "(lines \"SITE-ID mcdist-ed25519:BASE64\" or \"SITE-ID KEYFILE\")")
      ->type_name("FILE");
  app.add_flag("--encrypt", c.encrypt,
               "Encrypt the session (needs --key and --site-keys): the manifest (names, sizes), "
               "digest lists and data are readable only by the pinned sites; AES-256-GCM, "
               "XChaCha20-Poly1305 (docs/security.md). The unicast fallback of such a session "
               "seals every record and request (AES-256-GCM, per-site keys)");
  app.add_option("--channel", c.channel,
                 "Channel name carried in the announce (letters, digits, - _ . : @ /); with "
                 "--channel-seq receivers track the channel's sessions and report the ones they "
                 "never completed")
      ->type_name("NAME");
  app.add_option("--channel-seq", c.channel_seq,
                 "This session's sequence number on --channel (1, 2, ...; 0 = unsequenced). The "
                 "feed daemon numbers its sessions itself; this is for tests and scripts")
      ->type_name("N");
  app.add_option("--catch-up", c.catch_up,
                 "This unsequenced session carries again the products of these session numbers "
                 "of --channel (e.g. 3-4,7); a receiver that completes it stops reporting them "
                 "missing. Usually with --only SITE")
      ->type_name("N-M,...");
  app.add_flag("--no-digest-cache", c.no_digest_cache,
               "Neither read nor write the SHA-256 kept in the files' user.mcdist.sha256 xattr");
}

sender_options make_sender_options(const sender_cli& c) {
  sender_options o;
  o.paths = c.paths;
  const auto g = parse_endpoint(c.group);
  if (!g || !g->is_multicast()) {
    throw usage_error("--group " + c.group +
                      " is not a multicast ADDR:PORT (e.g. 239.192.0.1:4711)");
  }
  o.app.group = *g;
  const auto spec = net::parse_interface(c.interface);
  if (!spec) {
    throw usage_error("--interface " + c.interface +
                      " is neither an IP address nor an interface name (e.g. 10.0.0.5, eth1)");
  }
  try {
    const auto itf = net::resolve_interface(*spec, g->v6);
    o.app.interface = itf.address;
    o.app.interface_index = itf.index;
    o.app.interface_name = itf.name;
  } catch (const net::interface_error& e) {
    throw usage_error(std::string("--interface: ") + e.what());
  } catch (const std::system_error& e) {
    throw usage_error(std::string("--interface: cannot list this host's interfaces: ") + e.what());
  }
  o.app.interface.port = c.port;
  o.app.ttl = c.ttl;
  const auto rmax = parse_rate(c.rate_max);
  if (!rmax || *rmax == 0) {
    throw usage_error("--rate-max " + c.rate_max + " is not a rate (e.g. 200M, 8G)");
  }
  if (c.rate == "auto") {
    o.session.rate_auto = true;
    o.session.rate_max_bps = *rmax;
    o.session.rate_bps = *rmax;  // the pacer's bucket is sized for the ceiling
  } else {
    const auto r = parse_rate(c.rate);
    if (!r) throw usage_error("--rate " + c.rate + " is not a rate (e.g. 500M, 1G, max, auto)");
    o.session.rate_bps = *r;
  }
  const auto bs = parse_size(c.block_size);
  if (!bs || *bs < wire::min_block_size || *bs > wire::max_block_size) {
    throw usage_error("--block-size must be " + std::to_string(wire::min_block_size) + ".." +
                      std::to_string(wire::max_block_size) + " bytes");
  }
  o.session.block_size = static_cast<std::uint32_t>(*bs);
  const auto ph = parse_size(c.prehash_max);
  if (!ph) throw usage_error("--prehash-max " + c.prehash_max + " is not a size");
  for (auto [text, out, opt] :
       {std::tuple{&c.register_window, &o.session.register_window, "--register-window"},
        std::tuple{&c.register_timeout, &o.session.register_timeout, "--register-timeout"},
        std::tuple{&c.receiver_timeout, &o.session.receiver_timeout, "--receiver-timeout"}}) {
    const auto d = parse_duration(*text);
    if (!d) throw usage_error(std::string(opt) + " " + *text + " is not a duration (e.g. 2s)");
    *out = *d;
  }
  o.session.max_passes = c.max_passes;
  session_profile profile;
  if (!parse_fec_k(c.fec_k, profile)) {
    throw usage_error("--fec-k " + c.fec_k + " is not auto or 0 to " + std::to_string(fec::max_k));
  }
  profile.fec_depth = c.fec_depth;
  profile.register_window = o.session.register_window;
  const auto share = parse_share(c.fec_overhead);
  if (!share) {
    throw usage_error("--fec-overhead " + c.fec_overhead +
                      " is not a share of 0 to 100 % (e.g. 3% or 0.03)");
  }
  profile.fec_overhead = *share;
  profile.silent_passes = c.silent_passes;
  const auto fallback = parse_fallback_mode(c.fallback);
  if (!fallback) {
    throw usage_error("--fallback " + c.fallback + " is not auto, sctp, tcp, sctp-kernel or off");
  }
  profile.fallback = *fallback;
  if (const auto why = profile_problem(profile, !c.receivers.empty(), c.encrypt, c.rate == "auto",
                                       setting_names::options);
      !why.empty()) {
    throw usage_error(why);
  }
  profile.apply(o.session);
  o.session.fallback_nak_ratio = c.fallback_nak_ratio;
  o.session.fallback_after_passes = c.fallback_after_passes;
  o.session.force_unicast = c.force_unicast;
  const auto ur = parse_rate(c.unicast_rate);
  if (!ur) throw usage_error("--unicast-rate " + c.unicast_rate + " is not a rate");
  o.session.unicast_rate_bps = *ur;
  o.session.unicast_threshold = c.unicast_threshold;
  o.session.tcp_connections = c.tcp_connections;
  o.session.sctp_associations = c.sctp_associations;
  if (c.force_unicast && o.session.fallback == fallback_mode::off) {
    throw usage_error("--unicast needs a fallback transport; not with --fallback off");
  }
  o.app.unicast_port = c.unicast_port;
  o.app.tcp_congestion = c.tcp_congestion;
  const auto umr = parse_rate(c.unicast_max_rate);
  if (!umr) throw usage_error("--unicast-max-rate " + c.unicast_max_rate + " is not a rate");
  o.session.unicast_max_rate_bps = *umr;
  o.session.receivers = c.receivers;
  o.session.only_receivers = c.only;
  for (const auto& id : c.relays) {
    if (!wire::valid_receiver_id(id))
      throw usage_error("--relays lists \"" + id + "\", not a site id");
  }
  o.session.relays = c.relays;
  if (!c.channel.empty() && !wire::valid_channel_name(c.channel)) {
    throw usage_error("--channel " + c.channel + " is not 1 to 64 letters, digits or - _ . : @ /");
  }
  if (c.channel_seq > 0 && c.channel.empty()) throw usage_error("--channel-seq needs --channel");
  o.session.channel = c.channel;
  o.session.channel_seq = c.channel_seq;
  if (!c.catch_up.empty()) {
    if (c.channel.empty() || c.channel_seq > 0) {
      throw usage_error(
          "--catch-up needs --channel and no --channel-seq (a catch-up session is "
          "unsequenced)");
    }
    o.session.catch_up_seqs = parse_catch_up(c.catch_up);
    if (!wire::valid_seq_ranges(o.session.catch_up_seqs, UINT64_MAX)) {
      throw usage_error("--catch-up " + c.catch_up + ": at most " +
                        std::to_string(wire::max_seq_ranges) +
                        " ascending, disjoint ranges of numbers from 1");
    }
  }
  if (c.session_hex.empty()) {
    std::random_device rd;
    o.session.session = session_id{rd() | 1u};
  } else {
    try {
      std::size_t used = 0;
      const auto v = std::stoul(c.session_hex, &used, 16);
      if (used != c.session_hex.size() || v == 0 || v > 0xffffffffu)
        throw std::invalid_argument("");
      o.session.session = session_id{static_cast<std::uint32_t>(v)};
    } catch (const std::exception&) {
      throw usage_error("--session-id must be 1 to 8 hex digits, not 0");
    }
  }
  try {
    if (!c.key_file.empty()) o.app.identity = crypto::read_secret_key_file(c.key_file);
    if (!c.site_keys_file.empty()) {
      if (c.key_file.empty()) {
        throw usage_error("--site-keys needs --key (only a signed session checks site keys)");
      }
      o.app.site_keys = read_site_keys(c.site_keys_file);
      for (const auto& id : c.receivers) {
        if (!o.app.site_keys.count(id)) {
          throw usage_error("--receivers lists " + id + ", whose key is not in " +
                            c.site_keys_file);
        }
      }
    }
  } catch (const crypto::key_error& e) {
    throw usage_error(e.what());
  }
  if (c.encrypt && (c.key_file.empty() || c.site_keys_file.empty())) {
    throw usage_error(
        "--encrypt needs --key (a signed session) and --site-keys (the sites that "
        "may read it, each proving its key): without them anyone could register "
        "and get the session key");
  }
  o.app.encrypt = c.encrypt;
  o.session.sender_name = c.name;
  if (c.name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    o.session.sender_name = host;
  }
  o.prehash_max = *ph;
  try {
    o.log_level = c.quiet ? spdlog::level::warn : parse_log_level(c.log_level);
  } catch (const std::exception& e) {
    throw usage_error(e.what());
  }
  o.quiet = c.quiet;
  o.no_progress = c.no_progress;
  if (!c.summary_json_path.empty()) o.app.summary_json = c.summary_json_path;
  o.app.digest_cache = !c.no_digest_cache;
  return o;
}

std::variant<sender_options, int> parse_sender_options(int argc, const char* const* argv) {
  CLI::App app{
      "mcdist-send - announce a file set and multicast it reliably, at a configured rate, in "
      "NAK-collected passes, to mcdistd receivers.",
      "mcdist-send"};
  app.set_version_flag("--version", std::string("mcdist-send ") + mcdist::version(),
                       "Print the release and exit");
  sender_cli cli;
  add_sender_options(app, cli);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? exit_ok : exit_usage;
  }
  try {
    return make_sender_options(cli);
  } catch (const usage_error& e) {
    std::cerr << "mcdist-send: " << e.what() << "\n";
    return exit_usage;
  }
}

}  // namespace mcdist::sender
