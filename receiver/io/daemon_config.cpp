#include "receiver/io/daemon_config.hpp"

#include "common/daemon/toml_config.hpp"
#include "common/sys/key_file.hpp"
#include "common/units.hpp"
#include "common/wire.hpp"

#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <type_traits>

namespace mcdist::receiver {

std::optional<endpoint> parse_http_setting(const std::string& text, const std::string& what) {
  try {
    return http::parse_status_address(text, default_http_port);
  } catch (const std::invalid_argument& e) {
    throw config_error(what + " " + e.what());
  }
}

namespace {

using table_reader = mcdist::table_reader<config_error>;

endpoint parse_group(const std::string& text, const std::string& key) {
  const auto g = parse_endpoint(text);
  if (!g || !g->is_multicast()) {
    throw config_error("'" + key + "' = \"" + text +
                       "\" is not a multicast ADDR:PORT (e.g. 239.192.0.1:4711)");
  }
  return *g;
}

/// [[channel.action]] tables; the only type so far is "wis2" (common/wis2/wis2_publisher.hpp).
std::vector<wis2_action> parse_actions(const toml::node& node, const std::string& key) {
  const auto* arr = node.as_array();
  if (!arr) throw config_error("'" + key + "' must be an array of tables: [[channel.action]]");
  std::vector<wis2_action> out;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const std::string k = key + "[" + std::to_string(i) + "]";
    const auto* at = arr->get(i)->as_table();
    if (!at) throw config_error(k + " must be a table ([[channel.action]])");
    refuse_unknown_settings<config_error>(
        *at,
        {"type", "broker", "topic", "base_url", "data_id_prefix", "qos", "username", "password",
         "password_file", "ca_file", "client_cert", "client_key", "tls_insecure", "max_queued"},
        k);
    const table_reader r(*at, k + ".", "");
    const auto t = r.string("type");
    if (!t) throw config_error(k + " needs type = \"wis2\"");
    if (*t != "wis2")
      throw config_error(k + ".type = \"" + *t + "\": the only action type is \"wis2\"");
    wis2_action a;
    const auto str = [&r](const char* name, auto& v) {
      if (auto s = r.string(name)) v = *s;
    };
    std::string broker;
    str("broker", broker);
    if (broker.empty()) throw config_error(k + " needs broker = \"mqtts://HOST:PORT\"");
    const auto b = parse_mqtt_url(broker);
    if (!b) {
      throw config_error(k + ".broker = \"" + broker +
                         "\" is not mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (MQTT over TLS, "
                         "e.g. mqtts://broker.example.org:8883)");
    }
    a.broker.url = *b;
    str("ca_file", a.broker.ca_file);
    str("client_cert", a.broker.client_cert);
    str("client_key", a.broker.client_key);
    str("username", a.broker.username);
    str("password", a.broker.password);
    str("password_file", a.broker.password_file);
    if (auto v = r.boolean("tls_insecure")) a.broker.tls_insecure = *v;
    str("topic", a.topic);
    str("base_url", a.base_url);
    str("data_id_prefix", a.data_id_prefix);
    if (auto v = r.value<std::int64_t>("qos", "0, 1 or 2")) a.qos = static_cast<int>(*v);
    if (auto v = r.value<std::int64_t>("max_queued", "a whole number")) {
      if (*v < 1 || *v > 1000000) throw config_error(k + ".max_queued must be 1 to 1000000");
      a.max_queued = static_cast<std::size_t>(*v);
    }
    try {
      check_wis2_action(a);
      check_mqtt_broker_files(a.broker);
    } catch (const std::invalid_argument& e) {
      throw config_error(k + " (wis2): " + e.what());
    }
    out.push_back(std::move(a));
  }
  return out;
}

/// A duration setting of an [[action]] or [retention] table. @throws config_error
std::optional<std::chrono::nanoseconds> age_setting(const table_reader& r, const char* name) {
  const auto s = r.value<std::string>(name, "a duration string like \"60s\" or \"7d\"");
  if (!s) return std::nullopt;
  const auto d = parse_age(*s);
  if (!d) {
    throw config_error("'" + r.key(name) + "' = \"" + *s +
                       "\" is not a duration (e.g. 90s, 6h, 7d)");
  }
  return d;
}

/// Longest `match` accepted, bytes.
constexpr std::size_t max_match_bytes = 512;

/// Top-level [[action]] tables (action_config.hpp, docs/actions.md).
std::vector<action_config> parse_receipt_actions(const toml::node& node) {
  const auto* arr = node.as_array();
  if (!arr) throw config_error("'action' must be an array of tables: [[action]]");
  std::vector<action_config> out;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    std::string k = "action[" + std::to_string(i) + "]";
    const auto* at = arr->get(i)->as_table();
    if (!at) throw config_error(k + " must be a table ([[action]])");
    refuse_unknown_settings<config_error>(*at,
                                          {"name", "channel", "match", "exec", "link", "copy",
                                           "timeout", "concurrency", "retries", "retry_delay"},
                                          k);
    action_config a;
    if (auto v = table_reader(*at, k + ".", "").string("name")) a.name = *v;
    if (!a.name.empty()) k = "action '" + a.name + "'";
    const table_reader r(*at, k + ".", "");
    a.channel = r.string("channel").value_or("*");
    if (auto v = r.string("match"))
      a.match = *v;
    else
      throw config_error(k + " needs match = \"REGEX\" (ECMAScript, searched in the product path)");
    // libstdc++ compiles and matches regular expressions recursively: a bounded pattern keeps
    // the stack bounded (product paths are at most max_path_bytes = 1024, common/path_check.hpp).
    if (a.match.size() > max_match_bytes) {
      throw config_error(k + ".match is longer than " + std::to_string(max_match_bytes) + " bytes");
    }
    try {
      a.re = std::regex(a.match, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      throw config_error(k + ".match = \"" + a.match +
                         "\" is not a valid regular expression: " + e.what());
    }
    int kinds = 0;
    if (const auto* n = r.get("exec")) {
      ++kinds;
      a.kind = action_kind::exec;
      const auto* argv = n->as_array();
      if (!argv)
        throw config_error(k + ".exec must be an array of strings: [\"/path/prog\", \"{path}\"]");
      for (std::size_t j = 0; j < argv->size(); ++j) {
        const auto* v = argv->get(j)->as_string();
        if (!v) throw config_error(k + ".exec must be an array of strings");
        a.argv.push_back(v->get());
      }
    }
    for (auto [name, kind] :
         {std::pair{"link", action_kind::link}, std::pair{"copy", action_kind::copy}}) {
      if (auto v = r.value<std::string>(name, "a path template string")) {
        ++kinds;
        a.kind = kind;
        a.target = *v;
      }
    }
    if (kinds != 1)
      throw config_error(k + " needs exactly one of exec = [...], link = \"...\", copy = \"...\"");
    if (auto v = age_setting(r, "timeout")) a.timeout = *v;
    if (auto v = age_setting(r, "retry_delay")) a.retry_delay = *v;
    if (auto v = r.value<std::int64_t>("concurrency", "a whole number")) {
      if (*v < 1 || *v > 1024) throw config_error(k + ".concurrency must be 1 to 1024");
      a.concurrency = static_cast<std::uint32_t>(*v);
    }
    if (auto v = r.value<std::int64_t>("retries", "a whole number")) {
      if (*v < 0 || *v > 100) throw config_error(k + ".retries must be 0 to 100");
      a.retries = static_cast<std::uint32_t>(*v);
    }
    try {
      check_action(a);
    } catch (const std::invalid_argument& e) {
      throw config_error(k + ": " + e.what());
    }
    out.push_back(std::move(a));
  }
  return out;
}

/// A list of public keys or key files (`trusted_senders`). @throws config_error
std::vector<crypto::key32> key_list(const toml::node& n, const std::string& key) {
  std::vector<crypto::key32> keys;
  const auto* arr = n.as_array();
  if (!arr) throw config_error("'" + key + "' must be an array of keys or key files");
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const auto* v = arr->get(i)->as_string();
    if (!v) throw config_error("'" + key + "' must be an array of strings");
    try {
      keys.push_back(crypto::read_public_key(v->get()));
    } catch (const crypto::key_error& e) {
      throw config_error(key + "[" + std::to_string(i) + "]: " + e.what());
    }
  }
  return keys;
}

/// The settings of a parsed configuration; `source` names it in messages.
daemon_config from_table(const toml::table& t, const std::string& source) {
  daemon_config cfg;
  std::filesystem::path default_dest;
  refuse_unknown_settings<config_error>(
      t,
      {// the site, its directories and channels
       "id", "interface", "dest", "temp", "sync", "journal", "channel", "action", "retention",
       // budgets and limits
       "buffer_pool", "socket_buffer", "session_memory", "total_memory", "parity_memory",
       "disk_reserve", "disk_reserve_percent", "session_quota", "max_sessions",
       "max_sessions_per_source",
       // timers and status
       "session_timeout", "status_interval", "checkpoint_interval", "status_file", "http", "log",
       // authentication
       "key_file", "trusted_senders", "allow_unsigned", "max_session_age", "max_clock_skew"},
      source);
  const table_reader r(t, "", "");
  if (auto v = r.string("id")) cfg.id = *v;
  if (auto s = r.string("interface")) {
    const auto a = net::parse_interface(*s);
    if (!a || a->any()) {
      throw config_error("'interface' = \"" + *s +
                         "\" is neither an IP address nor an interface name (e.g. \"10.0.0.7\", "
                         "\"eth1\")");
    }
    cfg.interface = *a;
  }
  if (auto v = r.string("dest")) default_dest = *v;
  if (auto v = r.string("temp")) cfg.temp = *v;
  if (auto s = r.string("sync")) {
    const auto m = parse_sync_mode(*s);
    if (!m)
      throw config_error(std::string("'sync' must be one of ") + sync_mode_names + ", not \"" + *s +
                         "\"");
    cfg.sync = *m;
  }
  auto size_setting = [&](const char* key, auto& out) {
    using out_t = std::remove_reference_t<decltype(out)>;
    if (const auto* n = r.get(key)) {
      // A string ("32M") or an integer of bytes. Not a float: toml++ converts a float such as
      // 5.4e31 to int64 with a cast that is undefined behaviour out of range (found by
      // tests/fuzz/config_fuzz).
      if (!n->is_string() && !n->is_integer()) {
        r.fail(key, "must be a size like \"32M\" or a whole number of bytes");
      }
      const auto s =
          n->is_string() ? *n->value<std::string>() : std::to_string(*n->value<std::int64_t>());
      const auto v = parse_size(s);
      if (!v)
        throw config_error(std::string("'") + key + "' = \"" + s + "\" is not a size (e.g. 32M)");
      if (*v > static_cast<std::uint64_t>(std::numeric_limits<out_t>::max())) {
        throw config_error(std::string("'") + key + "' = \"" + s + "\" is too large");
      }
      out = static_cast<out_t>(*v);
    }
  };
  size_setting("buffer_pool", cfg.buffer_pool_bytes);
  size_setting("socket_buffer", cfg.socket_buffer_bytes);
  size_setting("session_memory", cfg.session_memory_bytes);
  size_setting("total_memory", cfg.total_memory_bytes);
  size_setting("parity_memory", cfg.parity_memory_bytes);
  size_setting("disk_reserve", cfg.disk_reserve_bytes);
  size_setting("session_quota", cfg.session_quota_bytes);
  auto count_setting = [&](const char* key, std::uint32_t& out) {
    if (auto v = r.value<std::int64_t>(key, "a whole number")) {
      if (*v < 1 || *v > 100000)
        throw config_error(std::string("'") + key + "' must be 1 to 100000");
      out = static_cast<std::uint32_t>(*v);
    }
  };
  count_setting("max_sessions", cfg.max_sessions);
  count_setting("max_sessions_per_source", cfg.max_sessions_per_source);
  if (const auto* n = r.get("disk_reserve_percent")) {
    const auto v = n->is_integer() ? static_cast<double>(*n->value<std::int64_t>())
                                   : *r.value<double>("disk_reserve_percent", "a number");
    if (v < 0 || v > 50) throw config_error("'disk_reserve_percent' must be 0 to 50");
    cfg.disk_reserve_percent = v;
  }
  auto duration_setting = [&](const char* key, std::chrono::nanoseconds& out) {
    if (auto s = r.value<std::string>(key, "a duration string like \"60s\"")) {
      const auto d = parse_duration(*s);
      if (!d) throw config_error(std::string("'") + key + "' = \"" + *s + "\" is not a duration");
      out = *d;
    }
  };
  duration_setting("session_timeout", cfg.session_timeout);
  duration_setting("status_interval", cfg.status_interval);
  duration_setting("checkpoint_interval", cfg.checkpoint_interval);
  if (auto v = r.string("status_file")) cfg.status_file = *v;
  if (auto v = r.string("http")) {
    cfg.http = parse_http_setting(*v, "'http' =");
    cfg.http_explicit = true;
  }
  if (auto lt = t["log"].as_table()) {
    const table_reader lr(*lt, "log.", "");
    if (auto v = lr.string("level")) {
      try {
        cfg.log.level = parse_log_level(*v);
      } catch (const std::invalid_argument& e) {
        throw config_error(std::string("log.level: ") + e.what());
      }
    }
    if (auto v = lr.string("file")) cfg.log.file = *v;
  }
  if (auto v = r.string("journal")) cfg.journal = *v;
  if (const auto* n = r.get("action")) cfg.actions = parse_receipt_actions(*n);
  if (const auto* n = r.get("retention")) {
    const auto* rt = n->as_table();
    if (!rt) throw config_error("'retention' must be a table: [retention]");
    refuse_unknown_settings<config_error>(*rt, {"max_age", "interval", "journal_max_age"},
                                          "retention");
    const table_reader rr(*rt, "retention.", "");
    if (auto v = age_setting(rr, "max_age")) cfg.retention_max_age = *v;
    if (auto v = age_setting(rr, "interval")) cfg.retention_interval = *v;
    if (auto v = age_setting(rr, "journal_max_age")) cfg.journal_max_age = *v;
  }
  if (auto v = r.string("key_file")) cfg.key_file = *v;
  std::vector<crypto::key32> default_trusted;
  if (const auto* n = r.get("trusted_senders")) default_trusted = key_list(*n, "trusted_senders");
  if (auto v = r.boolean("allow_unsigned")) cfg.allow_unsigned = *v;
  auto ms_setting = [&](const char* key, std::chrono::milliseconds& out) {
    std::chrono::nanoseconds d{out};
    duration_setting(key, d);
    if (d < std::chrono::seconds(1) || d > std::chrono::hours(24 * 7)) {
      throw config_error(std::string("'") + key + "' must be 1s to 7d");
    }
    out = std::chrono::duration_cast<std::chrono::milliseconds>(d);
  };
  ms_setting("max_session_age", cfg.max_session_age);
  ms_setting("max_clock_skew", cfg.max_clock_skew);
  if (auto arr = t["channel"].as_array()) {
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const auto* ct = arr->get(i)->as_table();
      const std::string key = "channel[" + std::to_string(i) + "]";
      if (!ct) throw config_error(key + " must be a table ([[channel]])");
      // A misspelt setting would silently keep its default (a relay that does not relay).
      refuse_unknown_settings<config_error>(
          *ct,
          {"name", "group", "source", "dest", "trusted_senders", "allow_unsigned", "silent",
           "catch_up_url", "catch_up_ca", "relay_group", "relay_interface", "relay_ttl", "relays",
           "behind_relay", "action", "retention"},
          key);
      const table_reader c(*ct, key + ".", "");
      channel_config ch;
      if (auto v = c.string("name")) ch.name = *v;
      const auto g = c.string("group");
      if (!g) throw config_error(key + " needs group = \"ADDR:PORT\"");
      ch.group = parse_group(*g, key + ".group");
      if (auto v = c.string("source")) ch.source = parse_source(*v, ch.group, key + ".source");
      if (auto v = c.string("dest")) ch.dest = *v;
      if (const auto* n = c.get("trusted_senders")) {
        ch.trusted_senders = key_list(*n, key + ".trusted_senders");
      } else {
        ch.trusted_senders = default_trusted;
      }
      if (auto v = c.boolean("silent")) ch.silent = *v;
      if (auto v = c.string("relay_group")) ch.relay_group = parse_group(*v, key + ".relay_group");
      if (auto s = c.string("relay_interface")) {
        const auto a = net::parse_interface(*s);
        if (!a || a->any()) {
          throw config_error("'" + key + ".relay_interface' = \"" + *s +
                             "\" is neither an IP address nor an interface name (e.g. "
                             "\"10.1.0.1\", \"eth2\")");
        }
        ch.relay_interface = *a;
      }
      if (auto v = c.integer("relay_ttl", 1, 255)) ch.relay_ttl = static_cast<int>(*v);
      ch.relays = c.strings("relays");
      for (const auto& id : ch.relays) {
        if (!wire::valid_receiver_id(id)) {
          throw config_error("'" + key + ".relays' lists \"" + id + "\", not a valid site id");
        }
      }
      if (auto v = c.string("behind_relay")) {
        if (!wire::valid_receiver_id(*v)) {
          throw config_error("'" + key + ".behind_relay' = \"" + *v + "\" is not a valid site id");
        }
        ch.behind_relay = *v;
      }
      if (!ch.relay_group &&
          (!ch.relay_interface.any() || c.get("relay_ttl") || !ch.relays.empty())) {
        throw config_error("'" + key +
                           "': relay_interface, relay_ttl and relays need relay_group = "
                           "\"ADDR:PORT\", the group this host relays the channel into");
      }
      if (auto v = c.string("catch_up_url")) {
        ch.catch_up_url = *v;
        if (!(ch.catch_up_url.starts_with("https://") || ch.catch_up_url.starts_with("http://")) ||
            ch.catch_up_url.find_first_of(" \t\r\n?#") != std::string::npos) {
          throw config_error("'" + key + ".catch_up_url' = \"" + ch.catch_up_url +
                             "\" must be an https:// (or http://) URL of the hub's product "
                             "server, e.g. \"https://hub.example.org:9613/\"");
        }
        if (!ch.catch_up_url.ends_with("/")) ch.catch_up_url += '/';
        if (!ch.silent) {
          throw config_error("'" + key +
                             ".catch_up_url' needs silent = true: a channel that "
                             "may transmit is caught up by the hub's multicast catch-up");
        }
      }
      if (auto v = c.string("catch_up_ca")) {
        ch.catch_up_ca = *v;
        if (ch.catch_up_url.empty()) {
          throw config_error("'" + key + ".catch_up_ca' needs catch_up_url");
        }
      }
      ch.allow_unsigned = c.boolean("allow_unsigned").value_or(cfg.allow_unsigned);
      if (ch.name.empty()) ch.name = ch.group.to_string();
      if (const auto* n = c.get("action")) ch.wis2 = parse_actions(*n, key + ".action");
      if (const auto* n = c.get("retention")) {
        const auto* rt = n->as_table();
        if (!rt) throw config_error(key + ".retention must be a table: [channel.retention]");
        for (const auto& [name, v] : *rt) {
          if (name.str() != "max_age") {
            throw config_error(key + ".retention: unknown setting '" + std::string(name.str()) +
                               "' (only max_age; interval and journal_max_age are in [retention])");
          }
        }
        ch.retention_max_age = age_setting(table_reader(*rt, key + ".retention.", ""), "max_age");
      }
      cfg.channels.push_back(std::move(ch));
    }
  } else if (t.contains("channel")) {
    throw config_error("'channel' must be an array of tables: [[channel]]");
  }
  for (auto& ch : cfg.channels) {
    if (ch.dest.empty()) ch.dest = default_dest;
    if (!ch.retention_max_age) ch.retention_max_age = cfg.retention_max_age;
  }
  cfg.trusted_senders = std::move(default_trusted);
  cfg.dest = default_dest;
  return cfg;
}

}  // namespace

daemon_config load_config_file(const std::filesystem::path& file) {
  return from_table(parse_toml_file<config_error>(file), file.string());
}

daemon_config load_config_string(std::string_view text, const std::string& source) {
  return from_table(parse_toml<config_error>(text, source), source);
}

endpoint parse_source(const std::string& text, const endpoint& group, const std::string& what) {
  const auto a = parse_address(text);
  if (!a) throw config_error(what + " = \"" + text + "\" is not an IP address");
  if (a->v6 != group.v6) {
    throw config_error(what + " = \"" + text + "\" is not of the address family of the group " +
                       group.address_string());
  }
  const bool wildcard = std::all_of(a->addr.begin(), a->addr.begin() + (a->v6 ? 16 : 4),
                                    [](std::uint8_t b) { return b == 0; });
  if (a->is_multicast() || wildcard) {
    throw config_error(what + " = \"" + text +
                       "\" is not a sender's unicast address (the address its datagrams come "
                       "from)");
  }
  return *a;
}

std::vector<bool> silent_channels(const std::vector<channel_config>& channels) {
  std::vector<bool> out;
  out.reserve(channels.size());
  for (const auto& ch : channels) out.push_back(ch.silent);
  return out;
}

std::vector<std::string> upstream_relays(const std::vector<channel_config>& channels) {
  std::vector<std::string> out;
  out.reserve(channels.size());
  for (const auto& ch : channels) out.push_back(ch.behind_relay);
  return out;
}

std::vector<bool> relay_channels(const std::vector<channel_config>& channels) {
  std::vector<bool> out;
  out.reserve(channels.size());
  for (const auto& ch : channels) out.push_back(ch.relay_group.has_value());
  return out;
}

std::string ssm_warning(const channel_config& ch) {
  if (ch.source && !ch.group.is_source_specific()) {
    return "channel " + ch.name + ": source " + ch.source->address_string() + " with group " +
           ch.group.address_string() + " outside the SSM range (" +
           (ch.group.v6 ? "ff3x::/32" : "232.0.0.0/8") +
           "): this host filters by source, but routers may forward the group from every source";
  }
  if (!ch.source && ch.group.is_source_specific()) {
    return "channel " + ch.name + ": group " + ch.group.address_string() +
           " is in the SSM range joined without a source: routers forward nothing to such a "
           "join (RFC 4607); set source = \"SENDER-ADDRESS\"";
  }
  return {};
}

std::optional<std::chrono::nanoseconds> parse_age(std::string_view text) noexcept {
  return parse_duration(text);  // "7d" included
}

namespace {

/// A relayed channel's checks: a group of the channel's family that no channel of this daemon
/// receives (or its relay would feed its own channel: a loop), and no two channels relaying
/// into one group (their sessions would mix under one source address at the sites).
void validate_relay(const daemon_config& cfg, const channel_config& ch) {
  const auto& rg = *ch.relay_group;
  if (rg.v6 != ch.group.v6) {
    throw config_error("channel " + ch.name + ": relay_group " + rg.to_string() +
                       " is not of the channel's address family");
  }
  if (ch.relay_interface.address && ch.relay_interface.address->v6 != rg.v6) {
    throw config_error("channel " + ch.name + ": relay_interface " +
                       ch.relay_interface.to_string() + " is not of relay_group's address family");
  }
  for (const auto& other : cfg.channels) {
    if (other.group.addr == rg.addr && other.group.v6 == rg.v6) {
      throw config_error("channel " + ch.name + ": relay_group " + rg.to_string() +
                         " is the group of channel " + other.name +
                         ": this host would receive what it relays (a loop); give the relay a "
                         "group of its own");
    }
    if (&other != &ch && other.relay_group && *other.relay_group == rg) {
      throw config_error("channels " + ch.name + " and " + other.name + " both relay into " +
                         rg.to_string() + ": give each relayed channel a group of its own");
    }
  }
}

}  // namespace

void validate(const daemon_config& cfg) {
  if (cfg.id.empty()) throw config_error("no receiver id: set --id or id = \"...\" in the config");
  if (!wire::valid_receiver_id(cfg.id)) {
    throw config_error("receiver id '" + cfg.id +
                       "' is invalid: use 1-64 letters, digits and - _ . : @");
  }
  if (cfg.channels.empty()) {
    throw config_error("no channel: set --group ADDR:PORT or a [[channel]] in the config");
  }
  for (const auto& ch : cfg.channels) {
    if (ch.dest.empty()) {
      throw config_error("channel " + ch.name + " has no destination: set --dest or dest = ...");
    }
    if (ch.trusted_senders.empty() && !ch.allow_unsigned) {
      throw config_error(
          "channel " + ch.name + " trusts no sender: any host that can reach " +
          ch.group.to_string() + " could write into " + ch.dest.string() +
          ". Set trusted_senders = [\"/etc/mcdist/hub.key.pub\"] (the hub's public key, a file "
          "or \"mcdist-ed25519:...\"; --trust on the command line), or take unsigned sessions "
          "from anyone by name: allow_unsigned = true (--allow-unsigned) (docs/security.md)");
    }
    if (cfg.interface.address && ch.group.v6 != cfg.interface.address->v6) {
      throw config_error("channel " + ch.name + " and interface " + cfg.interface.to_string() +
                         " are of different address families");
    }
    // One control socket and one resolved interface serve every channel.
    if (ch.group.v6 != cfg.channels.front().group.v6) {
      throw config_error("channels " + cfg.channels.front().name + " and " + ch.name +
                         " are of different address families: one daemon receives one family");
    }
    if (ch.source && ch.source->v6 != ch.group.v6) {
      throw config_error("channel " + ch.name + ": source " + ch.source->address_string() +
                         " is not of the group's address family");
    }
    if (ch.relay_group) validate_relay(cfg, ch);
  }
  if (cfg.temp.empty()) throw config_error("no temp directory: set --temp or temp = ...");
  std::set<std::string> names;
  for (const auto& a : cfg.actions) {
    if (!names.insert(a.name).second) throw config_error("two actions are named '" + a.name + "'");
    if (a.channel != "*" &&
        std::none_of(cfg.channels.begin(), cfg.channels.end(),
                     [&](const channel_config& ch) { return ch.name == a.channel; })) {
      throw config_error("action '" + a.name + "': channel = \"" + a.channel +
                         "\" names no configured channel (or use \"*\")");
    }
    if (a.kind == action_kind::exec) {
      struct stat st {};
      std::string why;
      if (::stat(a.argv[0].c_str(), &st) != 0)
        why = std::strerror(errno);
      else if (!S_ISREG(st.st_mode))
        why = "not a regular file";
      else if (::access(a.argv[0].c_str(), X_OK) != 0)
        why = std::strerror(errno);
      if (!why.empty()) {
        throw config_error("action '" + a.name + "': exec[0] = \"" + a.argv[0] +
                           "\" is not an executable file (" + why + ")");
      }
    }
  }
  for (const auto& ch : cfg.channels) {
    if (ch.retention_max_age && *ch.retention_max_age > cfg.journal_max_age) {
      throw config_error("channel " + ch.name +
                         ": retention max_age is longer than [retention] journal_max_age: the "
                         "journal would forget products before retention deletes them");
    }
    if (ch.retention_max_age && *ch.retention_max_age <= std::chrono::nanoseconds::zero()) {
      throw config_error("channel " + ch.name + ": retention max_age must be positive");
    }
  }
  if (cfg.retention_interval <= std::chrono::nanoseconds::zero()) {
    throw config_error("[retention] interval must be positive");
  }
  if (cfg.drop_rate < 0 || cfg.drop_rate >= 1) throw config_error("--drop-rate must be in [0, 1)");
}

}  // namespace mcdist::receiver
