#pragma once
/// @file
/// What mcdistd's status port shows beyond the engine's counters: per channel the files
/// stored and failed, their bytes and the last products (a bounded ring each), and the bytes
/// received per minute over the last hour (a ring of minutes). Fed by the daemon from
/// receiver_sink::file_finished and a once-a-second sample of receiver_stats::data_bytes.
/// Pure: wall-clock time is passed in; no I/O, no Asio.

#include "common/http/throughput.hpp"
#include "common/ids.hpp"
#include "common/time.hpp"
#include "receiver/core/receiver_engine.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace mcdist::receiver {

/// One delivered (or failed) product as the page lists it.
struct product_record {
  std::string path;  ///< manifest path
  std::uint64_t size = 0;
  session_id session{};
  wall_time at{};  ///< when it was stored or failed
  bool stored = false;
  std::string failure;  ///< why, when not stored
};

/// Per-channel counters and recent products.
struct channel_board {
  std::uint64_t files_stored = 0;
  std::uint64_t files_failed = 0;
  std::uint64_t bytes_stored = 0;        ///< sizes of the files stored
  std::optional<wall_time> last_stored;  ///< time of the latest stored file
  std::deque<product_record> recent;     ///< newest last, at most max_recent_products
};

/// The board. Not thread-safe: the daemon's io thread owns it.
class status_board {
 public:
  /// Products kept per channel (50: what a person scans on a page; with 1024-byte paths at
  /// most ~60 KB per channel).
  static constexpr std::size_t max_recent_products = 50;
  /// Minutes of throughput kept: the page's chart covers the last hour.
  static constexpr std::size_t minutes_kept = http::minute_ring::minutes_kept;

  /// @param channels  number of configured channels (engine channel indexes 0..n-1)
  explicit status_board(std::size_t channels);

  /// A channel added by a reload: the next index.
  void add_channel() { m_channels.emplace_back(); }
  /// Counts a file's outcome on its channel (an unknown channel index is ignored).
  void file_finished(const file_outcome& o, wall_time now);
  /// Samples the running total of bytes received: the growth since the previous sample is
  /// added to the minute of `now` (so a minute's figure is late by at most one sample
  /// interval). A total lower than the previous one restarts the count.
  void observe_bytes(std::uint64_t total, wall_time now);

  const std::vector<channel_board>& channels() const noexcept { return m_channels; }
  /// Bytes received in each of the last minutes_kept minutes, oldest first, the last entry
  /// being the (partial) minute of `now`.
  std::vector<std::uint64_t> bytes_per_minute(wall_time now) const;

 private:
  std::vector<channel_board> m_channels;
  http::minute_ring m_minutes;
  std::optional<std::uint64_t> m_last_total;
};

}  // namespace mcdist::receiver
