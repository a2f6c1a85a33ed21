#pragma once
/// @file
/// Which hub sends which channel, when several hubs share one PostgreSQL journal (README
/// "Redundant hubs", docs/design-notes.md "Redundant hubs"). Each channel has a lease, a row of
/// the journal's `leases` with a holder, an epoch and a deadline on the database's clock (Gray
/// & Cheriton, "Leases: an efficient fault-tolerant mechanism for distributed file cache
/// consistency", SOSP 1989). Every `renew` interval this thread runs one lease round
/// (pg_journal::lease_round, one statement on a connection of its own): the hub's leases are
/// renewed, lapsed ones taken, and the other hubs and leases read for the status page.
///
/// Fencing: before each round the thread reads its monotonic clock (t0); a lease the round
/// grants lets the hub send until t0 + lease - margin. The database set the lease's deadline to
/// its clock_timestamp() + lease when it ran the statement, after t0, so the hub's own fence
/// falls at least `margin` before any other hub can be granted the channel, as long as the two
/// clocks run at the same rate (NTP slews by at most 500 ppm: 3 ms over a 6 s lease) and the
/// database's clock is not stepped. The fence is an atomic per channel that the sessions read
/// before every round of sending (sender_app's app_options::fence), written here the moment a
/// round ends: a renewal needs no io-thread turn to keep the sessions going, and a hub whose io
/// thread was held up (a journal write waiting on the database) finds the fence passed when it
/// wakes, before it sends. A round that fails (the database unreachable, a call past its
/// timeout) changes no fence: the sessions stop when it passes, and the daemon, told by the
/// report, stops the channel and says so.
///
/// A pg_advisory_lock held on this thread's connection would also name one holder, but the
/// server frees it only when it notices the connection is gone (TCP keepalive: minutes), and
/// the holder cannot tell when that is: nothing bounds how long two hubs might both believe
/// they send. A deadline in the row bounds it.

#include "feed/feed_config.hpp"
#include "feed/pg_journal.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mcdist::feed {

/// One round's result, for the io thread.
struct lease_report {
  bool ok = false;
  std::string error;                                    ///< why the round failed
  std::chrono::steady_clock::time_point round_started;  ///< t0 (see the file's comment)
  std::vector<lease_grant> held;                        ///< the leases this hub holds now
  std::chrono::steady_clock::time_point fence;          ///< t0 + lease - margin, for `held`
  cluster_view view;  ///< hubs and leases as the database has them
};

/// The lease thread. Construct on the io thread; reports arrive through `report` on the lease
/// thread (the daemon posts them to its io_context).
class lease_keeper {
 public:
  using report_fn = std::function<void(lease_report)>;

  /// Starts the thread; the first round runs at once.
  /// @param uri       the journal's PostgreSQL URI
  /// @param http      this hub's status address, "" when off (shown to the other hubs)
  /// @param channels  the channels to hold
  lease_keeper(std::string uri, cluster_settings settings, std::string http,
               std::vector<std::string> channels, report_fn report);
  /// Stops the thread (a round in progress finishes first, bounded by round_timeout).
  ~lease_keeper();
  lease_keeper(const lease_keeper&) = delete;
  lease_keeper& operator=(const lease_keeper&) = delete;

  /// The channel's fence (steady_clock ns since its epoch; 0 until a round grants it), for
  /// app_options::fence. Stable for the keeper's life.
  const std::atomic<std::int64_t>* fence(const std::string& channel);

  /// Replaces the channels to hold (a reload): a channel no longer listed is released at the
  /// next round's end (its fence set to 0 at once).
  void set_channels(std::vector<std::string> channels);

  /// Ends this hub's leases in the database (a clean stop: the standby takes over at its next
  /// round, not after a lease) and stops the thread. Blocks up to round_timeout.
  void release();

  /// This process's instance number (the leases' `instance`): a hub restarted under the same
  /// name waits for its own old leases to lapse like anyone else.
  std::int64_t instance() const noexcept { return m_instance; }

 private:
  void run();
  void round();

  std::string m_uri;
  cluster_settings m_settings;
  std::string m_http;
  report_fn m_report;
  std::int64_t m_instance;
  std::chrono::system_clock::time_point m_started;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  bool m_release = false;
  std::vector<std::string> m_channels;  ///< under m_mutex
  /// Fences by channel; entries are never removed (their addresses are handed out).
  std::map<std::string, std::unique_ptr<std::atomic<std::int64_t>>, std::less<>> m_fences;
  std::unique_ptr<pg_journal> m_journal;  ///< the lease thread's own connection
  std::thread m_thread;
};

}  // namespace mcdist::feed
