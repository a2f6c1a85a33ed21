#pragma once
/// @file
/// mcdistd's retention (docs/actions.md "Retention"): every retention_interval, the products
/// of each live channel with retention_max_age that were delivered longer ago are deleted, but
/// only while they are still what was delivered (same size and mtime; a product changed by hand
/// or replaced is left and its row marked), with their directories emptied up to the
/// destination root; journal rows older than journal_max_age are pruned. At most `batch`
/// deliveries per channel and pass keep one pass short on the io thread.

#include "receiver/io/daemon_config.hpp"
#include "receiver/io/delivery_journal.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// The retention passes and their counters. Runs on the daemon's io thread.
class retention_sweeper {
 public:
  /// Deliveries looked at per retention pass and channel (bounds one pass's time on the io
  /// thread; the next pass goes on).
  static constexpr std::size_t batch = 1000;

  /// @param cfg   the daemon's configuration, read at each pass: a reload changes the
  ///              retention settings and adds channels
  /// @param live  false for a channel index a reload retired (its successor does its retention)
  retention_sweeper(boost::asio::io_context& io, const daemon_config& cfg,
                    delivery_journal& journal, std::function<bool(std::size_t)> live,
                    std::shared_ptr<spdlog::logger> log);

  /// One pass now, then one every retention_interval.
  void run();
  /// No further pass.
  void stop();

  /// Products deleted, and those left because they changed since their delivery.
  std::uint64_t deleted() const noexcept { return m_deleted; }
  std::uint64_t skipped() const noexcept { return m_skipped; }

 private:
  /// Deletes the expired deliveries of channel `ch` (at most `batch`) and marks their rows.
  void sweep_channel(const channel_config& ch, std::chrono::system_clock::time_point now);

  const daemon_config& m_cfg;
  delivery_journal& m_journal;
  std::function<bool(std::size_t)> m_live;
  std::shared_ptr<spdlog::logger> m_log;
  boost::asio::steady_timer m_timer;
  bool m_stopping = false;
  std::uint64_t m_deleted = 0;
  std::uint64_t m_skipped = 0;
};

}  // namespace mcdist::receiver
