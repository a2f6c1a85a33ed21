// mcdist-feed's configuration reload at SIGHUP (feed_daemon::reload; README "Reloading the
// configuration"). Channel indexes are never reused: the board, the watcher and the status
// name a channel by index, so a removed channel stays, retired, and an added one takes the
// next index.

#include "common/logging.hpp"
#include "feed/feed_daemon.hpp"
#include "sender/io/sender_app.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace mcdist::feed {

namespace {

/// Settings of `next` that differ from `now` and that the running feed cannot change: bound
/// into sockets, files and the journal at start.
std::vector<std::string> restart_only_changes(const feed_config& now, const feed_config& next) {
  std::vector<std::string> out;
  const auto check = [&out](bool same, const char* name) {
    if (!same) out.emplace_back(name);
  };
  check(now.interface == next.interface, "interface");
  check(now.key_file == next.key_file, "key_file");
  check(now.rate_bps == next.rate_bps, "rate");
  check(now.journal == next.journal, "journal");
  check(now.retained_dir == next.retained_dir, "retained_dir");
  check(now.control_socket == next.control_socket && now.control_group == next.control_group,
        "control_socket");
  check(now.http == next.http, "http");
  return out;
}

bool same_wis2(const std::optional<wis2_action>& a, const std::optional<wis2_action>& b) {
  if (!a || !b) return !a && !b;
  const auto key = [](const wis2_action& w) {
    return std::tie(w.broker_host, w.broker_port, w.topic, w.base_url, w.data_id_prefix, w.qos,
                    w.username, w.password, w.max_queued);
  };
  return key(*a) == key(*b);
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

  std::vector<std::string> changes;
  std::vector<bool> matched(next.channels.size(), false);
  std::vector<std::size_t> respool;  ///< kept channels whose spools changed
  for (std::size_t i = 0; i < m_channels.size(); ++i) {
    auto& cs = m_channels[i];
    if (cs.retired) continue;
    auto& cur = m_cfg.channels[i];
    const auto it = std::find_if(next.channels.begin(), next.channels.end(),
                                 [&](const channel_config& c) { return c.name == cur.name; });
    if (it == next.channels.end()) {
      cs.retired = true;
      cs.timer->cancel();
      if (m_watcher) m_watcher->remove_channel(i);
      changes.push_back("channel " + cur.name + " removed" +
                        (!cs.runs.empty() ? " (its sessions under way finish)" : ""));
      continue;
    }
    matched[static_cast<std::size_t>(it - next.channels.begin())] = true;
    const bool spools_changed = cur.spools != it->spools || cur.ignore != it->ignore;
    const bool changed =
        spools_changed || cur.group != it->group || cur.priority != it->priority ||
        cur.share != it->share || cur.cap_bps != it->cap_bps ||
        cur.batch_window != it->batch_window || cur.batch_max_files != it->batch_max_files ||
        cur.batch_max_bytes != it->batch_max_bytes || cur.after != it->after ||
        cur.move_dir != it->move_dir || cur.ttl != it->ttl || cur.receivers != it->receivers ||
        cur.profile != it->profile || cur.register_timeout != it->register_timeout ||
        cur.concurrent_sessions != it->concurrent_sessions || cur.heartbeat != it->heartbeat ||
        cur.encrypt != it->encrypt;
    if (!changed) continue;
    cur = *it;  // the pointer cs.cfg stays valid: same element
    cs.batch.set_limits({cur.batch_window, cur.batch_max_files, cur.batch_max_bytes});
    if (spools_changed) respool.push_back(i);
    changes.push_back("channel " + cur.name + " changed (from its next batch)");
  }
  std::vector<std::size_t> added;
  for (std::size_t j = 0; j < next.channels.size(); ++j) {
    if (matched[j]) continue;
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
    changes.push_back("channel " + c.name + " added");
  }
  // push_back may have moved the configurations: point every channel at its own again.
  for (std::size_t i = 0; i < m_channels.size(); ++i) m_channels[i].cfg = &m_cfg.channels[i];
  m_site_keys = std::move(site_keys);
  m_cfg.site_keys = next.site_keys;
  if (!same_wis2(m_cfg.wis2, next.wis2)) {
    // The old publisher sends what it holds on its way out (its destructor disconnects).
    m_wis2.reset();
    if (next.wis2) m_wis2 = std::make_unique<wis2_publisher>(*next.wis2, "mcdist-feed", m_log);
    m_cfg.wis2 = next.wis2;
    changes.push_back(next.wis2 ? "[wis2] replaced" : "[wis2] removed");
  }
  if (m_cfg.wis2_channels != next.wis2_channels) {
    m_cfg.wis2_channels = next.wis2_channels;
    changes.push_back("[wis2] channels changed");
  }
  if (m_cfg.retention != next.retention) {
    m_cfg.retention = next.retention;
    changes.push_back("retention changed");
  }
  log_restart_only(*m_log, restart_only_changes(m_cfg, next), changes);
  if (m_watcher) {
    for (const auto i : respool) {
      m_watcher->remove_channel(i);
      m_watcher->add_channel(i);
    }
  }
  for (const auto i : added) {
    // Products the journal still holds queued for a channel of this name (it was removed by an
    // earlier reload, or before a restart) go out with its first batches.
    for (const auto& p : m_journal.queued(m_cfg.channels[i].name)) queue_product(i, p);
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
  std::size_t live = 0;
  for (const auto& c : m_channels) live += c.retired ? 0 : 1;
  std::string summary;
  for (const auto& c : changes) summary += (summary.empty() ? "" : "; ") + c;
  m_log->info("SIGHUP: configuration reloaded: {} ({} channel{} now)",
              summary.empty() ? "no change" : summary, live, live == 1 ? "" : "s");
  if (m_heartbeats) {
    m_heartbeats->set_site_keys(m_site_keys);
    m_heartbeats->set_channels(heartbeat_channels());
  }
  rebalance();
  for (std::size_t i = 0; i < m_channels.size(); ++i) maybe_start(i);
  return true;
}

}  // namespace mcdist::feed
