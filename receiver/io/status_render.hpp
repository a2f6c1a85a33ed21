#pragma once
/// @file
/// mcdistd's status port documents, rendered from one snapshot of the daemon's state:
///   - /metrics: Prometheus text format 0.0.4 (common/http/prometheus_text.hpp); names by the
///     Prometheus naming practice, `mcdist_receiver_` prefix, base units, `_total` counters;
///   - /status: JSON, the status file's fields plus channels with their last products and
///     ages, recent warnings and errors, and bytes per minute;
///   - /: an HTML page for a person (no script, no external asset): channels and their last
///     products with ages, recent warnings and errors, throughput over the last hour as an
///     inline SVG bar chart. It reloads itself every 10 s.
/// Pure functions of the snapshot.

#include "common/auth.hpp"
#include "common/daemon/status_port.hpp"
#include "receiver/core/receiver_engine.hpp"
#include "receiver/io/daemon_config.hpp"
#include "receiver/io/relay_forwarder.hpp"
#include "receiver/io/status_board.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace mcdist::receiver {

/// Everything the documents show, gathered on the io thread.
struct status_snapshot {
  std::string id;  ///< receiver id
  wall_time now{};
  wall_time started{};
  const std::vector<channel_config>* channels = nullptr;  ///< configured channels
  /// Per channel index: removed by a reload (not shown). nullptr: every channel is shown.
  const std::vector<bool>* retired = nullptr;
  /// Configuration reloads (SIGHUP) applied and refused.
  std::uint64_t reloads_ok = 0;
  std::uint64_t reloads_failed = 0;
  const receiver_stats* stats = nullptr;  ///< the engine's counters
  const status_board* board = nullptr;
  std::size_t sessions_active = 0;
  std::size_t unicast_active = 0;   ///< unicast fallback transfers running
  std::uint64_t bytes_written = 0;  ///< storage: bytes written to temp files
  /// Storage: parity repairs (file_store::stats; docs/design-notes.md "Parity repairs").
  struct parity_counters {
    std::uint64_t kept = 0;     ///< parity blocks kept
    std::uint64_t refused = 0;  ///< parity blocks refused (parity_memory full)
    std::uint64_t bytes = 0;    ///< parity bytes held now
    std::uint64_t fec_blocks_recovered = 0;
    std::uint64_t blocks_recovered = 0;  ///< source blocks decoded and written
    std::uint64_t decode_failures = 0;
  } parity;
  /// Storage: group commits, and those made by one syncfs (file_store::stats).
  std::uint64_t commit_batches = 0;
  std::uint64_t commit_batches_syncfs = 0;
  std::uint64_t dropped_by_option = 0;  ///< --drop-rate (test option)
  auth::auth_stats not_authenticated;   ///< refused by authentication (common/auth.hpp)
  std::uint64_t read_pauses = 0;        ///< reads paused for a full storage pool
  log_summary log;                      ///< recent warnings and errors, and how many were logged
  nlohmann::json status_file;           ///< the status file's document
  /// WIS2 actions: channel name, topic and counters (wis2_publisher::stats), in config order.
  struct wis2_entry {
    std::string channel;
    std::string topic;
    wis2_stats stats;
  };
  std::vector<wis2_entry> wis2;
  /// Channel numbering (sequence_book::status): per channel as announced and sender.
  std::vector<sequence_status> sequences;
  /// Actions on receipt: name and counters, in config order.
  std::vector<std::pair<std::string, action_stats>> actions;
  /// Relays (relay_forwarder): per relayed channel its name and counters, in channel order.
  std::vector<std::pair<std::string, relay_forwarder::counters>> relays;
  /// Retention: delivered products deleted, and those left because they changed since.
  std::uint64_t retention_deleted = 0;
  std::uint64_t retention_skipped = 0;
};

/// The /metrics text.
std::string render_metrics(const status_snapshot& s);
/// The /status document.
nlohmann::json render_status_json(const status_snapshot& s);
/// The / page.
std::string render_status_page(const status_snapshot& s);

}  // namespace mcdist::receiver
