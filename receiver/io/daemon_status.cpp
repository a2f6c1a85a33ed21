// daemon: the status it reports: the periodic status log line, the status file's JSON (also
// served on the status port) and its atomic write.
#include "receiver/io/daemon.hpp"

#include "common/units.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace mcdist::receiver {

namespace {

/// Datagrams the engine dropped, by reason.
nlohmann::json dropped_status(const receiver_stats& st) {
  nlohmann::json drops = nlohmann::json::object();
  for (std::size_t i = 1; i < st.drops.counts.size(); ++i) {
    if (st.drops.counts[i])
      drops[std::string(to_string(static_cast<errc>(i)))] = st.drops.counts[i];
  }
  return drops;
}

/// One WIS2 publisher's state and counters.
nlohmann::json wis2_status(const wis2_publisher& p) {
  const auto ws = p.stats();
  return {{"channel", p.channel()},    {"topic", p.action().topic}, {"connected", ws.connected},
          {"published", ws.published}, {"failed", ws.failed},       {"dropped", ws.dropped},
          {"queued", ws.queued}};
}

/// Per channel (as announced) and sender: the newest session number seen, the newest
/// completed, and how many below the newest were never completed.
nlohmann::json sequences_status(const std::vector<sequence_status>& streams) {
  auto seqs = nlohmann::json::array();
  for (const auto& q : streams) {
    seqs.push_back({{"channel", q.channel},
                    {"source", q.source},
                    {"last_seq_seen", q.last_seen},
                    {"last_seq_completed", q.last_completed},
                    {"missing_sessions", q.missing}});
  }
  return seqs;
}

/// Each action's runs by outcome.
nlohmann::json actions_status(const action_runner& runner) {
  auto acts = nlohmann::json::array();
  for (const auto& [name, as] : runner.stats()) {
    acts.push_back({{"name", name},
                    {"done", as.done},
                    {"retried", as.retried},
                    {"failed", as.failed},
                    {"running", as.running},
                    {"queued", as.queued}});
  }
  return acts;
}

/// Authentication's refusals and costs.
void add_auth_status(nlohmann::json& j, const auth::auth_stats& a) {
  j["not_authenticated"] = {{"bad_signature", a.bad_signature},
                            {"bad_tag", a.bad_tag},
                            {"no_key", a.no_key},
                            {"unsigned", a.unauthenticated},
                            {"verify_budget", a.verify_budget},
                            {"bad_path", a.bad_path},
                            {"bad_digest", a.bad_digest},
                            {"no_digest", a.no_digest}};
  // Block digests (silent signed sessions, docs/security.md "Block digests"): verified chunks
  // taken and blocks whose digest matched.
  j["block_digests"] = {{"chunks", a.digest_chunks}, {"blocks_checked", a.blocks_checked}};
  // What announce signatures cost (docs/security.md "Announce trees"): Ed25519 checks made,
  // and announces verified by their path to a root checked before.
  j["announce_signatures"] = {{"checked", a.signatures}, {"by_path", a.by_path}};
  // Relays of signed sessions: at a relay, the hub's delegations received; at a site behind
  // one, relay keys bound by a verified relay_hello.
  j["relay_delegations"] = a.delegations;
}

}  // namespace

void daemon::log_status(bool final) {
  const auto& st = m_engine->stats();
  const auto ss = m_store->get_stats();
  std::string drops;
  for (std::size_t i = 1; i < st.drops.counts.size(); ++i) {
    if (st.drops.counts[i] == 0) continue;
    drops += (drops.empty() ? "" : ", ") + std::string(to_string(static_cast<errc>(i))) + " " +
             std::to_string(st.drops.counts[i]);
  }
  if (m_read_pauses) {
    drops += (drops.empty() ? "" : ", ") + std::string("(reads paused for storage ") +
             std::to_string(m_read_pauses) + " times)";
  }
  if (m_dropped_by_option) {
    drops += (drops.empty() ? "" : ", ") + std::string("--drop-rate ") +
             std::to_string(m_dropped_by_option);
  }
  if (const auto a = m_keys->stats(); a.total() > 0) {
    drops += (drops.empty() ? "" : ", ") +
             fmt::format(
                 "not authenticated {} (bad signature {}, bad path {}, bad tag {}, bad digest {}, "
                 "no digest {}, no key {}, unsigned {}, over the verification budget {})",
                 a.total(), a.bad_signature, a.bad_path, a.bad_tag, a.bad_digest, a.no_digest,
                 a.no_key, a.unauthenticated, a.verify_budget);
  }
  m_log->info(
      "{}: {} sessions active, {} completed, {} failed; {} files stored, {} failed, {} "
      "refused; {} received; dropped: {}",
      final ? "final status" : "status", m_engine->active_sessions(), st.sessions_completed,
      st.sessions_failed, st.files_stored, st.files_failed, st.files_refused,
      format_bytes(static_cast<double>(st.data_bytes)), drops.empty() ? "none" : drops);
  if (ss.parity_kept + ss.parity_refused > 0) {
    m_log->info(
        "{}: parity: {} blocks kept, {} refused (parity_memory), {} bytes held; {} FEC "
        "blocks decoded, {} blocks recovered, {} decode failures",
        final ? "final status" : "status", ss.parity_kept, ss.parity_refused, ss.parity_bytes,
        ss.fec_blocks_recovered, ss.blocks_recovered, ss.decode_failures);
  }
  if (m_cfg.status_file) write_status_file();
  if (!final && !m_stopping) {
    m_status_timer.expires_after(m_cfg.status_interval);
    m_status_timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) log_status(false);
    });
  }
}

nlohmann::json daemon::status_json() {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  const auto& st = m_engine->stats();
  const auto ss = m_store->get_stats();
  nlohmann::json j;
  j["id"] = m_cfg.id;
  j["sessions_active"] = m_engine->active_sessions();
  j["sessions_completed"] = st.sessions_completed;
  j["sessions_failed"] = st.sessions_failed;
  j["files_stored"] = st.files_stored;
  j["files_failed"] = st.files_failed;
  j["files_refused"] = st.files_refused;
  j["datagrams"] = st.datagrams;
  j["data_bytes"] = st.data_bytes;
  j["naks_sent"] = st.naks_sent;
  j["datagrams_sent"] = m_datagrams_sent;  // every datagram from the control socket
  // Silent sessions (docs/design-notes.md "Silent sessions"): files they ended without, and
  // the feedback they did not send.
  j["files_incomplete"] = st.files_incomplete;
  j["silent_suppressed"] = st.silent_suppressed;
  // --rate auto: this host's socket buffer overran (docs/design-notes.md "Receiver overrun").
  j["overrun_reports"] = st.overrun_reports;
  j["overrun_lost"] = st.overrun_lost;
  j["session_memory_bytes"] = m_engine->memory_charged();  // charged to the memory budgets
  j["bytes_written"] = ss.bytes_written;
  j["parity"] = {{"kept", ss.parity_kept},
                 {"refused", ss.parity_refused},
                 {"bytes", ss.parity_bytes},
                 {"fec_blocks_recovered", ss.fec_blocks_recovered},
                 {"blocks_recovered", ss.blocks_recovered},
                 {"decode_failures", ss.decode_failures}};
  j["commit"] = {{"batches", ss.commit_batches}, {"batches_by_syncfs", ss.commit_batches_syncfs}};
  j["dropped_by_drop_rate"] = m_dropped_by_option;
  j["read_pauses"] = m_read_pauses;
  j["announce_repeats_unchecked"] = m_keys->repeats_unchecked();  // auth::announce_repeat_interval
  const auto& hb = m_heartbeats.stats();
  j["heartbeats"] = {
      {"taken", hb.taken}, {"refused", hb.refused}, {"gap_reports_sent", hb.gap_reports_sent}};
  j["catch_up"] = m_catch_up.status();  // catch-up over HTTP(S) of silent channels
  j["dropped"] = dropped_status(st);
  // Per channel: datagrams read from its socket, and those from another host than a
  // source-specific channel's source (0 while the kernel filters them, as it should).
  // (Not "channels": the status port's JSON puts its per-channel products there.)
  j["channel_sockets"] = m_channels.status(m_cfg.channels);
  j["interface"] = m_channels.interface().to_string();
  // Relayed channels: what was sent on, refused, and how long it waited here.
  j["relay"] = m_relays.status(m_cfg.channels);
  if (!m_wis2.empty()) {
    auto& w = j["wis2"] = nlohmann::json::array();
    for (const auto& [channel, p] : m_wis2) w.push_back(wis2_status(*p));
  }
  j["sequences"] = sequences_status(m_engine->sequences().status());
  if (const auto& runner = m_deliveries->actions(); !runner.actions().empty()) {
    j["actions"] = actions_status(runner);
  }
  j["retention"] = {{"deleted", m_retention->deleted()}, {"skipped", m_retention->skipped()}};
  j["config_reloads"] = {{"success", m_reloads_ok}, {"failure", m_reloads_failed}};
  j["journal"] = m_deliveries->journal().file().string();
  add_auth_status(j, m_keys->stats());
  return j;
}

void daemon::write_status_file() {
  const auto j = status_json();
  const auto tmp = m_cfg.status_file->string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) {
      m_log->warn("cannot write the status file {}", tmp);
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, *m_cfg.status_file, ec);
  if (ec)
    m_log->warn("cannot rename the status file into {}: {}", m_cfg.status_file->string(),
                ec.message());
}

}  // namespace mcdist::receiver
