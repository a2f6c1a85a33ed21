#pragma once
/// @file
/// A thread of its own with its own read-only connection to the hub journal, on which
/// mcdistctl's journal queries run (`history` and `missing` of a busy day read about
/// 100 k rows, ~0.6 s), so that the daemon's io thread, which sends the sessions, never waits for
/// an operator's query: a warning batch goes out while `mcdistctl history` is being answered.
///
/// SQLite in WAL mode lets a reader run beside the writer (https://www.sqlite.org/wal.html,
/// "readers do not block writers and a writer does not block readers"): the worker's connection
/// reads a snapshot of the last commit while the io thread's connection goes on writing. The
/// connection is opened read-only (hub_journal read_only), so no query of the worker can change
/// the journal; it is used from the worker thread only (common/sqlite: one connection per
/// thread).
///
/// Jobs run one at a time, in the order given (a Boost.Asio thread_pool of one thread).

#include "feed/journal.hpp"

#include <boost/asio/thread_pool.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>

namespace mcdist::feed {

/// One query thread over a read-only connection to the journal.
class query_worker {
 public:
  /// Opens the connection (the journal must exist: the daemon's hub_journal creates it first)
  /// and starts the thread.
  /// @throws sqlite::error, std::runtime_error as hub_journal(file, true)
  explicit query_worker(const std::filesystem::path& journal_file);
  /// Waits for the running job, drops the queued ones (they are destroyed, never called), and
  /// joins the thread.
  ~query_worker();
  query_worker(const query_worker&) = delete;
  query_worker& operator=(const query_worker&) = delete;

  /// Queues `job`, called on the worker thread with the worker's journal. The job posts its
  /// result where it is needed (the daemon: back to its io_context) and must not throw (an
  /// escaping exception is caught and dropped, so the job must report its own errors).
  void post(std::function<void(hub_journal&)> job);

  /// Test hook: called on the worker thread before each job (a test blocks the worker here to
  /// hold a query "running" for as long as it likes). Set it before posting jobs.
  void set_before_job(std::function<void()> hook);

 private:
  std::unique_ptr<hub_journal> m_journal;
  std::mutex m_hook_mutex;
  std::function<void()> m_before_job;
  boost::asio::thread_pool m_pool{1};
};

}  // namespace mcdist::feed
