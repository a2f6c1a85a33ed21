// mcdistd's configuration reload at SIGHUP (daemon::reload; README "Reloading the
// configuration"). Channel indexes are never reused: the engine's sessions, the store's
// destination roots, the keyrings and the status board all name a channel by index, so a
// removed channel keeps its index (retired) and a new one takes the next.

#include "common/byte_order.hpp"
#include "common/daemon/reload_diff.hpp"
#include "common/wire.hpp"
#include "receiver/io/daemon.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace mcdist::receiver {

namespace {

bool same_actions(const std::vector<action_config>& a, const std::vector<action_config>& b) {
  const auto key = [](const action_config& x) {
    return std::tie(x.name, x.channel, x.match, x.kind, x.argv, x.target, x.timeout, x.concurrency,
                    x.retries, x.retry_delay);
  };
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [&](const auto& x, const auto& y) { return key(x) == key(y); });
}

/// What a channel's sessions are received with: a change of any of these is a new channel
/// (the old one finishes its sessions with the old settings).
bool same_receiving(const channel_config& a, const channel_config& b) {
  return a.group == b.group && a.source == b.source && a.dest == b.dest &&
         a.trusted_senders == b.trusted_senders && a.silent == b.silent &&
         a.relay_group == b.relay_group && a.relay_interface == b.relay_interface &&
         a.relay_ttl == b.relay_ttl && a.relays == b.relays && a.behind_relay == b.behind_relay;
}

/// What a reload does to the channels: the running ones it retires (removed, or changed in
/// what their sessions are received with) and the next ones it adds (new, or the changed ones'
/// successors), each noted in `diff`.
struct channel_plan {
  std::vector<std::size_t> retire;
  std::vector<const channel_config*> add;
};

template <class Live>
channel_plan plan_channels(const std::vector<channel_config>& now,
                           const std::vector<channel_config>& next, const channel_match& match,
                           Live live, reload_diff& diff) {
  channel_plan plan;
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (!live(i)) continue;
    const auto& cur = now[i];
    const auto j = match.next_of[i];
    if (!j) {
      plan.retire.push_back(i);
      diff.note("channel " + cur.name + " removed");
    } else if (!same_receiving(cur, next[*j])) {
      plan.retire.push_back(i);
      plan.add.push_back(&next[*j]);
      diff.note("channel " + cur.name + " changed (group, dest, trusted_senders, silent or relay)");
    }
  }
  for (const auto j : match.added) {
    plan.add.push_back(&next[j]);
    diff.note("channel " + next[j].name + " added");
  }
  return plan;
}

/// The settings of `next` that differ from `now` and that a running daemon cannot change:
/// they are bound into sockets, threads, files or budgets made at start.
void restart_only_changes(const daemon_config& now, const daemon_config& next, reload_diff& d) {
  d.restart_only(now.id == next.id, "id");
  d.restart_only(now.interface == next.interface, "interface");
  d.restart_only(now.temp == next.temp, "temp");
  d.restart_only(now.key_file == next.key_file, "key_file");
  d.restart_only(now.sync == next.sync, "sync");
  d.restart_only(now.buffer_pool_bytes == next.buffer_pool_bytes, "buffer_pool");
  d.restart_only(now.parity_memory_bytes == next.parity_memory_bytes, "parity_memory");
  d.restart_only(now.socket_buffer_bytes == next.socket_buffer_bytes, "socket_buffer");
  d.restart_only(now.session_timeout == next.session_timeout, "session_timeout");
  d.restart_only(now.checkpoint_interval == next.checkpoint_interval, "checkpoint_interval");
  d.restart_only(now.status_file == next.status_file, "status_file");
  d.restart_only(now.session_memory_bytes == next.session_memory_bytes, "session_memory");
  d.restart_only(now.total_memory_bytes == next.total_memory_bytes, "total_memory");
  d.restart_only(now.disk_reserve_bytes == next.disk_reserve_bytes &&
                     now.disk_reserve_percent == next.disk_reserve_percent,
                 "disk_reserve");
  d.restart_only(now.session_quota_bytes == next.session_quota_bytes, "session_quota");
  d.restart_only(now.http == next.http, "http");
  d.restart_only(now.log.level == next.log.level && now.log.file == next.log.file, "log");
  d.restart_only(now.journal == next.journal, "journal");
}

}  // namespace

bool daemon::channel_takes(std::size_t index, const wire::header& h) const {
  if (const auto owner = m_engine->channel_of(h.session)) return *owner == index;
  return !m_channels.retired(index);
}

void daemon::add_channel(const channel_config& ch) {
  const std::size_t index = m_cfg.channels.size();
  m_channels.open(ch);
  try {
    m_relays.open(index, ch);
  } catch (const std::exception& e) {
    // The channel is joined; only its relay is missing (checked a moment ago: rare).
    m_log->error("SIGHUP: channel {}: not relayed: {}", ch.name, e.what());
  }
  if (const auto w = ssm_warning(ch); !w.empty()) m_log->warn("{}", w);
  m_cfg.channels.push_back(ch);
  m_keys->add_channel(ch);
  m_store->add_dest_root(ch.dest);
  m_board.add_channel();
  m_engine->set_channel_count(static_cast<std::uint32_t>(m_cfg.channels.size()));
  m_engine->set_silent_channels(silent_channels(m_cfg.channels));
  m_engine->set_relay_channels(relay_channels(m_cfg.channels));
  m_engine->set_upstream_relays(upstream_relays(m_cfg.channels));
  for (const auto& a : ch.wis2) {
    m_wis2.push_back({index, std::make_unique<wis2_publisher>(a, ch.name, m_log)});
  }
  m_keys->log_trust(ch);
  do_receive(index);
}

void daemon::close_idle_channels() {
  for (std::size_t i = 0; i < m_channels.size(); ++i) {
    if (!m_channels.retired(i) || !m_channels.is_open(i) ||
        m_engine->active_sessions_on(static_cast<std::uint32_t>(i)) > 0) {
      continue;
    }
    m_channels.close(i);  // leaves the group; the pending wait ends with an error
    m_relays.close(i);
    std::erase_if(m_wis2, [i](const auto& p) { return p.first == i; });
    m_log->info("channel {} ({} -> {}) left: no session under way on it", m_cfg.channels[i].name,
                m_cfg.channels[i].group.to_string(), m_cfg.channels[i].dest.string());
  }
}

void daemon::apply_kept_channels(const daemon_config& next, const channel_match& match,
                                 reload_diff& diff) {
  // Channels kept as they were take the new per-channel actions and retention.
  for (std::size_t i = 0; i < m_cfg.channels.size(); ++i) {
    if (m_channels.retired(i) || !match.next_of[i]) continue;
    auto& cur = m_cfg.channels[i];
    const auto& nc = next.channels[*match.next_of[i]];
    if (!same_receiving(cur, nc)) continue;
    if (cur.wis2 != nc.wis2) {
      // Notifications queued for the old broker are sent on its way out (the destructor
      // disconnects after its queue); the next stored file goes to the new one.
      std::erase_if(m_wis2, [i](const auto& p) { return p.first == i; });
      for (const auto& a : nc.wis2) {
        m_wis2.push_back({i, std::make_unique<wis2_publisher>(a, cur.name, m_log)});
      }
      cur.wis2 = nc.wis2;
      diff.note("channel " + cur.name + " wis2 actions replaced");
    }
    diff.take(cur.retention_max_age, nc.retention_max_age,
              "channel " + cur.name + " retention changed");
  }
}

void daemon::apply_settings(const daemon_config& next, reload_diff& diff) {
  if (!same_actions(m_cfg.actions, next.actions)) {
    diff.note(
        fmt::format("actions replaced ({} -> {})", m_cfg.actions.size(), next.actions.size()));
    m_deliveries->actions().replace_actions(next.actions);
    m_cfg.actions = next.actions;
  }
  if (m_cfg.retention_max_age != next.retention_max_age ||
      m_cfg.retention_interval != next.retention_interval ||
      m_cfg.journal_max_age != next.journal_max_age) {
    diff.note("retention changed");
    m_cfg.retention_max_age = next.retention_max_age;
    m_cfg.retention_interval = next.retention_interval;
    m_cfg.journal_max_age = next.journal_max_age;
  }
  if (m_cfg.max_sessions != next.max_sessions ||
      m_cfg.max_sessions_per_source != next.max_sessions_per_source) {
    diff.note("session limits changed");
    m_cfg.max_sessions = next.max_sessions;
    m_cfg.max_sessions_per_source = next.max_sessions_per_source;
    m_engine->set_session_limits(m_cfg.max_sessions, m_cfg.max_sessions_per_source);
  }
  diff.take(m_cfg.status_interval, next.status_interval, "status_interval changed");
  m_cfg.trusted_senders = next.trusted_senders;
  restart_only_changes(m_cfg, next, diff);
}

bool daemon::reload(const std::function<daemon_config()>& source) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  daemon_config next;
  try {
    next = source();
    validate(next);
    check_directories(next, false);
  } catch (const std::exception& e) {
    return log_reload_refused(*m_log, m_reloads_failed, e);
  }

  // Plan the channels by name, then open what is new before changing anything, so a socket
  // that cannot be opened leaves the daemon as it was.
  const auto live = [this](std::size_t i) { return !m_channels.retired(i); };
  const auto match = match_channels(m_cfg.channels, next.channels, live);
  reload_diff diff;
  const auto plan = plan_channels(m_cfg.channels, next.channels, match, live, diff);
  try {
    for (const auto* ch : plan.add) {
      std::error_code ec;
      std::filesystem::create_directories(ch->dest, ec);
      if (ec) {
        throw config_error("cannot create the destination directory " + ch->dest.string() +
                           " of channel " + ch->name + ": " + ec.message());
      }
      // Bind and join once here: a group that cannot be joined fails the reload whole.
      m_channels.probe(*ch);
      m_relays.check(*ch);
    }
  } catch (const std::exception& e) {
    return log_reload_refused(*m_log, m_reloads_failed, e);
  }

  apply_kept_channels(next, match, diff);
  for (const auto i : plan.retire) m_channels.retire(i);
  for (const auto* ch : plan.add) {
    try {
      add_channel(*ch);
    } catch (const std::exception& e) {
      // Probed a moment ago; a failure now (another process took the port) is only logged.
      m_log->error("SIGHUP: channel {} ({}) not joined: {}", ch->name, ch->group.to_string(),
                   e.what());
    }
  }
  channel_table::save(m_cfg.temp / channel_table::file_name, m_cfg.channels, *m_log);
  apply_settings(next, diff);
  m_deliveries->publish_config(m_cfg.channels, m_cfg.actions);
  ++m_reloads_ok;
  diff.log(*m_log, m_channels.live());
  close_idle_channels();
  return true;
}

}  // namespace mcdist::receiver
