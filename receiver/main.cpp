// mcdistd: the mcdist receiver daemon.

#include "common/sys/descriptors.hpp"
#include "common/sys/key_file.hpp"
#include "common/sys/logging.hpp"
#include "common/units.hpp"
#include "common/version.hpp"
#include "receiver/io/daemon.hpp"
#include "receiver/storage/file_store.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>

namespace {

constexpr const char* footer = R"(
mcdistd joins the multicast channels it is given, takes part in every session announced on them
(unless a session is a resend addressed to other receivers), writes each file into a temp file
under --temp, verifies its SHA-256, makes it durable and renames it atomically into --dest.
Nothing partial or corrupt ever appears under --dest. It runs until SIGTERM or SIGINT; state of
unfinished sessions is saved under --temp and resumed at the next start.

When a sender moves this receiver to unicast (its loss holds the group back, or the set is small,
or an operator resends over unicast), mcdistd opens the connections itself towards the sender
(SCTP over UDP, or several TCP connections, as the sender says), so a site behind a firewall
needs no inbound port. Unicast data takes the same verified temp-then-rename path.

A status page for a person (/), the status as JSON (/status) and Prometheus metrics (/metrics)
are served on --http (default 127.0.0.1:9611; "off" disables). If the default port is taken,
mcdistd warns and runs without them; an address given explicitly must be free.

Settings come from --config FILE (TOML) and are overridden by options on the command line:

  id = "site-a"
  interface = "eth1"            # interface to join on and reply from: name or address
  dest = "/srv/mcdist/in"       # default destination of every channel
  temp = "/srv/mcdist/tmp"      # same filesystem as every destination
  sync = "batch"                # batch (group commit, adaptive), file (fsync each) or none
  session_timeout = "60s"
  status_interval = "60s"
  checkpoint_interval = "2s"     # how often resume state of unfinished sessions is saved
  buffer_pool = "16M"           # memory for data on its way to disk (reads pause when it is full)
  status_file = "/run/mcdistd/status.json"
  key_file = "/etc/mcdist/site.key"      # this site's key (default: TEMP/site.key, made at first start)
  trusted_senders = ["mcdist-ed25519:BASE64...", "/etc/mcdist/hub.pub"]  # default of every channel
  # allow_unsigned = true         # only to take unsigned sessions from anyone (no trusted_senders)
  max_session_age = "1h"        # signed sessions stamped longer ago are refused (replays)
  max_clock_skew = "5m"         # ... and those stamped further ahead of this host's clock
  http = "127.0.0.1:9611"       # /metrics, /status and a status page; "off" disables
  [log]
  level = "info"
  file = "/var/log/mcdist/mcdistd.log"   # rotated at 10 MiB, 5 kept
  [[channel]]
  name = "products"
  group = "239.192.0.1:4711"
  # source = "192.0.2.10"                # optional: join source-specific (SSM), only this sender
  dest = "/srv/mcdist/in/products"       # optional, else the top-level dest
  trusted_senders = ["/etc/mcdist/hub.pub"]  # optional, else the top-level list
  # allow_unsigned = true                # optional, else the top-level setting
  silent = false                         # true: a one-way link, never transmit (see below)
  catch_up_url = "https://hub:9613/"     # silent channels: fetch missed sessions over HTTP(S)
  catch_up_ca = "/etc/mcdist/hub-ca.pem" # the hub certificate's CA (default: the system's)
  # relay_group = "239.193.0.1:4711"     # relay sessions into this group (below)
  # relay_interface = "eth2"             # ... from this interface (default: interface)
  # relay_ttl = 4                        # ... with this multicast TTL (default 1)
  # relays = ["rb"]                      # sites behind that relay in turn: waited 60 s, not 10
  # behind_relay = "ra"                  # the relay this channel comes through (signed hubs'
                                         # catch-ups and resends for its sites name it)
  [[channel.action]]                     # optional: a WIS2 notification per stored file
  type = "wis2"
  broker = "mqtt://127.0.0.1:1883"
  topic = "origin/a/wis2/xx-centre/data/core/weather/surface-based-observations/synop"
  base_url = "https://data.example.org/"  # canonical link: base_url + the file's path in the
                                         # set, percent-encoded (RFC 3986)
  qos = 1                                # optional, 0-2; username/password and data_id_prefix too

WIS2 notifications: with a wis2 action, every file stored on that channel is announced on the
MQTT broker by a WIS2 Notification Message (WMO WNM 1.0: data_id, pubtime, sha256 integrity,
canonical link). Publishing runs on its own thread with a bounded queue: while the broker is
down messages wait (beyond 10000 they are dropped and counted) and mcdistd reconnects.

Authentication (docs/security.md): a channel with trusted_senders accepts only sessions signed
by one of those keys (mcdist-send --key); every datagram of them is checked (signatures on
announces, digests and session ends, tags on markers and data blocks under a session key this
site receives sealed to its own key) and everything else is counted and dropped. A signed
session is taken once only, and only when its signed timestamp is within max_session_age (and
not beyond max_clock_skew ahead): TEMP/replay remembers the sessions taken across restarts, so a
recorded session replayed later is refused (hub and sites keep time with NTP). A channel must
trust a sender: one without trusted_senders is a configuration error unless allow_unsigned =
true (or --allow-unsigned) asks, by name, to take any host's unsigned sessions.

Source-specific multicast and multi-homed hosts: a channel with source = "ADDR" (--source)
joins (ADDR, group) with MCAST_JOIN_SOURCE_GROUP (IGMPv3, MLDv2), as EUMETCast Terrestrial and
other SSM networks (232.0.0.0/8, ff3x::/32) need: the kernel delivers nothing to the group from
another sender, and status counts per channel what reached its socket (channel_sockets). The
interface, by name or address, is resolved at start to its address of the channels' family and
its index: every channel is joined on it (IPv4 and IPv6 alike) and replies leave from its
address, whatever the default route says. A named interface needs an IPv6 address beyond
link-local for IPv6 channels.

Silent channels (docs/design-notes.md "Silent sessions"): with silent = true, and for every
session a sender marks silent (mcdist-send --silent-passes), mcdistd never transmits: no
REGISTER, NAK, COMPLETE, key request or unicast fallback. It delivers the files it completes
from the multicast passes and parity alone and, when the session ends, records each file it
could not complete (log, status page, files_incomplete) for a catch-up over another path.
Signed silent sessions are checked by the signed manifest's SHA-256 per file, not per block.
With catch_up_url, a silent channel fetches each session number its heartbeats say it missed
from the hub's product server (mcdist-feed products_http) over a terrestrial path: an index
signed by the channel's trusted sender (for this request's random nonce), then every product
it does not hold, with libcurl on worker threads; each file is checked (size, SHA-256),
delivered like a multicast one (never over a newer version), journaled with the hub's key and
its actions run. Failures are logged with the URL and retried after 2 s, doubling to 5 min.

Relays (docs/design-notes.md "Relays"): a channel with relay_group passes every datagram of a
session silent here, and every heartbeat it took, on byte for byte into that group as it
arrives, once this site authenticated it; the sites behind (silent = true on the relay group,
the hub's key in trusted_senders) check the hub's signatures themselves. An unsigned two-way
session (allow_unsigned) is run again for the sites behind: they register, NAK and complete with
this relay (allow_unsigned, not silent, on the relay group), which sends them what it holds and
asks the hub only for what it lacks itself; after a restart it takes such a session up again
(TEMP/relay) if it had checkpointed it (every 2 s). Catch-up goes through it too: it keeps the
gap reports its sites send it in answer to the hub's heartbeats, reports their gaps with its own
to the hub 300 ms after each heartbeat (signed by this site for a signed hub), and runs the hub's
catch-up, named to it, for the sites that reported them; behind a signed hub's relay a site
takes such a session only with behind_relay naming the relay. A signed two-way session is run
for the sites behind under the hub's delegation to this relay (the hub lists it in its relays
and pins its key): the sites (trusting the hub's key only) take this relay's key from its
relay_hello and still check every announce, digest list and file against the hub's key; one
the hub does not delegate, or an encrypted one, is not relayed (counted, logged with the
reason); after a restart the relay asks the hub for a new delegation and takes the session up
again under a new key. Relays nest: a relay behind this one (a site of the relay group with a
relay_group of its own, listed and pinned at the hub too) asks the hub for its delegation
through this relay, which passes the request up and the answer back unopened. The relay group
must not be a group this daemon receives. Status "relay" and /metrics mcdist_relay_* count
what was sent on.

Under systemd (Type=notify) mcdistd reports READY=1 once its sockets are bound, WATCHDOG=1
every half WatchdogSec= and STOPPING=1 on SIGTERM.

SIGHUP reopens the log file (for logrotate) and reloads the configuration: --config is read
again with the command-line options over it and checked whole first (an invalid file is
logged and changes nothing). Channels are matched by name: an added one is joined; a removed
one takes no new session, finishes those under way (into its old dest) and is then left; a
channel whose group, source, dest, trusted_senders, silent or relay settings changed is both, so new sessions get the new
settings. Actions, retention, status_interval, max_sessions and max_sessions_per_source are
replaced (running action attempts finish). id, interface, temp, key_file, sync, http, journal,
log, the memory and disk budgets and the timeouts need a restart: a change to them is logged
and ignored. One line sums up what changed; /metrics counts mcdist_receiver_config_reloads_total.

Exit status: 0 after a signal, or a valid --check-config; 2 bad configuration; 3 runtime error
(socket, directories).

Example:
  mcdistd --id site-a --group 239.192.0.1:4711 --interface 127.0.0.1 --dest /srv/in --temp /srv/tmp
)";

}  // namespace

int main(int argc, char** argv) {
  // Before any thread: the store keeps up to max_open_files temp files open, and a table
  // grown under threads waits for an RCU grace period each time (common/sys/descriptors.hpp).
  // RLIMIT_NOFILE's soft limit caps it (LimitNOFILE= of the unit files allows this).
  mcdist::reserve_descriptors(
      mcdist::receiver::store_descriptors(mcdist::receiver::storage_config{}.max_open_files));
  CLI::App app{
      "mcdistd - mcdist receiver daemon: receives multicast file sets and delivers each "
      "file atomically into a destination tree.",
      "mcdistd"};
  app.set_version_flag("--version", std::string("mcdistd ") + mcdist::version(),
                       "Print the release and exit");
  app.footer(footer);
  app.get_formatter()->column_width(34);

  std::string config_file;
  std::string check_config;
  std::string id;
  std::vector<std::string> groups;
  std::string interface;
  std::string source;
  std::string dest;
  std::string temp;
  std::string sync;
  std::string log_level;
  std::string log_file;
  std::string session_timeout;
  std::string status_interval;
  std::string status_file;
  std::string checkpoint_interval;
  std::string key_file;
  std::string journal;
  std::vector<std::string> trust;
  bool allow_unsigned = false;
  std::string http;
  double drop_rate = -1;
  std::uint64_t drop_seed = 1;

  app.add_option("-c,--config", config_file, "TOML configuration file")->type_name("FILE");
  app.add_option("--check-config", check_config,
                 "Validate this configuration file (with the other options applied over it), "
                 "check its directories without creating them, print the problem and exit: 0 "
                 "valid, 2 not. Binds no socket (replaces --config)")
      ->type_name("FILE");
  app.add_option("--id", id, "This site's receiver id (letters, digits, - _ . : @)")
      ->type_name("ID");
  app.add_option("-g,--group", groups, "Multicast channel to join (repeat for more channels)")
      ->type_name("ADDR:PORT");
  app.add_option("-i,--interface", interface,
                 "Interface to join on and reply from: a name (eth1) or a local address "
                 "(default: where the routes point)")
      ->type_name("NAME|ADDR");
  app.add_option("--source", source,
                 "Join the --group channels source-specific: take only datagrams this sender "
                 "address sends to them (SSM, usually a 232.0.0.0/8 or ff3x:: group)")
      ->type_name("ADDR");
  app.add_option("-d,--dest", dest, "Destination directory")->type_name("DIR");
  app.add_option("-t,--temp", temp, "Temp directory (same filesystem as --dest)")->type_name("DIR");
  app.add_option("--sync", sync,
                 "How delivered files are made durable: batch (group commit by the default "
                 "method, adaptive), adaptive (syncfs while the page cache holds little else "
                 "that is dirty, range otherwise), syncfs, fdatasync, range, uring (group "
                 "commit methods; docs/design-notes.md \"Durability\"), file (fsync each) or "
                 "none")
      ->type_name("MODE");
  app.add_option("--session-timeout", session_timeout,
                 "Abandon a session whose sender is silent this long (default 60s)")
      ->type_name("DURATION");
  app.add_option("--status-interval", status_interval, "How often to log status (default 60s)")
      ->type_name("DURATION");
  app.add_option("--checkpoint-interval", checkpoint_interval,
                 "How often unfinished sessions' resume state is saved (default 2s)")
      ->type_name("DURATION");
  app.add_option("--status-file", status_file, "Also write status as JSON to this file")
      ->type_name("FILE");
  app.add_option(
         "--http", http,
         "Serve /metrics (Prometheus), /status (JSON) and a status page here (port 0: any free "
         "port, logged), or \"off\" "
         "(default 127.0.0.1:9611)")
      ->type_name("ADDR:PORT");
  app.add_option("--log-level", log_level, "trace, debug, info (default), warn, error, off")
      ->type_name("LEVEL");
  app.add_option("--log-file", log_file, "Also log to this file (rotated at 10 MiB, 5 kept)")
      ->type_name("FILE");
  app.add_option("--drop-rate", drop_rate,
                 "TEST ONLY: drop received datagrams with this probability before the protocol "
                 "sees them (simulated loss)")
      ->type_name("P")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--journal", journal,
                 "Delivery journal, an SQLite file (default: TEMP/journal.db; docs/actions.md)")
      ->type_name("FILE");
  app.add_option("--key", key_file,
                 "This site's secret key (mcdist-keygen; default: TEMP/site.key, made at the "
                 "first start)")
      ->type_name("FILE");
  app.add_option("--trust", trust,
                 "Accept sessions only from this sender key (mcdist-ed25519:BASE64 or a key "
                 "file); repeat for several; replaces trusted_senders of every channel")
      ->type_name("KEY");
  app.add_flag("--allow-unsigned", allow_unsigned,
               "Let every channel take unsigned sessions from any host that reaches its group "
               "(allow_unsigned = true); without it a channel with no trusted sender is refused");
  app.add_option("--drop-seed", drop_seed, "TEST ONLY: seed of --drop-rate")->type_name("N");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (!check_config.empty()) config_file = check_config;
  // The file with the command line over it: at start, and again at each SIGHUP (reload).
  // @throws config_error
  const auto build_config = [&]() -> mcdist::receiver::daemon_config {
    mcdist::receiver::daemon_config cfg;
    if (!config_file.empty()) cfg = mcdist::receiver::load_config_file(config_file);
    if (!id.empty()) cfg.id = id;
    if (!interface.empty()) {
      const auto a = mcdist::net::parse_interface(interface);
      if (!a) {
        throw mcdist::receiver::config_error("--interface " + interface +
                                             " is neither an IP address nor an interface name");
      }
      cfg.interface = *a;
    }
    if (!source.empty() && groups.empty()) {
      throw mcdist::receiver::config_error(
          "--source applies to the --group channels: give --group too (or source = in the "
          "channel's [[channel]] table)");
    }
    if (!groups.empty()) {
      // --group selects the channels: one the file defines on that group keeps its settings
      // (name, dest, trusted_senders, actions); another takes the file's top-level dest and
      // trusted_senders.
      std::vector<mcdist::receiver::channel_config> chosen;
      for (const auto& g : groups) {
        const auto e = mcdist::parse_endpoint(g);
        if (!e || !e->is_multicast()) {
          throw mcdist::receiver::config_error("--group " + g + " is not a multicast ADDR:PORT");
        }
        const auto it = std::find_if(cfg.channels.begin(), cfg.channels.end(),
                                     [&](const auto& ch) { return ch.group == *e; });
        if (it != cfg.channels.end()) {
          chosen.push_back(*it);
        } else {
          mcdist::receiver::channel_config ch;
          ch.name = g;
          ch.group = *e;
          ch.dest = cfg.dest;
          ch.trusted_senders = cfg.trusted_senders;
          ch.allow_unsigned = cfg.allow_unsigned;
          ch.retention_max_age = cfg.retention_max_age;
          chosen.push_back(std::move(ch));
        }
        if (!source.empty()) {
          chosen.back().source = mcdist::receiver::parse_source(source, *e, "--source");
        }
      }
      cfg.channels = std::move(chosen);
    }
    if (!dest.empty()) {
      for (auto& ch : cfg.channels) ch.dest = dest;
    }
    if (!temp.empty()) cfg.temp = temp;
    if (!key_file.empty()) cfg.key_file = key_file;
    if (!journal.empty()) cfg.journal = journal;
    if (!trust.empty()) {
      std::vector<mcdist::crypto::key32> keys;
      for (const auto& k : trust) {
        try {
          keys.push_back(mcdist::crypto::read_public_key(k));
        } catch (const mcdist::crypto::key_error& e) {
          throw mcdist::receiver::config_error(std::string("--trust: ") + e.what());
        }
      }
      cfg.trusted_senders = keys;
      for (auto& ch : cfg.channels) ch.trusted_senders = keys;
    }
    if (allow_unsigned) {
      cfg.allow_unsigned = true;
      for (auto& ch : cfg.channels) ch.allow_unsigned = true;
    }
    if (!sync.empty()) {
      const auto m = mcdist::receiver::parse_sync_mode(sync);
      if (!m) {
        throw mcdist::receiver::config_error(std::string("--sync must be one of ") +
                                             mcdist::receiver::sync_mode_names + ", not \"" + sync +
                                             "\"");
      }
      cfg.sync = *m;
    }
    for (auto [text, out, opt] :
         {std::tuple{&session_timeout, &cfg.session_timeout, "--session-timeout"},
          std::tuple{&status_interval, &cfg.status_interval, "--status-interval"},
          std::tuple{&checkpoint_interval, &cfg.checkpoint_interval, "--checkpoint-interval"}}) {
      if (text->empty()) continue;
      const auto d = mcdist::parse_duration(*text);
      if (!d)
        throw mcdist::receiver::config_error(std::string(opt) + " " + *text + " is not a duration");
      *out = *d;
    }
    if (!status_file.empty()) cfg.status_file = status_file;
    if (!http.empty()) {
      cfg.http = mcdist::receiver::parse_http_setting(http, "--http");
      cfg.http_explicit = true;
    }
    if (!log_level.empty()) {
      try {
        cfg.log.level = mcdist::parse_log_level(log_level);
      } catch (const std::invalid_argument& e) {
        throw mcdist::receiver::config_error(e.what());
      }
    }
    if (!log_file.empty()) cfg.log.file = log_file;
    if (drop_rate >= 0) cfg.drop_rate = drop_rate;
    cfg.drop_seed = drop_seed;
    return cfg;
  };

  mcdist::receiver::daemon_config cfg;
  try {
    cfg = build_config();
    mcdist::receiver::validate(cfg);
    if (!check_config.empty()) {
      mcdist::receiver::check_directories(cfg, false);
      std::cout << "mcdistd: " << check_config << ": configuration valid (receiver '" << cfg.id
                << "', " << cfg.channels.size() << " channel(s), temp " << cfg.temp.string()
                << ")\n";
      return 0;
    }
  } catch (const mcdist::receiver::config_error& e) {
    std::cerr << "mcdistd: " << (check_config.empty() ? "" : check_config + ": ") << e.what()
              << "\n";
    return 2;
  }

  std::shared_ptr<spdlog::logger> log;
  try {
    log = mcdist::make_logger("mcdistd", cfg.log);
  } catch (const std::exception& e) {
    std::cerr << "mcdistd: cannot open the log: " << e.what() << "\n";
    return 3;
  }
  if (cfg.drop_rate > 0) {
    log->warn("--drop-rate {}: dropping received datagrams on purpose (test option)",
              cfg.drop_rate);
  }
  try {
    boost::asio::io_context io(1);
    mcdist::receiver::daemon d(io, cfg, log);
    d.set_config_source(build_config);
    d.run();
  } catch (const mcdist::receiver::config_error& e) {
    log->error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return 3;
  }
  return 0;
}
