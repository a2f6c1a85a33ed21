// mcdist-feed: the hub daemon. Watches spool directories, batches products per channel and
// multicasts each batch as one signed session to the sites, with strict priority between
// channels, a durable outbox, a delivery journal and catch-up for sites that missed sessions.

#include "common/daemon/daemon_shell.hpp"
#include "common/sys/descriptors.hpp"
#include "common/sys/key_file.hpp"
#include "common/sys/logging.hpp"
#include "common/units.hpp"
#include "common/version.hpp"
#include "feed/control_server.hpp"
#include "feed/daemon_handler.hpp"
#include "feed/feed_config.hpp"
#include "feed/feed_daemon.hpp"
#include "feed/feed_http.hpp"
#include "feed/product_server.hpp"
#include "sender/io/block_reader.hpp"

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include <iostream>

namespace {

/// Exit statuses (documented in --help).
enum exit_status : int {
  exit_ok = 0,       ///< stopped by SIGTERM/SIGINT after saving the sessions' state
  exit_runtime = 1,  ///< could not run: journal, spool, socket
  exit_config = 2,   ///< bad command line or configuration (systemd: RestartPreventExitStatus)
};

constexpr const char* footer = R"(
CONFIGURATION (TOML, --config):
  interface = "eth1"                interface sessions leave by: a name or a local address
                                    ("10.0.0.5"); named, sessions leave from its first address
                                    of the channels' family (the source SSM sites configure)
  key = "/etc/mcdist/feed.key"      sender key (mcdist-keygen); sessions are signed with it;
                                    "credential:NAME": the systemd credential NAME (the
                                    packaged unit: LoadCredential=hub.key:/etc/mcdist/feed.key)
  site_keys = "/etc/mcdist/sites"   optional: only these sites may register ("SITE-ID KEY" lines)
  rate = "500M"                     total multicast rate of every channel together, bit/s;
                                    "auto" with rate_max = "1G": each session's rate follows
                                    its sites (TFMCC) within its priority share of rate_max
  journal = "/var/lib/mcdist-feed/journal.db"   SQLite journal: outbox, sessions, outcomes;
                                    or "postgresql://mcdist@db1/mcdist" (libpq URI): a journal
                                    redundant hubs share (README "Redundant hubs")
  relays = ["nmc-relay"]            optional: sites that are relays (mcdistd relay_group); a
                                    session fails one only after relay_timeout of silence, and
                                    a signed hub delegates its sessions to those site_keys pins
                                    (they run them for the sites behind them); list relays
                                    behind relays here too: they ask through the ones in front
  relay_timeout = "60s"             instead of 10 s, so a relay's restart resumes the session
                                    for the sites behind it (1s to 1h; default 60s)
  retention = "24h"                 how long sent products are kept for catch-up and resend
  retained = "/var/lib/mcdist-feed/retained"    where they are kept (hard links when possible)
  control_socket = "/run/mcdist-feed/control.sock"   mcdistctl's socket
  control_group = "mcdist-operators"                 group allowed on it besides this user
  http = "127.0.0.1:9612"           status page, /status and /metrics (default; "off" disables)
  products_http = "0.0.0.0:9613"    optional: the product server for one-way sites' catch-up
                                    over a terrestrial path and WIS2 links (off by default):
                                    GET /catch-up/CHANNEL/SEQ?nonce=HEX (an index signed by
                                    key), /products/ID/NAME, /data/NAME (newest version)
  products_tls_cert = "/etc/mcdist/hub.crt"   PEM certificate chain: HTTPS only (with
  products_tls_key = "/etc/mcdist/hub.tls.key" its PEM key; without both: plain HTTP)

  [cluster]                         with a PostgreSQL journal: this hub among several
  hub = "hub-a"                     its name, unique in the cluster (default: the host name)
  lease = "6s"                      a channel's lease; its holder alone sends the channel
  renew = "1s"                      how often the leases are renewed (and lapsed ones taken)
  margin = "1s"                     the hub stops sending this long before its lease can end

  [wis2]                            optional: a WIS2 Notification Message (WMO WNM 1.0) per
                                    product once the batch session that sent it ended
  broker = "mqtt://127.0.0.1:1883"  MQTT broker (no TLS yet)
  topic = "origin/a/wis2/xx-centre/data/core/weather"   origin/a/wis2/... or cache/a/wis2/...
  base_url = "https://data.example.org/"   canonical link = base_url + the product's name,
                                           percent-encoded (RFC 3986)
  channels = ["warnings"]           optional: only these channels (default: every channel)
  # data_id_prefix, qos (0-2, default 1), username, password, max_queued as in mcdistd

  [[channel]]
  name = "warnings"                 journal and sequence numbers are per channel
  group = "239.192.0.10:4711"       multicast group and port
  spool = ["/var/spool/mcdist-feed/warnings"]   watched recursively; subdirectories are
                                    part of the product name
  priority = 10                     higher first: its sessions take the rate they need
  share = 1.0                       part of the rate it takes when it is the most urgent (or
  # cap = "50M"                     a fixed cap instead)
  batch_window = "200ms"            a batch closes this long after its first product,
  batch_max_files = 1000            or at this many files,
  batch_max_bytes = "4G"            or this many bytes
  after = "delete"                  "delete", "keep" or "move:/DIR" once the session ended
                                    (spool subdirectories are never removed)
  ignore = ["*.tmp", "*.part"]      fnmatch globs; dot-files are always ignored
  ttl = 1                           multicast TTL
  receivers = ["site-a", "site-b"]  closed group (optional; default: any site that registers)
  register_window = "1s"            open group: how long registrations are accepted
  fec_k = "auto"                    parity repairs, as mcdist-send --fec-k (0: none): auto
                                    sizes each session's FEC blocks from the loss its sites
                                    reported before (4 / loss, 200 to 4096; 200 until known);
  fec_depth = 8                     fec_depth, fec_overhead ("3%"), silent_passes as well
  fallback = "sctp"                 the sites' unicast fallback: sctp, tcp, auto or off (one
                                    usrsctp stack and listener serve every channel)
  concurrent_sessions = 2           sessions of the channel at once, sharing its rate (one
                                    that waits only for a listed site that is down does not
                                    count; twice this many at most in all)
  heartbeat = "10s"                 multicast the newest session number this often, idle or
                                    not: returning sites report their gaps at once ("0s": off)
  register_timeout = "10s"          closed group: longest wait for every listed site (a site that
                                    missed the latest session is not waited for until heard again)
  encrypt = true                    encrypted sessions (needs key and site_keys): only the
                                    pinned sites read names and data; the unicast
                                    fallback seals its records per site

PRODUCTS: a product is picked up when its writer closes it (inotify IN_CLOSE_WRITE) or when it
is renamed into the spool (IN_MOVED_TO); write big products under a dot-name and rename them.
Every product is first recorded in the journal (the durable outbox), then batched: a batch is
one session, numbered per channel. Sites report the numbers they never completed when they
register, and the feed sends those products again to them (catch-up) from the retained copies.
A feed killed mid-batch sends the batch again at its next start; sites that hold a product
answer "held" and nothing is transferred twice.

PRIORITY: channels send at the same time, each with its own session and socket, and share the
rate: the highest-priority sending channel gets its share or cap, lower ones what is left, and
at least 1 % each so their sessions stay alive. A warning is not delayed by a model field of
another channel.

WIS2: with [wis2], each product of a batch is announced once its session ended: properties.
data_id = data_id_prefix (default: the topic after origin/a/wis2/) + the product's name,
integrity = the SHA-256 the session announced (read back from the spool file's digest xattr,
else hashed), one canonical link with its length. Publishing runs on libmosquitto's thread with
a bounded queue (never blocks the sessions); /status "wis2" counts published, failed, dropped.

STATUS: on `http` (default 127.0.0.1:9612, next to mcdistd's 9611; "off" disables) the feed
serves a status page for a person at /, a JSON document at /status and Prometheus metrics at
/metrics (mcdist_feed_products_sent_total{channel}, mcdist_sender_site_rtt_seconds{site}, ...).
A default port already taken is a warning; an explicit one is an error (exit 1).

CATCH-UP OVER HTTP(S): with products_http, a one-way site (mcdistd, silent = true and
catch_up_url) that missed batch session SEQ of a channel fetches its index and downloads each
product it lacks. The index lists the products of SEQ still retained and not superseded by a
newer version, with size, mtime, mode and SHA-256, echoes the site's nonce and is signed with
key ("mcdist v2 catch-up index"). Files are read only from retained, without following links.
At most 16 downloads at once (503 beyond), 64 connections, 30 s without progress ends one.

SIGNALS: SIGTERM/SIGINT end the running sessions (the sites are told), record their state in
the journal and exit 0; the next start sends the interrupted batches again. SIGHUP reopens the
log file and reloads --config: the file is checked first (an invalid one is logged and changes
nothing). Channels are matched by name: an added channel's spools are watched and scanned; a
removed one starts no new session (the session under way finishes, its queued products stay in
the journal) and its spools are no longer watched; a kept channel's new priority, share, cap,
batching, group, receivers, after and spools apply from its next batch. site_keys, the [wis2]
hook, retention, relays and relay_timeout are re-read; interface, key, rate, journal, retained_dir, control_socket,
http and products_http need a restart (logged, kept). A one-line summary is logged and
mcdist_feed_config_reloads_total{result} counts reloads. Under systemd (Type=notify) READY=1 follows the start-up scan, WATCHDOG=1 is sent
every half WatchdogSec from the event loop, STOPPING=1 on SIGTERM.

REDUNDANT HUBS: hubs with the same configuration (their own [cluster] hub, control_socket and
http), one PostgreSQL journal, one shared spool and retained directory and one key send each
channel from one hub at a time: the holder of its lease. The others are standby (status,
/metrics mcdist_feed_channel_active) and take a channel over when its lease lapses, sending
the batches it left unfinished again under their own numbers. A hub that cannot renew a lease
stops sending the channel `margin` before the lease can pass, and logs why.

Exit status: 0 stopped by a signal; 1 runtime error (journal, spool, socket); 2 bad
configuration or command line.

Examples:
  mcdist-feed --config /etc/mcdist/mcdist-feed.toml
  mcdist-feed --config feed.toml --check-config
)";

}  // namespace

int main(int argc, char** argv) {
  // Before any thread: each channel's session keeps up to default_open_files products open,
  // and a table grown under threads waits for an RCU grace period each time
  // (common/sys/descriptors.hpp). Room for several channels at once.
  // Every product of the running batches is held open from its batch's start to its end
  // (feed/spool_file.hpp), up to batch_max_files per channel.
  mcdist::raise_descriptor_limit();
  mcdist::reserve_descriptors(8 * mcdist::sender::default_open_files);
  CLI::App app{
      "mcdist-feed - the hub daemon: watches spool directories and multicasts their products, "
      "batched per channel, to mcdistd sites, with priorities, a durable outbox, a delivery "
      "journal and catch-up of missed sessions.",
      "mcdist-feed"};
  app.set_version_flag("--version", std::string("mcdist-feed ") + mcdist::version(),
                       "Print the release and exit");
  app.footer(footer);
  app.get_formatter()->column_width(34);
  std::string config_file = "/etc/mcdist/mcdist-feed.toml";
  bool check_only = false;
  std::string log_level = "info";
  std::string log_file;
  app.add_option("-c,--config", config_file, "Configuration file (TOML)")
      ->capture_default_str()
      ->type_name("FILE");
  app.add_flag("--check-config", check_only,
               "Check the configuration (and that the keys can be read), print a summary, exit");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str()
      ->type_name("LEVEL");
  app.add_option("--log-file", log_file, "Also log to this file (rotated; SIGHUP reopens it)")
      ->type_name("FILE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? exit_ok : exit_config;
  }

  mcdist::feed::feed_config cfg;
  try {
    cfg = mcdist::feed::load_feed_config(config_file);
  } catch (const mcdist::feed::config_error& e) {
    std::cerr << "mcdist-feed: " << e.what() << "\n";
    return exit_config;
  }
  mcdist::log_options lo;
  try {
    lo.level = mcdist::parse_log_level(log_level);
  } catch (const std::exception& e) {
    std::cerr << "mcdist-feed: " << e.what() << "\n";
    return exit_config;
  }
  if (!log_file.empty()) lo.file = log_file;
  if (check_only) {
    try {
      if (cfg.key_file.string().starts_with("credential:") &&
          !std::getenv("CREDENTIALS_DIRECTORY")) {
        std::cout << "key: " << cfg.key_file.string()
                  << " is read from systemd's credentials when the unit runs (not checked "
                     "here)\n";
      } else if (!cfg.key_file.empty()) {
        (void)mcdist::crypto::read_secret_key_file(
            mcdist::crypto::resolve_key_path(cfg.key_file.string()));
      }
      if (!cfg.site_keys.empty()) (void)mcdist::sender::read_site_keys(cfg.site_keys.string());
    } catch (const mcdist::crypto::key_error& e) {
      std::cerr << "mcdist-feed: " << e.what() << "\n";
      return exit_config;
    }
    std::cout << config_file << ": OK: " << cfg.channels.size() << " channel"
              << (cfg.channels.size() == 1 ? "" : "s") << " at "
              << mcdist::format_rate(static_cast<double>(cfg.rate_bps)) << " in total\n";
    for (const auto& c : cfg.channels) {
      std::cout << "  " << c.name << ": " << c.group.to_string() << ", priority " << c.priority
                << ", " << c.spools.size() << " spool director"
                << (c.spools.size() == 1 ? "y" : "ies") << "\n";
    }
    return exit_ok;
  }

  std::shared_ptr<spdlog::logger> log;
  try {
    log = mcdist::make_logger("mcdist-feed", lo);
  } catch (const std::exception& e) {
    std::cerr << "mcdist-feed: cannot open the log: " << e.what() << "\n";
    return exit_runtime;
  }
  // Pacing wakes the network thread every few hundred microseconds (as in mcdist-send).
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  try {
    boost::asio::io_context io(1);
    // Its log ring before any other thread could log (spdlog's sink list is not guarded).
    mcdist::status_port status_port(log, cfg.http, cfg.http_explicit, "");
    mcdist::feed::feed_daemon daemon(io, cfg, log);
    status_port.open(io, [&](mcdist::status_view v, mcdist::log_summary l) {
      return mcdist::feed::render_feed_view(daemon, status_port.started(), v, std::move(l));
    });
    std::unique_ptr<mcdist::feed::product_server> products;
    if (cfg.products_http) {
      mcdist::feed::product_server_options po;
      po.at = *cfg.products_http;
      po.journal = cfg.journal;
      po.retained_dir = cfg.retained_dir;
      // Encrypted channels' products are for their pinned sites only, and the product server
      // does not authenticate clients: it never serves them.
      for (const auto& c : cfg.channels) {
        if (!c.encrypt) po.channels.push_back(c.name);
      }
      po.key = daemon.identity();
      po.tls_cert = cfg.products_tls_cert;
      po.tls_key = cfg.products_tls_key;
      if (po.tls_cert.empty()) {
        log->warn(
            "products_http without products_tls_cert/products_tls_key: products and catch-up "
            "indexes are served over plain HTTP (readable on the path; the indexes' signatures "
            "still protect their integrity)");
      }
      products = std::make_unique<mcdist::feed::product_server>(std::move(po), log);
    }
    mcdist::feed::daemon_handler handler(daemon, io);
    std::unique_ptr<mcdist::feed::control_server> control;
    if (!cfg.control_socket.empty()) {
      control = std::make_unique<mcdist::feed::control_server>(
          io, mcdist::feed::control_socket_options{cfg.control_socket, cfg.control_group}, handler,
          mcdist::feed::control_limits{}, log);
      control->start();
    }
    mcdist::daemon_shell shell(
        io, log,
        {[&] { daemon.reload([&] { return mcdist::feed::load_feed_config(config_file); }); },
         [&](const char* signal) {
           log->info("{}: ending the running sessions", signal);
           if (control) control->stop();
           status_port.stop();
           if (products) products->stop();
           daemon.stop([&] {
             shell.close();
             log->info("stopped; the journal holds every session's state");
             io.stop();
           });
         },
         [&](const char* signal) {
           log->warn("{} again: quitting at once (the next start sends unfinished batches again)",
                     signal);
           io.stop();
         }});
    daemon.start();
    status_port.start();
    if (products) products->start();
    log->info("mcdist-feed: {} channel{} at {} in total, journal {}", cfg.channels.size(),
              cfg.channels.size() == 1 ? "" : "s",
              mcdist::format_rate(static_cast<double>(cfg.rate_bps)),
              mcdist::feed::describe_journal(cfg.journal.string()));
    shell.ready("watching " + std::to_string(cfg.channels.size()) + " channels");
    io.run();
    return exit_ok;
  } catch (const mcdist::feed::config_error& e) {
    if (log) log->error("{}", e.what());
    return exit_config;
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return exit_runtime;
  }
}
