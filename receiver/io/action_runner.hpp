#pragma once
/// @file
/// Runs the actions of delivered products (action_config.hpp) in mcdistd's io_context, with
/// their state in the delivery journal (delivery_journal.hpp): each attempt is journaled
/// 'running' before it starts and 'done', 'pending' (a retry follows) or 'failed' when it
/// ends, so a crash leaves the run 'running' and the next start runs it again (at least once).
///
/// exec: posix_spawn(3) of argv (no shell) in a new process group, stdin /dev/null, stdout
/// and stderr on a pipe whose lines go to the daemon log (at most max_logged_lines per
/// attempt, each cut at max_line_bytes); the child is reaped when its pidfd (pidfd_open(2),
/// Linux 5.3) becomes readable; at the timeout its whole process group gets SIGKILL. Exit
/// status 0 is success. link/copy run on a small worker pool (a copy of a large product must
/// not stall the io thread): link(2) to a temp name beside the target then rename(2) over it;
/// copy to a temp name, fsync, rename. Parent directories of the target are created.

#include "receiver/io/action_config.hpp"
#include "receiver/io/delivery_journal.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// See the file comment. All member functions on the io thread.
class action_runner {
 public:
  /// Lines of a child's output logged per attempt; the rest is counted, not logged.
  static constexpr std::size_t max_logged_lines = 50;
  /// Longest output line logged, bytes; longer lines are cut.
  static constexpr std::size_t max_line_bytes = 1024;

  action_runner(boost::asio::io_context& io, std::vector<action_config> actions,
                delivery_journal& journal, std::shared_ptr<spdlog::logger> log);
  /// Kills running children's process groups (their runs stay 'running' in the journal and
  /// run again at the next start) and joins the worker pool.
  ~action_runner();
  action_runner(const action_runner&) = delete;
  action_runner& operator=(const action_runner&) = delete;

  /// The names of the actions that take `relpath` on `channel`, in configuration order.
  std::vector<std::string> matching(const std::string& channel, const std::string& relpath) const;

  /// Queues run `run_id` of action `action` on `product` (journaled 'pending' by the caller).
  /// `attempts` is how many attempts it had already (a restart).
  void submit(std::int64_t run_id, const std::string& action, const delivery_row& product,
              std::uint32_t attempts = 0);

  /// Graceful shutdown, first step: starts no further attempt (queued runs stay 'pending' in
  /// the journal for the next start) and calls `done` on the io thread once no attempt is
  /// running, or after `grace` (then stop() kills what still runs). An attempt that finishes
  /// within the grace is journaled as usual, so a stop does not run it twice.
  void drain(std::chrono::nanoseconds grace, std::function<void()> done);

  /// Replaces the actions (a configuration reload). An action kept by name keeps its queue,
  /// running attempts and counters, its new settings applying to attempts started from now
  /// on. A removed action's running attempts finish and are journaled (without a retry); its
  /// queued runs are journaled failed ("action no longer configured"), as at a restart.
  void replace_actions(std::vector<action_config> actions);

  /// Attempts running now, over every action.
  std::uint32_t running() const noexcept;

  /// Stops starting attempts and kills running children (daemon shutdown).
  void stop();

  /// Counters per action name, in configuration order.
  std::vector<std::pair<std::string, action_stats>> stats() const;

  const std::vector<action_config>& actions() const noexcept { return m_actions; }

 private:
  struct job {
    std::int64_t run_id = 0;
    std::size_t action = 0;  ///< index in m_actions, re-found by name after a reload
    std::string name;        ///< the action's name
    delivery_row product;
    std::uint32_t attempts = 0;
  };
  struct child;
  struct slot {
    std::deque<job> queue;
    std::uint32_t running = 0;
    action_stats st;
  };
  void pump(std::size_t action);
  void start(job j);
  void start_exec(job j, const placeholder_values& v);
  void start_file_op(job j, const placeholder_values& v);
  /// The index of j's action now (re-found by name after replace_actions), or nullopt when a
  /// reload removed it.
  std::optional<std::size_t> locate(job& j) const;
  /// An attempt ended: journal, count, retry or give up, start the next.
  void finished(job j, std::optional<int> exit_status, std::string error);

  boost::asio::io_context& m_io;
  std::vector<action_config> m_actions;
  delivery_journal& m_journal;
  std::shared_ptr<spdlog::logger> m_log;
  std::vector<slot> m_slots;
  /// Attempts running of actions a reload removed.
  std::uint32_t m_orphans_running = 0;
  std::map<std::int64_t, std::shared_ptr<child>> m_children;  ///< by run id
  boost::asio::thread_pool m_pool{2};
  bool m_stopped = false;
  bool m_draining = false;
  std::function<void()> m_drained;  ///< drain()'s callback, until called
  boost::asio::steady_timer m_drain_timer{m_io};
  void call_drained();
  std::shared_ptr<bool> m_alive = std::make_shared<bool>(true);
};

}  // namespace mcdist::receiver
