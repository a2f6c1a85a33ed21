// mcdistctl: the hub operator's tool. Asks the running mcdist-feed over its control socket
// (feed/control_server.hpp) and, when the daemon is down, answers status, history and missing
// from its journal, read-only (feed/journal.hpp).

#include "common/units.hpp"
#include "common/version.hpp"
#include "feed/control_protocol.hpp"
#include "feed/journal.hpp"
#include "tools/mcdistctl/client.hpp"
#include "tools/mcdistctl/render.hpp"

#include <CLI/CLI.hpp>
#include <toml++/toml.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace mcdist;

/// mcdist-feed's shipped configuration (deploy/config/mcdist-feed.toml, a conffile).
constexpr const char* default_config = "/etc/mcdist/mcdist-feed.toml";
constexpr const char* default_socket = "/run/mcdist-feed/control.sock";
constexpr const char* default_journal = "/var/lib/mcdist-feed/journal.db";
/// How long to wait for the daemon's answer (60 s: a day's history is read from the journal
/// in well under a second; the daemon answers on its io thread between packets).
constexpr auto call_timeout = std::chrono::seconds(60);
/// History rows asked for unless --limit says otherwise (10 000: a screenful is what an operator
/// reads; the daemon answers on its io thread, and 10 000 rows take it ~0.3 s against ~3 s for
/// feed::max_history_rows).
constexpr std::size_t default_history_rows = 10'000;

constexpr const char* footer = R"(
Commands:
  status
      The daemon's channels (last sequence number; products queued, sending, sent, failed;
      last session), the sites (last seen, RTT, NAK ratio, last sequence number completed per
      channel) and the latest sessions with their outcome.
  history --site SITE --since DURATION [--product GLOB] [--channel CHANNEL] [--limit N]
      What SITE did with each product in the window, newest first: stored, held (it had an
      identical copy), failed (with the reason the site gave) or missed (it was not in the
      session, or reported the session's sequence number missing).
  missing --site SITE --since DURATION
      Products sent in the window on SITE's channels that SITE has not stored or held, with
      its last outcome and whether the hub still keeps a copy (RESENDABLE).
  resend --site SITE (--since DURATION | --product GLOB | --seq N[-M]) [--channel C] [--unicast]
      Sends retained products again to SITE: those sent in the last DURATION, those whose
      name matches GLOB, or those of the channel's batches N to M. --unicast uses the unicast
      fallback instead of multicast. Needs the running daemon.

mcdistctl talks to the running mcdist-feed over its control socket (control_socket in
/etc/mcdist/mcdist-feed.toml, default /run/mcdist-feed/control.sock; reachable by the daemon's
user and the operator group, control_group). When the daemon is not running, status, history and
missing are answered from the hub journal (journal in that file, default
/var/lib/mcdist-feed/journal.db), read-only, and mcdistctl says so on stderr. Durations are a
number with a unit: 90s, 30m, 6h. GLOB is matched against the product's path in its set:
* and ? match any characters including '/', [...] a set.

Output is an aligned table, times in UTC; --json prints the answer as one JSON object with stable
keys ("ok", "source": "daemon" or "journal", then the command's keys: "rows" for history and
missing, "channels", "sites" and "sessions" for status). Global options may come before or after
the command.

Examples:
  mcdistctl status
  mcdistctl history --site dwd --since 6h --product '*.grib2'
  mcdistctl history --site knmi --since 30m --channel warnings --json
  mcdistctl missing --site dwd --since 24h
  mcdistctl resend --site dwd --since 6h
  mcdistctl resend --site knmi --seq 1200-1210 --channel obs --unicast
  mcdistctl --socket /tmp/feed.sock --journal /tmp/journal.db status

Exit status: 0 done; 1 the daemon or the journal refused or failed (the reason is on stderr);
2 usage error.
)";

struct settings {
  fs::path socket = default_socket;
  fs::path journal = default_journal;
};

/// Reads control_socket and journal from the daemon's configuration, if it exists.
settings read_config(const fs::path& file, bool explicit_file) {
  settings s;
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    if (explicit_file) std::cerr << "mcdistctl: " << file.string() << " does not exist\n";
    return s;
  }
  try {
    const auto t = toml::parse_file(file.string());
    if (auto v = t["control_socket"].value<std::string>()) s.socket = *v;
    if (auto v = t["journal"].value<std::string>()) s.journal = *v;
  } catch (const toml::parse_error& e) {
    std::cerr << "mcdistctl: cannot read " << file.string() << " (" << e.description()
              << "); using the default socket and journal\n";
  }
  return s;
}

std::optional<mcdist::wall_time> since_from(const std::string& text) {
  const auto d = parse_duration(text);
  if (!d || d->count() < 0) return std::nullopt;
  return std::chrono::time_point_cast<mcdist::wall_time::duration>(std::chrono::system_clock::now() -
                                                                  *d);
}

std::optional<mcdist::wire::seq_span> parse_seq_range(const std::string& s) {
  const auto dash = s.find('-');
  const auto num = [](const std::string& t) -> std::optional<std::uint64_t> {
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 19)
      return std::nullopt;
    return std::stoull(t);
  };
  const auto a = num(s.substr(0, dash));
  const auto b = dash == std::string::npos ? a : num(s.substr(dash + 1));
  if (!a || !b || *a == 0 || *a > *b) return std::nullopt;
  return std::pair{*a, *b};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mcdistctl - query and steer the mcdist hub daemon (mcdist-feed): status, "
      "delivery history, missing products, resends",
      "mcdistctl"};
  app.set_version_flag("--version", std::string("mcdistctl ") + mcdist::version(),
                       "Print the release and exit");
  app.footer(footer);
  app.get_formatter()->column_width(34);
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the command: `mcdistctl missing ... --json`

  std::string config_file = default_config, socket_opt, journal_opt;
  bool as_json = false;
  app.add_option("--config", config_file,
                 "mcdist-feed's configuration, read for control_socket and journal")
      ->type_name("FILE")
      ->default_str(default_config);
  app.add_option("--socket", socket_opt, "The daemon's control socket (overrides --config)")
      ->type_name("PATH");
  app.add_option("--journal", journal_opt,
                 "The hub journal, read when the daemon is down (overrides --config)")
      ->type_name("PATH");
  app.add_flag("--json", as_json, "Print the answer as JSON instead of a table");

  auto* status = app.add_subcommand("status", "Channels, sites and the latest sessions");
  status->footer("\nExample: mcdistctl status --json");

  std::string site, since_text, glob, channel, seq_text;
  std::size_t limit = default_history_rows;
  auto* history = app.add_subcommand("history",
                                     "What a site did with each product (stored, "
                                     "held, failed, missed), newest first");
  history->footer(
      "\nExamples:\n  mcdistctl history --site dwd --since 6h --product 'nwp/*.grib2'\n"
      "  mcdistctl history --site knmi --since 30m --channel warnings --json");
  history->add_option("--site", site, "Site name")->required();
  history->add_option("--since", since_text, "How far back, e.g. 6h")
      ->required()
      ->type_name("DURATION");
  history->add_option("--product", glob, "Only products whose name matches (*, ?, [...])")
      ->type_name("GLOB");
  history->add_option("--channel", channel, "Only this channel");
  history->add_option("--limit", limit, "At most N rows, the newest (default 10000, max 100000)")
      ->check(CLI::Range(std::size_t{1}, feed::max_history_rows));

  auto* missing = app.add_subcommand(
      "missing", "Products sent on the site's channels that it has not stored or held");
  missing->footer(
      "\nExample: mcdistctl missing --site dwd --since 24h\n"
      "Then: mcdistctl resend --site dwd --since 24h");
  missing->add_option("--site", site, "Site name")->required();
  missing->add_option("--since", since_text, "How far back, e.g. 24h")
      ->required()
      ->type_name("DURATION");

  bool unicast = false;
  auto* resend =
      app.add_subcommand("resend", "Send products again to a site (needs the running daemon)");
  resend->footer(
      "\nExamples:\n  mcdistctl resend --site dwd --since 6h\n"
      "  mcdistctl resend --site dwd --product 'nwp/*_t2m_*.grib2'\n"
      "  mcdistctl resend --site knmi --seq 1200-1210 --channel obs --unicast");
  resend->add_option("--site", site, "Site name")->required();
  auto* r_since = resend->add_option("--since", since_text, "Products sent in the last DURATION")
                      ->type_name("DURATION");
  auto* r_glob =
      resend->add_option("--product", glob, "Products whose name matches")->type_name("GLOB");
  auto* r_seq = resend->add_option("--seq", seq_text, "Products of batches N to M of the channel")
                    ->type_name("N[-M]");
  r_since->excludes(r_glob)->excludes(r_seq);
  r_glob->excludes(r_seq);
  resend->add_option("--channel", channel,
                     "Only this channel (needed with --seq when the site "
                     "is on several)");
  resend->add_flag("--unicast", unicast, "Over the unicast fallback instead of multicast");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  const bool config_given = app.get_option("--config")->count() > 0;
  auto s = read_config(config_file, config_given);
  if (!socket_opt.empty()) s.socket = socket_opt;
  if (!journal_opt.empty()) s.journal = journal_opt;

  // Build the request.
  feed::control_request req;
  std::optional<mcdist::wall_time> since;
  if (!since_text.empty()) {
    since = since_from(since_text);
    if (!since) {
      std::cerr << "mcdistctl: --since " << since_text
                << " is not a duration (a number with a unit: 90s, 30m, 6h)\n";
      return 2;
    }
  }
  if (status->parsed()) {
    req = feed::status_request{};
  } else if (history->parsed()) {
    feed::history_request h;
    h.site = site;
    h.since = *since;
    if (!glob.empty()) h.glob = glob;
    if (!channel.empty()) h.channel = channel;
    h.limit = limit;
    req = h;
  } else if (missing->parsed()) {
    req = feed::missing_request{site, *since};
  } else {
    feed::resend_request r;
    r.site = site;
    r.since = since;
    if (!glob.empty()) r.glob = glob;
    if (!seq_text.empty()) {
      r.seqs = parse_seq_range(seq_text);
      if (!r.seqs) {
        std::cerr << "mcdistctl: --seq " << seq_text << " is not N or N-M with 1 <= N <= M\n";
        return 2;
      }
    }
    if (!r.since && !r.glob && !r.seqs) {
      std::cerr << "mcdistctl: resend needs --since, --product or --seq (which products)\n";
      return 2;
    }
    if (!channel.empty()) r.channel = channel;
    r.unicast = unicast;
    req = r;
  }

  // Ask the daemon; when nobody answers, the journal.
  json answer;
  std::string source = "daemon";
  auto result = ctl::call(s.socket, feed::to_json(req), call_timeout);
  if (auto* err = std::get_if<ctl::call_error>(&result)) {
    if (!err->unreachable) {
      std::cerr << "mcdistctl: " << err->what << "\n";
      return 1;
    }
    if (resend->parsed()) {
      std::cerr << "mcdistctl: resend needs the running mcdist-feed, and it does not answer on "
                << err->what << " (start it: systemctl start mcdist-feed)\n";
      return 1;
    }
    std::cerr << "mcdistctl: mcdist-feed does not answer on " << err->what
              << "; answering from the journal " << s.journal.string() << " (read-only)\n";
    source = "journal";
    try {
      feed::hub_journal j(s.journal, true);
      feed::journal_handler h(j);
      answer = feed::answer(h, feed::to_json(req).dump());
    } catch (const std::exception& e) {
      std::cerr << "mcdistctl: cannot read the journal: " << e.what() << "\n";
      return 1;
    }
  } else {
    answer = std::move(std::get<json>(result));
  }

  answer["source"] = source;
  const bool ok = answer.value("ok", false);
  if (as_json) {
    std::cout << feed::to_line(answer);
  } else if (ok) {
    if (status->parsed())
      std::cout << ctl::render_status(answer);
    else if (history->parsed())
      std::cout << ctl::render_history(answer);
    else if (missing->parsed())
      std::cout << ctl::render_missing(answer);
    else
      std::cout << ctl::render_resend(answer);
  }
  if (!ok) {
    std::cerr << "mcdistctl: " << answer.value("error", std::string("failed (no reason given)"))
              << "\n";
    return 1;
  }
  return 0;
}
