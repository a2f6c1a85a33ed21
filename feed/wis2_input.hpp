#pragma once
/// @file
/// One `[[wis2_input]]` of mcdist-feed (README "WIS2 input"): the hub subscribes to WIS2
/// topics on a broker (common/wis2/wis2_subscriber.hpp), checks every notification
/// (common/wis2/wnm.hpp), drops duplicates (feed/wis2_seen.hpp), downloads each product from its
/// link (common/wis2/http_download.hpp) and writes it into its channel's spool: into a temp
/// file in a dot-directory of the spool (".wis2-NAME", which the spool watcher ignores), checked
/// against the notification's integrity value and length, made durable, its mtime set to the
/// notification's pubtime, then renamed to its product name below the spool. From there the
/// spool watcher picks it up like any producer's file: journaled, batched, sent, retained
/// (docs/design-notes.md "WIS2 input" says why the spool and not a queue of its own).
///
/// Threads: libmosquitto's thread receives notifications and the downloader's threads fetch
/// and place products; both only hand their results to the feed's io thread (a mutex-guarded
/// inbox and one posted drain), where everything else runs: parsing, the duplicate rules, the
/// journal, retries, counters. A drain takes every notification waiting in one journal
/// transaction (one fsync), so the journal keeps up with bursts of thousands a second.
///
/// A notification is refused alone, counted by reason and logged (rate-limited per reason,
/// common/log_limit.hpp): nothing a broker or a data server sends can stop the daemon or
/// another notification. A download that fails in a way another attempt may not (network,
/// timeout, TLS, HTTP 5xx, 408 or 429, a full disk) is tried again after retry_delay, doubling,
/// up to `retries` times; a definite answer (HTTP 4xx, integrity or length mismatch, too big)
/// fails it at once.

#include "common/wis2/http_download.hpp"
#include "common/wis2/wis2_subscriber.hpp"
#include "feed/feed_config.hpp"
#include "feed/wis2_seen.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::feed {

/// The longest wait between two attempts of one download, whatever retry_delay and the
/// doubling give.
inline constexpr std::chrono::minutes wis2_max_retry_delay{10};
/// Most notification bytes waiting between libmosquitto's thread and the io thread; beyond
/// it notifications are refused (overload) until the io thread has drained them.
inline constexpr std::size_t wis2_inbox_max_bytes = 16 << 20;
/// The directory below a spool where an input's downloads are written before the rename:
/// ".wis2-" + the input's name (a dot-name: the spool watcher ignores it).
std::string wis2_temp_dir_name(std::string_view input);

/// Counters of one input since the daemon started (status JSON "wis2_input", /metrics
/// mcdist_feed_wis2_input_*).
struct wis2_input_counters {
  std::uint64_t accepted = 0;           ///< taken for download (journaled pending)
  std::uint64_t delivered = 0;          ///< products put in the spool
  std::uint64_t delivered_bytes = 0;    ///< their bytes
  std::uint64_t retries = 0;            ///< download attempts after a failure
  std::uint64_t duplicate_id = 0;       ///< dropped: id seen
  std::uint64_t duplicate_data_id = 0;  ///< dropped: data_id taken with a pubtime at or after
  std::map<std::string, std::uint64_t, std::less<>> refused;  ///< by reason word
  std::optional<wall_time> last_delivered;
};

/// One [[wis2_input]] (see the file comment).
class wis2_input {
 public:
  /// @param channels the feed's channels (a channel's first spool receives its products)
  /// @param seen the journal's WIS2 table (shared by every input: duplicates across brokers)
  wis2_input(boost::asio::io_context& io, const wis2_input_config& cfg,
             const std::vector<channel_config>& channels, wis2_seen& seen,
             std::shared_ptr<spdlog::logger> log);
  /// Stops the subscription and the downloads (joins their threads); downloads under way stay
  /// pending in the journal and are resumed at the next start.
  ~wis2_input();
  wis2_input(const wis2_input&) = delete;
  wis2_input& operator=(const wis2_input&) = delete;

  /// Opens the spools' temp directories (removing what a stop left there), resumes `resumed`
  /// (this input's pending journal rows), starts the downloader and the subscription.
  /// @throws std::runtime_error (a spool directory, libmosquitto, libcurl)
  void start(std::vector<wis2_taken> resumed);

  const wis2_input_config& config() const noexcept { return m_cfg; }
  const wis2_input_counters& counters() const noexcept { return m_counters; }

  /// Status JSON: name, broker, topics, connected, received, accepted, delivered,
  /// delivered_bytes, duplicates {id, data_id}, refused {reason: n}, retries, downloading,
  /// waiting (for a download slot or a retry), last_delivered.
  nlohmann::json status() const;

 private:
  struct message {
    std::string topic;
    std::string payload;
  };
  struct job {
    wis2_taken taken;
    std::optional<wnm_integrity> integrity;
    std::unique_ptr<boost::asio::steady_timer> retry;
  };
  struct spool_dirs {
    std::shared_ptr<const unique_fd> root;
    std::shared_ptr<const unique_fd> temp;
  };

  /// libmosquitto's thread: queues a notification for the io thread.
  void on_message(std::string topic, std::string payload);
  /// The downloader's finisher thread: queues a result for the io thread.
  void on_download(download_result r);
  /// io thread: takes every queued notification and result in one journal transaction.
  void drain();
  void take(const message& m, std::vector<std::int64_t>& to_submit);
  void finished(const download_result& r);
  void submit(std::int64_t row);
  /// Counts and logs a refusal; `what` names the notification (id, topic or data_id).
  void refuse(std::string_view reason, std::string_view what, std::string_view detail);
  /// The channel a topic feeds (the first filter it matches), or nullptr.
  const wis2_subscription* route(std::string_view topic) const;
  spool_dirs& dirs_of(const std::string& channel);

  boost::asio::io_context& m_io;
  wis2_input_config m_cfg;
  const std::vector<channel_config>& m_channels;
  wis2_seen& m_seen;
  std::shared_ptr<spdlog::logger> m_log;
  /// Posted handlers hold this and do nothing once the input is gone.
  std::shared_ptr<bool> m_alive = std::make_shared<bool>(true);

  std::mutex m_inbox_mutex;  ///< guards the three below
  std::vector<message> m_inbox;
  std::size_t m_inbox_bytes = 0;
  std::vector<download_result> m_results;
  bool m_drain_posted = false;
  std::atomic<std::uint64_t> m_overload{0};  ///< refused on libmosquitto's thread (inbox full)

  std::map<std::int64_t, job> m_jobs;  ///< by journal row: accepted, not finished
  std::map<std::string, spool_dirs, std::less<>> m_dirs;  ///< by channel name
  wis2_input_counters m_counters;
  std::map<std::string, log_limiter, std::less<>> m_log_limits;  ///< refusals, per reason
  std::unique_ptr<http_downloader> m_downloader;
  std::unique_ptr<wis2_subscriber> m_subscriber;
};

}  // namespace mcdist::feed
