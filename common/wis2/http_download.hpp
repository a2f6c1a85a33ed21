#pragma once
/// @file
/// Downloads of WIS2 products (the hub's `[[wis2_input]]`) with libcurl's multi interface on
/// threads of their own, so that no download, however slow, hung or large, ever runs on the
/// feed's io thread (architecture.md "Layers"; Guide to WIS, WMO-No. 1061, Volume II, 2.7.4.2:
/// "downloads are not blocking each other").
///
/// Two threads per downloader:
/// - the transfer thread runs curl_multi_poll/curl_multi_perform over at most `concurrency`
///   transfers; each writes into a temp file of its own, hashes what it writes with the
///   notification's integrity method, and is bounded by `max_bytes` and the declared length
///   (a larger body is cut off at once) and by `timeout` (connect to last byte);
/// - the finisher thread makes a verified product durable (fdatasync), stamps its mtime and
///   renames it into place below the spool directory (never following a link), or removes the
///   temp file of a failed one, then reports the result.
///
/// Only http:// and https:// are fetched, redirects included (CURLOPT_PROTOCOLS_STR and
/// CURLOPT_REDIR_PROTOCOLS_STR), at most 5 redirects; TLS peers are verified unless the
/// operator named `download_tls_insecure`.

#include "common/sys/unique_fd.hpp"
#include "common/wis2/wnm.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace mcdist {

/// One product to fetch and put in place.
struct download_job {
  std::uint64_t id = 0;  ///< the caller's key, given back in the result
  std::string url;       ///< acceptable_download_url
  std::uint64_t max_bytes = 0;
  std::optional<std::uint64_t> expected_length;  ///< the notification's links[].length
  std::optional<wnm_integrity> integrity;        ///< checked before the product is put in place
  /// The directory the product goes below (a spool), opened O_DIRECTORY | O_NOFOLLOW.
  std::shared_ptr<const unique_fd> root;
  /// The directory temp files are made in, on the same file system as root (a dot-directory
  /// of the spool, which the spool watcher ignores).
  std::shared_ptr<const unique_fd> temp_dir;
  std::string target;         ///< the product's name below root (check_relative_path)
  std::int64_t mtime_ns = 0;  ///< the file's mtime once in place (the notification's pubtime)
};

/// How a download ended.
enum class download_error : std::uint8_t {
  none,         ///< in place below root
  http_status,  ///< the server answered with an HTTP error status (4xx, 5xx)
  timeout,      ///< the transfer took longer than the timeout
  connect,      ///< name resolution or connection failed
  tls,          ///< the TLS handshake or the peer's certificate failed
  too_big,      ///< more than max_bytes (declared or sent)
  length,       ///< not the length the notification declared
  integrity,    ///< the data's digest is not the notification's integrity value
  bad_url,      ///< a URL (or redirect) curl refuses: another protocol, malformed, too many hops
  transfer,     ///< the connection broke, or another curl error
  local_io,     ///< the temp file or the rename into place failed (disk full, a name in the way)
};

/// The word of an error ("http_status", ...).
std::string_view to_string(download_error e) noexcept;

/// A finished download.
struct download_result {
  std::uint64_t id = 0;
  download_error error = download_error::none;
  long http_status = 0;     ///< the last response's status, 0 if none
  std::uint64_t bytes = 0;  ///< bytes of the body received
  bool retryable = false;   ///< another attempt may succeed (network, timeout, 5xx, 408, 429, disk)
  std::string detail;       ///< for the log
};

/// Settings of one downloader.
struct download_options {
  std::uint32_t concurrency = 8;  ///< transfers at once; more wait in submission order
  std::chrono::nanoseconds timeout = std::chrono::minutes(10);  ///< one attempt, whole
  std::filesystem::path ca_file;  ///< https:// trust anchors (PEM); empty: the system's
  bool tls_insecure = false;      ///< no peer or host name verification (test servers only)
  std::string user_agent;         ///< "mcdist-feed/VERSION"
};

/// A pool of downloads on two threads of its own (see the file comment). Thread-safe.
class http_downloader {
 public:
  /// Called on the finisher thread for every job submitted (never for jobs still running or
  /// waiting when the downloader is destroyed).
  using completion = std::function<void(download_result)>;

  /// Starts the threads. @throws std::runtime_error when libcurl cannot be set up
  http_downloader(download_options options, completion done);
  /// Stops both threads: running transfers are dropped and their temp files removed.
  ~http_downloader();
  http_downloader(const http_downloader&) = delete;
  http_downloader& operator=(const http_downloader&) = delete;

  /// Queues a job; returns at once.
  void submit(download_job job);

  /// Transfers running now.
  std::size_t active() const noexcept { return m_active.load(std::memory_order_relaxed); }

 private:
  struct transfer;
  void run_transfers();
  void run_finisher();
  void finish(std::unique_ptr<transfer> t);

  download_options m_options;
  completion m_done;
  void* m_multi = nullptr;  ///< CURLM*, transfer thread only after construction
  std::atomic<std::size_t> m_active{0};

  std::mutex m_mutex;  ///< guards the queues and the stop flags below
  std::condition_variable m_finish_cv;
  std::deque<download_job> m_submitted;
  std::deque<std::unique_ptr<transfer>> m_finished;
  bool m_stop = false;
  std::uint64_t m_temp_counter = 0;  ///< transfer thread only

  std::thread m_transfer_thread;
  std::thread m_finisher_thread;
};

}  // namespace mcdist
