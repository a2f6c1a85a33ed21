#pragma once
/// @file
/// mcdistctl's requests in the running hub: the control socket's handler (control_protocol.hpp
/// journal_handler) over a feed_daemon, with the journal queries on query workers and the
/// answers completed on the io thread.

#include "feed/control_protocol.hpp"
#include "feed/feed_daemon.hpp"
#include "feed/query_worker.hpp"

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>

namespace mcdist::feed {

/// The control socket's handler in the running daemon. The io thread runs no journal query for
/// mcdistctl: `history`, `missing` and a resend's lookup run on a query worker (query_worker.hpp,
/// its own thread and read-only connection), `status`'s journal part on a second one, so that a
/// status answers while a long history runs; the answers are posted back to the io thread, where
/// status adds the daemon's live state and a resend queues its sessions. The synchronous
/// functions (journal_handler's, on the daemon's connection) remain for direct calls; the
/// control server uses answer_async().
class daemon_handler : public journal_handler {
 public:
  /// Opens the workers' read-only connections to the daemon's journal.
  /// @throws sqlite::error, std::runtime_error (query_worker)
  explicit daemon_handler(feed_daemon& d, boost::asio::io_context& io);
  ~daemon_handler() override;
  /// journal_handler::status() with "daemon": true and "feed": feed_daemon::status().
  nlohmann::json status() override;
  /// Keys of control_handler::resend, plus "channels".
  nlohmann::json resend(const resend_request& r) override;
  /// See the class: status, history, missing and resend's lookup on the workers; `done` on the
  /// io thread.
  void answer_async(control_request r, answer_callback done) override;

  /// Test hook: called on the worker thread before each history, missing or resend lookup
  /// (query_worker::set_before_job), e.g. to hold a query running while the test asks status.
  void set_query_hook(std::function<void()> hook);

 private:
  /// Runs `query` on worker `w` and posts `done(answer)` to the io thread; an exception of the
  /// query becomes {"ok":false,"error":...}. `then` (on the io thread) completes the answer.
  void on_worker(query_worker& w, std::function<nlohmann::json(hub_journal&)> query,
                 std::function<nlohmann::json(nlohmann::json)> then, answer_callback done);

  feed_daemon& m_daemon;
  boost::asio::io_context& m_io;
  std::unique_ptr<query_worker> m_queries;  ///< history, missing, resend lookups
  std::unique_ptr<query_worker> m_status;   ///< status's journal part (short queries)
};

}  // namespace mcdist::feed
