#include "tests/linkem/core/scenario.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "tests/linkem/core/units.hpp"

namespace mcdist::linkem {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto pos = s.find(sep);
    parts.push_back(trim(s.substr(0, pos)));
    if (pos == std::string_view::npos) {
      return parts;
    }
    s.remove_prefix(pos + 1);
  }
}

/// Largest TOML scenario file read: a scenario is a few kB; this bounds a mistaken path.
constexpr std::uintmax_t k_max_scenario_bytes = 1U << 20U;

}  // namespace

std::string host_name(std::size_t i) { return "h" + std::to_string(i); }

std::size_t parse_host_name(std::string_view name, std::size_t host_count) {
  const std::string_view s = trim(name);
  if (s.size() < 2 || s[0] != 'h' || !std::all_of(s.begin() + 1, s.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      })) {
    throw config_error("invalid host name '" + std::string(name) + "': expected h0 .. h" +
                       std::to_string(host_count - 1));
  }
  const std::uint64_t index = parse_count(s.substr(1), 1'000'000);
  if (index >= host_count) {
    throw config_error("host '" + std::string(s) + "' does not exist: hosts are h0 .. h" +
                       std::to_string(host_count - 1) + " (see --hosts)");
  }
  return static_cast<std::size_t>(index);
}

link_selector parse_selector(std::string_view text, std::size_t host_count) {
  link_selector sel;
  bool first = true;
  for (std::string_view item : split(text, ',')) {
    bool up = true;
    bool down = true;
    if (item.size() > 3 && item.substr(item.size() - 3) == ".up") {
      down = false;
      item.remove_suffix(3);
    } else if (item.size() > 5 && item.substr(item.size() - 5) == ".down") {
      up = false;
      item.remove_suffix(5);
    }
    if (!first && (up != sel.up || down != sel.down)) {
      throw config_error("selector '" + std::string(text) +
                         "' mixes directions; use one --link per direction");
    }
    sel.up = up;
    sel.down = down;
    first = false;
    if (item == "all" || item == "*") {
      for (std::size_t i = 0; i < host_count; ++i) {
        sel.hosts.push_back(i);
      }
    } else if (const auto dash = item.find('-'); dash != std::string_view::npos) {
      const std::size_t lo = parse_host_name(item.substr(0, dash), host_count);
      const std::size_t hi = parse_host_name(item.substr(dash + 1), host_count);
      if (lo > hi) {
        throw config_error("empty host range '" + std::string(item) + "'");
      }
      for (std::size_t i = lo; i <= hi; ++i) {
        sel.hosts.push_back(i);
      }
    } else {
      sel.hosts.push_back(parse_host_name(item, host_count));
    }
  }
  std::sort(sel.hosts.begin(), sel.hosts.end());
  sel.hosts.erase(std::unique(sel.hosts.begin(), sel.hosts.end()), sel.hosts.end());
  return sel;
}

void apply_link_setting(link_params& params, std::string_view key, std::string_view value) {
  const std::string k(trim(key));
  try {
    if (k == "delay") {
      params.delay = parse_duration(value);
    } else if (k == "loss") {
      params.loss_rate = parse_probability(value);
    } else if (k == "burst") {
      const double burst = parse_number(value, 1, 1e6);
      params.mean_burst = burst;
    } else if (k == "rate") {
      params.rate_bps = trim(value) == "0" ? 0 : parse_bit_rate(value);
    } else if (k == "queue") {
      const std::string_view v = trim(value);
      if (!v.empty() && std::all_of(v.begin(), v.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c)) != 0;
          })) {
        params.queue = queue_limit{static_cast<std::uint32_t>(parse_count(v, 1'000'000)), 0};
      } else {
        params.queue = queue_limit{0, parse_byte_size(v)};
      }
    } else if (k == "reorder") {
      params.reorder_rate = parse_probability(value);
    } else if (k == "reorder_delay") {
      params.reorder_delay = parse_duration(value);
    } else if (k == "dup" || k == "duplicate") {
      params.duplicate_rate = parse_probability(value);
    } else {
      throw config_error("unknown link key '" + k +
                         "': use delay, loss, burst, rate, queue, reorder, reorder_delay, dup");
    }
  } catch (const config_error& e) {
    const std::string what = e.what();
    if (what.rfind("unknown link key", 0) == 0) {
      throw;
    }
    throw config_error(k + "=" + std::string(value) + ": " + what);
  }
}

void apply_link_spec(std::string_view spec, std::vector<link_params>& up,
                     std::vector<link_params>& down) {
  const auto colon = spec.find(':');
  if (colon == std::string_view::npos) {
    throw config_error("link spec '" + std::string(spec) +
                       "' needs the form SELECTOR:KEY=VALUE,... e.g. h2:delay=350ms,loss=1e-3");
  }
  try {
    const link_selector sel = parse_selector(spec.substr(0, colon), up.size());
    for (const std::string_view kv : split(spec.substr(colon + 1), ',')) {
      if (kv.empty()) {
        continue;
      }
      const auto eq = kv.find('=');
      if (eq == std::string_view::npos) {
        throw config_error("'" + std::string(kv) + "' is not KEY=VALUE");
      }
      for (const std::size_t h : sel.hosts) {
        if (sel.up) {
          apply_link_setting(up[h], kv.substr(0, eq), kv.substr(eq + 1));
        }
        if (sel.down) {
          apply_link_setting(down[h], kv.substr(0, eq), kv.substr(eq + 1));
        }
      }
    }
    for (const std::size_t h : sel.hosts) {
      up[h].validate();
      down[h].validate();
    }
  } catch (const config_error& e) {
    throw config_error("link spec '" + std::string(spec) + "': " + e.what());
  }
}

run_spec parse_run_spec(std::string_view text, std::size_t host_count) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) {
    throw config_error("run spec '" + std::string(text) + "' needs the form HOST:COMMAND");
  }
  run_spec spec;
  spec.host = parse_host_name(text.substr(0, colon), host_count);
  spec.command = std::string(trim(text.substr(colon + 1)));
  if (spec.command.empty()) {
    throw config_error("run spec '" + std::string(text) + "' has an empty command");
  }
  return spec;
}

std::uint32_t parse_ipv4(std::string_view text) {
  const auto parts = split(text, '.');
  if (parts.size() != 4) {
    throw config_error("invalid IPv4 address '" + std::string(text) + "'");
  }
  std::uint32_t addr = 0;
  for (const auto p : parts) {
    addr = (addr << 8U) | static_cast<std::uint32_t>(parse_count(p, 255));
  }
  return addr;
}

std::string format_ipv4(std::uint32_t addr) {
  return std::to_string(addr >> 24U) + "." + std::to_string((addr >> 16U) & 0xFFU) + "." +
         std::to_string((addr >> 8U) & 0xFFU) + "." + std::to_string(addr & 0xFFU);
}

ipv4_prefix parse_ipv4_prefix(std::string_view text) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) {
    throw config_error("prefix '" + std::string(text) + "' needs the form a.b.c.d/len");
  }
  ipv4_prefix p;
  // Shorter than /8 would overlap the multicast and loopback ranges' neighbours; longer
  // than /30 leaves fewer than two hosts.
  p.length = static_cast<std::uint8_t>(parse_count(text.substr(slash + 1), 30));
  if (p.length < 8) {
    throw config_error("prefix length of '" + std::string(text) + "' must be 8..30");
  }
  p.network = parse_ipv4(text.substr(0, slash)) & p.netmask();
  if (is_multicast_or_reserved(p.network)) {
    throw config_error("prefix '" + std::string(text) + "' is not a unicast range");
  }
  return p;
}

namespace {

std::string toml_value_text(const toml::node& node, const std::string& where) {
  if (const auto* s = node.as_string()) {
    return s->get();
  }
  if (const auto* i = node.as_integer()) {
    return std::to_string(i->get());
  }
  if (const auto* f = node.as_floating_point()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", f->get());
    return buf;
  }
  throw config_error(where + ": expected a string or a number");
}

/// Turns one [link.SELECTOR] table into spec strings: the keys for both directions
/// first, then the .up and .down sub-tables.
void link_table_specs(const std::string& selector, const toml::table& table,
                      const std::string& source, std::vector<std::string>& out) {
  std::string both;
  std::vector<std::string> directional;
  for (const auto& [key, node] : table) {
    const std::string k(key.str());
    if ((k == "up" || k == "down") && node.is_table()) {
      std::string spec = selector + "." + k + ":";
      bool firstkv = true;
      for (const auto& [dkey, dnode] : *node.as_table()) {
        spec += (firstkv ? "" : ",") + std::string(dkey.str()) + "=" +
                toml_value_text(
                    dnode, source + ": link." + selector + "." + k + "." + std::string(dkey.str()));
        firstkv = false;
      }
      directional.push_back(spec);
      continue;
    }
    both += (both.empty() ? "" : ",") + k + "=" +
            toml_value_text(node, source + ": link." + selector + "." + k);
  }
  if (!both.empty()) {
    out.push_back(selector + ":" + both);
  }
  out.insert(out.end(), directional.begin(), directional.end());
}

int selector_rank(const std::string& selector) {
  if (selector == "all" || selector == "*") {
    return 0;
  }
  if (selector.find_first_of(",-") != std::string::npos) {
    return 1;
  }
  return 2;
}

}  // namespace

bool is_multicast_or_reserved(std::uint32_t addr) noexcept {
  return (addr >> 28U) >= 0xEU || (addr >> 24U) == 127U || (addr >> 24U) == 0U;
}

scenario_file parse_scenario_toml(std::string_view text, std::string_view source_name) {
  const std::string source(source_name);
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
        << e.description();
    throw config_error(msg.str());
  }
  scenario_file out;
  // "links" strings apply before [link.*] tables whatever their order in the file (the
  // TOML table is sorted by key, which would put "link" first).
  std::vector<std::string> table_links;
  for (const auto& [key, node_binding] : root) {
    // A named reference: lambdas cannot capture structured bindings before Clang 16.
    const toml::node& node = node_binding;
    const std::string k(key.str());
    const std::string where = source + ": " + k;
    auto need_int = [&](std::int64_t lo, std::int64_t hi) {
      const auto* i = node.as_integer();
      if (i == nullptr || i->get() < lo || i->get() > hi) {
        throw config_error(where + ": expected an integer in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
      }
      return i->get();
    };
    auto need_string = [&]() {
      const auto* s = node.as_string();
      if (s == nullptr) {
        throw config_error(where + ": expected a string");
      }
      return s->get();
    };
    if (k == "hosts") {
      out.hosts = static_cast<std::size_t>(need_int(1, 1000));
    } else if (k == "prefix") {
      out.prefix = need_string();
    } else if (k == "seed") {
      out.seed = static_cast<std::uint64_t>(need_int(0, INT64_MAX));
    } else if (k == "flood_multicast") {
      const auto* b = node.as_boolean();
      if (b == nullptr) {
        throw config_error(where + ": expected true or false");
      }
      out.flood_multicast = b->get();
    } else if (k == "ifname") {
      out.ifname = need_string();
    } else if (k == "mtu") {
      out.mtu = static_cast<std::uint32_t>(need_int(576, 65535));
    } else if (k == "run_id") {
      out.run_id = need_string();
    } else if (k == "log_dir") {
      out.log_dir = need_string();
    } else if (k == "stats_json") {
      out.stats_json = need_string();
    } else if (k == "env_file") {
      out.env_file = need_string();
    } else if (k == "duration") {
      out.duration = parse_duration(toml_value_text(node, where));
    } else if (k == "links") {
      const auto* arr = node.as_array();
      if (arr == nullptr) {
        throw config_error(where + ": expected an array of link spec strings");
      }
      for (const auto& item : *arr) {
        const auto* s = item.as_string();
        if (s == nullptr) {
          throw config_error(where + ": expected strings like \"h2:delay=350ms\"");
        }
        out.links.push_back(s->get());
      }
    } else if (k == "link") {
      const auto* table = node.as_table();
      if (table == nullptr) {
        throw config_error(where + ": expected tables [link.SELECTOR]");
      }
      std::vector<std::pair<std::string, const toml::table*>> selectors;
      for (const auto& [sel, sub] : *table) {
        if (!sub.is_table()) {
          throw config_error(where + "." + std::string(sel.str()) +
                             ": expected a table of link keys");
        }
        selectors.emplace_back(std::string(sel.str()), sub.as_table());
      }
      // Least specific first, so that [link.h2] overrides [link.all].
      std::stable_sort(selectors.begin(), selectors.end(), [](const auto& a, const auto& b) {
        return selector_rank(a.first) < selector_rank(b.first);
      });
      for (const auto& [sel, sub] : selectors) {
        link_table_specs(sel, *sub, source, table_links);
      }
    } else if (k == "run") {
      const auto* arr = node.as_array();
      if (arr == nullptr) {
        throw config_error(where + ": expected [[run]] tables");
      }
      for (const auto& item : *arr) {
        const auto* t = item.as_table();
        if (t == nullptr) {
          throw config_error(where + ": expected [[run]] tables");
        }
        std::string host;
        std::string command;
        bool is_main = false;
        for (const auto& [rk, rv] : *t) {
          const std::string rks(rk.str());
          if (rks == "host" && rv.is_string()) {
            host = rv.as_string()->get();
          } else if (rks == "command" && rv.is_string()) {
            command = rv.as_string()->get();
          } else if (rks == "main" && rv.is_boolean()) {
            is_main = rv.as_boolean()->get();
          } else {
            throw config_error(where + ": unknown or mistyped key '" + rks +
                               "' (host = \"hN\", command = \"...\", main = true|false)");
          }
        }
        if (host.empty() || command.empty()) {
          throw config_error(where + ": each [[run]] needs host and command");
        }
        out.runs.push_back(host + ":" + command);
        if (is_main) {
          out.mains.push_back(host);
        }
      }
    } else {
      throw config_error(where +
                         ": unknown key (hosts, prefix, seed, flood_multicast, ifname, "
                         "mtu, run_id, log_dir, stats_json, env_file, duration, links, "
                         "link, run)");
    }
  }
  out.links.insert(out.links.end(), table_links.begin(), table_links.end());
  return out;
}

scenario_file load_scenario_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw config_error("cannot open scenario file '" + path + "'");
  }
  std::string text;
  char buf[4096];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > k_max_scenario_bytes) {
      throw config_error("scenario file '" + path + "' is larger than 1 MiB");
    }
  }
  return parse_scenario_toml(text, path);
}

}  // namespace mcdist::linkem
