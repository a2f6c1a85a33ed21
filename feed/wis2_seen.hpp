#pragma once
/// @file
/// The WIS2 notifications the hub took (`[[wis2_input]]`), in the hub journal's table
/// wis2_notifications (schema version 4; SQLite journals only), and the duplicate rules applied
/// to new ones:
///
/// - a notification whose `id` was seen is a duplicate, whatever became of the first one: the
///   Global Brokers' anti-loop rule (Guide to WIS, WMO-No. 1061, Volume II, 2.7.3.1; WNM 1.0
///   "Identifier": the id "provides the anti-loop feature"). A hub subscribed to two Global
///   Brokers gets every notification twice, with the same id;
/// - a notification whose `properties.data_id` was taken (downloading, or in the spool) with a
///   `pubtime` at or after its own is a duplicate: the Global Caches' rule (2.7.4.2: download
///   "only new or updated data", an update having a later pubtime). A Global Cache republishes
///   what it cached under a new id with the same data_id, so the same product reaches a hub
///   subscribed to several caches under several ids. A data_id whose download failed for good
///   does not block a later notification of it (another cache may serve it).
///
/// Rows are kept for the dedupe window (wis2_dedupe_window) and at most a bounded number;
/// pending rows (downloads not finished) are never forgotten: they carry what the download
/// needs, and a restart resumes them.
///
/// Not thread-safe, like the journal: the feed's io thread only.

#include "common/sqlite/sqlite.hpp"
#include "feed/journal.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist::feed {

/// A notification taken for download, as the journal keeps it.
struct wis2_taken {
  std::int64_t row = 0;         ///< journal row (0 before accept)
  std::string notification_id;  ///< the WNM's id
  std::string data_id;
  std::int64_t pubtime_ns = 0;          ///< properties.pubtime, ns since the Unix epoch
  std::string input;                    ///< the [[wis2_input]] it came from
  std::string channel;                  ///< the channel it feeds
  std::string name;                     ///< its product name below the channel's spool
  std::string href;                     ///< where it is downloaded from
  std::optional<std::uint64_t> length;  ///< declared length, bytes
  std::string integrity_method;         ///< WNM word ("sha512"), empty: none given
  std::string integrity_value;          ///< base64, as notified
  std::uint32_t attempts = 0;           ///< downloads tried so far
};

/// What the duplicate rules say of a new notification.
enum class wis2_verdict : std::uint8_t {
  fresh,              ///< take it
  duplicate_id,       ///< its id was seen (anti-loop)
  duplicate_data_id,  ///< its data_id is taken with a pubtime at or after its own
};

/// The word of a verdict's duplicate kind ("id", "data_id"; "" for fresh).
std::string_view to_string(wis2_verdict v) noexcept;

/// The table and the rules (see the file comment).
class wis2_seen {
 public:
  /// Most rows kept (done and failed ones beyond it are forgotten oldest first): at ~500 bytes
  /// a row, about 500 MB of journal at most, a day of 10 notifications a second.
  static constexpr std::size_t default_max_rows = 1'000'000;

  /// @param db the hub journal's connection (sqlite_journal::db(); schema version 4 or later)
  explicit wis2_seen(sqlite::database& db) : m_db(db) {}

  /// The duplicate rules for a notification. @throws sqlite::error
  wis2_verdict check(std::string_view notification_id, std::string_view data_id,
                     std::int64_t pubtime_ns);

  /// Records a notification taken: state pending. @return its row. @throws sqlite::error
  /// (a constraint error when its id is in the table: check() first)
  std::int64_t accept(const wis2_taken& t, wall_time now);

  /// The product is in the channel's spool: state done.
  void mark_done(std::int64_t row, wall_time now);
  /// The notification is given up (`reason`: refusal word and detail): state failed.
  void mark_failed(std::int64_t row, std::string_view reason, wall_time now);
  /// Counts an attempt (a retry resumes from here after a restart).
  void set_attempts(std::int64_t row, std::uint32_t attempts);

  /// The pending notifications (at start: downloads a stop interrupted), oldest first.
  std::vector<wis2_taken> pending();

  /// The state of a notification by id ("pending", "done", "failed"), or nullopt (tests and
  /// mcdistctl's journal reading).
  std::optional<std::string> state_of(std::string_view notification_id);

  /// Forgets done and failed rows received before `before`, then, above `max_rows` rows,
  /// the oldest done and failed ones. @return rows removed
  std::int64_t expire(wall_time before, std::size_t max_rows = default_max_rows);

  /// The connection (a caller groups several calls in one transaction).
  sqlite::database& db() noexcept { return m_db; }

 private:
  sqlite::database& m_db;
};

}  // namespace mcdist::feed
