#pragma once
/// @file
/// What mcdist-feed's status port shows beyond feed_daemon::status(): per channel the products
/// sent, their bytes, the sessions by kind, the last products (a bounded ring) and the bytes
/// multicast per minute over the last hour; per site its state in its last session, when it
/// was last seen, RTT, NAK ratio, fallbacks by transport, outcomes by kind and its lag (the
/// products it has not stored yet). Fed by the daemon at the end of each session, next to the
/// journal writes (feed_daemon::record_outcomes, on_session_done). Pure: wall-clock time is
/// passed in; no I/O, no Asio.
///
/// Counts start at zero with the daemon (Prometheus counters may reset: rate() handles it);
/// the journal keeps the durable history (mcdistctl history / missing).

#include "common/delivery_path.hpp"
#include "common/http/throughput.hpp"
#include "feed/journal.hpp"
#include "sender/core/sender_session.hpp"
#include "sender/io/summary.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist::feed {

/// One product as the page lists it, once its batch session ended.
struct sent_record {
  std::string name;  ///< path inside the set
  std::uint64_t size = 0;
  std::uint64_t seq = 0;       ///< the batch's sequence number
  std::string session;         ///< session id, text form
  wall_time at{};              ///< when its session ended
  std::uint32_t sites_ok = 0;  ///< sites that stored or held it
  std::uint32_t sites = 0;     ///< sites in the session
};

/// Per-channel counters, recent products and throughput.
struct channel_tally {
  std::uint64_t products_sent = 0;  ///< products of ended batch sessions
  std::uint64_t bytes_sent = 0;     ///< their sizes
  /// Spool files refused: at intake (a name that cannot be a product) or when their batch
  /// opened them (not a regular file, a link, changed since queued); journaled failed.
  std::uint64_t products_refused = 0;
  /// Sessions ended, by session_kind (batch, catchup, resend).
  std::array<std::uint64_t, 3> sessions{};
  /// Data datagrams of ended sessions (every kind), by datagram_kind: first sends of source
  /// blocks and silent sessions' later passes; repairs (blocks sent again and parity sent for
  /// NAKs, sender::session_report::repair_datagrams, less the next kind); blocks sent again for
  /// sites keyed after them (session_report::late_key_blocks); proactive parity. What the
  /// channel's sites' losses cost on the wire is the repair share.
  std::array<std::uint64_t, 4> datagrams{};
  std::optional<wall_time> last_sent;  ///< end of the latest batch session
  std::deque<sent_record> recent;      ///< newest last, at most feed_board::max_recent_products
  http::minute_ring minutes;           ///< multicast payload bytes, repairs included
};

/// Index into channel_tally::datagrams.
enum class datagram_kind : std::size_t {
  first = 0,
  repair = 1,
  proactive_parity = 2,
  late_key = 3
};

/// Per-site figures, from its latest session on any channel.
struct site_tally {
  /// Outcome of its latest session (sender/io/summary.hpp: completed, failed, registered,
  /// missing), or "missed" once a product it never got was given up.
  std::string state;
  /// How its latest session's data reached it (none while missing).
  std::optional<delivery_path> path;
  std::string channel;                          ///< of its latest session
  std::set<std::string, std::less<>> channels;  ///< every channel it was seen on
  std::optional<wall_time> last_seen;           ///< end of the latest session it took part in
  std::optional<double> rtt_s;                  ///< last RTT sample, seconds
  double nak_ratio = 0;  ///< blocks NAKed / data datagrams sent, latest session, 0..1
  std::map<transport_kind, std::uint64_t> fallbacks;  ///< sessions moved to unicast, by transport
  std::array<std::uint64_t, 4> outcomes{};            ///< by outcome (stored, held, failed, missed)
  /// Products sent that it has not stored or held yet: id -> (channel, when first missed).
  std::map<std::int64_t, std::pair<std::string, wall_time>> missing;
  /// More products were missing than feed_board::max_missing_tracked: `missing` holds the
  /// first ones only, so the lag is a lower bound.
  bool missing_truncated = false;
};

/// The board. Not thread-safe: the daemon's io thread owns it.
class feed_board {
 public:
  /// Products kept per channel (50, as mcdistd's page: what a person scans).
  static constexpr std::size_t max_recent_products = 50;
  /// Minutes of throughput kept: the page's chart covers the last hour.
  static constexpr std::size_t minutes_kept = http::minute_ring::minutes_kept;
  /// Missing products remembered per site (10,000: a site down for a day of a busy channel;
  /// ~100 bytes each, 1 MB per site at most).
  static constexpr std::size_t max_missing_tracked = 10'000;

  /// @param channels  configured channel names, in configuration order (indexes of the calls)
  explicit feed_board(std::vector<std::string> channels);

  /// A product x site outcome, as journaled. stored/held clear the product from the site's
  /// lag, failed/missed add it.
  void record_outcome(std::string_view site, std::size_t channel, std::int64_t product_id,
                      feed::outcome o, wall_time now);
  /// At start-up: a product the journal lists as missing at `site` since `since` (its lag
  /// survives a restart). Counts no outcome and changes no state.
  void restore_missing(std::string_view site, std::size_t channel, std::int64_t product_id,
                       wall_time since);
  /// A site's report at the end of a session on `channel` (any state). A site that never
  /// registered (state missing, or failed without an address) is "missing" and not seen.
  /// @param nak_ratio  as journaled (site_row::nak_ratio)
  void site_report(std::size_t channel, const sender::receiver_report& r, double nak_ratio,
                   wall_time now);
  /// A session ended on `channel`. `products_sent`: its products count as sent (a batch that
  /// was not interrupted by shutdown). `products[i]` is the session's file i.
  void session_done(std::size_t channel, session_kind kind, std::uint64_t seq,
                    const std::vector<product>& products, const sender::session_report& report,
                    bool products_sent, wall_time now);

  /// A spool file of `channel` was refused (channel_tally::products_refused).
  void refused(std::size_t channel) { ++m_channels.at(channel).products_refused; }

  /// A channel added by a reload: the next index.
  void add_channel(std::string name) {
    m_names.push_back(std::move(name));
    m_channels.emplace_back();
  }

  const std::vector<std::string>& channel_names() const noexcept { return m_names; }
  const std::vector<channel_tally>& channels() const noexcept { return m_channels; }
  /// By site name.
  const std::map<std::string, site_tally, std::less<>>& sites() const noexcept { return m_sites; }
  /// Bytes multicast on `channel` in each of the last minutes_kept minutes, oldest first, the
  /// last entry being the minute of `now`. A session's bytes count in the minute it ended.
  std::vector<std::uint64_t> bytes_per_minute(std::size_t channel, wall_time now) const;

 private:
  std::vector<std::string> m_names;
  std::vector<channel_tally> m_channels;
  std::map<std::string, site_tally, std::less<>> m_sites;
};

}  // namespace mcdist::feed
