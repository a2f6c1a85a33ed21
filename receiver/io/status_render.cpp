#include "receiver/io/status_render.hpp"

#include "common/error.hpp"
#include "common/http/html.hpp"
#include "common/http/prometheus_text.hpp"
#include "common/http/throughput.hpp"
#include "common/units.hpp"

#include <algorithm>
#include <ctime>
#include <map>

namespace mcdist::receiver {

namespace {

using http::html_escape;
using http::iso_time;
using http::metric_type;

double unix_seconds(wall_time t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

double age_seconds(wall_time now, wall_time then) {
  return std::max(0.0, std::chrono::duration<double>(now - then).count());
}

const std::string& channel_name(const status_snapshot& s, std::size_t i) {
  return (*s.channels)[i].name;
}

/// The channel indexes the documents show: every one but those a reload removed.
std::vector<std::size_t> shown_channels(const status_snapshot& s) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < s.board->channels().size(); ++i) {
    if (!s.retired || i >= s.retired->size() || !(*s.retired)[i]) out.push_back(i);
  }
  return out;
}

}  // namespace

std::string render_metrics(const status_snapshot& s) {
  const auto& st = *s.stats;
  const auto& chans = s.board->channels();
  http::prometheus_text p;
  p.family("mcdist_receiver_info", metric_type::gauge, "Receiver identity; the value is always 1.");
  p.sample({{"id", s.id}}, std::uint64_t{1});
  p.family("mcdist_receiver_start_time_seconds", metric_type::gauge,
           "When the daemon started, seconds since the Unix epoch.");
  p.sample(unix_seconds(s.started));
  p.family("mcdist_receiver_sessions_active", metric_type::gauge, "Sessions being received now.");
  p.sample(std::uint64_t{s.sessions_active});
  p.family("mcdist_receiver_sessions_completed_total", metric_type::counter,
           "Sessions this receiver completed.");
  p.sample(st.sessions_completed);
  p.family("mcdist_receiver_sessions_failed_total", metric_type::counter,
           "Sessions given up before this receiver completed them.");
  p.sample(st.sessions_failed);
  p.family("mcdist_receiver_files_stored_total", metric_type::counter,
           "Files verified (SHA-256) and renamed into the channel's destination.");
  for (const std::size_t i : shown_channels(s))
    p.sample({{"channel", channel_name(s, i)}}, chans[i].files_stored);
  p.family("mcdist_receiver_files_failed_total", metric_type::counter,
           "Files that could not be stored (verification retries exhausted, disk full, ...).");
  for (const std::size_t i : shown_channels(s))
    p.sample({{"channel", channel_name(s, i)}}, chans[i].files_failed);
  p.family("mcdist_receiver_files_refused_total", metric_type::counter,
           "Manifest entries refused (unsafe or conflicting paths, too large).");
  p.sample(st.files_refused);
  p.family("mcdist_receiver_stored_bytes_total", metric_type::counter,
           "Bytes of the files stored.");
  for (const std::size_t i : shown_channels(s))
    p.sample({{"channel", channel_name(s, i)}}, chans[i].bytes_stored);
  p.family("mcdist_receiver_last_product_timestamp_seconds", metric_type::gauge,
           "When the channel's latest file was stored, seconds since the Unix epoch.");
  for (const std::size_t i : shown_channels(s)) {
    if (chans[i].last_stored)
      p.sample({{"channel", channel_name(s, i)}}, unix_seconds(*chans[i].last_stored));
  }
  p.family("mcdist_receiver_bytes_received_total", metric_type::counter,
           "File data bytes taken from the network (new blocks over multicast, and unicast).");
  p.sample(st.data_bytes);
  p.family("mcdist_receiver_datagrams_received_total", metric_type::counter,
           "Datagrams handed to the protocol engine.");
  p.sample(st.datagrams);
  p.family("mcdist_receiver_datagrams_dropped_total", metric_type::counter,
           "Datagrams dropped, by reason (malformed, unknown session, duplicate, ...).");
  for (std::size_t i = 1; i < st.drops.counts.size(); ++i) {
    p.sample({{"reason", to_string(static_cast<errc>(i))}}, st.drops.counts[i]);
  }
  p.sample({{"reason", "test_drop_rate"}}, s.dropped_by_option);
  p.family("mcdist_receiver_datagrams_unauthenticated_total", metric_type::counter,
           "Datagrams refused by authentication (signed sessions, docs/security.md), by reason.");
  const auto& a = s.not_authenticated;
  p.sample({{"reason", "bad_signature"}}, a.bad_signature);
  p.sample({{"reason", "bad_tag"}}, a.bad_tag);
  p.sample({{"reason", "no_key"}}, a.no_key);
  p.sample({{"reason", "unsigned"}}, a.unauthenticated);
  p.sample({{"reason", "verify_budget"}}, a.verify_budget);
  p.sample({{"reason", "bad_path"}}, a.bad_path);
  p.sample({{"reason", "bad_digest"}}, a.bad_digest);
  p.sample({{"reason", "no_digest"}}, a.no_digest);
  p.family("mcdist_receiver_naks_sent_total", metric_type::counter, "NAK datagrams sent.");
  p.sample(st.naks_sent);
  p.family("mcdist_receiver_overrun_lost_total", metric_type::counter,
           "Datagrams of receiving sessions this host's full socket buffer dropped "
           "(SO_RXQ_OVFL; docs/design-notes.md \"Receiver overrun\").");
  p.sample(st.overrun_lost);
  p.family("mcdist_receiver_files_incomplete_total", metric_type::counter,
           "Files silent sessions ended without (docs/design-notes.md \"Silent sessions\").");
  p.sample(st.files_incomplete);
  p.family("mcdist_receiver_storage_written_bytes_total", metric_type::counter,
           "Bytes written into temp files.");
  p.sample(s.bytes_written);
  p.family("mcdist_receiver_commit_batches_total", metric_type::counter,
           "Group commits (batches of files made durable before their renames), by how: one "
           "syncfs, or each file's own sync (range, fdatasync, uring; docs/design-notes.md "
           "\"Durability\").");
  p.sample({{"method", "syncfs"}}, s.commit_batches_syncfs);
  // Read apart from each other, so the second may be ahead by a batch.
  p.sample({{"method", "per_file"}}, s.commit_batches > s.commit_batches_syncfs
                                         ? s.commit_batches - s.commit_batches_syncfs
                                         : 0);
  p.family("mcdist_receiver_parity_blocks_total", metric_type::counter,
           "Parity blocks taken for decoding, by outcome: kept, or refused (parity_memory full; "
           "the FEC block's blocks are then NAKed one by one).");
  p.sample({{"outcome", "kept"}}, s.parity.kept);
  p.sample({{"outcome", "refused"}}, s.parity.refused);
  p.family("mcdist_receiver_parity_bytes", metric_type::gauge,
           "Bytes of parity blocks held in memory, awaiting a decode.");
  p.sample(s.parity.bytes);
  p.family("mcdist_receiver_fec_blocks_recovered_total", metric_type::counter,
           "FEC blocks decoded from parity.");
  p.sample(s.parity.fec_blocks_recovered);
  p.family("mcdist_receiver_blocks_recovered_total", metric_type::counter,
           "Source blocks recovered from parity and written.");
  p.sample(s.parity.blocks_recovered);
  p.family("mcdist_receiver_fec_decode_failures_total", metric_type::counter,
           "FEC block decodes that failed (their blocks are then NAKed one by one).");
  p.sample(s.parity.decode_failures);
  p.family("mcdist_receiver_read_pauses_total", metric_type::counter,
           "Times reading paused because the storage pool was full.");
  p.sample(s.read_pauses);
  p.family("mcdist_receiver_unicast_transfers_active", metric_type::gauge,
           "Unicast fallback transfers running.");
  p.sample(std::uint64_t{s.unicast_active});
  log_messages_metric(p, "mcdist_receiver_log_messages_total", s.log);
  if (!s.sequences.empty()) {
    // Per channel name as announced; a channel numbered by two senders sums their gaps.
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_channel;  // missing, last
    for (const auto& q : s.sequences) {
      auto& [missing, last] = by_channel[q.channel];
      missing += q.missing;
      last = std::max(last, q.last_seen);
    }
    p.family("mcdist_receiver_channel_missing_sessions", metric_type::gauge,
             "Sessions of the channel below the newest seen that this site never completed "
             "(reported to the sender for catch-up).");
    for (const auto& [channel, v] : by_channel) p.sample({{"channel", channel}}, v.first);
    p.family("mcdist_receiver_channel_last_seq", metric_type::gauge,
             "Newest session number seen on the channel.");
    for (const auto& [channel, v] : by_channel) p.sample({{"channel", channel}}, v.second);
  }
  if (!s.wis2.empty()) {
    p.family("mcdist_receiver_wis2_notifications_total", metric_type::counter,
             "WIS2 notifications by outcome: published (acknowledged by the broker), failed "
             "(refused by the MQTT library), dropped (queue full while the broker was away).");
    for (const auto& w : s.wis2) {
      p.sample({{"channel", w.channel}, {"topic", w.topic}, {"outcome", "published"}},
               w.stats.published);
      p.sample({{"channel", w.channel}, {"topic", w.topic}, {"outcome", "failed"}}, w.stats.failed);
      p.sample({{"channel", w.channel}, {"topic", w.topic}, {"outcome", "dropped"}},
               w.stats.dropped);
    }
    p.family("mcdist_receiver_wis2_queued", metric_type::gauge,
             "WIS2 notifications waiting for the broker or its acknowledgement.");
    for (const auto& w : s.wis2) {
      p.sample({{"channel", w.channel}, {"topic", w.topic}}, w.stats.queued);
    }
    p.family("mcdist_receiver_wis2_broker_connected", metric_type::gauge,
             "1 while the WIS2 action is connected to its MQTT broker.");
    for (const auto& w : s.wis2) {
      p.sample({{"channel", w.channel}, {"topic", w.topic}},
               std::uint64_t{w.stats.connected ? 1u : 0u});
    }
  }
  if (!s.actions.empty()) {
    p.family("mcdist_receiver_actions_total", metric_type::counter,
             "Action attempts on delivered products by result: done (succeeded), retry (failed, "
             "another attempt follows), failed (failed for good).");
    for (const auto& [name, as] : s.actions) {
      p.sample({{"action", name}, {"result", "done"}}, as.done);
      p.sample({{"action", name}, {"result", "retry"}}, as.retried);
      p.sample({{"action", name}, {"result", "failed"}}, as.failed);
    }
    p.family("mcdist_receiver_actions_running", metric_type::gauge, "Action attempts running now.");
    for (const auto& [name, as] : s.actions) p.sample({{"action", name}}, as.running);
    p.family("mcdist_receiver_actions_queued", metric_type::gauge,
             "Action runs waiting for a concurrency slot.");
    for (const auto& [name, as] : s.actions) p.sample({{"action", name}}, as.queued);
  }
  if (!s.relays.empty()) {
    p.family("mcdist_relay_datagrams_forwarded_total", metric_type::counter,
             "Datagrams relayed byte for byte into the channel's relay_group (heartbeats "
             "included).");
    for (const auto& [channel, r] : s.relays) p.sample({{"channel", channel}}, r.forwarded);
    p.family("mcdist_relay_forwarded_bytes_total", metric_type::counter,
             "Bytes of the datagrams relayed.");
    for (const auto& [channel, r] : s.relays) p.sample({{"channel", channel}}, r.forwarded_bytes);
    p.family("mcdist_relay_sessions_total", metric_type::counter,
             "Sessions relayed: one-way sessions passed on, two-way sessions run for the sites "
             "behind the relay, and two-way sessions not relayed.");
    for (const auto& [channel, r] : s.relays) {
      p.sample({{"channel", channel}, {"outcome", "relayed"}}, r.sessions);
      p.sample({{"channel", channel}, {"outcome", "two_way"}}, r.two_way_sessions);
      p.sample({{"channel", channel}, {"outcome", "not_relayed"}}, r.not_relayed_sessions);
    }
    p.family("mcdist_relay_two_way_datagrams_total", metric_type::counter,
             "Datagrams the two-way sessions run for the sites behind the relay sent, by kind.");
    for (const auto& [channel, r] : s.relays) {
      p.sample({{"channel", channel}, {"kind", "data"}}, r.two_way.data);
      p.sample({{"channel", channel}, {"kind", "parity"}}, r.two_way.parity);
      p.sample({{"channel", channel}, {"kind", "control"}}, r.two_way.control);
    }
    p.family("mcdist_relay_two_way_sites_total", metric_type::counter,
             "Sites of finished two-way sessions run by the relay, by outcome.");
    for (const auto& [channel, r] : s.relays) {
      p.sample({{"channel", channel}, {"outcome", "completed"}}, r.two_way_sites_completed);
      p.sample({{"channel", channel}, {"outcome", "failed"}}, r.two_way_sites_failed);
    }
    p.family("mcdist_relay_gap_reports_total", metric_type::counter,
             "Gap reports the sites behind the relay sent it (catch-up through the relay), by "
             "outcome, and the relay's own reports upstream that carried theirs.");
    for (const auto& [channel, r] : s.relays) {
      p.sample({{"channel", channel}, {"outcome", "taken"}}, r.gap_reports_taken);
      p.sample({{"channel", channel}, {"outcome", "refused"}}, r.gap_reports_refused);
      p.sample({{"channel", channel}, {"outcome", "sent_upstream"}}, r.subtree_reports_sent);
    }
    p.family("mcdist_relay_catch_ups_total", metric_type::counter,
             "Catch-up sessions of the hub, named to the relay, run for the sites behind it.");
    for (const auto& [channel, r] : s.relays) p.sample({{"channel", channel}}, r.catch_ups);
    p.family("mcdist_relay_delegation_requests_total", metric_type::counter,
             "Delegation requests of relays behind this one for the hub (signed sessions), by "
             "outcome: passed upstream, the hub's answers passed back, dropped.");
    for (const auto& [channel, r] : s.relays) {
      p.sample({{"channel", channel}, {"outcome", "passed"}}, r.origin_requests);
      p.sample({{"channel", channel}, {"outcome", "answered"}}, r.origin_replies);
      p.sample({{"channel", channel}, {"outcome", "dropped"}}, r.origin_dropped);
    }
    p.family("mcdist_relay_send_failed_total", metric_type::counter,
             "Datagrams the relay socket did not send (its buffer full, or an error).");
    for (const auto& [channel, r] : s.relays) p.sample({{"channel", channel}}, r.send_failed);
    p.family("mcdist_relay_site_datagrams_total", metric_type::counter,
             "Datagrams sent to the relay socket for no session it runs (dropped).");
    for (const auto& [channel, r] : s.relays) p.sample({{"channel", channel}}, r.site_datagrams);
  }
  p.family("mcdist_receiver_retention_deleted_total", metric_type::counter,
           "Delivered products deleted by [retention] max_age.");
  p.sample(s.retention_deleted);
  p.family("mcdist_receiver_retention_skipped_total", metric_type::counter,
           "Expired products left in place: changed (size or mtime) or gone since delivery.");
  p.sample(s.retention_skipped);
  p.family("mcdist_receiver_config_reloads_total", metric_type::counter,
           "Configuration reloads at SIGHUP, by result (applied, or refused as invalid).");
  p.sample({{"result", "success"}}, s.reloads_ok);
  p.sample({{"result", "failure"}}, s.reloads_failed);
  return p.text();
}

nlohmann::json render_status_json(const status_snapshot& s) {
  nlohmann::json j = s.status_file;
  j["time"] = iso_time(s.now);
  j["started"] = iso_time(s.started);
  j["uptime_seconds"] = age_seconds(s.now, s.started);
  nlohmann::json chans = nlohmann::json::array();
  const auto& board = s.board->channels();
  for (const std::size_t i : shown_channels(s)) {
    const auto& cfg = (*s.channels)[i];
    const auto& b = board[i];
    nlohmann::json c;
    c["name"] = cfg.name;
    c["group"] = cfg.group.to_string();
    if (cfg.source) c["source"] = cfg.source->address_string();
    c["dest"] = cfg.dest.string();
    c["files_stored"] = b.files_stored;
    c["files_failed"] = b.files_failed;
    c["bytes_stored"] = b.bytes_stored;
    if (b.last_stored) {
      c["last_stored"] = iso_time(*b.last_stored);
      c["last_stored_age_seconds"] = age_seconds(s.now, *b.last_stored);
    }
    nlohmann::json last = nlohmann::json::array();
    for (auto it = b.recent.rbegin(); it != b.recent.rend(); ++it) {
      nlohmann::json p;
      p["path"] = it->path;
      p["size"] = it->size;
      p["session"] = fmt::format("{}", it->session);
      p["time"] = iso_time(it->at);
      p["age_seconds"] = age_seconds(s.now, it->at);
      p["stored"] = it->stored;
      if (!it->stored) p["failure"] = it->failure;
      last.push_back(std::move(p));
    }
    c["last_products"] = std::move(last);  // newest first
    chans.push_back(std::move(c));
  }
  j["channels"] = std::move(chans);
  j["recent_log"] = recent_log_json(s.log.recent);
  j["bytes_per_minute"] = s.board->bytes_per_minute(s.now);
  return j;
}

namespace {

void card(std::string& h, const char* id, const std::string& value, const char* label) {
  h += http::card(id, value, label);
}

}  // namespace

std::string render_status_page(const status_snapshot& s) {
  const auto& st = *s.stats;
  const auto& board = s.board->channels();
  std::uint64_t stored = 0;
  std::uint64_t failed = 0;
  for (const auto& b : board) {
    stored += b.files_stored;
    failed += b.files_failed;
  }
  std::string h;
  h.reserve(64 * 1024);
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
       "<meta http-equiv=\"refresh\" content=\"10\">\n<title>mcdistd " +
       html_escape(s.id) + "</title>\n<style>" + std::string(http::page_style()) +
       "</style></head>\n<body>\n";
  h += "<h1>mcdistd <span id=\"receiver-id\">" + html_escape(s.id) + "</span></h1>\n";
  h += "<p class=\"sub\">up " + http::format_age(age_seconds(s.now, s.started)) + " &middot; " +
       iso_time(s.now) +
       " &middot; reloads every 10 s &middot; <a href=\"/metrics\">metrics</a> &middot; "
       "<a href=\"/status\">status JSON</a></p>\n";
  h += "<div class=\"cards\">\n";
  card(h, "sessions-active", std::to_string(s.sessions_active), "sessions active");
  card(h, "sessions-completed", std::to_string(st.sessions_completed), "sessions completed");
  card(h, "sessions-failed", std::to_string(st.sessions_failed), "sessions failed");
  card(h, "files-stored", std::to_string(stored), "files stored");
  card(h, "files-failed", std::to_string(failed), "files failed");
  card(h, "files-refused", std::to_string(st.files_refused), "files refused");
  card(h, "bytes-received", format_bytes(static_cast<double>(st.data_bytes)), "received");
  card(h, "datagrams-dropped", std::to_string(st.drops.total() + s.dropped_by_option),
       "datagrams dropped");
  card(h, "unicast-active", std::to_string(s.unicast_active), "unicast transfers");
  h += "</div>\n";

  h += "<h2>Channels</h2>\n<table id=\"channels\"><thead><tr><th>channel</th><th>group</th>"
       "<th>destination</th><th class=\"num\">stored</th><th class=\"num\">failed</th>"
       "<th class=\"num\">bytes</th><th>last product</th></tr></thead><tbody>\n";
  for (const std::size_t i : shown_channels(s)) {
    const auto& cfg = (*s.channels)[i];
    const auto& b = board[i];
    const std::string n = std::to_string(i);
    h += "<tr data-channel=\"" + html_escape(cfg.name) + "\"><td>" + html_escape(cfg.name) +
         "</td><td>" + html_escape(cfg.group.to_string()) + "</td><td class=\"path\">" +
         html_escape(cfg.dest.string()) + "</td><td class=\"num\" id=\"channel-" + n +
         "-stored\">" + std::to_string(b.files_stored) + "</td><td class=\"num" +
         (b.files_failed ? " bad" : "") + "\" id=\"channel-" + n + "-failed\">" +
         std::to_string(b.files_failed) + "</td><td class=\"num\">" +
         format_bytes(static_cast<double>(b.bytes_stored)) + "</td><td>" +
         (b.last_stored ? http::format_age(age_seconds(s.now, *b.last_stored)) + " ago"
                        : std::string("<span class=\"none\">none yet</span>")) +
         "</td></tr>\n";
  }
  h += "</tbody></table>\n";

  if (!s.sequences.empty()) {
    h += "<h2>Session numbers</h2>\n<table id=\"sequences\"><thead><tr><th>channel</th>"
         "<th>sender</th><th class=\"num\">last seen</th><th class=\"num\">last completed</th>"
         "<th class=\"num\">missing</th></tr></thead><tbody>\n";
    for (const auto& q : s.sequences) {
      h += "<tr data-channel=\"" + html_escape(q.channel) + "\"><td>" + html_escape(q.channel) +
           "</td><td class=\"path\">" + html_escape(q.source) + "</td><td class=\"num\">" +
           std::to_string(q.last_seen) + "</td><td class=\"num\">" +
           std::to_string(q.last_completed) + "</td><td class=\"num" + (q.missing ? " bad" : "") +
           "\">" + std::to_string(q.missing) + "</td></tr>\n";
    }
    h += "</tbody></table>\n";
  }

  if (!s.relays.empty()) {
    h += "<h2>Relays</h2>\n<table id=\"relays\"><thead><tr><th>channel</th>"
         "<th class=\"num\">datagrams relayed</th><th class=\"num\">bytes</th>"
         "<th class=\"num\">sessions</th><th class=\"num\">not relayed</th>"
         "<th class=\"num\">not sent</th><th class=\"num\">from sites</th></tr></thead>"
         "<tbody>\n";
    for (const auto& [channel, r] : s.relays) {
      const auto num = [](std::uint64_t v, bool bad) {
        return std::string("<td class=\"num") + (bad && v > 0 ? " bad" : "") + "\">" +
               std::to_string(v) + "</td>";
      };
      h += "<tr><td>" + html_escape(channel) + "</td>" + num(r.forwarded, false) +
           "<td class=\"num\">" + format_bytes(static_cast<double>(r.forwarded_bytes)) + "</td>" +
           num(r.sessions, false) + num(r.not_relayed_sessions, true) + num(r.send_failed, true) +
           num(r.site_datagrams, true) + "</tr>\n";
    }
    h += "</tbody></table>\n";
  }

  h += "<h2>Last products</h2>\n";
  for (const std::size_t i : shown_channels(s)) {
    const auto& b = board[i];
    const std::string n = std::to_string(i);
    h += "<h3>" + html_escape((*s.channels)[i].name) + "</h3>\n";
    if (b.recent.empty()) {
      h += "<p class=\"none\">No product yet.</p>\n";
      continue;
    }
    h += "<table class=\"products\" id=\"channel-" + n +
         "-products\"><thead><tr><th>time (UTC)</th><th>age</th><th>file</th>"
         "<th class=\"num\">size</th><th>session</th><th>state</th></tr></thead><tbody>\n";
    for (auto it = b.recent.rbegin(); it != b.recent.rend(); ++it) {
      h += "<tr><td>" + http::utc_clock(it->at) + "</td><td>" +
           http::format_age(age_seconds(s.now, it->at)) + "</td><td class=\"path product\">" +
           html_escape(it->path) + "</td><td class=\"num\">" +
           format_bytes(static_cast<double>(it->size)) + "</td><td>" +
           fmt::format("{}", it->session) + "</td><td>" +
           (it->stored ? std::string("<span class=\"ok\">stored</span>")
                       : "<span class=\"bad\">failed</span>: " + html_escape(it->failure)) +
           "</td></tr>\n";
    }
    h += "</tbody></table>\n";
  }

  const auto minutes = s.board->bytes_per_minute(s.now);
  h += http::throughput_figure(minutes, s.now, "bytes received per minute over the last hour",
                               "File data received per minute (multicast and unicast), as a mean "
                               "rate");

  h += http::recent_log_html(s.log.recent);
  h += "</body></html>\n";
  return h;
}

}  // namespace mcdist::receiver
