#include "tools/mcdistctl/render.hpp"

#include "tools/mcdistctl/table.hpp"

#include <cstdio>

namespace mcdist::ctl {
namespace {

using json = nlohmann::json;

/// A scalar as text: strings as they are, numbers and booleans as JSON writes them, null and
/// absent as "".
std::string text(const json& o, const char* key) {
  if (!o.is_object()) return {};
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  return it->dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string size_text(const json& o, const char* key) {
  const auto it = o.find(key);
  if (it == o.end() || !it->is_number_unsigned()) return text(o, key);
  return format_size(it->get<std::uint64_t>());
}

std::string fixed(const json& o, const char* key, const char* fmt, double scale) {
  const auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return {};
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, it->get<double>() * scale);
  return buf;
}

const json& array(const json& o, const char* key) {
  static const json empty = json::array();
  const auto it = o.find(key);
  return it != o.end() && it->is_array() ? *it : empty;
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string short_time(const json& iso) {
  if (!iso.is_string()) return {};
  auto s = iso.get<std::string>();
  if (s.size() >= 19 && s[10] == 'T') {
    s[10] = ' ';
    s.resize(19);
  }
  return s;
}

std::string render_status(const json& a) {
  std::string out;
  const bool daemon = a.value("daemon", false);
  out += daemon ? "mcdist-feed: running\n" : "mcdist-feed: not running (from the journal)\n";
  for (const auto& [k, v] : a.items()) {
    if (k == "ok" || k == "daemon" || k == "source" || !v.is_primitive()) continue;
    out += k + ": " + sanitize_cell(text(a, k.c_str())) + "\n";
  }

  table ch{{{"CHANNEL"},
            {"LAST SEQ", align::right},
            {"QUEUED", align::right},
            {"SENDING", align::right},
            {"SENT", align::right},
            {"FAILED", align::right},
            {"LAST SESSION (UTC)"}},
           {}};
  for (const auto& c : array(a, "channels"))
    ch.rows.push_back({text(c, "channel"), text(c, "last_seq"), text(c, "queued"),
                       text(c, "sending"), text(c, "sent"), text(c, "failed"),
                       short_time(c.value("last_session", json()))});
  out += "\n" + format_table(ch);

  table si{{{"SITE"},
            {"CHANNEL"},
            {"LAST SEEN (UTC)"},
            {"RTT ms", align::right},
            {"NAK %", align::right},
            {"LAST SEQ", align::right}},
           {}};
  for (const auto& s : array(a, "sites"))
    si.rows.push_back({text(s, "site"), text(s, "channel"),
                       short_time(s.value("last_seen", json())), fixed(s, "rtt_s", "%.1f", 1e3),
                       fixed(s, "nak_ratio", "%.2f", 100), text(s, "last_seq")});
  out += "\n" + format_table(si);

  // A cluster (PostgreSQL journal): every hub and who sends each channel, as the shared journal
  // has them (the same from any hub), and what the asked hub itself does.
  if (a.contains("cluster") && a["cluster"].is_object()) {
    const auto& c = a["cluster"];
    table hu{{{"HUB"}, {"SEEN s AGO", align::right}, {"ACTIVE CHANNELS"}, {"STATUS PORT"}}, {}};
    for (const auto& h : array(c, "hubs")) {
      std::string act;
      for (const auto& x : array(h, "active")) {
        act += (act.empty() ? "" : ",") + (x.is_string() ? x.get<std::string>() : std::string());
      }
      hu.rows.push_back(
          {text(h, "hub"), fixed(h, "age_s", "%.1f", 1), act.empty() ? "-" : act, text(h, "http")});
    }
    out += "\n" + format_table(hu);
    table le{{{"CHANNEL"},
              {"HOLDER"},
              {"EPOCH", align::right},
              {"ACQUIRED (UTC)"},
              {"EXPIRES IN s", align::right}},
             {}};
    for (const auto& l : array(c, "leases"))
      le.rows.push_back({text(l, "channel"), text(l, "holder"), text(l, "epoch"),
                         short_time(l.value("acquired", json())),
                         fixed(l, "expires_in_s", "%.1f", 1)});
    out += "\n" + format_table(le);
  }
  if (a.contains("feed") && a["feed"].is_object() && a["feed"].contains("cluster")) {
    const auto& f = a["feed"];
    const auto& c = f["cluster"];
    out += "\nthis hub: " + text(c, "hub") + ", database " + text(c, "database");
    const auto err = text(c, "error");
    if (!err.empty()) out += " (" + sanitize_cell(err) + ")";
    out += "\n";
    table ro{{{"CHANNEL"},
              {"ROLE"},
              {"LEASE AGE s", align::right},
              {"EPOCH", align::right},
              {"WHY STANDBY"}},
             {}};
    for (const auto& row : array(f, "channels")) {
      const auto lease = row.value("lease", json::object());
      ro.rows.push_back({text(row, "name"), text(row, "role"), fixed(lease, "age_s", "%.1f", 1),
                         text(lease, "epoch"), sanitize_cell(text(row, "lost_reason"))});
    }
    out += format_table(ro);
  }

  if (!array(a, "sessions").empty()) {
    table se{{{"STARTED (UTC)"},
              {"CHANNEL"},
              {"SEQ", align::right},
              {"KIND"},
              {"SESSION"},
              {"PRODUCTS", align::right},
              {"OUTCOME"}},
             {}};
    for (const auto& s : array(a, "sessions"))
      se.rows.push_back({short_time(s.value("started", json())), text(s, "channel"), text(s, "seq"),
                         text(s, "kind"), text(s, "session"), text(s, "products"),
                         s.value("ended", json()).is_null() ? "running" : text(s, "outcome")});
    out += "\n" + format_table(se);
  }
  return out;
}

std::string render_history(const json& a) {
  table t{{{"AT (UTC)"},
           {"CHANNEL"},
           {"SEQ", align::right},
           {"OUTCOME"},
           {"SIZE", align::right},
           {"PRODUCT"},
           {"REASON"}},
          {}};
  const auto& rows = array(a, "rows");
  for (const auto& r : rows)
    t.rows.push_back({short_time(r.value("at", json())), text(r, "channel"), text(r, "seq"),
                      text(r, "outcome"), size_text(r, "size"), text(r, "name"),
                      text(r, "reason")});
  std::string out = format_table(t);
  out += plural(rows.size(), "outcome", "outcomes") + " for " + sanitize_cell(text(a, "site")) +
         " since " + short_time(a.value("since", json())) + " UTC";
  if (a.value("truncated", false)) out += " (truncated: narrow --since or --product)";
  out += "\n";
  return out;
}

std::string render_missing(const json& a) {
  const auto& rows = array(a, "rows");
  const auto who = sanitize_cell(text(a, "site"));
  const auto since = short_time(a.value("since", json()));
  if (rows.empty()) return "nothing missing for " + who + " since " + since + " UTC\n";
  table t{{{"CHANNEL"},
           {"SEQ", align::right},
           {"SENT (UTC)"},
           {"LAST OUTCOME"},
           {"SIZE", align::right},
           {"PRODUCT"},
           {"RESENDABLE"},
           {"REASON"}},
          {}};
  std::size_t resendable = 0;
  for (const auto& r : rows) {
    const bool kept = r.value("retained", false);
    resendable += kept ? 1 : 0;
    const auto last = text(r, "last_outcome");
    t.rows.push_back({text(r, "channel"), text(r, "seq"), short_time(r.value("sent_at", json())),
                      last.empty() ? "none" : last, size_text(r, "size"), text(r, "name"),
                      kept ? "yes" : "no", text(r, "reason")});
  }
  return format_table(t) + plural(rows.size(), "product", "products") + " missing at " + who +
         " since " + since + " UTC, " + std::to_string(resendable) + " resendable\n";
}

std::string render_resend(const json& a) {
  std::string out = "resend to " + sanitize_cell(text(a, "site")) + ": ";
  const auto n = a.value("products", json());
  out += n.is_number() ? plural(n.get<std::size_t>(), "product", "products") : "products";
  if (const auto it = a.find("bytes"); it != a.end() && it->is_number_unsigned())
    out += " (" + format_size(it->get<std::uint64_t>()) + ")";
  out += a.value("unicast", false) ? " over unicast" : " over multicast";
  const auto session = text(a, "session");
  out += session.empty() ? ", queued" : ", session " + sanitize_cell(session);
  out += "\n";
  return out;
}

}  // namespace mcdist::ctl
