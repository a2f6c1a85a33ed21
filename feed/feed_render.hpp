#pragma once
/// @file
/// mcdist-feed's status port documents, rendered from one snapshot of the daemon's state (as
/// receiver/io/status_render.hpp for mcdistd):
///   - /metrics: Prometheus text format 0.0.4 (common/http/prometheus_text.hpp): `mcdist_feed_`
///     for the hub's channels and outcomes, `mcdist_sender_` for what the sending side measures
///     of each site (RTT, NAK ratio, fallbacks); base units, `_total` counters;
///   - /status: JSON, feed_daemon::status() with, per channel, the products sent and the last
///     products, and per site its state, last seen, RTT, NAK ratio, lag and fallbacks;
///   - /: an HTML page for a person, in mcdistd's look (common/http/html.hpp; no script, no
///     external asset): channels with their queue, running session and last products, sites,
///     recent warnings and errors, the bytes multicast per minute over the last hour as an
///     inline SVG bar chart. It reloads itself every 10 s.
/// Pure functions of the snapshot.

#include "common/daemon/status_port.hpp"
#include "feed/feed_board.hpp"
#include "feed/feed_config.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace mcdist::feed {

/// Everything the documents show, gathered on the io thread.
struct feed_snapshot {
  std::string version;  ///< mcdist's version (the build's)
  wall_time now{};
  wall_time started{};
  const feed_config* cfg = nullptr;
  /// feed_daemon::status(): "channels" in configuration order (index i = board channel i)
  nlohmann::json daemon;
  const feed_board* board = nullptr;
  log_summary log;  ///< recent warnings and errors, and how many were logged
};

/// A site's lag: what it has not stored yet.
struct site_lag {
  std::uint64_t missing = 0;  ///< products sent that it did not store or hold (failed, missed)
  std::uint64_t queued = 0;   ///< products waiting on the channels it is on
  std::optional<double> oldest_missing_age_s;  ///< age of the oldest missing product
  bool truncated = false;  ///< missing is a lower bound (feed_board::max_missing_tracked)
};

/// The lag of `site` in the snapshot.
site_lag lag_of(const feed_snapshot& s, const site_tally& site);

/// The /metrics text.
std::string render_feed_metrics(const feed_snapshot& s);
/// The /status document.
nlohmann::json render_feed_status(const feed_snapshot& s);
/// The / page.
std::string render_feed_page(const feed_snapshot& s);

}  // namespace mcdist::feed
