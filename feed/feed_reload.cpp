// mcdist-feed's configuration reload at SIGHUP (feed_daemon::reload; README "Reloading the
// configuration"). Channel indexes are never reused: the board, the watcher and the status
// name a channel by index, so a removed channel stays, retired, and an added one takes the
// next index.

#include "common/daemon/reload_diff.hpp"
#include "feed/feed_daemon.hpp"
#include "sender/io/sender_app.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace mcdist::feed {

namespace {

/// Settings of `next` that differ from `now` and that the running feed cannot change: bound
/// into sockets, files and the journal at start.
void restart_only_changes(const feed_config& now, const feed_config& next, reload_diff& d) {
  d.restart_only(now.interface == next.interface, "interface");
  d.restart_only(now.key_file == next.key_file, "key_file");
  d.restart_only(now.rate_bps == next.rate_bps, "rate");
  d.restart_only(now.journal == next.journal, "journal");
  d.restart_only(now.retained_dir == next.retained_dir, "retained_dir");
  d.restart_only(
      now.control_socket == next.control_socket && now.control_group == next.control_group,
      "control_socket");
  d.restart_only(now.http == next.http, "http");
  d.restart_only(
      now.wis2_inputs == next.wis2_inputs && now.wis2_dedupe_window == next.wis2_dedupe_window,
      "wis2_input");
}

}  // namespace

bool feed_daemon::reload(const std::function<feed_config()>& source) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  feed_config next;
  std::map<std::string, crypto::key32, std::less<>> site_keys;
  try {
    next = source();
    if (!next.channels.empty() && next.channels.front().group.v6 != m_interface.address.v6) {
      throw config_error(
          "the channels' address family changed: the interface is resolved for "
          "one family at start (a restart changes it)");
    }
    if (!next.site_keys.empty()) site_keys = sender::read_site_keys(next.site_keys.string());
    for (const auto& c : next.channels) {
      for (const auto& id : c.receivers) {
        if (!site_keys.empty() && !site_keys.count(id)) {
          throw config_error("channel " + c.name + " lists receiver " + id +
                             ", whose key is not in " + next.site_keys.string());
        }
      }
    }
  } catch (const std::exception& e) {
    return log_reload_refused(*m_log, m_reloads_failed, e);
  }

  const auto match = match_channels(m_cfg.channels, next.channels,
                                    [this](std::size_t i) { return !m_channels[i].retired; });
  reload_diff diff;
  std::vector<std::size_t> respool;  ///< kept channels whose spools changed
  for (std::size_t i = 0; i < m_channels.size(); ++i) {
    auto& cs = m_channels[i];
    if (cs.retired) continue;
    auto& cur = m_cfg.channels[i];
    if (!match.next_of[i]) {
      cs.retired = true;
      cs.timer->cancel();
      if (m_watcher) m_watcher->remove_channel(i);
      diff.note("channel " + cur.name + " removed" +
                (!cs.runs.empty() ? " (its sessions under way finish)" : ""));
      continue;
    }
    const auto& nc = next.channels[*match.next_of[i]];
    if (cur == nc) continue;
    if (cur.spools != nc.spools || cur.ignore != nc.ignore) respool.push_back(i);
    cur = nc;  // the pointer cs.cfg stays valid: same element
    cs.batch.set_limits({cur.batch_window, cur.batch_max_files, cur.batch_max_bytes});
    diff.note("channel " + cur.name + " changed (from its next batch)");
  }
  std::vector<std::size_t> added;
  for (const auto j : match.added) {
    m_cfg.channels.push_back(next.channels[j]);
    const auto& c = m_cfg.channels.back();
    m_channels.push_back(
        channel_state{nullptr,
                      batcher({c.batch_window, c.batch_max_files, c.batch_max_bytes}),
                      std::make_unique<boost::asio::steady_timer>(m_io),
                      {},
                      {},
                      false,
                      0,
                      false});
    m_board.add_channel(c.name);
    added.push_back(m_channels.size() - 1);
    diff.note("channel " + c.name + " added");
  }
  // push_back may have moved the configurations: point every channel at its own again.
  for (std::size_t i = 0; i < m_channels.size(); ++i) m_channels[i].cfg = &m_cfg.channels[i];
  m_site_keys = std::move(site_keys);
  m_cfg.site_keys = next.site_keys;
  if (m_cfg.wis2 != next.wis2) {
    // The old publisher sends what it holds on its way out (its destructor disconnects).
    m_wis2.reset();
    if (next.wis2) m_wis2 = std::make_unique<wis2_publisher>(*next.wis2, "mcdist-feed", m_log);
    m_cfg.wis2 = next.wis2;
    diff.note(next.wis2 ? "[wis2] replaced" : "[wis2] removed");
  }
  diff.take(m_cfg.wis2_channels, next.wis2_channels, "[wis2] channels changed");
  diff.take(m_cfg.retention, next.retention, "retention changed");
  diff.take(m_cfg.relays, next.relays, "relays changed (from the next session)");
  diff.take(m_cfg.relay_timeout, next.relay_timeout,
            "relay_timeout changed (from the next session)");
  restart_only_changes(m_cfg, next, diff);
  if (m_watcher) {
    for (const auto i : respool) {
      m_watcher->remove_channel(i);
      m_watcher->add_channel(i);
    }
  }
  for (const auto i : added) {
    // Products the journal still holds queued for a channel of this name (it was removed by an
    // earlier reload, or before a restart) go out with its first batches: a single hub takes
    // the channel at once, a cluster's hub when the lease rounds grant it.
    if (!m_keeper) take_channel(i, 0, std::nullopt);
    if (m_watcher) {
      try {
        m_watcher->add_channel(i);
      } catch (const std::exception& e) {
        m_log->error("SIGHUP: channel {}: {}; its spools are not watched", m_cfg.channels[i].name,
                     e.what());
      }
    }
  }
  ++m_reloads_ok;
  diff.log(*m_log,
           static_cast<std::size_t>(std::count_if(m_channels.begin(), m_channels.end(),
                                                  [](const auto& c) { return !c.retired; })));
  if (m_keeper) {
    std::vector<std::string> names;
    for (const auto& c : m_channels) {
      if (!c.retired) names.push_back(c.cfg->name);
    }
    m_keeper->set_channels(std::move(names));
  }
  if (m_heartbeats) {
    m_heartbeats->set_site_keys(m_site_keys);
    m_heartbeats->set_channels(heartbeat_channels());
  }
  rebalance();
  for (std::size_t i = 0; i < m_channels.size(); ++i) maybe_start(i);
  return true;
}

}  // namespace mcdist::feed
