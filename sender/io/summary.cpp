#include "sender/io/summary.hpp"

#include "common/packet.hpp"
#include "common/units.hpp"
#include "common/wire.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

namespace mcdist::sender {

std::string_view to_string(receiver_report::state_t s) noexcept {
  switch (s) {
    case receiver_report::state_t::missing: return "missing";
    case receiver_report::state_t::registered: return "registered";
    case receiver_report::state_t::completed: return "completed";
    case receiver_report::state_t::failed: return "failed";
  }
  return "unknown";
}

std::string format_summary(const run_result& r) {
  const auto& rep = r.report;
  std::ostringstream os;
  char line[512];
  const double goodput =
      r.wall_seconds > 0 ? static_cast<double>(rep.transferred_bytes) * 8 / r.wall_seconds : 0;
  std::snprintf(line, sizeof line,
                "session %s: %u files, %s in %.3f s (goodput %s), %u passes, %llu datagrams "
                "(%llu repairs), GRTT %.2f ms\n",
                fmt::format("{}", rep.session).c_str(), rep.files,
                format_bytes(static_cast<double>(rep.bytes)).c_str(), r.wall_seconds,
                format_rate(goodput).c_str(), rep.passes,
                static_cast<unsigned long long>(rep.data_datagrams),
                static_cast<unsigned long long>(rep.repair_datagrams), to_ms(rep.grtt));
  os << line;
  if (rep.rate_auto) {
    os << "rate auto (max " << format_rate(static_cast<double>(rep.rate_max_bps))
       << "): " << format_rate(static_cast<double>(rep.rate_bps)) << " at the end, lowest "
       << (rep.rate_lowest_bps ? format_rate(static_cast<double>(rep.rate_lowest_bps))
                               : std::string("- (no loss reported)"))
       << ", " << rep.control.rate_reports << " rate reports"
       << (rep.control.overrun_reports > 0
               ? " (" + std::to_string(rep.control.overrun_reports) + " of receiver overrun)"
               : std::string())
       << (rep.rate_clr.empty() ? std::string() : ", limited by " + rep.rate_clr) << "\n";
  } else {
    os << "rate fixed: "
       << (rep.rate_bps ? format_rate(static_cast<double>(rep.rate_bps)) : "unpaced") << "\n";
  }
  if (rep.silent_passes > 0) {
    // No receiver reports to a silent session: what was sent is all the sender knows.
    const double share = rep.source_datagrams ? 100.0 * static_cast<double>(rep.parity_datagrams) /
                                                    static_cast<double>(rep.source_datagrams)
                                              : 0.0;
    std::snprintf(line, sizeof line,
                  "silent session: %u of %u passes sent, %llu source datagrams, %llu parity "
                  "(%.2f %% of the sources); sites send nothing, %llu datagrams arrived and were "
                  "dropped\n",
                  rep.passes, rep.silent_passes,
                  static_cast<unsigned long long>(rep.source_datagrams),
                  static_cast<unsigned long long>(rep.parity_datagrams), share,
                  static_cast<unsigned long long>(rep.control.silent_refused));
    os << line;
  }
  if (rep.block_digests) {
    const double data =
        static_cast<double>(rep.data_datagrams) *
            static_cast<double>(wire::data_header_size + packet::ipv4_udp_overhead) +
        static_cast<double>(rep.data_bytes);
    std::snprintf(line, sizeof line,
                  "block digests: %llu windows, %llu chunks sent (both copies), %llu bytes, "
                  "%.2f %% of the data and parity on the wire\n",
                  static_cast<unsigned long long>(rep.digest_windows),
                  static_cast<unsigned long long>(rep.digest_chunks),
                  static_cast<unsigned long long>(rep.digest_bytes),
                  data > 0 ? 100.0 * static_cast<double>(rep.digest_bytes) / data : 0.0);
    os << line;
  }
  if (rep.silent_passes == 0) {
    std::snprintf(line, sizeof line, "%-20s %-10s %-12s %7s %7s %11s %6s %8s %10s %9s\n",
                  "receiver", "state", "path", "files", "held", "bytes", "passes", "NAKs", "NAKed",
                  "RTT ms");
    os << line;
  }
  for (const auto& rr : rep.receivers) {
    char rtt[32] = "-";
    if (rr.rtt_valid) std::snprintf(rtt, sizeof rtt, "%.2f", to_ms(rr.rtt));
    std::snprintf(line, sizeof line, "%-20s %-10s %-12s %7u %7u %11s %6u %8llu %10llu %9s\n",
                  rr.id.c_str(), std::string(to_string(rr.state)).c_str(),
                  std::string(to_string(rr.path)).c_str(), rr.files_stored, rr.files_held,
                  format_bytes(static_cast<double>(rr.bytes_stored)).c_str(), rr.passes,
                  static_cast<unsigned long long>(rr.naks),
                  static_cast<unsigned long long>(rr.blocks_naked), rtt);
    os << line;
    if (const auto t = unicast_transport(rr.path)) {
      os << "    unicast over " << to_string(*t)
         << (rr.fallback_connections
                 ? " (" + connection_count_text(*t, rr.fallback_connections) + ")"
                 : std::string())
         << " from " << std::to_string(to_seconds(rr.fallback_at)).substr(0, 5)
         << " s: " << rr.fallback_reason << "\n";
    }
    if (!rr.reason.empty()) os << "    reason: " << rr.reason << "\n";
    if (!rr.missing_seqs.empty()) {
      os << "    never completed sessions";
      for (const auto& [first, last] : rr.missing_seqs) {
        os << ' ' << first;
        if (last != first) os << '-' << last;
      }
      os << " (last completed " << rr.last_seq << ")\n";
    }
    for (const auto& [file, why] : rr.file_failures) {
      os << "    file " << file << ": " << why << "\n";
    }
  }
  if (r.refused.total() > 0) {
    std::snprintf(line, sizeof line,
                  "refused %llu datagrams that did not authenticate (%llu bad tag, %llu no key, "
                  "%llu untrusted site key, %llu unsigned)\n",
                  static_cast<unsigned long long>(r.refused.total()),
                  static_cast<unsigned long long>(r.refused.bad_tag),
                  static_cast<unsigned long long>(r.refused.no_key),
                  static_cast<unsigned long long>(r.refused.untrusted_site),
                  static_cast<unsigned long long>(r.refused.unauthenticated));
    os << line;
  }
  if (r.fallback_hellos_refused > 0) {
    std::snprintf(line, sizeof line,
                  "refused %llu unicast fallback connections (%llu with the right token but no "
                  "proof of the site key)\n",
                  static_cast<unsigned long long>(r.fallback_hellos_refused),
                  static_cast<unsigned long long>(r.fallback_hellos_bad_proof));
    os << line;
  }
  if (r.fallback_per_source_refused + r.fallback_handshakes_evicted + r.fallback_busy_refused > 0) {
    std::snprintf(
        line, sizeof line,
        "closed %llu unicast fallback connections before their hello (%llu over their "
        "address's limit, %llu evicted at the total limit, %llu at the session limit; "
        "%llu hello timeouts)\n",
        static_cast<unsigned long long>(r.fallback_per_source_refused +
                                        r.fallback_handshakes_evicted + r.fallback_busy_refused),
        static_cast<unsigned long long>(r.fallback_per_source_refused),
        static_cast<unsigned long long>(r.fallback_handshakes_evicted),
        static_cast<unsigned long long>(r.fallback_busy_refused),
        static_cast<unsigned long long>(r.fallback_hello_timeouts));
    os << line;
  }
  if (!r.error.empty()) os << "error: " << r.error << "\n";
  return os.str();
}

std::string summary_json(const run_result& r) {
  const auto& rep = r.report;
  nlohmann::json j;
  j["session_id"] = rep.session.value;
  j["files"] = rep.files;
  j["bytes"] = rep.bytes;
  j["wall_seconds"] = r.wall_seconds;
  j["transferred_bytes"] = rep.transferred_bytes;
  j["goodput_bps"] =
      r.wall_seconds > 0 ? static_cast<double>(rep.transferred_bytes) * 8 / r.wall_seconds : 0;
  j["passes"] = rep.passes;
  j["data_datagrams"] = rep.data_datagrams;
  j["repair_datagrams"] = rep.repair_datagrams;
  j["late_key_blocks"] = rep.late_key_blocks;
  j["parity_datagrams"] = rep.parity_datagrams;  // proactive and for NAKs
  j["proactive_parity"] = rep.proactive_parity;
  const auto& c = rep.control;
  j["control_received"] = {{"register", c.registers},    {"nak", c.naks},
                           {"status", c.status},         {"complete", c.completes},
                           {"nak_blocks", c.nak_blocks}, {"nak_new_blocks", c.nak_new_blocks}};
  j["repair_adverts"] = {{"sent", c.adverts}, {"blocks", c.advertised_blocks}};
  j["silent_passes"] = rep.silent_passes;  // 0: a normal session
  j["source_datagrams"] = rep.source_datagrams;
  j["silent_refused"] = c.silent_refused;  // datagrams that reached a silent session
  // Block digests (silent signed sessions): bytes as the pacer counts them (IP and UDP headers
  // included), both copies of every window.
  j["block_digests"] = {{"enabled", rep.block_digests},
                        {"windows", rep.digest_windows},
                        {"chunks", rep.digest_chunks},
                        {"bytes", rep.digest_bytes}};
  j["data_bytes"] = rep.data_bytes;
  j["grtt_ms"] = to_ms(rep.grtt);
  j["rate"] = {{"mode", rep.rate_auto ? "auto" : "fixed"},
               {"bps", rep.rate_bps},
               {"lowest_bps", rep.rate_lowest_bps},
               {"max_bps", rep.rate_max_bps},
               {"clr", rep.rate_clr},
               {"reports", c.rate_reports},
               {"overrun_reports", c.overrun_reports}};
  j["succeeded"] = r.succeeded;
  j["signed"] = r.signed_session;
  j["encrypted"] = r.encrypted_session;
  if (!rep.channel.empty()) {
    j["channel"] = rep.channel;
    j["channel_seq"] = rep.channel_seq;
  }
  j["refused_unauthenticated"] = {{"bad_tag", r.refused.bad_tag},
                                  {"no_key", r.refused.no_key},
                                  {"untrusted_site", r.refused.untrusted_site},
                                  {"unsigned", r.refused.unauthenticated}};
  // Ed25519 signatures made: one per announce tree, digest list and session end.
  if (r.signed_session) j["signatures"] = r.refused.signatures;
  j["fallback_refused"] = {{"hellos", r.fallback_hellos_refused},
                           {"bad_proof", r.fallback_hellos_bad_proof},
                           {"per_source", r.fallback_per_source_refused},
                           {"evicted", r.fallback_handshakes_evicted},
                           {"busy", r.fallback_busy_refused},
                           {"hello_timeouts", r.fallback_hello_timeouts}};
  if (!r.error.empty()) j["error"] = r.error;
  nlohmann::json drops = nlohmann::json::object();
  for (std::size_t i = 1; i < rep.drops.counts.size(); ++i) {
    if (rep.drops.counts[i])
      drops[std::string(to_string(static_cast<errc>(i)))] = rep.drops.counts[i];
  }
  j["dropped"] = drops;
  auto& list = j["receivers"] = nlohmann::json::array();
  for (const auto& rr : rep.receivers) {
    nlohmann::json o;
    o["id"] = rr.id;
    o["state"] = std::string(to_string(rr.state));
    o["path"] = std::string(to_string(rr.path));
    o["files"] = rr.files_stored;
    o["files_held"] = rr.files_held;
    o["bytes"] = rr.bytes_stored;
    o["passes"] = rr.passes;
    o["naks"] = rr.naks;
    o["blocks_naked"] = rr.blocks_naked;
    o["rtt_ms"] = rr.rtt_valid ? nlohmann::json(to_ms(rr.rtt)) : nlohmann::json(nullptr);
    o["completion_seconds"] = to_seconds(rr.completion_time);
    o["address"] = rr.address.to_string();
    if (!rr.reason.empty()) o["reason"] = rr.reason;
    if (const auto t = unicast_transport(rr.path)) {
      o["fallback"] = {{"transport", std::string(to_string(*t))},
                       {"reason", rr.fallback_reason},
                       {"at_seconds", to_seconds(rr.fallback_at)}};
      if (rr.fallback_connections) o["fallback"]["connections"] = rr.fallback_connections;
    }
    auto& ff = o["file_failures"] = nlohmann::json::array();
    for (const auto& [file, why] : rr.file_failures)
      ff.push_back({{"file", file}, {"reason", why}});
    // Sequenced sessions: what the site reported in its REGISTER (docs/design-notes.md
    // "Session sequence numbers"); inclusive [first, last] pairs.
    o["last_seq"] = rr.last_seq;
    auto& ms = o["missing_seqs"] = nlohmann::json::array();
    for (const auto& [first, last] : rr.missing_seqs) ms.push_back({first, last});
    list.push_back(std::move(o));
  }
  return j.dump(2) + "\n";
}

std::string incomplete_receivers(const run_result& r) {
  std::size_t bad = 0;
  std::string names;
  for (const auto& rr : r.report.receivers) {
    if (rr.state == receiver_report::state_t::completed) continue;
    ++bad;
    names +=
        (names.empty() ? "" : ", ") + rr.id + (rr.reason.empty() ? "" : " (" + rr.reason + ")");
  }
  if (r.report.receivers.empty()) names = "no receiver registered";
  return std::to_string(bad) + " of " + std::to_string(r.report.receivers.size()) +
         " receivers did not complete: " + names;
}

}  // namespace mcdist::sender
