#pragma once
/// @file
/// mcdistd's record of what it delivered (docs/actions.md): the delivery journal
/// (delivery_journal.hpp) and the actions on receipt (action_runner.hpp). The storage path's
/// finalizer journals the deliveries of a batch, with their actions' runs, before renaming
/// its files (journal_deliveries, on its own thread; one transaction) and reports the files
/// that did not end in place (settle_renames); when the engine or catch-up reports a file
/// stored, take() finds its journaled delivery and queues its actions, with no further write.
/// Deliveries a crash may have caught before their renames are settled at the next start
/// (the file in place with its digest keeps its delivery, else it is deleted), and runs left
/// pending or running run again.

#include "receiver/core/receiver_engine.hpp"
#include "receiver/io/action_runner.hpp"
#include "receiver/io/daemon_config.hpp"
#include "receiver/io/delivery_journal.hpp"
#include "receiver/storage/storage_config.hpp"

#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// The delivery journal and the actions it queues. The io thread calls everything but
/// journal_deliveries and settle_renames, which the finalizer thread calls.
class delivery_recorder {
 public:
  /// Opens the journal (cfg.journal; empty: TEMP/journal.db; fully synchronous unless sync is
  /// none) and makes the action runner with cfg.actions.
  /// @throws config_error naming the journal file when it cannot be opened
  delivery_recorder(boost::asio::io_context& io, const daemon_config& cfg,
                    std::shared_ptr<spdlog::logger> log);
  /// Confirms the deliveries of every settled batch (call after the store is gone).
  ~delivery_recorder();
  delivery_recorder(const delivery_recorder&) = delete;
  delivery_recorder& operator=(const delivery_recorder&) = delete;

  delivery_journal& journal() noexcept { return *m_journal; }
  action_runner& actions() noexcept { return *m_actions; }

  /// The channel names (by channel index) and actions journal_deliveries reads, at start
  /// and after each reload (a reload changes them on the io thread).
  void publish_config(const std::vector<channel_config>& channels,
                      const std::vector<action_config>& actions);
  /// The finalizer thread's storage_config::before_renames: journals each file's delivery
  /// (channel and sender key from its file_spec, delivered_at now) and its actions' runs,
  /// and confirms the batch before.
  /// @throws what the journal throws: the batch's files fail (not renamed) and are fetched again
  void journal_deliveries(std::span<const pending_rename> files);
  /// The finalizer thread's storage_config::after_renames: deletes the deliveries of the files
  /// that did not end in place. @throws nothing (a failure is logged; the next start settles)
  void settle_renames(std::span<const pending_rename> failed) noexcept;
  /// A file was stored: when journal_deliveries journaled it, queues its actions' runs and
  /// returns true. False: not journaled here (record() it), or not stored.
  bool take(const file_outcome& outcome);
  /// A file of channel `ch` that no finalizer journaled ended (a store without the hooks;
  /// the daemon's has them, so this is a safety net): stored, it is queued for
  /// flush() (posted) with `sender_key`, the pinned key that verified its session ("":
  /// unsigned).
  void record(const file_outcome& outcome, const channel_config& ch, std::string sender_key);
  /// Journals the queued deliveries in one transaction and queues their actions.
  void flush();
  /// Settles what a crash left (start, before the store): a schema-1 journal's intents, and
  /// the deliveries above the confirmed mark.
  void recover();
  /// Queues the runs the journal holds as pending or running (run()).
  void resume_runs();

 private:
  boost::asio::io_context& m_io;
  std::shared_ptr<spdlog::logger> m_log;
  std::unique_ptr<delivery_journal> m_journal;
  std::unique_ptr<action_runner> m_actions;
  /// Deliveries recorded since the last flush (one finalize batch is reported in one go:
  /// journaled together, one commit).
  std::vector<delivery_journal::batch_entry> m_unjournaled;
  /// What the finalizer thread reads: channel names by index, and the actions.
  struct config_snapshot {
    std::vector<std::string> channel_names;
    std::vector<action_config> actions;
  };
  std::mutex m_config_mutex;
  std::shared_ptr<const config_snapshot> m_config;
  /// Finalizer thread only: the last delivery of the last batch journaled, and the last one
  /// known settled (every rename of its batch ended, failures deleted), which the next batch
  /// confirms. `m_unsettled` stops confirming after a failed deletion.
  std::int64_t m_batch_last = 0;
  std::int64_t m_settled = 0;
  bool m_unsettled = false;
  /// Journaled deliveries the io thread has not taken yet, by (session, channel, path). One
  /// whose report never comes (its session closed while the file was being renamed) stays
  /// until the daemon stops; its runs, pending in the journal, run at the next start.
  using journaled_key = std::tuple<std::uint32_t, std::uint32_t, std::string>;
  std::mutex m_journaled_mutex;
  std::map<journaled_key, std::vector<delivery_journal::batch_entry>> m_journaled;
};

}  // namespace mcdist::receiver
