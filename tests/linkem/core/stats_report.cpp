#include "tests/linkem/core/stats_report.hpp"

#include <cstdio>

namespace mcdist::linkem {
namespace {

direction_stats direction_snapshot(const forwarder& fwd, std::size_t host, direction dir,
                                   bool include_in_flight) {
  direction_stats d;
  const link_counters& c = fwd.counters(host, dir);
  for (std::size_t i = 0; i < k_link_counter_count; ++i) {
    d.values[i] = c.get(static_cast<link_counter>(i));
  }
  if (include_in_flight) {
    d.in_flight = fwd.in_flight(host, dir);
  }
  return d;
}

std::string human_bytes(std::uint64_t bytes) {
  char buf[32];
  const auto b = static_cast<double>(bytes);
  if (b >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2fGB", b / 1e9);
  } else if (b >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fMB", b / 1e6);
  } else if (b >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fkB", b / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%lluB", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

void append_direction_json(std::string& out, const direction_stats& d) {
  out += "{\"params\":" + json_quote(d.params);
  for (std::size_t i = 0; i < k_link_counter_count; ++i) {
    out += ",\"" + std::string(link_counter_name(static_cast<link_counter>(i))) +
           "\":" + std::to_string(d.values[i]);
  }
  out += ",\"in_flight\":" + std::to_string(d.in_flight) + "}";
}

}  // namespace

run_stats snapshot_stats(const forwarder& fwd, const std::vector<std::string>& names,
                         const std::vector<std::string>& netns,
                         const std::vector<std::string>& addresses, bool include_in_flight) {
  run_stats s;
  for (std::size_t h = 0; h < fwd.host_count(); ++h) {
    host_stats hs;
    hs.name = h < names.size() ? names[h] : "h" + std::to_string(h);
    hs.netns = h < netns.size() ? netns[h] : "";
    hs.address = h < addresses.size() ? addresses[h] : "";
    hs.up = direction_snapshot(fwd, h, direction::up, include_in_flight);
    hs.down = direction_snapshot(fwd, h, direction::down, include_in_flight);
    s.hosts.push_back(std::move(hs));
  }
  for (std::size_t i = 0; i < k_global_counter_count; ++i) {
    s.global[i] = fwd.counter_value(static_cast<global_counter>(i));
  }
  for (std::size_t i = 0; i < k_lateness_buckets; ++i) {
    s.lateness[i] = fwd.lateness_bucket(i);
  }
  s.pool_reserved_bytes = fwd.pool().reserved_bytes();
  s.pool_peak_bytes = fwd.pool().peak_in_use_bytes();
  return s;
}

std::string format_stats_table(const run_stats& stats) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-5s %-4s %12s %10s %12s %10s %10s %10s %9s %9s %9s %9s\n",
                "host", "dir", "packets_in", "bytes_in", "delivered", "bytes_out", "lost",
                "queue_drop", "other", "dup", "reorder", "in_flight");
  out += line;
  for (const auto& h : stats.hosts) {
    for (const auto* dname : {"up", "down"}) {
      const direction_stats& d = std::string_view(dname) == "up" ? h.up : h.down;
      std::snprintf(line, sizeof line,
                    "%-5s %-4s %12llu %10s %12llu %10s %10llu %10llu %9llu %9llu %9llu %9llu\n",
                    h.name.c_str(), dname,
                    static_cast<unsigned long long>(d.get(link_counter::packets_in)),
                    human_bytes(d.get(link_counter::bytes_in)).c_str(),
                    static_cast<unsigned long long>(d.get(link_counter::delivered)),
                    human_bytes(d.get(link_counter::bytes_delivered)).c_str(),
                    static_cast<unsigned long long>(d.get(link_counter::dropped_loss)),
                    static_cast<unsigned long long>(d.get(link_counter::dropped_queue)),
                    static_cast<unsigned long long>(d.get(link_counter::dropped_other)),
                    static_cast<unsigned long long>(d.get(link_counter::duplicated)),
                    static_cast<unsigned long long>(d.get(link_counter::reordered)),
                    static_cast<unsigned long long>(d.in_flight));
      out += line;
    }
  }
  out += "switch:";
  for (std::size_t i = 0; i < k_global_counter_count; ++i) {
    out += " " + std::string(global_counter_name(static_cast<global_counter>(i))) + "=" +
           std::to_string(stats.global[i]);
  }
  out += "\n";
  out += "release lateness (write time - due time):";
  for (std::size_t i = 0; i < k_lateness_buckets; ++i) {
    if (stats.lateness[i] == 0) {
      continue;
    }
    out += i < k_lateness_bounds_us.size()
               ? " <" + std::to_string(k_lateness_bounds_us[i]) + "us:"
               : " >=" + std::to_string(k_lateness_bounds_us.back()) + "us:";
    out += std::to_string(stats.lateness[i]);
  }
  out += "\n";
  std::string tun;
  for (const auto& h : stats.hosts) {
    if (h.tun_tx_dropped && *h.tun_tx_dropped > 0) {
      tun += " " + h.name + "=" + std::to_string(*h.tun_tx_dropped);
    }
  }
  if (!tun.empty()) {
    out += "kernel TUN tx drops (emulator too slow to read):" + tun + "\n";
  }
  for (const auto& h : stats.hosts) {
    if (!h.ingress_stamps) {
      continue;
    }
    const auto& g = *h.ingress_stamps;
    std::snprintf(
        line, sizeof line,
        "ingress %s: tap-dated=%llu read-dated=%llu skipped=%llu lost=%llu "
        "longest wait on the device=%.1fms\n",
        h.name.c_str(), static_cast<unsigned long long>(g.tapped),
        static_cast<unsigned long long>(g.read_stamped), static_cast<unsigned long long>(g.skipped),
        static_cast<unsigned long long>(g.lost), static_cast<double>(g.max_wait_us) / 1000.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "packet memory: peak %s in use, %s reserved; elapsed %.3fs\n",
                human_bytes(stats.pool_peak_bytes).c_str(),
                human_bytes(stats.pool_reserved_bytes).c_str(), stats.elapsed_seconds);
  out += line;
  return out;
}

std::string format_stats_json(const run_stats& stats) {
  std::string out = "{";
  char num[64];
  std::snprintf(num, sizeof num, "%.6f", stats.elapsed_seconds);
  out += "\"elapsed_s\":" + std::string(num) + ",\"hosts\":[";
  bool first = true;
  for (const auto& h : stats.hosts) {
    out += first ? "" : ",";
    first = false;
    out += "{\"name\":" + json_quote(h.name) + ",\"netns\":" + json_quote(h.netns) +
           ",\"address\":" + json_quote(h.address) + ",\"up\":";
    append_direction_json(out, h.up);
    out += ",\"down\":";
    append_direction_json(out, h.down);
    if (h.tun_tx_dropped) {
      out += ",\"tun_tx_dropped\":" + std::to_string(*h.tun_tx_dropped);
    }
    if (h.ingress_stamps) {
      const auto& g = *h.ingress_stamps;
      out += ",\"ingress\":{\"tap_dated\":" + std::to_string(g.tapped) +
             ",\"read_dated\":" + std::to_string(g.read_stamped) +
             ",\"skipped\":" + std::to_string(g.skipped) + ",\"lost\":" + std::to_string(g.lost) +
             ",\"max_wait_us\":" + std::to_string(g.max_wait_us) + "}";
    }
    out += "}";
  }
  out += "],\"switch\":{";
  for (std::size_t i = 0; i < k_global_counter_count; ++i) {
    out += (i == 0 ? "\"" : ",\"") +
           std::string(global_counter_name(static_cast<global_counter>(i))) +
           "\":" + std::to_string(stats.global[i]);
  }
  out += "},\"lateness_histogram_us\":[";
  for (std::size_t i = 0; i < k_lateness_buckets; ++i) {
    out += (i == 0 ? "{\"below\":" : ",{\"below\":") +
           (i < k_lateness_bounds_us.size() ? std::to_string(k_lateness_bounds_us[i]) : "null") +
           ",\"count\":" + std::to_string(stats.lateness[i]) + "}";
  }
  out += "],\"memory\":{\"reserved_bytes\":" + std::to_string(stats.pool_reserved_bytes) +
         ",\"peak_in_use_bytes\":" + std::to_string(stats.pool_peak_bytes) + "}}";
  return out;
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

}  // namespace mcdist::linkem
