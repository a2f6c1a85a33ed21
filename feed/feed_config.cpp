#include "feed/feed_config.hpp"

#include "feed/journal.hpp"

#include <unistd.h>

#include "common/daemon/toml_config.hpp"
#include "common/fec/fec.hpp"
#include "common/fec/fec_layout.hpp"
#include "common/path_check.hpp"
#include "common/units.hpp"
#include "common/wire.hpp"

#include <toml++/toml.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <span>
#include <sstream>

namespace mcdist::feed {

namespace {

/// Limits on what an operator may configure, each far above any sane setting: they bound the
/// daemon's memory and the size of one session (wire's manifest limit is the real ceiling).
constexpr std::size_t max_channels = 256;
constexpr std::size_t max_spools_per_channel = 64;
constexpr std::int64_t max_batch_files = 100'000;
/// Sessions of one channel at once: each holds its products open and has its own socket and
/// state; 16 is far beyond what overtaking a long field needs (2).
constexpr std::int64_t max_concurrent_sessions = 16;
/// Heartbeats more often than this would be traffic for nothing (a site reports gaps within a
/// heartbeat; seconds are the scale of a warning's latency budget).
constexpr std::chrono::seconds min_heartbeat{1};
/// Each [[wis2_input]] is one broker connection with two threads (libmosquitto's, the
/// downloads'); a hub subscribes to a few Global Brokers.
constexpr std::size_t max_wis2_inputs = 16;

using table_reader = mcdist::table_reader<config_error>;

bool valid_channel_name(std::string_view n) {
  // Channel names key the journal and the receivers' sequence state: printable, no spaces.
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

/// The settings of read_broker, known to every WIS2 table.
constexpr const char* broker_keys[] = {"broker",   "ca_file",  "client_cert",   "client_key",
                                       "username", "password", "password_file", "tls_insecure"};

/// The broker settings every WIS2 table has (mqtt_broker.hpp), checked, files included.
mqtt_broker read_broker(const table_reader& r, const std::string& source,
                        const std::string& table) {
  mqtt_broker b;
  const auto broker = r.required_string("broker", "\"mqtts://broker.example.org:8883\"");
  const auto u = parse_mqtt_url(broker);
  if (!u) {
    r.fail("broker",
           "= \"" + broker + "\" is not mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (MQTT over TLS)");
  }
  b.url = *u;
  if (auto v = r.string("ca_file")) b.ca_file = *v;
  if (auto v = r.string("client_cert")) b.client_cert = *v;
  if (auto v = r.string("client_key")) b.client_key = *v;
  if (auto v = r.string("username")) b.username = *v;
  if (auto v = r.string("password")) b.password = *v;
  if (auto v = r.string("password_file")) b.password_file = *v;
  if (auto v = r.boolean("tls_insecure")) b.tls_insecure = *v;
  try {
    check_mqtt_broker(b);
    check_mqtt_broker_files(b);
  } catch (const std::invalid_argument& e) {
    throw config_error(source + ": " + table + ": " + e.what());
  }
  return b;
}

wis2_input_config parse_wis2_input(const toml::table& t, std::size_t index,
                                   const std::string& source) {
  const std::string table = "wis2_input[" + std::to_string(index) + "]";
  const table_reader r(
      t, table + ".", source,
      {"name", "topics", "channel", "client_id", "qos", "download_ca_file", "download_tls_insecure",
       "max_bytes", "download_timeout", "concurrency", "retries", "retry_delay", "max_pending",
       "require_integrity", "product_name", "name_prefix"},
      broker_keys);
  wis2_input_config w;
  w.name = r.required_string("name", "\"global-broker-a\"");
  if (!valid_channel_name(w.name)) {
    r.fail("name", "= \"" + w.name + "\": use 1 to 64 letters, digits, '-', '_' or '.'");
  }
  w.broker = read_broker(r, source, table);
  const auto channel = r.string("channel").value_or("");
  const auto* topics = r.get("topics");
  if (!topics) {
    throw config_error(source + ": '" + r.key("topics") +
                       "' is required: the topic filters to subscribe to (e.g. topics = "
                       "[\"cache/a/wis2/+/data/core/weather/#\"])");
  }
  const auto* arr = topics->as_array();
  if (!arr || arr->empty()) r.fail("topics", "must be a non-empty list");
  if (arr->size() > 64) r.fail("topics", "lists too many filters (at most 64)");
  for (const auto& e : *arr) {
    wis2_subscription sub;
    if (e.is_string()) {
      sub.filter = *e.value<std::string>();
      sub.channel = channel;
    } else if (const auto* et = e.as_table()) {
      const table_reader er(*et, r.key("topics") + "[].", source, {"topic", "channel"});
      sub.filter = er.required_string("topic", "\"cache/a/wis2/+/data/core/weather/#\"");
      sub.channel = er.string("channel").value_or(channel);
    } else {
      r.fail("topics", "must list topic filters or {topic = \"...\", channel = \"...\"} tables");
    }
    if (!valid_topic_filter(sub.filter)) {
      r.fail("topics", "holds \"" + sub.filter +
                           "\", not an MQTT topic filter ('+' and '#' only as whole levels, '#' "
                           "last)");
    }
    if (sub.channel.empty()) {
      r.fail("topics", "entry \"" + sub.filter +
                           "\" feeds no channel: give channel = \"...\" (for every topic) or "
                           "{topic = \"...\", channel = \"...\"}");
    }
    w.topics.push_back(std::move(sub));
  }
  if (auto v = r.string("client_id")) {
    // MQTT 3.1.1 section 3.1.3.1: servers must take 1-23 bytes of [0-9a-zA-Z]; most take more.
    if (v->empty() || v->size() > 128 || !valid_utf8(*v)) {
      r.fail("client_id", "must be 1 to 128 bytes of UTF-8");
    }
    w.client_id = *v;
  }
  if (auto v = r.integer("qos", 0, 2)) w.qos = static_cast<int>(*v);
  if (auto v = r.string("download_ca_file")) {
    w.download_ca_file = *v;
    if (::access(w.download_ca_file.c_str(), R_OK) != 0) {
      r.fail("download_ca_file", "= \"" + *v + "\" cannot be read: " + std::strerror(errno));
    }
  }
  if (auto v = r.boolean("download_tls_insecure")) w.download_tls_insecure = *v;
  if (auto v = r.size("max_bytes")) w.max_bytes = *v;
  if (auto v = r.duration("download_timeout")) {
    if (*v < std::chrono::seconds(1)) r.fail("download_timeout", "must be at least 1s");
    w.download_timeout = *v;
  }
  if (auto v = r.integer("concurrency", 1, 256)) w.concurrency = static_cast<std::uint32_t>(*v);
  if (auto v = r.integer("retries", 0, 100)) w.retries = static_cast<std::uint32_t>(*v);
  if (auto v = r.duration("retry_delay")) w.retry_delay = *v;
  if (auto v = r.integer("max_pending", 1, 1'000'000)) w.max_pending = static_cast<std::size_t>(*v);
  if (auto v = r.boolean("require_integrity")) w.require_integrity = *v;
  if (auto v = r.string("product_name")) {
    if (*v == "data_id") {
      w.product_name = wis2_name_source::data_id;
    } else if (*v == "url") {
      w.product_name = wis2_name_source::url;
    } else {
      r.fail("product_name", "= \"" + *v + "\" must be \"data_id\" or \"url\"");
    }
  }
  if (auto v = r.string("name_prefix")) {
    std::string p = *v;
    if (!p.empty() && p.back() != '/') p += '/';
    if (!p.empty() && check_relative_path(std::string_view(p).substr(0, p.size() - 1))) {
      r.fail("name_prefix", "= \"" + *v + "\" must be a relative directory without '.' or '..'");
    }
    if (!p.empty() && p[0] == '.') {
      r.fail("name_prefix", "= \"" + *v + "\" must not start with '.' (the spool ignores it)");
    }
    w.name_prefix = p;
  }
  return w;
}

channel_config parse_channel(const toml::table& t, std::size_t index, const std::string& source,
                             std::uint64_t total_rate) {
  const table_reader r(t, "channel[" + std::to_string(index) + "].", source,
                       {// what and where
                        "name", "group", "spool", "after", "ignore", "ttl", "receivers",
                        // when and how fast
                        "priority", "share", "cap", "batch_window", "batch_max_files",
                        "batch_max_bytes", "concurrent_sessions", "heartbeat",
                        // the sessions' profile
                        "register_window", "register_timeout", "encrypt", "fec_k", "fec_depth",
                        "fec_overhead", "silent_passes", "fallback"});
  channel_config c;
  c.name = r.required_string("name", "\"warnings\"");
  if (!valid_channel_name(c.name)) {
    r.fail("name", "= \"" + c.name + "\": use 1 to 64 letters, digits, '-', '_' or '.'");
  }
  const auto g = r.required_string("group", "\"239.192.0.1:4711\"");
  const auto ge = parse_endpoint(g);
  if (!ge || !ge->is_multicast()) {
    r.fail("group", "= \"" + g + "\" is not a multicast ADDR:PORT (e.g. \"239.192.0.1:4711\")");
  }
  c.group = *ge;
  for (const auto& s : r.strings("spool")) {
    const std::filesystem::path p(s);
    if (!p.is_absolute()) r.fail("spool", "= \"" + s + "\" must be an absolute directory");
    c.spools.push_back(p.lexically_normal());
  }
  if (c.spools.empty()) {
    throw config_error(source + ": '" + r.key("spool") +
                       "' is required: the spool directories to watch (e.g. spool = "
                       "[\"/var/spool/mcdist-feed/warnings\"])");
  }
  if (c.spools.size() > max_spools_per_channel) r.fail("spool", "lists too many directories");
  if (auto v = r.integer("priority", -1000, 1000)) c.priority = static_cast<int>(*v);
  if (const auto* n = r.get("share")) {
    const auto v = n->value<double>();
    if (!v || !(*v > 0.0 && *v <= 1.0))
      r.fail("share", "must be a fraction of the rate, 0 < share <= 1");
    c.share = *v;
  }
  if (auto v = r.rate("cap")) {
    if (r.get("share")) r.fail("cap", "and 'share' exclude each other: give one");
    if (*v > total_rate) r.fail("cap", "exceeds the feed's rate");
    c.cap_bps = *v;
  }
  if (auto v = r.duration("batch_window")) c.batch_window = *v;
  if (c.batch_window > std::chrono::minutes(10)) r.fail("batch_window", "must be at most 10m");
  if (auto v = r.integer("batch_max_files", 1, max_batch_files)) {
    c.batch_max_files = static_cast<std::size_t>(*v);
  }
  if (auto v = r.size("batch_max_bytes")) c.batch_max_bytes = *v;
  if (auto v = r.string("after"))
    c.after = parse_after(*v, source + ": '" + r.key("after") + "'", c.move_dir);
  c.ignore = r.strings("ignore");
  if (auto v = r.integer("ttl", 0, 255)) c.ttl = static_cast<int>(*v);
  c.receivers = r.strings("receivers");
  for (const auto& id : c.receivers) {
    if (!wire::valid_receiver_id(id))
      r.fail("receivers", "lists \"" + id + "\", not a valid site id");
  }
  auto& p = c.profile;
  if (auto v = r.duration("register_window")) p.register_window = *v;
  if (const auto* n = r.get("fec_k")) {
    // "auto" or a number of sources.
    bool ok = false;
    if (n->is_string()) ok = sender::parse_fec_k(*n->value<std::string>(), p);
    if (const auto x = n->value<std::int64_t>();
        n->is_integer() && x && *x >= 0 && *x <= fec::max_k) {
      ok = sender::parse_fec_k(std::to_string(*x), p);
    }
    if (!ok) r.fail("fec_k", "must be \"auto\" or 0 to " + std::to_string(fec::max_k));
  }
  if (auto v = r.integer("fec_depth", 1, fec::max_depth)) {
    p.fec_depth = static_cast<std::uint32_t>(*v);
  }
  if (const auto* n = r.get("fec_overhead")) {
    // "3%" or a number: 0.03.
    std::optional<double> share;
    if (n->is_string()) share = sender::parse_share(*n->value<std::string>());
    if (n->is_floating_point() || n->is_integer()) {
      const auto x = n->value<double>();
      if (x && *x >= 0 && *x <= 1) share = *x;
    }
    if (!share) r.fail("fec_overhead", "must be a share of the data, \"3%\" or 0.03");
    p.fec_overhead = *share;
  }
  if (auto v = r.integer("silent_passes", 0, 64)) p.silent_passes = static_cast<std::uint32_t>(*v);
  if (auto v = r.string("fallback")) {
    const auto m = sender::parse_fallback_mode(*v);
    if (!m) r.fail("fallback", "= \"" + *v + "\" is not \"sctp\", \"tcp\", \"auto\" or \"off\"");
    p.fallback = *m;
  }
  if (auto v = r.integer("concurrent_sessions", 1, max_concurrent_sessions)) {
    c.concurrent_sessions = static_cast<std::uint32_t>(*v);
  }
  if (auto v = r.duration("heartbeat")) {
    if (v->count() != 0 && *v < min_heartbeat) {
      r.fail("heartbeat", "must be \"0s\" (none) or at least 1s");
    }
    c.heartbeat = *v;
  }
  if (auto v = r.duration("register_timeout")) c.register_timeout = *v;
  if (const auto* v = t.get("encrypt")) {
    const auto b = v->value<bool>();
    if (!b) r.fail("encrypt", "must be true or false");
    c.encrypt = *b;
  }
  return c;
}

bool inside(const std::filesystem::path& a, const std::filesystem::path& b) {
  // a is b or below it.
  auto ai = a.begin();
  for (auto bi = b.begin(); bi != b.end(); ++bi, ++ai) {
    if (bi->empty()) continue;  // trailing separator
    if (ai == a.end() || *ai != *bi) return false;
  }
  return true;
}

feed_config from_table(const toml::table& t, const std::string& source) {
  const table_reader r(
      t, "", source,
      {// the hub, its sessions and its journal
       "interface", "key", "site_keys", "rate", "rate_max", "journal", "retention", "retained",
       "relays", "relay_timeout", "channel", "cluster",
       // its operators and services
       "control_socket", "control_group", "http", "products_http", "products_tls_cert",
       "products_tls_key", "wis2", "wis2_input", "wis2_dedupe_window"});
  feed_config c;
  const auto itf = r.required_string("interface", "\"10.0.0.5\" or \"eth1\"");
  const auto a = net::parse_interface(itf);
  if (!a || a->any()) {
    r.fail("interface",
           "= \"" + itf + "\" is neither a local IP address nor an interface name (e.g. eth1)");
  }
  c.interface = *a;
  if (auto v = r.string("key")) c.key_file = *v;
  if (auto v = r.string("site_keys")) {
    if (c.key_file.empty())
      r.fail("site_keys", "needs 'key' (only signed sessions check site keys)");
    c.site_keys = *v;
  }
  if (r.string("rate") == std::optional<std::string>("auto")) {
    // Every session's rate follows its sites (TFMCC), each within its share of rate_max.
    const auto m = r.rate("rate_max");
    if (!m) {
      throw config_error(source +
                         ": rate = \"auto\" needs 'rate_max': the highest total rate the "
                         "channels may reach together (e.g. rate_max = \"1G\")");
    }
    c.rate_auto = true;
    c.rate_max_bps = *m;
    c.rate_bps = *m;
  } else if (auto v = r.rate("rate")) {
    if (r.get("rate_max")) r.fail("rate_max", "is only for rate = \"auto\"");
    c.rate_bps = *v;
  } else {
    throw config_error(source +
                       ": 'rate' is required: the total multicast rate of every channel "
                       "together (e.g. rate = \"500M\"), or \"auto\" with rate_max");
  }
  c.journal = r.required_string("journal", "\"/var/lib/mcdist-feed/journal.db\"");
  c.relays = r.strings("relays");
  for (const auto& id : c.relays) {
    if (!wire::valid_receiver_id(id)) r.fail("relays", "lists \"" + id + "\", not a valid site id");
  }
  if (auto v = r.duration("relay_timeout")) {
    if (*v < std::chrono::seconds(1) || *v > std::chrono::hours(1)) {
      r.fail("relay_timeout", "must be from 1s to 1h (how long a silent relay is waited for)");
    }
    c.relay_timeout = *v;
  }
  if (auto v = r.duration("retention")) c.retention = *v;
  if (auto v = r.string("retained")) c.retained_dir = *v;
  if (c.retention.count() > 0 && c.retained_dir.empty()) {
    throw config_error(source +
                       ": 'retained' is required when 'retention' is not \"0s\": the "
                       "directory that keeps sent products for catch-up and resend");
  }
  if (auto v = r.string("control_socket")) c.control_socket = *v;
  if (auto v = r.string("control_group")) c.control_group = *v;
  if (auto v = r.string("http")) {
    c.http_explicit = true;
    try {
      c.http = http::parse_status_address(*v, default_http_port);
    } catch (const std::invalid_argument& e) {
      r.fail("http", std::string("= ") + e.what());
    }
  }
  if (auto v = r.string("products_http")) {
    // Port 0 (any free port, logged at start) is for tests, as for http.
    const bool any_port = v->size() > 2 && v->ends_with(":0");
    const auto e = any_port ? parse_endpoint(std::string_view(*v).substr(0, v->size() - 2), 0)
                            : parse_endpoint(*v);
    if (!e || e->is_multicast()) {
      r.fail("products_http", "= \"" + *v +
                                  "\" is not a local ADDR:PORT to serve products on (e.g. "
                                  "\"0.0.0.0:9613\")");
    }
    c.products_http = e;
  }
  if (auto v = r.string("products_tls_cert")) c.products_tls_cert = *v;
  if (auto v = r.string("products_tls_key")) c.products_tls_key = *v;
  if (c.products_tls_cert.empty() != c.products_tls_key.empty()) {
    r.fail(c.products_tls_cert.empty() ? "products_tls_key" : "products_tls_cert",
           "needs both products_tls_cert and products_tls_key (PEM files)");
  }
  if (!c.products_tls_cert.empty() && !c.products_http) {
    r.fail("products_tls_cert", "needs products_http = \"ADDR:PORT\"");
  }

  {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) c.cluster.hub = host;
  }
  if (const auto* cl = t.get("cluster")) {
    const auto* ct = cl->as_table();
    if (!ct) r.fail("cluster", "must be a table: [cluster]");
    if (!is_postgresql(c.journal.string())) {
      r.fail("cluster", "needs a journal that several hubs share: journal = \"postgresql://...\"");
    }
    const table_reader cr(*ct, "cluster.", source, {"hub", "lease", "renew", "margin"});
    if (auto v = cr.string("hub")) c.cluster.hub = *v;
    const auto ms = [](std::chrono::nanoseconds d) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(d);
    };
    if (auto v = cr.duration("lease")) c.cluster.lease = ms(*v);
    if (auto v = cr.duration("renew")) c.cluster.renew = ms(*v);
    if (auto v = cr.duration("margin")) c.cluster.margin = ms(*v);
    if (c.cluster.hub.empty() || c.cluster.hub.size() > 64) {
      cr.fail("hub", "must name this hub (1 to 64 characters), unique in the cluster");
    }
    if (c.cluster.renew.count() < 100 || c.cluster.margin.count() < 100) {
      cr.fail("renew", "and margin must be at least 100ms");
    }
    // Room for at least two rounds between a renewal and the fence.
    if (c.cluster.lease < c.cluster.margin + 2 * c.cluster.renew) {
      cr.fail("lease", "must be at least margin + 2 x renew (two rounds before the fence)");
    }
    c.cluster.round_timeout = std::min(c.cluster.round_timeout,
                                       std::max(c.cluster.renew, std::chrono::milliseconds(500)));
  }
  if (const auto* w = t.get("wis2")) {
    const auto* wt = w->as_table();
    if (!wt) r.fail("wis2", "must be a table: [wis2]");
    const table_reader wr(*wt, "wis2.", source,
                          {"topic", "base_url", "data_id_prefix", "qos", "max_queued", "channels"},
                          broker_keys);
    wis2_action wa;
    wa.broker = read_broker(wr, source, "[wis2]");
    wa.topic = wr.required_string("topic", "\"origin/a/wis2/xx-centre/data/core/weather\"");
    wa.base_url = wr.required_string("base_url", "\"https://data.example.org/\"");
    if (auto v = wr.string("data_id_prefix")) wa.data_id_prefix = *v;
    if (auto v = wr.integer("qos", 0, 2)) wa.qos = static_cast<int>(*v);
    if (auto v = wr.integer("max_queued", 1, 1'000'000))
      wa.max_queued = static_cast<std::size_t>(*v);
    try {
      check_wis2_action(wa);
    } catch (const std::invalid_argument& e) {
      throw config_error(source + ": [wis2]: " + e.what());
    }
    c.wis2 = std::move(wa);
    c.wis2_channels = wr.strings("channels");
  }

  const auto* ch = t.get("channel");
  if (!ch) throw config_error(source + ": no [[channel]]: the feed has nothing to send");
  const auto* arr = ch->as_array();
  if (!arr || arr->empty()) r.fail("channel", "must be an array of tables: [[channel]]");
  if (arr->size() > max_channels) r.fail("channel", "has too many entries");
  std::set<std::string> names;
  std::set<endpoint> groups;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const auto* ct = arr->get(i)->as_table();
    if (!ct) throw config_error(source + ": 'channel[" + std::to_string(i) + "]' must be a table");
    auto cc = parse_channel(*ct, i, source, c.rate_bps);
    if (c.interface.address && cc.group.v6 != c.interface.address->v6) {
      throw config_error(source + ": 'channel[" + std::to_string(i) +
                         "].group' is not of the interface's address family");
    }
    // Sessions of every channel leave from one resolved interface address.
    if (!c.channels.empty() && cc.group.v6 != c.channels.front().group.v6) {
      throw config_error(source + ": 'channel[" + std::to_string(i) +
                         "].group' is not of the first channel's address family: one feed "
                         "sends one family");
    }
    if (!names.insert(cc.name).second) {
      throw config_error(source + ": two channels are named \"" + cc.name + "\"");
    }
    if (!groups.insert(cc.group).second) {
      throw config_error(source + ": channel \"" + cc.name + "\" uses the group " +
                         cc.group.to_string() + " of another channel");
    }
    for (const auto& s : cc.spools) {
      for (const auto& other : c.channels) {
        for (const auto& os : other.spools) {
          if (inside(s, os) || inside(os, s)) {
            throw config_error(source + ": channel \"" + cc.name + "\" spool " + s.string() +
                               " overlaps channel \"" + other.name + "\" spool " + os.string());
          }
        }
      }
      if (cc.after == after_send::move && inside(cc.move_dir, s)) {
        throw config_error(source + ": channel \"" + cc.name + "\": after = \"move:" +
                           cc.move_dir.string() + "\" lies inside its spool " + s.string());
      }
    }
    if (const auto why = sender::profile_problem(cc.profile, !cc.receivers.empty(), cc.encrypt,
                                                 c.rate_auto, sender::setting_names::toml);
        !why.empty()) {
      throw config_error(source + ": channel \"" + cc.name + "\": " + why);
    }
    if (cc.encrypt && (c.key_file.empty() || c.site_keys.empty())) {
      throw config_error(source + ": channel \"" + cc.name +
                         "\": encrypt = true needs 'key' and "
                         "'site_keys' (only pinned sites may get the session key)");
    }
    c.channels.push_back(std::move(cc));
  }
  for (const auto& n : c.wis2_channels) {
    if (!names.count(n)) {
      throw config_error(source + ": [wis2] channels names \"" + n + "\", which is no [[channel]]");
    }
  }
  if (const auto* wi = t.get("wis2_input")) {
    const auto* wa = wi->as_array();
    if (!wa || wa->empty()) r.fail("wis2_input", "must be an array of tables: [[wis2_input]]");
    if (wa->size() > max_wis2_inputs) r.fail("wis2_input", "has too many entries");
    // The notifications taken are a table of the SQLite journal; several hubs would each
    // download every product (no shared de-duplication yet).
    if (is_postgresql(c.journal.string())) {
      r.fail("wis2_input", "runs on a single hub: it needs an SQLite journal, not PostgreSQL");
    }
    std::set<std::string> input_names;
    for (std::size_t i = 0; i < wa->size(); ++i) {
      const auto* it = wa->get(i)->as_table();
      if (!it) {
        throw config_error(source + ": 'wis2_input[" + std::to_string(i) + "]' must be a table");
      }
      auto in = parse_wis2_input(*it, i, source);
      if (!input_names.insert(in.name).second) {
        throw config_error(source + ": two [[wis2_input]] are named \"" + in.name + "\"");
      }
      for (const auto& sub : in.topics) {
        if (!names.count(sub.channel)) {
          throw config_error(source + ": [[wis2_input]] \"" + in.name + "\": topic \"" +
                             sub.filter + "\" feeds channel \"" + sub.channel +
                             "\", which is no [[channel]]");
        }
      }
      c.wis2_inputs.push_back(std::move(in));
    }
  }
  if (auto v = r.duration("wis2_dedupe_window")) {
    if (*v < std::chrono::minutes(1)) r.fail("wis2_dedupe_window", "must be at least 1m");
    c.wis2_dedupe_window = *v;
  }
  return c;
}

}  // namespace

after_send parse_after(const std::string& text, const std::string& key,
                       std::filesystem::path& move_dir) {
  if (text == "delete") return after_send::remove;
  if (text == "keep") return after_send::keep;
  if (text.starts_with("move:")) {
    const std::filesystem::path d(text.substr(5));
    if (d.empty() || !d.is_absolute()) {
      throw config_error(key + " = \"" + text + "\": move needs an absolute directory (move:/DIR)");
    }
    move_dir = d.lexically_normal();
    return after_send::move;
  }
  throw config_error(key + " = \"" + text + "\" must be \"delete\", \"keep\" or \"move:/DIR\"");
}

feed_config parse_feed_config(std::string_view text, const std::string& source) {
  return from_table(parse_toml<config_error>(text, source), source);
}

feed_config load_feed_config(const std::filesystem::path& file) {
  return from_table(parse_toml_file<config_error>(file), file.string());
}

}  // namespace mcdist::feed
