#pragma once
/// @file
/// mcdistd's catch-up over HTTP(S) of silent channels (docs/design-notes.md "Catch-up over
/// HTTP"): the catch_up_queue of missed numbers, the catch_up_client that fetches them on its
/// own threads (made at the first missing number), the timer that looks for due numbers every
/// catch_up_tick, and each fetched number's files on their way through the storage path until
/// the number is caught up or backed off. What a delivered file means elsewhere (status board,
/// journal, WIS2) and the sequence book belong to the daemon, which passes them in as a
/// catch_up_port. Runs on the daemon's io thread.

#include "common/log_limit.hpp"
#include "common/sys/single_thread.hpp"
#include "receiver/core/receiver_engine.hpp"
#include "receiver/io/catch_up_client.hpp"
#include "receiver/io/catch_up_queue.hpp"
#include "receiver/io/daemon_config.hpp"
#include "receiver/storage/storage_config.hpp"

#include <nlohmann/json_fwd.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// What catch-up needs of the daemon.
struct catch_up_port {
  /// True while channel `index` takes new work (not retired by a reload).
  std::function<bool(std::size_t index)> live;
  /// Hands a downloaded, checked file to the storage path (file_store::deliver_file).
  std::function<void(file_key key, std::uint32_t channel, file_spec spec, std::string temp_path,
                     const sha256_digest& expected, std::function<void(store_result)> done)>
      deliver;
  /// A fetched file ended: stored (renamed into place; `key` is the index's signer as the
  /// journal records it, "" when unsigned) or not.
  std::function<void(const file_outcome& outcome, const std::string& key)> finished;
  /// Number `seq` of stream `s` was caught up (the sequence book marks it, and is saved).
  std::function<void(const catch_up_queue::stream& s, std::uint64_t seq)> caught_up;
};

/// The catch-up of every silent channel with a catch_up_url.
class catch_up_runner {
 public:
  /// How often due numbers are looked for.
  static constexpr std::chrono::milliseconds tick{500};

  /// @param channels  the daemon's channels by index (it only grows: a reload appends)
  /// @param temp      the temp directory (catch_up_client's files go below it)
  /// @param disk_reserve_bytes  free space kept on the temp filesystem by downloads
  catch_up_runner(boost::asio::io_context& io, const std::vector<channel_config>& channels,
                  std::filesystem::path temp, std::uint64_t disk_reserve_bytes,
                  std::shared_ptr<spdlog::logger> log, catch_up_port port);
  ~catch_up_runner();
  catch_up_runner(const catch_up_runner&) = delete;
  catch_up_runner& operator=(const catch_up_runner&) = delete;

  /// A heartbeat of silent channel `index` left `missing` numbers of stream (channel as the
  /// hub names it, source) signed by `signer` (catch_up_queue::note_missing); due numbers are
  /// submitted at once.
  void note_missing(std::size_t index, const std::string& channel, const std::string& source,
                    const std::optional<crypto::key32>& signer,
                    std::span<const wire::seq_span> missing);
  /// Takes no more work: outcomes arriving later are dropped with their temp files.
  void stop();
  /// Aborts transfers under way and joins the client's threads (before the storage path goes).
  void close() noexcept { m_client.reset(); }

  /// The status file's "catch_up" object.
  nlohmann::json status() const;

 private:
  /// Submits the numbers whose time has come to the client; re-arms the timer.
  void do_catch_up();
  /// A job's outcome: its files go to the storage path, then the number is done.
  void on_catch_up(catch_up_outcome o);
  /// The end of one number's deliveries: caught up, or backed off.
  void done(std::size_t index, std::uint64_t seq, bool ok, const std::string& why);

  boost::asio::io_context& m_io;
  const std::vector<channel_config>& m_channels;
  std::filesystem::path m_temp;
  std::uint64_t m_disk_reserve_bytes;
  std::shared_ptr<spdlog::logger> m_log;
  catch_up_port m_port;
  catch_up_queue m_queue;
  std::unique_ptr<catch_up_client> m_client;  ///< made at the first missing number
  boost::asio::steady_timer m_timer;
  bool m_stopping = false;
  std::uint64_t m_file_seq = 0;    ///< file_key of deliver_file
  std::uint64_t m_delivered = 0;   ///< files renamed into place
  std::uint64_t m_kept_newer = 0;  ///< files not taken: a newer version is in place
  log_limiter m_failures_logged{50};
  single_thread m_io_thread;  ///< the daemon's io thread: every call and outcome runs there
};

}  // namespace mcdist::receiver
