#pragma once
/// @file
/// A one-way site's catch-up over a terrestrial path (docs/design-notes.md "Catch-up over
/// HTTP"): for one missed session number of a silent channel, fetch the hub's signed index
/// (common/catch_up_index.hpp) from its product server with a fresh nonce, check it, and
/// download each product the site does not already hold into a temp file, with libcurl on
/// worker threads of its own (never the io thread). The daemon then delivers each file through
/// the storage path (file_store::deliver_file: SHA-256 again, durable, renamed into place,
/// never over a newer version) and journals it like any delivery (catch_up_runner.hpp).
///
/// Everything from the network is bounded before it is kept: the index by
/// catch_up::max_index_bytes while it arrives, each download by the size the verified index
/// declares (a body longer than that is aborted mid-transfer, a shorter one refused), and the
/// SHA-256 is checked as the bytes arrive. Temp files are created below TEMP/catch-up with
/// openat(O_CREAT | O_EXCL | O_NOFOLLOW) from that directory's descriptor.

#include "common/catch_up_index.hpp"
#include "common/crypto.hpp"

#include <array>
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
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// One missed number to fetch.
struct catch_up_job {
  std::uint32_t channel = 0;  ///< the daemon's channel index
  std::string channel_name;   ///< the channel as the hub names it (heartbeat, index)
  std::uint64_t seq = 0;
  std::string base_url;                  ///< catch_up_url, ending in '/'
  std::filesystem::path ca;              ///< catch_up_ca; empty: the system's CAs
  std::vector<crypto::key32> trusted;    ///< the channel's trusted_senders
  std::optional<crypto::key32> signer;   ///< the heartbeat's signer: the index must be its
  std::filesystem::path dest;            ///< the channel's destination tree
  std::uint64_t disk_reserve_bytes = 0;  ///< free space kept on the temp filesystem
};

/// One product of a fetched index.
struct catch_up_file {
  catch_up::product product;
  bool held = false;  ///< the destination already holds it (same size and SHA-256)
  /// The destination holds another file of that name whose mtime is not older: left alone,
  /// nothing downloaded (the storage path checks this again at the rename).
  bool newer_held = false;
  std::string temp_path;  ///< downloaded and checked here (when not held)
};

/// What a job came to.
struct catch_up_outcome {
  catch_up_job job;
  /// Empty: the index verified and every product is held or downloaded. Otherwise the URL and
  /// why (a download that failed fails the job; its other files are not delivered, so the
  /// number is fetched again whole after the back-off).
  std::string error;
  bool not_found = false;  ///< the hub answered 404 for the index: unknown, running or expired
  std::optional<crypto::key32> signer;  ///< who signed the index (nullopt: unsigned)
  std::vector<catch_up_file> files;
  std::uint64_t bytes = 0;  ///< downloaded
};

/// Why a downloaded product was refused (to_string for logs and the status file).
enum class file_refusal : std::uint8_t {
  too_long,         ///< more bytes than the index declares (aborted mid-transfer)
  too_short,        ///< fewer bytes than the index declares
  sha256_mismatch,  ///< the bytes do not hash to the index's SHA-256
};
/// Number of file_refusal values.
inline constexpr std::size_t file_refusal_count = 3;
std::string_view to_string(file_refusal r) noexcept;

/// Number of catch_up::refusal values (refusal::none included, never counted).
inline constexpr std::size_t index_refusal_count =
    static_cast<std::size_t>(catch_up::refusal::too_many) + 1;

/// Counters, readable from any thread.
struct catch_up_counters {
  std::atomic<std::uint64_t> indexes{0};          ///< indexes fetched and verified
  std::atomic<std::uint64_t> indexes_refused{0};  ///< fetched but refused (any reason below)
  std::atomic<std::uint64_t> downloads{0};        ///< products downloaded and checked
  std::atomic<std::uint64_t> bytes{0};            ///< their bytes
  std::atomic<std::uint64_t> held{0};             ///< products found already held
  std::atomic<std::uint64_t> failures{0};         ///< jobs that failed (any reason)
  /// Indexes refused, by catch_up::refusal (its value as the index).
  std::array<std::atomic<std::uint64_t>, index_refusal_count> index_refusals{};
  /// Downloads refused, by file_refusal.
  std::array<std::atomic<std::uint64_t>, file_refusal_count> file_refusals{};
};

/// The worker threads and their queue.
class catch_up_client {
 public:
  /// Worker threads: downloads of one site at once (2: a terrestrial backup link is narrow;
  /// two keep it busy across a file's set-up round trips without splitting it thinly).
  static constexpr std::size_t workers = 2;
  /// Jobs queued at most (a heartbeat reports at most wire::max_seq_ranges ranges; the daemon
  /// submits only due numbers, so this bounds a burst, not the work).
  static constexpr std::size_t max_queued = 64;
  /// TCP and TLS set-up (10 s) and the longest time without a byte (30 s: a stalled transfer
  /// is abandoned and retried, a slow one goes on).
  static constexpr std::chrono::seconds connect_timeout{10};
  static constexpr std::chrono::seconds idle_timeout{30};

  /// Creates TEMP/catch-up (its leftovers from an earlier run are removed) and starts the
  /// threads. @param post hands a closure to the io thread
  /// @throws std::system_error when the directory cannot be made or opened
  catch_up_client(const std::filesystem::path& temp_dir,
                  std::function<void(std::function<void()>)> post,
                  std::shared_ptr<spdlog::logger> log);
  /// Aborts transfers under way and joins the threads; results not yet posted are dropped
  /// (their temp files removed).
  ~catch_up_client();
  catch_up_client(const catch_up_client&) = delete;
  catch_up_client& operator=(const catch_up_client&) = delete;

  /// Queues a job; `done` gets its outcome through `post`. @return false when the queue is full
  bool submit(catch_up_job job, std::function<void(catch_up_outcome)> done);
  /// Jobs queued or running.
  std::size_t busy() const;
  const catch_up_counters& counters() const noexcept { return m_counters; }
  /// The directory the temp files are in.
  const std::filesystem::path& dir() const noexcept { return m_dir; }

 private:
  struct queued {
    catch_up_job job;
    std::function<void(catch_up_outcome)> done;
  };
  void run();
  catch_up_outcome fetch(const catch_up_job& job, void* curl);
  std::filesystem::path m_dir;
  int m_dir_fd = -1;
  std::function<void(std::function<void()>)> m_post;
  std::shared_ptr<spdlog::logger> m_log;
  mutable std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<queued> m_queue;
  std::size_t m_running = 0;
  std::atomic<bool> m_stop{false};
  std::atomic<std::uint64_t> m_next_file{0};
  catch_up_counters m_counters;
  std::vector<std::thread> m_threads;
};

}  // namespace mcdist::receiver
