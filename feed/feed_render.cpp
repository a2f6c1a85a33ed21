#include "feed/feed_render.hpp"

#include "common/http/html.hpp"
#include "common/http/prometheus_text.hpp"
#include "common/http/throughput.hpp"
#include "common/units.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace mcdist::feed {

namespace {

using http::html_escape;
using http::iso_time;
using http::metric_type;

constexpr std::array<const char*, 3> kind_names = {"batch", "catchup", "resend"};
/// By feed::datagram_kind.
constexpr std::array<const char*, 4> datagram_kind_names = {"first", "repair", "proactive_parity",
                                                            "late_key"};
constexpr std::array<const char*, 4> outcome_names = {"stored", "held", "failed", "missed"};

double unix_seconds(wall_time t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

double age_seconds(wall_time now, wall_time then) {
  return std::max(0.0, std::chrono::duration<double>(now - then).count());
}

/// The daemon's status of channel i (an empty object if absent).
const nlohmann::json& daemon_channel(const feed_snapshot& s, std::size_t i) {
  static const nlohmann::json empty = nlohmann::json::object();
  const auto& ch = s.daemon.contains("channels") ? s.daemon["channels"] : empty;
  return ch.is_array() && i < ch.size() ? ch[i] : empty;
}

/// The channel indexes shown: every one but those a reload removed (daemon "retired").
std::vector<std::size_t> shown(const feed_snapshot& s) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < s.board->channel_names().size(); ++i) {
    if (!daemon_channel(s, i).value("retired", false)) out.push_back(i);
  }
  return out;
}

std::uint64_t queued_of(const nlohmann::json& ch) {
  return ch.value("waiting_products", std::uint64_t{0});
}

const nlohmann::json* running_of(const nlohmann::json& ch) {
  const auto it = ch.find("running");
  return it != ch.end() && it->is_object() ? &*it : nullptr;
}

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", r * 100);
  return buf;
}

std::string rtt_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", s * 1000);
  return buf;
}

std::string fallbacks_text(const site_tally& t) {
  std::string out;
  for (const auto& [transport, n] : t.fallbacks) {
    out += (out.empty() ? "" : ", ") + std::string(to_string(transport)) + " &times;" +
           std::to_string(n);
  }
  return out;
}

std::string lag_text(const site_lag& l) {
  if (l.missing == 0 && l.queued == 0) return "<span class=\"ok\">none</span>";
  std::string out = std::to_string(l.missing) + (l.truncated ? "+" : "") + " missing";
  if (l.oldest_missing_age_s) out += " (oldest " + http::format_age(*l.oldest_missing_age_s) + ")";
  out += ", " + std::to_string(l.queued) + " queued";
  return l.missing ? "<span class=\"bad\">" + out + "</span>" : out;
}

const char* state_class(std::string_view state) {
  if (state == "completed") return "ok";
  if (state == "registered") return "warning";
  return "bad";
}

}  // namespace

site_lag lag_of(const feed_snapshot& s, const site_tally& site) {
  site_lag l;
  l.missing = site.missing.size();
  l.truncated = site.missing_truncated;
  for (const auto& [id, m] : site.missing) {
    const double age = age_seconds(s.now, m.second);
    if (!l.oldest_missing_age_s || age > *l.oldest_missing_age_s) l.oldest_missing_age_s = age;
  }
  const auto& names = s.board->channel_names();
  for (const std::size_t i : shown(s)) {
    if (site.channels.count(names[i])) l.queued += queued_of(daemon_channel(s, i));
  }
  return l;
}

namespace {

/// The mcdist_feed_wis2_input_* families, from feed_daemon::status()'s "wis2_input" list
/// (wis2_input::status()); nothing without a [[wis2_input]].
void render_wis2_input_metrics(http::prometheus_text& p, const nlohmann::json& daemon) {
  const auto it = daemon.find("wis2_input");
  if (it == daemon.end() || !it->is_array() || it->empty()) return;
  const auto& inputs = *it;
  const auto u64 = [](const nlohmann::json& j, const char* key) {
    return j.value(key, std::uint64_t{0});
  };
  const auto each = [&](const char* name, metric_type type, const char* help, const char* key) {
    p.family(name, type, help);
    for (const auto& in : inputs) {
      p.sample({{"input", in.value("name", std::string())}}, u64(in, key));
    }
  };
  p.family("mcdist_feed_wis2_input_broker_connected", metric_type::gauge,
           "1 while the input is connected to its broker.");
  for (const auto& in : inputs) {
    p.sample({{"input", in.value("name", std::string())}},
             std::uint64_t{in.value("connected", false) ? 1u : 0u});
  }
  each("mcdist_feed_wis2_input_notifications_total", metric_type::counter,
       "WIS2 notifications received from the broker.", "received");
  each("mcdist_feed_wis2_input_accepted_total", metric_type::counter,
       "Notifications taken for download (checked, not duplicates).", "accepted");
  p.family("mcdist_feed_wis2_input_duplicates_total", metric_type::counter,
           "Notifications dropped as duplicates: key id (seen before: anti-loop), data_id (taken "
           "with a pubtime at or after).");
  for (const auto& in : inputs) {
    const auto name = in.value("name", std::string());
    const auto d = in.value("duplicates", nlohmann::json::object());
    p.sample({{"input", name}, {"key", "id"}}, u64(d, "id"));
    p.sample({{"input", name}, {"key", "data_id"}}, u64(d, "data_id"));
  }
  p.family("mcdist_feed_wis2_input_refused_total", metric_type::counter,
           "Notifications refused, by reason: the notification (too_large, bad_json, not_wnm, "
           "no_link, bad_link, no_integrity, bad_integrity, bad_name, too_big, overload, ...) "
           "or its download (http_404, integrity, length, timeout, connect, tls, ...).");
  for (const auto& in : inputs) {
    const auto name = in.value("name", std::string());
    // Bound to a name: items() refers to the object, which a temporary would not outlive.
    const auto refused = in.value("refused", nlohmann::json::object());
    for (const auto& [reason, n] : refused.items()) {
      p.sample({{"input", name}, {"reason", reason}}, n.get<std::uint64_t>());
    }
  }
  each("mcdist_feed_wis2_input_products_total", metric_type::counter,
       "Products downloaded, verified and written into their channel's spool.", "delivered");
  each("mcdist_feed_wis2_input_bytes_total", metric_type::counter, "Bytes of those products.",
       "delivered_bytes");
  each("mcdist_feed_wis2_input_retries_total", metric_type::counter,
       "Download attempts after a failure that may pass (network, timeout, HTTP 5xx).", "retries");
  each("mcdist_feed_wis2_input_downloads_active", metric_type::gauge, "Downloads running now.",
       "downloading");
  each("mcdist_feed_wis2_input_downloads_waiting", metric_type::gauge,
       "Downloads waiting for a slot or for their next attempt.", "waiting");
  p.family("mcdist_feed_wis2_input_last_product_timestamp_seconds", metric_type::gauge,
           "When the input's latest product was written into the spool, seconds since the "
           "Unix epoch.");
  for (const auto& in : inputs) {
    if (in.contains("last_delivered")) {
      p.sample({{"input", in.value("name", std::string())}}, in["last_delivered"].get<double>());
    }
  }
}

}  // namespace

std::string render_feed_metrics(const feed_snapshot& s) {
  const auto& names = s.board->channel_names();
  const auto& chans = s.board->channels();
  const auto& sites = s.board->sites();
  http::prometheus_text p;
  p.family("mcdist_feed_info", metric_type::gauge, "Hub daemon build; the value is always 1.");
  p.sample({{"version", s.version}}, std::uint64_t{1});
  p.family("mcdist_feed_start_time_seconds", metric_type::gauge,
           "When the daemon started, seconds since the Unix epoch.");
  p.sample(unix_seconds(s.started));
  // Prometheus base units are bytes (promtool refuses "bits"): the configured bit/s over 8.
  p.family("mcdist_feed_rate_limit_bytes_per_second", metric_type::gauge,
           "Configured multicast rate of every channel together.");
  p.sample(static_cast<double>(s.cfg->rate_bps) / 8);
  p.family("mcdist_feed_products_queued", metric_type::gauge,
           "Products picked up from the spools, waiting for their channel's next batch.");
  for (const std::size_t i : shown(s))
    p.sample({{"channel", names[i]}}, queued_of(daemon_channel(s, i)));
  p.family("mcdist_feed_sessions_running", metric_type::gauge,
           "1 while the channel sends a session.");
  for (const std::size_t i : shown(s))
    p.sample({{"channel", names[i]}}, std::uint64_t{running_of(daemon_channel(s, i)) ? 1u : 0u});
  p.family("mcdist_feed_session_rate_bytes_per_second", metric_type::gauge,
           "Rate of the channel's running session (its priority share of the total), 0 if none.");
  for (const std::size_t i : shown(s)) {
    const auto* run = running_of(daemon_channel(s, i));
    const auto bps = run ? run->value("rate_bps", std::uint64_t{0}) : std::uint64_t{0};
    p.sample({{"channel", names[i]}}, static_cast<double>(bps) / 8);
  }
  p.family("mcdist_feed_products_sent_total", metric_type::counter,
           "Products of ended batch sessions (each counted once, whatever the sites did).");
  for (const std::size_t i : shown(s)) p.sample({{"channel", names[i]}}, chans[i].products_sent);
  p.family("mcdist_feed_products_refused_total", metric_type::counter,
           "Spool files refused: a name that cannot be a product, not a regular file, a link, "
           "or changed since queued (journaled failed with the reason)");
  for (const std::size_t i : shown(s)) {
    p.sample({{"channel", names[i]}}, chans[i].products_refused);
  }
  p.family("mcdist_feed_bytes_sent_total", metric_type::counter,
           "Bytes of the products of ended batch sessions.");
  for (const std::size_t i : shown(s)) p.sample({{"channel", names[i]}}, chans[i].bytes_sent);
  p.family("mcdist_feed_sessions_total", metric_type::counter,
           "Sessions ended, by kind: batch (new products), catchup (missed sequence numbers), "
           "resend (mcdistctl).");
  for (const std::size_t i : shown(s)) {
    for (std::size_t k = 0; k < kind_names.size(); ++k)
      p.sample({{"channel", names[i]}, {"kind", kind_names[k]}}, chans[i].sessions[k]);
  }
  p.family("mcdist_feed_data_datagrams_total", metric_type::counter,
           "Data datagrams of ended sessions, by kind: first (source blocks sent the first time, "
           "and a silent session's later passes), repair (blocks sent again and parity sent for "
           "NAKs), late_key (blocks sent again for sites that got the session key after them), "
           "proactive_parity.");
  for (const std::size_t i : shown(s)) {
    for (std::size_t k = 0; k < datagram_kind_names.size(); ++k)
      p.sample({{"channel", names[i]}, {"kind", datagram_kind_names[k]}}, chans[i].datagrams[k]);
  }
  p.family("mcdist_feed_last_product_timestamp_seconds", metric_type::gauge,
           "When the channel's latest batch session ended, seconds since the Unix epoch.");
  for (const std::size_t i : shown(s)) {
    if (chans[i].last_sent) p.sample({{"channel", names[i]}}, unix_seconds(*chans[i].last_sent));
  }
  p.family("mcdist_feed_site_outcomes_total", metric_type::counter,
           "Product x site outcomes journaled: stored, held (already there), failed, missed.");
  for (const auto& [site, t] : sites) {
    for (std::size_t o = 0; o < outcome_names.size(); ++o)
      p.sample({{"site", site}, {"outcome", outcome_names[o]}}, t.outcomes[o]);
  }
  p.family("mcdist_feed_site_last_seen_timestamp_seconds", metric_type::gauge,
           "End of the latest session the site took part in, seconds since the Unix epoch.");
  for (const auto& [site, t] : sites) {
    if (t.last_seen) p.sample({{"site", site}}, unix_seconds(*t.last_seen));
  }
  p.family("mcdist_feed_site_lag_products", metric_type::gauge,
           "Products sent that the site did not store yet, plus those queued on its channels.");
  for (const auto& [site, t] : sites) {
    const auto l = lag_of(s, t);
    p.sample({{"site", site}}, l.missing + l.queued);
  }
  p.family("mcdist_feed_site_lag_seconds", metric_type::gauge,
           "Age of the oldest product sent that the site did not store yet (0: none).");
  for (const auto& [site, t] : sites) {
    p.sample({{"site", site}}, lag_of(s, t).oldest_missing_age_s.value_or(0.0));
  }
  p.family("mcdist_sender_site_rtt_seconds", metric_type::gauge,
           "Round-trip time to the site, last sample of its latest session.");
  for (const auto& [site, t] : sites) {
    if (t.rtt_s) p.sample({{"site", site}}, *t.rtt_s);
  }
  p.family("mcdist_sender_site_nak_ratio", metric_type::gauge,
           "Blocks the site NAKed / data datagrams sent, in its latest session (0..1).");
  for (const auto& [site, t] : sites) {
    if (t.last_seen) p.sample({{"site", site}}, t.nak_ratio);
  }
  p.family("mcdist_sender_fallback_total", metric_type::counter,
           "Sessions in which the site was moved to unicast, by transport.");
  for (const auto& [site, t] : sites) {
    for (const auto& [transport, n] : t.fallbacks)
      p.sample({{"site", site}, {"transport", to_string(transport)}}, n);
  }
  log_messages_metric(p, "mcdist_feed_log_messages_total", s.log);
  if (const auto c = s.daemon.find("cluster"); c != s.daemon.end() && c->is_object()) {
    // Redundant hubs (README "Redundant hubs"): this hub's role per channel and the others.
    p.family("mcdist_feed_channel_active", metric_type::gauge,
             "1 while this hub holds the channel's lease and sends it, 0 while standby.");
    for (const std::size_t i : shown(s)) {
      p.sample({{"channel", names[i]}},
               std::uint64_t{daemon_channel(s, i).value("role", std::string()) == "active"});
    }
    p.family("mcdist_feed_lease_age_seconds", metric_type::gauge,
             "How long this hub has held the channel's lease (0 while standby).");
    for (const std::size_t i : shown(s)) {
      const auto lease = daemon_channel(s, i).value("lease", nlohmann::json::object());
      p.sample({{"channel", names[i]}}, lease.value("age_s", 0.0));
    }
    p.family("mcdist_feed_cluster_database_up", metric_type::gauge,
             "1 while the lease rounds reach the shared journal database.");
    p.sample(std::uint64_t{c->value("database", std::string()) == "ok"});
    p.family("mcdist_feed_cluster_hub_seen_seconds", metric_type::gauge,
             "Seconds since each hub of the cluster last ran a lease round (database clock).");
    for (const auto& h : c->value("hubs", nlohmann::json::array())) {
      p.sample({{"hub", h.value("hub", std::string())}}, h.value("age_s", 0.0));
    }
  }
  p.family("mcdist_feed_config_reloads_total", metric_type::counter,
           "Configuration reloads at SIGHUP, by result (applied, or refused as invalid).");
  const auto reloads = s.daemon.value("config_reloads", nlohmann::json::object());
  p.sample({{"result", "success"}}, reloads.value("success", std::uint64_t{0}));
  p.sample({{"result", "failure"}}, reloads.value("failure", std::uint64_t{0}));
  render_wis2_input_metrics(p, s.daemon);
  return p.text();
}

nlohmann::json render_feed_status(const feed_snapshot& s) {
  nlohmann::json j = s.daemon;
  j["version"] = s.version;
  j["time"] = iso_time(s.now);
  j["started"] = iso_time(s.started);
  j["uptime_seconds"] = age_seconds(s.now, s.started);
  const auto& names = s.board->channel_names();
  const auto& chans = s.board->channels();
  if (!j.contains("channels") || !j["channels"].is_array()) j["channels"] = nlohmann::json::array();
  auto& list = j["channels"];
  while (list.size() < names.size()) list.push_back({{"name", names[list.size()]}});
  std::vector<std::uint64_t> total(feed_board::minutes_kept, 0);
  for (const std::size_t i : shown(s)) {
    auto& c = list[i];
    const auto& b = chans[i];
    c["products_sent"] = b.products_sent;
    c["bytes_sent"] = b.bytes_sent;
    c["products_refused"] = b.products_refused;
    for (std::size_t k = 0; k < kind_names.size(); ++k)
      c["sessions_ended"][kind_names[k]] = b.sessions[k];
    if (b.last_sent) {
      c["last_sent"] = iso_time(*b.last_sent);
      c["last_sent_age_seconds"] = age_seconds(s.now, *b.last_sent);
    }
    nlohmann::json last = nlohmann::json::array();
    for (auto it = b.recent.rbegin(); it != b.recent.rend(); ++it) {
      last.push_back({{"name", it->name},
                      {"size", it->size},
                      {"seq", it->seq},
                      {"session", it->session},
                      {"time", iso_time(it->at)},
                      {"age_seconds", age_seconds(s.now, it->at)},
                      {"sites_ok", it->sites_ok},
                      {"sites", it->sites}});
    }
    c["last_products"] = std::move(last);  // newest first
    const auto minutes = s.board->bytes_per_minute(i, s.now);
    for (std::size_t m = 0; m < minutes.size(); ++m) total[m] += minutes[m];
    c["bytes_per_minute"] = minutes;
  }
  nlohmann::json sites = nlohmann::json::array();
  for (const auto& [name, t] : s.board->sites()) {
    nlohmann::json o;
    o["site"] = name;
    o["state"] = t.state;
    o["path"] = t.path ? nlohmann::json(to_string(*t.path)) : nlohmann::json(nullptr);
    o["channel"] = t.channel;
    o["channels"] = t.channels;
    if (t.last_seen) {
      o["last_seen"] = iso_time(*t.last_seen);
      o["last_seen_age_seconds"] = age_seconds(s.now, *t.last_seen);
    } else {
      o["last_seen"] = nullptr;
    }
    o["rtt_seconds"] = t.rtt_s ? nlohmann::json(*t.rtt_s) : nlohmann::json(nullptr);
    o["nak_ratio"] = t.nak_ratio;
    o["fallbacks"] = nlohmann::json::object();
    for (const auto& [transport, n] : t.fallbacks)
      o["fallbacks"][std::string(to_string(transport))] = n;
    for (std::size_t k = 0; k < outcome_names.size(); ++k)
      o["outcomes"][outcome_names[k]] = t.outcomes[k];
    const auto l = lag_of(s, t);
    o["lag"] = {{"missing_products", l.missing},
                {"queued_products", l.queued},
                {"oldest_missing_age_seconds", l.oldest_missing_age_s
                                                   ? nlohmann::json(*l.oldest_missing_age_s)
                                                   : nlohmann::json(nullptr)},
                {"lower_bound", l.truncated}};
    sites.push_back(std::move(o));
  }
  j["sites"] = std::move(sites);
  j["recent_log"] = recent_log_json(s.log.recent);
  j["bytes_per_minute"] = total;
  // Channels a reload removed are not shown (their indexes stay for the board's sake).
  nlohmann::json live = nlohmann::json::array();
  for (auto& c : j["channels"]) {
    if (!c.value("retired", false)) live.push_back(std::move(c));
  }
  j["channels"] = std::move(live);
  return j;
}

std::string render_feed_page(const feed_snapshot& s) {
  const auto& names = s.board->channel_names();
  const auto& chans = s.board->channels();
  const auto& sites = s.board->sites();
  const std::string title = "mcdist-feed " + s.cfg->interface.to_string();
  std::uint64_t queued = 0, running = 0, sent = 0, bytes = 0;
  for (const std::size_t i : shown(s)) {
    queued += queued_of(daemon_channel(s, i));
    running += running_of(daemon_channel(s, i)) ? 1 : 0;
    sent += chans[i].products_sent;
    bytes += chans[i].bytes_sent;
  }
  std::size_t lagging = 0;
  for (const auto& [n, t] : sites) lagging += lag_of(s, t).missing ? 1 : 0;

  std::string h;
  h.reserve(64 * 1024);
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
       "<meta http-equiv=\"refresh\" content=\"10\">\n<title>" +
       html_escape(title) + "</title>\n<style>" + std::string(http::page_style()) +
       "</style></head>\n<body>\n";
  h += "<h1>mcdist-feed <span id=\"hub-interface\">" + html_escape(s.cfg->interface.to_string()) +
       "</span></h1>\n";
  h += "<p class=\"sub\">hub &middot; version " + html_escape(s.version) + " &middot; up " +
       http::format_age(age_seconds(s.now, s.started)) + " &middot; " + iso_time(s.now) +
       " &middot; " + format_rate(static_cast<double>(s.cfg->rate_bps)) +
       " in total &middot; reloads every 10 s &middot; <a href=\"/metrics\">metrics</a> &middot; "
       "<a href=\"/status\">status JSON</a></p>\n";
  h += "<div class=\"cards\">\n";
  h += http::card("channels-count", std::to_string(shown(s).size()), "channels");
  h += http::card("sessions-running", std::to_string(running), "sessions running");
  h += http::card("products-queued", std::to_string(queued), "products queued");
  h += http::card("products-sent", std::to_string(sent), "products sent");
  h += http::card("bytes-sent", format_bytes(static_cast<double>(bytes)), "sent");
  h += http::card("sites-count", std::to_string(sites.size()), "sites");
  h += http::card("sites-lagging", std::to_string(lagging), "sites lagging");
  h += "</div>\n";

  h += "<h2>Channels</h2>\n<table id=\"channels\"><thead><tr><th>channel</th><th>group</th>"
       "<th class=\"num\">priority</th><th class=\"num\">queued</th><th>running session</th>"
       "<th class=\"num\">sent</th><th class=\"num\">bytes</th><th class=\"num\">sessions</th>"
       "<th>last product</th></tr></thead><tbody>\n";
  for (const std::size_t i : shown(s)) {
    const auto& cfg = s.cfg->channels[i];
    const auto& b = chans[i];
    const auto& dc = daemon_channel(s, i);
    const std::string n = std::to_string(i);
    std::string run = "<span class=\"none\">idle</span>";
    if (const auto* r = running_of(dc)) {
      const auto kind = r->value("kind", std::string());
      const auto seq = r->value("seq", std::uint64_t{0});
      run = html_escape(kind) + (seq ? " " + std::to_string(seq) : std::string()) + ": " +
            std::to_string(r->value("products", std::uint64_t{0})) + " products at " +
            format_rate(static_cast<double>(r->value("rate_bps", std::uint64_t{0})));
    }
    std::uint64_t sessions = 0;
    for (auto k : b.sessions) sessions += k;
    h += "<tr data-channel=\"" + html_escape(cfg.name) + "\"><td>" + html_escape(cfg.name) +
         "</td><td>" + html_escape(cfg.group.to_string()) + "</td><td class=\"num\">" +
         std::to_string(cfg.priority) + "</td><td class=\"num\" id=\"channel-" + n + "-queued\">" +
         std::to_string(queued_of(dc)) + "</td><td id=\"channel-" + n + "-running\">" + run +
         "</td><td class=\"num\" id=\"channel-" + n + "-sent\">" + std::to_string(b.products_sent) +
         "</td><td class=\"num\">" + format_bytes(static_cast<double>(b.bytes_sent)) +
         "</td><td class=\"num\">" + std::to_string(sessions) + "</td><td>" +
         (b.last_sent ? http::format_age(age_seconds(s.now, *b.last_sent)) + " ago"
                      : std::string("<span class=\"none\">none yet</span>")) +
         "</td></tr>\n";
  }
  h += "</tbody></table>\n";

  if (const auto c = s.daemon.find("cluster"); c != s.daemon.end() && c->is_object()) {
    h += "<h2>Cluster</h2>\n<p class=\"sub\" id=\"cluster-self\">this hub: " +
         html_escape(c->value("hub", std::string())) + " &middot; database " +
         html_escape(c->value("database", std::string())) + "</p>\n";
    h += "<table id=\"cluster-channels\"><thead><tr><th>channel</th><th>role</th><th>holder</th>"
         "<th class=\"num\">lease age</th><th class=\"num\">epoch</th><th>why standby</th>"
         "</tr></thead><tbody>\n";
    for (const std::size_t i : shown(s)) {
      const auto& dc = daemon_channel(s, i);
      const auto lease = dc.value("lease", nlohmann::json::object());
      const auto role = dc.value("role", std::string());
      h += "<tr data-channel=\"" + html_escape(names[i]) + "\"><td>" + html_escape(names[i]) +
           "</td><td class=\"role-" + html_escape(role) + "\">" + html_escape(role) + "</td><td>" +
           html_escape(lease.value("holder", std::string())) + "</td><td class=\"num\">" +
           (role == "active" ? http::format_age(lease.value("age_s", 0.0)) : std::string("-")) +
           "</td><td class=\"num\">" + std::to_string(lease.value("epoch", std::uint64_t{0})) +
           "</td><td>" + html_escape(dc.value("lost_reason", std::string())) + "</td></tr>\n";
    }
    h += "</tbody></table>\n<table id=\"cluster-hubs\"><thead><tr><th>hub</th>"
         "<th class=\"num\">last seen</th><th>active channels</th><th>status port</th></tr>"
         "</thead><tbody>\n";
    for (const auto& hub : c->value("hubs", nlohmann::json::array())) {
      std::string act;
      for (const auto& a : hub.value("active", nlohmann::json::array())) {
        act += (act.empty() ? "" : ", ") + html_escape(a.is_string() ? a.get<std::string>() : "");
      }
      h += "<tr><td>" + html_escape(hub.value("hub", std::string())) + "</td><td class=\"num\">" +
           http::format_age(hub.value("age_s", 0.0)) + " ago</td><td>" +
           (act.empty() ? std::string("<span class=\"none\">none</span>") : act) + "</td><td>" +
           html_escape(hub.value("http", std::string())) + "</td></tr>\n";
    }
    h += "</tbody></table>\n";
  }

  h += "<h2>Sites</h2>\n";
  if (sites.empty()) {
    h += "<p class=\"none\" id=\"sites\">No site has taken part in a session yet.</p>\n";
  } else {
    h += "<table id=\"sites\"><thead><tr><th>site</th><th>state</th><th>path</th><th>channel</th>"
         "<th>last seen</th><th class=\"num\">RTT</th><th class=\"num\">NAK ratio</th>"
         "<th>lag</th><th>fallback</th></tr></thead><tbody>\n";
    std::size_t i = 0;
    for (const auto& [name, t] : sites) {
      const std::string n = std::to_string(i++);
      const auto fb = fallbacks_text(t);
      h += "<tr data-site=\"" + html_escape(name) + "\"><td class=\"site-name\">" +
           html_escape(name) + "</td><td id=\"site-" + n + "-state\" class=\"" +
           state_class(t.state) + "\">" + html_escape(t.state) + "</td><td id=\"site-" + n +
           "-path\">" + (t.path ? html_escape(to_string(*t.path)) : std::string("&ndash;")) +
           "</td><td>" + html_escape(t.channel) + "</td><td>" +
           (t.last_seen ? http::format_age(age_seconds(s.now, *t.last_seen)) + " ago"
                        : std::string("<span class=\"none\">never</span>")) +
           "</td><td class=\"num\">" + (t.rtt_s ? rtt_text(*t.rtt_s) : std::string("&ndash;")) +
           "</td><td class=\"num\">" + ratio_text(t.nak_ratio) + "</td><td id=\"site-" + n +
           "-lag\">" + lag_text(lag_of(s, t)) + "</td><td>" +
           (fb.empty() ? std::string("<span class=\"none\">none</span>") : fb) + "</td></tr>\n";
    }
    h += "</tbody></table>\n";
  }

  h += "<h2>Last products</h2>\n";
  for (const std::size_t i : shown(s)) {
    const auto& b = chans[i];
    const std::string n = std::to_string(i);
    h += "<h3>" + html_escape(names[i]) + "</h3>\n";
    if (b.recent.empty()) {
      h += "<p class=\"none\">No product sent yet.</p>\n";
      continue;
    }
    h += "<table class=\"products\" id=\"channel-" + n +
         "-products\"><thead><tr><th>time (UTC)</th><th>age</th><th>file</th>"
         "<th class=\"num\">size</th><th class=\"num\">seq</th><th>session</th>"
         "<th>sites</th></tr></thead><tbody>\n";
    for (auto it = b.recent.rbegin(); it != b.recent.rend(); ++it) {
      const bool all = it->sites_ok == it->sites;
      h += "<tr><td>" + http::utc_clock(it->at) + "</td><td>" +
           http::format_age(age_seconds(s.now, it->at)) + "</td><td class=\"path product\">" +
           html_escape(it->name) + "</td><td class=\"num\">" +
           format_bytes(static_cast<double>(it->size)) + "</td><td class=\"num\">" +
           std::to_string(it->seq) + "</td><td>" + html_escape(it->session) + "</td><td class=\"" +
           (all ? "ok" : "bad") + "\">" + std::to_string(it->sites_ok) + " of " +
           std::to_string(it->sites) + "</td></tr>\n";
    }
    h += "</tbody></table>\n";
  }

  std::vector<std::uint64_t> minutes(feed_board::minutes_kept, 0);
  for (const std::size_t i : shown(s)) {
    const auto m = s.board->bytes_per_minute(i, s.now);
    for (std::size_t k = 0; k < m.size(); ++k) minutes[k] += m[k];
  }
  h += http::throughput_figure(minutes, s.now, "bytes multicast per minute over the last hour",
                               "Data multicast per minute by every channel (repairs included; a "
                               "session counts in the minute it ended), as a mean rate");

  h += http::recent_log_html(s.log.recent);
  h += "</body></html>\n";
  return h;
}

}  // namespace mcdist::feed
