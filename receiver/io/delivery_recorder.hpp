#pragma once
/// @file
/// mcdistd's record of what it delivered (docs/actions.md): the delivery journal
/// (delivery_journal.hpp) and the actions on receipt (action_runner.hpp). The storage path's
/// finalizer journals an intent per file before its rename (journal_intents, on its own
/// thread); each file the engine or catch-up reports stored is queued and journaled with the
/// others of its finalize batch in one transaction, and its actions queued; intents a crash
/// left are settled at the next start (the file in place with its digest becomes a delivery,
/// else the intent is dropped), and runs left pending or running run again.

#include "receiver/core/receiver_engine.hpp"
#include "receiver/io/action_runner.hpp"
#include "receiver/io/daemon_config.hpp"
#include "receiver/io/delivery_journal.hpp"
#include "receiver/storage/storage_config.hpp"

#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// The delivery journal and the actions it queues. The io thread calls everything but
/// journal_intents, which the finalizer thread calls.
class delivery_recorder {
 public:
  /// Opens the journal (cfg.journal; empty: TEMP/journal.db; fully synchronous unless sync is
  /// none) and makes the action runner with cfg.actions.
  /// @throws config_error naming the journal file when it cannot be opened
  delivery_recorder(boost::asio::io_context& io, const daemon_config& cfg,
                    std::shared_ptr<spdlog::logger> log);
  ~delivery_recorder();
  delivery_recorder(const delivery_recorder&) = delete;
  delivery_recorder& operator=(const delivery_recorder&) = delete;

  delivery_journal& journal() noexcept { return *m_journal; }
  action_runner& actions() noexcept { return *m_actions; }

  /// The destination root -> channel name table journal_intents reads (at start and after
  /// each reload: a reload changes the channels on the io thread).
  void publish_dest_names(const std::vector<channel_config>& channels);
  /// The finalizer thread's hook (storage_config::before_renames): one intent per file.
  /// @throws what the journal throws: the batch's files fail (not renamed) and are fetched again
  void journal_intents(std::span<const pending_rename> intents);
  /// A file of channel `ch` ended. Not stored: its intents are dropped. Stored: queued for
  /// flush() (posted) with `sender_key`, the pinned key that verified its session ("": unsigned).
  void record(const file_outcome& outcome, const channel_config& ch, std::string sender_key);
  /// Journals the queued deliveries in one transaction and queues their actions.
  void flush();
  /// Settles the intents a crash left (start, before the store).
  void recover_intents();
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
  /// dest root -> channel name for the finalizer thread (journal_intents), under its mutex.
  std::mutex m_dest_names_mutex;
  std::vector<std::pair<std::filesystem::path, std::string>> m_dest_names;
};

}  // namespace mcdist::receiver
