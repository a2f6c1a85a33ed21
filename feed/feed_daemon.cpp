#include "feed/feed_daemon.hpp"

#include "common/path_check.hpp"
#include "common/sha256.hpp"
#include "common/sys/digest_xattr.hpp"
#include "common/sys/key_file.hpp"
#include "common/units.hpp"
#include "feed/sqlite_journal.hpp"
#include "sender/io/file_hasher.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <system_error>

namespace mcdist::feed {

namespace {

using steady = std::chrono::steady_clock;

/// Files hashed before the announce (the rest during pass 1, sender_app): up to this size ...
constexpr std::uint64_t prehash_file_max = 4 << 20;
/// ... and this much per session, because prehashing runs on the daemon's only thread: 32 MiB
/// at a few hundred MB/s stalls the other channels' sessions for ~0.1 s at most.
constexpr std::uint64_t prehash_budget = 32 << 20;
/// A session that cannot be set up (socket error) is tried again after this long.
constexpr auto retry_after = std::chrono::seconds(5);
/// At most this many sequence ranges go in one catch-up session (seqwire's wire limit).
constexpr std::size_t max_catch_up_ranges = 32;
/// The journal's history when no products are retained (retention = 0).
constexpr auto min_journal_history = std::chrono::hours(24);

/// A session's place in its channel's numbering (sender_config::channel, channel_seq; 0 for
/// catch-up and resend sessions) and, for a catch-up, the ranges it completes at the sites.
void set_sequence(sender::sender_config& cfg, const std::string& channel, std::uint64_t seq,
                  const std::set<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
  cfg.channel = channel;
  cfg.channel_seq = seq;
  cfg.catch_up_seqs.assign(ranges.begin(), ranges.end());
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> missing_seqs_of(
    const sender::receiver_report& r) {
  return {r.missing_seqs.begin(), r.missing_seqs.end()};
}

std::uint64_t last_seq_of(const sender::receiver_report& r) { return r.last_seq; }

/// Removes empty directories from `dir` up to (not including) `root`.
void prune_empty(std::filesystem::path dir, const std::filesystem::path& root) {
  std::error_code ec;
  while (!dir.empty() && dir != root && dir.string().starts_with(root.string())) {
    if (!std::filesystem::is_empty(dir, ec) || ec) return;
    std::filesystem::remove(dir, ec);
    if (ec) return;
    dir = dir.parent_path();
  }
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

const char* kind_name(session_kind k) { return to_string(k).data(); }

/// A channel's sessions' sender name (and its heartbeats'): an unsigned channel's sites key its
/// session numbers by it.
std::string sender_name_of(const channel_config& c) { return "mcdist-feed " + c.name; }

}  // namespace

feed_daemon::feed_daemon(boost::asio::io_context& io, feed_config cfg,
                         std::shared_ptr<spdlog::logger> log)
    : m_io(io), m_cfg(std::move(cfg)), m_log(std::move(log)),
      m_journal(is_postgresql(m_cfg.journal.string())
                    ? std::make_unique<pg_journal>(m_cfg.journal.string(), false,
                                                   std::min<std::chrono::milliseconds>(
                                                       pg::call_timeout, m_cfg.cluster.margin))
                    : open_hub_journal(m_cfg.journal.string())),
      m_expire_timer(io), m_board([this] {
        std::vector<std::string> names;
        for (const auto& c : m_cfg.channels) names.push_back(c.name);
        return names;
      }()) {
  if (auto* sj = dynamic_cast<sqlite_journal*>(m_journal.get()))
    m_wis2_seen = std::make_unique<wis2_seen>(sj->db());
  try {
    if (!m_cfg.key_file.empty()) {
      m_key_path = crypto::resolve_key_path(m_cfg.key_file.string());
      m_identity = crypto::read_secret_key_file(m_key_path);
    }
    if (!m_cfg.site_keys.empty()) m_site_keys = sender::read_site_keys(m_cfg.site_keys.string());
  } catch (const crypto::key_error& e) {
    throw config_error(e.what());
  }
  for (const auto& c : m_cfg.channels) {
    for (const auto& id : c.receivers) {
      if (!m_site_keys.empty() && !m_site_keys.count(id)) {
        throw config_error("channel " + c.name + " lists receiver " + id +
                           ", whose key is not in " + m_cfg.site_keys.string());
      }
    }
  }
  try {
    const bool v6 = m_cfg.channels.empty()
                        ? (m_cfg.interface.address && m_cfg.interface.address->v6)
                        : m_cfg.channels.front().group.v6;
    m_interface = net::resolve_interface(m_cfg.interface, v6);
  } catch (const net::interface_error& e) {
    throw config_error(std::string("interface: ") + e.what());
  }
  if (m_cfg.wis2) {
    m_wis2 = std::make_unique<wis2_publisher>(*m_cfg.wis2, "mcdist-feed", m_log);
  }
  m_channels.reserve(m_cfg.channels.size());
  for (const auto& c : m_cfg.channels) {
    channel_state s{&c,
                    batcher({c.batch_window, c.batch_max_files, c.batch_max_bytes}),
                    std::make_unique<boost::asio::steady_timer>(io),
                    {},
                    {},
                    false,
                    0};
    m_channels.push_back(std::move(s));
  }
}

feed_daemon::~feed_daemon() = default;

std::optional<std::size_t> feed_daemon::channel_index(std::string_view name) const {
  for (std::size_t i = 0; i < m_cfg.channels.size(); ++i) {
    if (m_cfg.channels[i].name == name) return i;
  }
  return std::nullopt;
}

void feed_daemon::start() {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (!is_postgresql(m_cfg.journal.string())) {
    // A single hub sends every channel: each is taken over from the journal as a new holder
    // would (its interrupted batches sent again under their numbers) ...
    for (std::size_t ch = 0; ch < m_channels.size(); ++ch) take_channel(ch, 0, std::nullopt);
    // ... and what is left open belongs to channels no longer configured: closed, queued again.
    if (const auto n = m_journal->close_interrupted_sessions()) {
      m_log->warn(
          "journal: {} session{} of channels no longer configured had no end: recorded "
          "as aborted",
          n, n == 1 ? "" : "s");
    }
    auto tx = m_journal->begin_tx();
    for (const auto& p : m_journal->unfinished()) {
      if (!channel_index(p.channel)) m_journal->requeue(p.id);
    }
    tx->commit();
  }
  // The status port's lag survives a restart: what the journal lists as missing per site.
  {
    const auto keep = m_cfg.retention.count() > 0 ? m_cfg.retention
                                                  : std::chrono::nanoseconds(min_journal_history);
    const auto since = std::chrono::system_clock::now() -
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(keep);
    std::set<std::string> done;
    for (const auto& s : m_journal->sites()) {
      if (!done.insert(s.site).second) continue;
      for (const auto& m : m_journal->missing(s.site, since)) {
        if (const auto ch = channel_index(m.channel)) {
          m_board.restore_missing(s.site, *ch, m.product_id, m.sent_at);
        }
      }
    }
  }
  // The journal's files exist now (the recovery above wrote to it).
  for (const auto& own : {m_key_path, m_cfg.site_keys}) {
    if (const auto id = identity_of(own)) m_own_files.push_back(*id);
  }
  if (!is_postgresql(m_cfg.journal.string())) {
    for (const auto& own : {m_cfg.journal, std::filesystem::path(m_cfg.journal.string() + "-wal"),
                            std::filesystem::path(m_cfg.journal.string() + "-shm")}) {
      if (const auto id = identity_of(own)) m_own_files.push_back(*id);
    }
  }
  start_unicast();
  m_heartbeats = std::make_unique<heartbeat_service>(
      m_io, m_interface, m_identity ? &*m_identity : nullptr, m_site_keys,
      [this](std::size_t ch) { return m_channels[ch].last_seq; },
      [this](std::size_t ch) {
        std::vector<wire::seq_span> under_way;
        for (const auto& r : m_channels[ch].runs) {
          if (r->seq > 0) under_way.emplace_back(r->seq, r->seq);
        }
        std::sort(under_way.begin(), under_way.end());
        return under_way;
      },
      [this](std::size_t ch, const std::string& site, const std::vector<wire::seq_span>& gaps) {
        if (ch < m_channels.size() && !m_channels[ch].retired && m_channels[ch].active &&
            !m_stopping) {
          request_catch_up(ch, site, {gaps.begin(), gaps.end()});
        }
      },
      m_log);
  m_heartbeats->set_channels(heartbeat_channels());
  m_watcher = std::make_unique<spool_watcher>(
      m_io, m_cfg.channels, [this](spooled_file f) { on_found(std::move(f)); }, m_log);
  m_watcher->start();
  if (is_postgresql(m_cfg.journal.string())) {
    // Every channel starts standby; the lease rounds decide which this hub sends.
    std::vector<std::string> names;
    for (const auto& c : m_channels) {
      if (!c.retired) names.push_back(c.cfg->name);
    }
    m_keeper = std::make_unique<lease_keeper>(
        m_cfg.journal.string(), m_cfg.cluster, m_cfg.http ? m_cfg.http->to_string() : "", names,
        [this](lease_report r) {
          boost::asio::post(m_io,
                            [this, r = std::move(r)]() mutable { on_lease_report(std::move(r)); });
        });
    m_log->info(
        "cluster: hub {} (instance {}), lease {} ms renewed every {} ms, fence {} ms before "
        "its end; every channel standby until its lease is granted",
        m_cfg.cluster.hub, m_keeper->instance(), m_cfg.cluster.lease.count(),
        m_cfg.cluster.renew.count(), m_cfg.cluster.margin.count());
  }
  do_expire();
  start_wis2_inputs();
}

void feed_daemon::start_wis2_inputs() {
  if (!m_wis2_seen) return;
  std::map<std::string, std::vector<wis2_taken>, std::less<>> resumed;
  for (auto& t : m_wis2_seen->pending()) resumed[t.input].push_back(std::move(t));
  for (const auto& in : m_cfg.wis2_inputs) {
    auto input = std::make_unique<wis2_input>(m_io, in, m_cfg.channels, *m_wis2_seen, m_log);
    auto mine = resumed.extract(in.name);
    input->start(mine ? std::move(mine.mapped()) : std::vector<wis2_taken>{});
    m_wis2_inputs.push_back(std::move(input));
  }
  if (resumed.empty()) return;
  const auto tx = m_journal->begin_tx();
  for (const auto& [name, rows] : resumed) {
    m_log->warn("WIS2: {} download{} of the input {}, no longer configured, given up", rows.size(),
                rows.size() == 1 ? "" : "s", name);
    for (const auto& t : rows) {
      m_wis2_seen->mark_failed(t.row, "its [[wis2_input]] is no longer configured",
                               std::chrono::system_clock::now());
    }
  }
  tx->commit();
}

template <class F>
bool feed_daemon::guarded(std::size_t ch, const char* what, F&& f) {
  if (!m_keeper) {
    f();
    return true;
  }
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    const std::string why = std::string("journal: ") + what + ": " + e.what();
    for (std::size_t i = 0; i < m_channels.size(); ++i) {
      if (ch == std::string::npos || i == ch) lose_channel(i, why);
    }
    return false;
  }
}

void feed_daemon::take_channel(std::size_t ch, std::uint64_t epoch,
                               std::optional<wall_time> acquired) {
  auto& cs = m_channels[ch];
  const auto& name = cs.cfg->name;
  std::vector<open_batch> batches;
  std::vector<product> queued;
  std::uint64_t last = 0;
  std::size_t requeued = 0;
  std::int64_t closed = 0;
  const bool ok = guarded(ch, "taking the channel over", [&] {
    auto tx = m_journal->begin_tx();
    if (m_keeper) m_journal->check_lease(name, m_cfg.cluster.hub, epoch);
    batches = m_journal->open_batches(name);
    closed = m_journal->close_interrupted_sessions(std::chrono::system_clock::now(), name);
    std::set<std::int64_t> repeating;
    for (const auto& b : batches) {
      for (const auto& p : b.products) repeating.insert(p.id);
    }
    for (const auto& p : m_journal->unfinished()) {
      if (p.channel == name && !repeating.count(p.id)) {
        m_journal->requeue(p.id);
        ++requeued;
      }
    }
    last = m_journal->last_seq(name);
    tx->commit();
    queued = m_journal->queued(name);
  });
  if (!ok) return;
  cs.active = true;
  cs.epoch = epoch;
  cs.acquired = acquired;
  cs.role_since = steady::now();
  cs.last_seq = last;
  cs.lost_reason.clear();
  ++cs.takeovers;
  std::size_t repeat_products = 0;
  std::string numbers;
  for (auto& b : batches) {
    repeat_products += b.products.size();
    numbers += (numbers.empty() ? "" : ",") + std::to_string(b.seq);
    cs.repeats.push_back(std::move(b));
  }
  if (m_keeper) {
    m_log->warn(
        "channel {}: this hub sends it now (lease epoch {}); {} interrupted batch{} sent again "
        "under {} ({} product{}), {} session{} of the previous holder closed as aborted, {} "
        "product{} queued",
        name, epoch, cs.repeats.size(), cs.repeats.size() == 1 ? "" : "es",
        numbers.empty() ? "-" : numbers, repeat_products, repeat_products == 1 ? "" : "s", closed,
        closed == 1 ? "" : "s", queued.size(), queued.size() == 1 ? "" : "s");
  } else if (closed > 0 || requeued > 0) {
    m_log->warn(
        "journal: channel {}: {} session{} had no end (the feed stopped mid-session): recorded as "
        "aborted; batch{} {} sent again under {} number{} (sites that hold a product answer "
        "'held'), {} product{} queued again",
        name, closed, closed == 1 ? "" : "s", cs.repeats.size() == 1 ? "" : "es",
        numbers.empty() ? "-" : numbers, cs.repeats.size() == 1 ? "its" : "their",
        cs.repeats.size() == 1 ? "" : "s", requeued, requeued == 1 ? "" : "s");
  }
  for (const auto& p : queued) queue_product(ch, p);
  if (m_heartbeats) m_heartbeats->set_channels(heartbeat_channels());
  if (m_keeper) {
    arm_fence(ch);
    // Spool events this hub ignored while standby (and, on a shared spool, writes another host
    // made, which inotify does not report): every spool is read again.
    if (m_watcher) m_watcher->rescan();
  }
  maybe_start(ch);
}

void feed_daemon::lose_channel(std::size_t ch, const std::string& why) {
  auto& cs = m_channels[ch];
  cs.lost_reason = why;
  if (!cs.active) return;
  const auto& c = *cs.cfg;
  cs.active = false;
  cs.role_since = steady::now();
  m_log->warn("channel {}: this hub stops sending it (standby): {}", c.name, why);
  cs.timer->cancel();
  if (cs.fence_timer) cs.fence_timer->cancel();
  cs.batch = batcher({c.batch_window, c.batch_max_files, c.batch_max_bytes});
  cs.extras.clear();
  cs.repeats.clear();
  // Their ends are not journaled: the journal keeps them open for the next holder.
  for (auto& r : cs.runs) r->fenced = true;
  for (auto& r : cs.runs) r->app->abort("this hub no longer sends the channel: " + why);
  if (m_heartbeats) m_heartbeats->set_channels(heartbeat_channels());
}

void feed_daemon::arm_fence(std::size_t ch) {
  auto& cs = m_channels[ch];
  if (!cs.fence_timer) cs.fence_timer = std::make_unique<boost::asio::steady_timer>(m_io);
  cs.fence_timer->expires_at(cs.fence);
  cs.fence_timer->async_wait([this, ch](const boost::system::error_code& ec) {
    if (ec || ch >= m_channels.size()) return;
    auto& c = m_channels[ch];
    if (!c.active || steady::now() < c.fence) return;
    lose_channel(ch, "its lease could not be renewed in time (" +
                         (m_lease.error.empty() ? std::string("no answer from the database")
                                                : m_lease.error) +
                         "); stopped " + std::to_string(m_cfg.cluster.margin.count()) +
                         " ms before the lease can pass to another hub");
  });
}

void feed_daemon::on_lease_report(lease_report r) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_stopping) return;
  if (!r.ok) {
    if (!m_lease_failing) {
      m_log->error(
          "cluster: lease round failed: {}; channels this hub sends stop at their fence "
          "unless a round succeeds first",
          r.error);
    }
    m_lease_failing = true;
    m_lease.ok = false;
    m_lease.error = r.error;
    return;
  }
  if (m_lease_failing) m_log->info("cluster: the database answers lease rounds again");
  m_lease_failing = false;
  m_lease_ok_at = steady::now();
  m_lease = std::move(r);
  for (std::size_t ch = 0; ch < m_channels.size(); ++ch) {
    auto& cs = m_channels[ch];
    if (cs.retired) continue;
    const auto g = std::find_if(m_lease.held.begin(), m_lease.held.end(),
                                [&](const lease_grant& x) { return x.channel == cs.cfg->name; });
    if (g != m_lease.held.end()) {
      cs.fence = m_lease.fence;
      if (cs.active && cs.epoch != g->epoch) {
        lose_channel(
            ch, "the lease changed hands and came back (epoch " + std::to_string(g->epoch) + ")");
      }
      if (!cs.active) {
        take_channel(ch, g->epoch, g->acquired);
      } else {
        arm_fence(ch);
      }
    } else if (cs.active) {
      std::string holder = "another hub";
      for (const auto& l : m_lease.view.leases) {
        if (l.channel == cs.cfg->name) holder = "hub " + l.holder;
      }
      lose_channel(ch, holder + " holds its lease now");
    }
  }
}

std::vector<heartbeat_channel> feed_daemon::heartbeat_channels() const {
  std::vector<heartbeat_channel> out;
  for (std::size_t i = 0; i < m_channels.size(); ++i) {
    const auto& c = *m_channels[i].cfg;
    out.push_back(
        {c.name, c.group, c.ttl,
         m_channels[i].retired || !m_channels[i].active ? std::chrono::nanoseconds(0) : c.heartbeat,
         sender_name_of(c)});
  }
  return out;
}

void feed_daemon::start_unicast() {
  unicast::server_options so;
  endpoint listen_on = m_interface.address;
  listen_on.port = 0;
  so.sctp_udp = listen_on;
  so.tcp = listen_on;
  unicast::server_events ev;
  ev.on_session_start = [this](const unicast::session_info& info) {
    if (const auto it = m_apps.find(info.session); it != m_apps.end()) {
      it->second->on_unicast_start(info);
    }
  };
  ev.on_session_end = [this](const unicast::session_info& info, const unicast::session_stats&,
                             const std::error_code& ec, const std::string& detail) {
    if (const auto it = m_apps.find(info.session); it != m_apps.end()) {
      it->second->on_unicast_end(info, ec, detail);
    }
  };
  m_unicast = std::make_unique<unicast::server>(m_io, so, ev);
  std::string detail;
  if (auto ec = m_unicast->start(detail)) {
    m_log->warn(
        "unicast fallback: the shared server cannot start ({}); sessions fall back over TCP "
        "listeners of their own",
        detail);
    m_unicast.reset();
    return;
  }
  m_log->info("unicast fallback for every channel: SCTP over UDP on {}, TCP on {}",
              m_unicast->sctp_udp_endpoint() ? m_unicast->sctp_udp_endpoint()->to_string() : "-",
              m_unicast->tcp_endpoint() ? m_unicast->tcp_endpoint()->to_string() : "-");
}

void feed_daemon::on_found(spooled_file f) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_stopping) return;
  // A channel another hub sends is its business (it reads the spool when it takes it over).
  if (f.channel >= m_channels.size() || !m_channels[f.channel].active) return;
  m_found.push_back(std::move(f));
  if (m_found.size() > 1) return;
  // The watcher reports a whole read of inotify events (or a whole scan) in one go: enqueue
  // them in one journal transaction, one fsync, once the watcher's handler returned.
  boost::asio::post(m_io, [this] { flush_found(); });
}

void feed_daemon::flush_found() {
  if (m_stopping) return;
  std::vector<std::pair<std::size_t, product>> ready;
  // Products journaled as sent whose spool file is still there: the feed stopped between
  // recording the session's end and applying `after` (a crash, SIGKILL). Applied now.
  std::vector<std::pair<std::size_t, product>> leftover;
  const bool ok = guarded(std::string::npos, "spool intake", [&] {
    auto tx = m_journal->begin_tx();
    for (const auto& f : m_found) {
      if (auto problem = product_name_problem(f.name); !problem.empty()) {
        reject(f, problem);
        continue;
      }
      product p;
      p.channel = m_cfg.channels[f.channel].name;
      p.name = f.name;
      p.spool_path = f.path.string();
      p.size = f.size;
      p.mtime_ns = f.mtime_ns;
      const auto id = m_journal->enqueue(p);
      auto got = m_journal->get(id);
      // sent ("keep" leaves the file in the spool), failed, or in a running session: done.
      if (got && got->state == product_state::queued) {
        ready.emplace_back(f.channel, std::move(*got));
      } else if (got && got->state == product_state::sent &&
                 m_cfg.channels[f.channel].after != after_send::keep) {
        leftover.emplace_back(f.channel, std::move(*got));
      }
    }
    tx->commit();
  });
  m_found.clear();
  if (!ok) return;
  for (const auto& [ch, p] : leftover) {
    // The file sent is known by its size and mtime only: it is disposed of if it still has
    // them (and is a regular file below the spool), else left as a new product.
    std::string why;
    const auto root = spool_root_of(p.spool_path, p.name);
    const auto o =
        root ? open_product(*root, p.name, {p.size, p.mtime_ns}, m_own_files, why) : std::nullopt;
    if (!o) continue;
    m_log->info(
        "channel {}: {} was sent before the last stop but is still in the spool; "
        "applying 'after' now",
        p.channel, p.name);
    dispose_spool(ch, p, *o);
  }
  for (const auto& [ch, p] : ready) {
    m_log->debug("channel {}: queued {} ({} bytes)", p.channel, p.name, p.size);
    queue_product(ch, p);
  }
}

void feed_daemon::queue_product(std::size_t ch, const product& p) {
  auto& cs = m_channels[ch];
  // One product can be reported twice: by the journal's recovery and by the start-up scan, or
  // by a scan whose batch of reports starts a session half-way (the product read 'queued'
  // before that session took it). The journal's state is the truth: only a product still
  // 'queued' goes into a batch, else a second batch would find it moved and mark it failed.
  if (!cs.active) return;
  std::optional<product> now_state;
  if (!guarded(ch, "reading a product", [&] { now_state = m_journal->get(p.id); })) return;
  if (!now_state || now_state->state != product_state::queued) return;
  if (!cs.batch.add(p, from_steady(steady::now()))) return;
  maybe_start(ch);
}

void feed_daemon::arm_batch_timer(std::size_t ch) {
  auto& cs = m_channels[ch];
  const auto when = cs.batch.deadline();
  if (!when || !slot_free(cs) || m_stopping) return;
  cs.timer->expires_at(to_steady(*when));
  cs.timer->async_wait([this, ch](const boost::system::error_code& ec) {
    if (!ec) maybe_start(ch);
  });
}

void feed_daemon::maybe_start(std::size_t ch) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  auto& cs = m_channels[ch];
  if (cs.retired || !cs.active) return;
  // Interrupted batches first, under their own numbers.
  while (!cs.repeats.empty() && slot_free(cs) && !m_stopping) {
    auto b = std::move(cs.repeats.front());
    cs.repeats.pop_front();
    if (!guarded(ch, "sending an interrupted batch again", [&] {
          start_session(ch, session_kind::batch, std::move(b.products), nullptr, b.seq);
        })) {
      return;
    }
  }
  while (slot_free(cs) && !m_stopping && cs.active) {
    const bool batch_ready = cs.batch.ready(from_steady(steady::now()));
    // Catch-up and resend alternate with batches, so neither starves the other. An extra
    // session waits while a product of it is still being sent (a site would store it twice,
    // and run its actions twice).
    const bool extra_ready =
        !cs.extras.empty() &&
        std::none_of(cs.extras.front().products.begin(), cs.extras.front().products.end(),
                     [&](const auto& kv) { return name_in_flight(ch, kv.second, true); });
    if (extra_ready && (!batch_ready || !cs.last_was_extra)) {
      auto req = std::move(cs.extras.front());
      cs.extras.pop_front();
      if (req.kind == session_kind::catchup) {
        // A newer version that went out since the request makes a product of it moot: sent
        // now, it would put the site back (a resend is the operator's choice and goes as is).
        if (!guarded(ch, "checking a catch-up", [&] {
              std::erase_if(req.products,
                            [&](const auto& kv) { return m_journal->superseded(kv.second); });
            })) {
          return;
        }
        if (req.products.empty()) continue;
      }
      std::vector<product> ps;
      for (auto& [id, p] : req.products) ps.push_back(std::move(p));
      cs.last_was_extra = true;
      if (!guarded(ch, "starting a session",
                   [&] { start_session(ch, req.kind, std::move(ps), &req); })) {
        return;
      }
      continue;
    }
    if (!batch_ready) break;
    cs.last_was_extra = false;
    auto batch = cs.batch.take([&](const product& p) { return name_in_flight(ch, p, false); });
    // Everything waiting is a new version of a product still being sent: wait for that
    // session's end (on_session_done starts again).
    if (batch.empty()) return;
    if (!guarded(ch, "starting a session",
                 [&] { start_session(ch, session_kind::batch, std::move(batch), nullptr); })) {
      return;
    }
  }
  if (cs.active && slot_free(cs)) arm_batch_timer(ch);
}

bool feed_daemon::slot_free(const channel_state& cs) {
  const auto busy = static_cast<std::size_t>(
      std::count_if(cs.runs.begin(), cs.runs.end(), [](const auto& r) { return !r->lingering; }));
  return busy < cs.cfg->concurrent_sessions && cs.runs.size() < 2 * cs.cfg->concurrent_sessions;
}

bool feed_daemon::name_in_flight(std::size_t ch, const product& p, bool same_too) const {
  for (const auto& r : m_channels[ch].runs) {
    for (const auto& q : r->products) {
      if (q.name == p.name && (same_too || q.id != p.id)) return true;
    }
  }
  return false;
}

bool feed_daemon::start_session(std::size_t ch, session_kind kind, std::vector<product> products,
                                const extra_request* extra, std::uint64_t repeat_seq) {
  auto& cs = m_channels[ch];
  const auto& cc = *cs.cfg;
  const bool batch = kind == session_kind::batch;
  // Every journal write of the set-up in one commit (one fsync; PostgreSQL: one commit round
  // trip), behind the lease's fencing token in a cluster.
  auto tx = m_journal->begin_tx();
  if (m_keeper) m_journal->check_lease(cc.name, m_cfg.cluster.hub, cs.epoch);
  std::vector<sender::source_file> files;
  std::vector<product> sent;
  std::set<std::string> names;
  std::vector<opened_product> opened;
  for (auto& p : products) {
    std::string why;
    std::optional<opened_product> o;
    if (batch) {
      if (const auto root = spool_root_of(p.spool_path, p.name)) {
        o = open_product(*root, p.name, {p.size, p.mtime_ns}, m_own_files, why);
      } else {
        why = "its spool path " + p.spool_path + " does not end in its name";
      }
    } else if (!p.retained_path) {
      why = "no longer retained";
    } else if (const auto root = spool_root_of(*p.retained_path, p.name)) {
      o = open_product(*root, p.name, {p.size, p.mtime_ns}, m_own_files, why);
      if (!o) why = "its retained copy " + why;
    } else {
      why = "its retained path does not end in its name";
    }
    if (o && !names.insert(p.name).second) {
      o.reset();
      why = "another product of the same name is in the session";
    }
    if (!o) {
      m_log->warn("channel {}: {} {}: {}", cc.name, printable(p.name),
                  batch ? "not sent" : "not resent", why);
      if (batch) {
        m_journal->mark_failed(p.id, why);
        m_board.refused(ch);
      }
      continue;
    }
    sender::source_file sf;
    sf.local = batch ? p.spool_path : *p.retained_path;
    sf.fd = o->fd;
    sf.entry.path = p.name;
    sf.entry.size = p.size;
    sf.entry.mtime_ns = p.mtime_ns;
    sf.entry.mode = o->st.st_mode & 07777;
    files.push_back(std::move(sf));
    sent.push_back(std::move(p));
    opened.push_back(std::move(*o));
  }
  if (files.empty()) {
    tx->commit();
    return false;
  }
  try {
    sender::prehash(files, prehash_file_max, prehash_budget, 1, true);
  } catch (const sender::file_set_error& e) {
    m_log->error("channel {}: {}; the batch is not sent", cc.name, e.what());
    if (batch) {
      for (const auto& p : sent) m_journal->mark_failed(p.id, e.what());
    }
    tx->commit();
    return false;
  }

  auto owned = std::make_unique<running>();
  running& run = *owned;
  run.kind = kind;
  run.channel = ch;
  run.claim = {cc.priority, cc.share, cc.cap_bps};
  sender::sender_config sc;
  std::random_device rd;
  sc.session = session_id{rd() | 1u};
  // fec_k "auto": the loss the session's sites reported of earlier sessions sizes its FEC
  // blocks (an open group's: every site heard).
  const std::vector<std::string> loss_sites =
      batch ? cc.receivers : std::vector<std::string>(extra->sites.begin(), extra->sites.end());
  const std::optional<double> loss =
      cc.profile.fec_k_auto ? m_loss.loss_of(loss_sites) : std::nullopt;
  cc.profile.apply(sc, loss);
  // Logged when it moves by a quarter: the estimate drifts a little with every session.
  if (loss && (cs.fec_k_logged == 0 || sc.fec_k * 4 >= cs.fec_k_logged * 5 ||
               sc.fec_k * 5 <= cs.fec_k_logged * 4)) {
    m_log->info("channel {}: fec_k {} (auto) from the sites' loss {:.2e} over {} datagrams",
                cc.name, sc.fec_k, *loss, m_loss.datagrams_of(loss_sites));
    cs.fec_k_logged = sc.fec_k;
  }
  cs.fec_k_now = sc.fec_k;
  sc.register_timeout = cc.register_timeout;
  sc.sender_name = sender_name_of(cc);
  sc.relays = m_cfg.relays;
  sc.relay_timeout = m_cfg.relay_timeout;
  if (m_cfg.rate_auto) {
    sc.rate_auto = true;
    sc.rate_max_bps = m_cfg.rate_max_bps;  // rebalance() lowers it to the session's share
    run.rate_auto = true;
  }
  // An encrypted channel's fallback seals its frames (common/unicast/record_seal.hpp).
  std::set<std::pair<std::uint64_t, std::uint64_t>> no_ranges;
  if (batch) {
    sc.receivers = cc.receivers;
    sc.not_awaited.assign(cs.absent.begin(), cs.absent.end());
    run.seq = repeat_seq ? repeat_seq : m_journal->next_seq(cc.name);
    cs.last_seq = std::max(cs.last_seq, run.seq);
    set_sequence(sc, cc.name, run.seq, no_ranges);
  } else {
    run.only.assign(extra->sites.begin(), extra->sites.end());
    run.catch_up_seqs = extra->seqs;
    sc.only_receivers = run.only;
    sc.force_unicast = extra->unicast;
    set_sequence(sc, cc.name, 0, extra->seqs);
  }
  // This session's rate: its place among the running ones (rebalance() updates the others).
  sc.rate_bps = session_rates(ch).front();
  if (sc.rate_auto) sc.rate_max_bps = sc.rate_bps;
  sender::app_options opts;
  opts.group = cc.group;
  opts.interface = m_interface.address;
  opts.interface_index = m_interface.index;
  opts.interface_name = m_interface.name;
  opts.ttl = cc.ttl;
  opts.identity = m_identity;
  opts.site_keys = m_site_keys;
  opts.encrypt = cc.encrypt;
  opts.shared_unicast = m_unicast.get();
  if (m_keeper) opts.fence = m_keeper->fence(cc.name);
  opts.on_activity = [this, ch, id = sc.session](sender::session_activity a) {
    on_activity(ch, id, a);
  };
  if (!m_unicast && sc.fallback != sender::fallback_mode::off) {
    // Without the shared server only per-session kernel TCP listeners can coexist.
    sc.fallback = sender::fallback_mode::tcp;
  }

  std::vector<std::int64_t> ids;
  for (const auto& p : sent) ids.push_back(p.id);
  run.row = m_journal->begin_session(
      session_row{cc.name, run.seq, fmt::format("{}", sc.session), kind, {}}, ids);
  std::uint64_t bytes = 0;
  for (const auto& p : sent) bytes += p.size;
  run.products = std::move(sent);
  run.opened = std::move(opened);
  try {
    run.app = std::make_unique<sender::sender_app>(m_io, opts, sc, std::move(files), m_log,
                                                   steady::now());
  } catch (const std::exception& e) {
    m_log->error("channel {}: cannot start a session: {}; trying again in {} s", cc.name, e.what(),
                 retry_after.count());
    m_journal->end_session(run.row, session_outcome::aborted);
    for (const auto& p : run.products) {
      if (batch) {
        m_journal->requeue(p.id);
        cs.batch.add(p, from_steady(steady::now() + retry_after));
      }
    }
    tx->commit();
    return false;
  }
  tx->commit();
  m_log->info(
      "channel {}: session {} ({}{}): {} product{}, {} at {}", cc.name, sc.session, kind_name(kind),
      batch ? " " + std::to_string(run.seq) + (repeat_seq ? ", sent again" : "")
            : " to " + std::to_string(run.only.size()) + " sites",
      run.products.size(), run.products.size() == 1 ? "" : "s",
      format_bytes(static_cast<double>(bytes)), format_rate(static_cast<double>(sc.rate_bps)));
  auto* app = run.app.get();
  m_apps[sc.session] = app;
  const running* key = owned.get();
  cs.runs.push_back(std::move(owned));
  ++cs.sessions;
  app->start([this, ch, key](sender::run_result r) { on_session_done(ch, key, std::move(r)); });
  rebalance();
  return true;
}

std::vector<std::uint64_t> feed_daemon::session_rates(std::optional<std::size_t> adding) const {
  // One claim per channel with sessions that have data (and the channel a session is being
  // added to), the channel's rate then split equally among those sessions. Strict priority by
  // what is sent, not by what is open: a warning's session spends most of its life waiting for
  // round trips, and holding the whole rate idle meanwhile starved every field behind it.
  std::vector<rate_claim> claims;
  std::vector<std::size_t> counts;
  std::size_t added_at = 0;
  for (std::size_t i = 0; i < m_channels.size(); ++i) {
    const auto& c = m_channels[i];
    const bool add = adding && *adding == i;
    const auto n = static_cast<std::size_t>(std::count_if(
                       c.runs.begin(), c.runs.end(), [](const auto& r) { return r->wants_data; })) +
                   (add ? 1 : 0);
    if (n == 0) continue;
    claims.push_back({c.cfg->priority, c.cfg->share, c.cfg->cap_bps});
    counts.push_back(n);
    if (add) added_at = claims.size() - 1;
  }
  const auto per_channel = share_rate(m_cfg.rate_bps, claims);
  if (adding) {
    // The new session's rate alone.
    const auto rates = split_rate(std::span(&per_channel[added_at], 1),
                                  std::span(&counts[added_at], 1), m_cfg.rate_bps);
    return {rates.back()};
  }
  const auto shared = split_rate(per_channel, counts, m_cfg.rate_bps);
  const auto floor = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(static_cast<double>(m_cfg.rate_bps) * default_floor_fraction));
  std::vector<std::uint64_t> out;
  std::size_t next = 0;
  for (const auto& c : m_channels) {
    for (const auto& r : c.runs) out.push_back(r->wants_data ? shared[next++] : floor);
  }
  return out;
}

void feed_daemon::on_activity(std::size_t ch, session_id session, sender::session_activity a) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  const auto app = m_apps.find(session);
  if (ch >= m_channels.size() || app == m_apps.end()) return;  // ended meanwhile
  for (auto& r : m_channels[ch].runs) {
    if (r->app.get() != app->second) continue;
    // Rate auto: the controller's rate would be clipped to the floor while the session waits,
    // and climb again from there; its sessions keep their share.
    const bool wants = r->rate_auto || a.wants_data;
    const bool freed = a.lingering && !r->lingering;
    const bool rates = wants != r->wants_data;
    r->wants_data = wants;
    r->lingering = a.lingering;
    if (rates) rebalance();
    if (freed) maybe_start(ch);
    return;
  }
}

void feed_daemon::rebalance() {
  std::vector<sender::sender_app*> apps;
  for (auto& c : m_channels) {
    for (auto& r : c.runs) apps.push_back(r->app.get());
  }
  const auto rates = session_rates(std::nullopt);
  for (std::size_t i = 0; i < apps.size(); ++i) {
    // A rate-auto session keeps finding its rate below the share, its ceiling.
    apps[i]->set_rate(rates[i]);
  }
}

void feed_daemon::on_session_done(std::size_t ch, const running* which, sender::run_result r) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  auto& cs = m_channels[ch];
  const auto it =
      std::find_if(cs.runs.begin(), cs.runs.end(), [&](const auto& p) { return p.get() == which; });
  if (it == cs.runs.end()) return;
  running run = std::move(**it);
  cs.runs.erase(it);
  m_apps.erase(r.report.session);
  // The app withdrew its grants when its session ended; this holds whatever the path to the
  // end, since the grants name the app's files, destroyed below.
  if (m_unicast) m_unicast->end_session(r.report.session);
  const auto& cc = *cs.cfg;
  // A cluster's hub that stops leaves its sessions open in the journal, as one that lost the
  // channel does: the hub taking over sends them again under their numbers.
  if (m_stopping && m_keeper) run.fenced = true;
  if (run.fenced) {
    m_log->warn(
        "channel {}: session {} ({}{}) stopped; left open in the journal for the hub that "
        "sends the channel next",
        cc.name, r.report.session, kind_name(run.kind),
        run.seq ? " " + std::to_string(run.seq) : std::string());
    boost::asio::post(m_io, [app = std::move(run.app)]() mutable { app.reset(); });
    rebalance();
    maybe_start(ch);
    check_stopped();
    return;
  }
  const bool aborted = m_stopping || !r.error.empty();
  const bool dispose_now = run.kind == session_kind::batch && !m_stopping;
  // The retained copies first, so that mark_sent records them ...
  std::vector<std::optional<std::string>> kept;
  if (dispose_now) {
    for (std::size_t i = 0; i < run.products.size(); ++i) {
      kept.push_back(retain(ch, run.products[i], run.opened[i]));
    }
  }
  // ... then every journal write of the session's end in one commit (one fsync for hundreds of
  // product x site outcomes) ...
  const bool journaled = guarded(ch, "ending a session", [&] {
    auto tx = m_journal->begin_tx();
    if (m_keeper) m_journal->check_lease(cc.name, m_cfg.cluster.hub, cs.epoch);
    record_outcomes(ch, run, r);
    m_journal->end_session(run.row, aborted       ? session_outcome::aborted
                                    : r.succeeded ? session_outcome::complete
                                                  : session_outcome::partial);
    if (run.kind == session_kind::batch) {
      for (std::size_t i = 0; i < run.products.size(); ++i) {
        // Stopping: sent again at the next start; sites that completed it answer 'held'.
        if (m_stopping) {
          m_journal->requeue(run.products[i].id);
        } else {
          m_journal->mark_sent(run.products[i].id, kept[i]);
        }
      }
    }
    tx->commit();
  });
  if (!journaled) {
    // The journal still has the session open and its products 'sending': the channel's next
    // holder sends them again; their spool files stay for it.
    boost::asio::post(m_io, [app = std::move(run.app)]() mutable { app.reset(); });
    rebalance();
    check_stopped();
    return;
  }
  // WIS2 notifications before the spool files go (their digests are read from them).
  if (dispose_now && m_wis2) announce_wis2(ch, run);
  // ... and only then the spool files go: a crash in between leaves a product 'sent' with its
  // file still in the spool (the next start's scan finds it sent and leaves it), never a
  // product gone from the spool that the journal would send again.
  if (dispose_now) {
    for (std::size_t i = 0; i < run.products.size(); ++i) {
      dispose_spool(ch, run.products[i], run.opened[i]);
    }
  }
  m_board.session_done(ch, run.kind, run.seq, run.products, r.report, dispose_now,
                       std::chrono::system_clock::now());
  std::size_t done = 0;
  for (const auto& rr : r.report.receivers) {
    if (rr.state == sender::receiver_report::state_t::completed) {
      ++done;
    }
  }
  m_log->info(
      "channel {}: session {} ({}{}) ended: {} of {} sites complete in {:.3f} s, {} data "
      "datagrams ({} repairs, {} of them for sites keyed late, {} proactive parity){}",
      cc.name, r.report.session, kind_name(run.kind),
      run.seq ? " " + std::to_string(run.seq) : std::string(), done, r.report.receivers.size(),
      r.wall_seconds, r.report.data_datagrams, r.report.repair_datagrams, r.report.late_key_blocks,
      r.report.proactive_parity, r.error.empty() ? "" : ": " + r.error);
  if (!m_stopping) {
    for (const auto& rr : r.report.receivers) {
      const auto gaps = missing_seqs_of(rr);
      if (!gaps.empty()) request_catch_up(ch, rr.id, gaps);
    }
  }
  // The app's cancelled handlers are queued ahead of this; destroy it after them.
  boost::asio::post(m_io, [app = std::move(run.app)]() mutable { app.reset(); });
  rebalance();
  maybe_start(ch);
  check_stopped();
}

void feed_daemon::record_outcomes(std::size_t ch, const running& run, const sender::run_result& r) {
  using st = sender::receiver_report::state_t;
  const auto& cc = *m_channels[ch].cfg;
  const auto now = std::chrono::system_clock::now();
  std::set<std::string> present;
  for (const auto& rr : r.report.receivers) {
    present.insert(rr.id);
    // A listed site that never registered is reported failed ("did not register within ...")
    // with no address: for the journal it missed the session.
    const bool absent = rr.state == st::missing || (rr.state == st::failed && rr.address.port == 0);
    const std::set<std::uint32_t> held(rr.held_files.begin(), rr.held_files.end());
    std::map<std::uint32_t, std::string> failed(rr.file_failures.begin(), rr.file_failures.end());
    for (std::uint32_t i = 0; i < run.products.size(); ++i) {
      outcome o = outcome::stored;
      std::string reason;
      if (held.count(i)) {
        o = outcome::held;
      } else if (rr.state == st::completed) {
        if (auto f = failed.find(i); f != failed.end()) {
          o = outcome::failed;
          reason = f->second;
        }
      } else if (absent) {
        o = outcome::missed;
        reason = rr.reason.empty() ? "listed but did not register" : rr.reason;
      } else {
        o = outcome::failed;
        reason = rr.reason.empty() ? "the session ended before the site completed" : rr.reason;
      }
      m_journal->record_outcome(run.products[i].id, rr.id, o, reason, run.seq, now);
      m_board.record_outcome(rr.id, ch, run.products[i].id, o, now);
    }
    const double nak_ratio = r.report.data_datagrams
                                 ? std::min(1.0, static_cast<double>(rr.blocks_naked) /
                                                     static_cast<double>(r.report.data_datagrams))
                                 : 0;
    m_board.site_report(ch, rr, nak_ratio, now);
    if (rr.state == st::completed && rr.path == delivery_path::multicast) {
      m_loss.note(rr.id, rr.datagrams_received, rr.datagrams_lost);
    }
    note_presence(ch, rr.id, !absent, run.kind == session_kind::batch ? run.seq : 0);
    if (absent) continue;
    site_row s;
    s.site = rr.id;
    s.channel = cc.name;
    s.last_seen = now;
    s.rtt_s = rr.rtt_valid ? to_seconds(rr.rtt) : 0;
    s.nak_ratio = nak_ratio;
    s.last_seq = last_seq_of(rr);
    if (run.kind == session_kind::batch && rr.state == st::completed) {
      s.last_seq = std::max(s.last_seq, run.seq);
    }
    m_journal->site_seen(s);
  }
  if (run.kind != session_kind::batch) return;
  // Sites seen on this channel before that did not take part: they missed the batch (down, or
  // registered too late); their REGISTER in a later session reports the gap for catch-up.
  for (const auto& s : m_journal->sites()) {
    if (s.channel != cc.name || present.count(s.site)) continue;
    for (const auto& p : run.products) {
      m_journal->record_outcome(p.id, s.site, outcome::missed,
                                "not in the session (down, or registered too late)", run.seq, now);
      m_board.record_outcome(s.site, ch, p.id, outcome::missed, now);
    }
  }
}

void feed_daemon::note_presence(std::size_t ch, const std::string& site, bool heard,
                                std::uint64_t seq) {
  auto& cs = m_channels[ch];
  if (heard) {
    if (cs.absent.erase(site)) {
      m_log->info("channel {}: site {} is heard again; its sessions wait for it again",
                  cs.cfg->name, site);
    }
    return;
  }
  // Only a batch session of the whole group tells that a listed site is down.
  if (seq == 0 || !cs.absent.insert(site).second) return;
  m_log->warn(
      "channel {}: site {} did not register in session {}; the channel's sessions do not wait "
      "for it until it is heard again (its gap report brings what it missed)",
      cs.cfg->name, site, seq);
  // The channel's other sessions that started before this one ended wait for it too.
  for (const auto& r : cs.runs) r->app->stop_awaiting(site);
}

void feed_daemon::request_catch_up(
    std::size_t ch, const std::string& site,
    const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
  note_presence(ch, site, true, 0);
  const auto& cc = *m_channels[ch].cfg;
  extra_request req;
  req.kind = session_kind::catchup;
  req.sites.insert(site);
  // Sessions of the channel still under way are not missed: a site reports a number below
  // the newest as missing while its session runs, when sessions run concurrently; nor are
  // the numbers of a catch-up under way that names the site (a heartbeat came during it).
  std::set<wire::seq_span> under_way;
  for (const auto& r : m_channels[ch].runs) {
    if (r->seq > 0) under_way.insert({r->seq, r->seq});
    if (std::find(r->only.begin(), r->only.end(), site) != r->only.end()) {
      under_way.insert(r->catch_up_seqs.begin(), r->catch_up_seqs.end());
    }
  }
  const std::vector<wire::seq_span> busy(under_way.begin(), under_way.end());
  const auto wanted = wire::subtract_seq_ranges(ranges, busy);
  std::size_t n = 0;
  std::size_t superseded = 0;
  for (const auto& [from, to] : wanted) {
    if (n++ == max_catch_up_ranges) break;
    std::vector<product> ps;
    if (!guarded(ch, "finding a catch-up's products",
                 [&] { ps = m_journal->products_of_seqs(cc.name, from, to); })) {
      return;
    }
    if (ps.empty()) {
      m_log->warn(
          "channel {}: site {} misses sessions {}-{}, whose products are no longer "
          "retained (retention {:.1f} h); they cannot be caught up",
          cc.name, site, from, to,
          std::chrono::duration<double, std::ratio<3600>>(m_cfg.retention).count());
      continue;
    }
    req.seqs.insert({from, to});
    for (const auto& p : ps) {
      // A newer version went out since: sending this one would put the site back.
      bool newer = false;
      if (!guarded(ch, "checking a catch-up", [&] { newer = m_journal->superseded(p); })) return;
      if (newer) {
        ++superseded;
        continue;
      }
      req.products.emplace(p.id, p);
    }
  }
  if (superseded > 0) {
    m_log->info("channel {}: catch-up for {}: {} product{} left out, newer versions were sent",
                cc.name, site, superseded, superseded == 1 ? "" : "s");
  }
  if (req.products.empty()) return;
  m_log->info(
      "channel {}: site {} reports {} missed session range{}: catch-up of {} product{} "
      "queued",
      cc.name, site, req.seqs.size(), req.seqs.size() == 1 ? "" : "s", req.products.size(),
      req.products.size() == 1 ? "" : "s");
  add_extra(ch, std::move(req));
}

void feed_daemon::add_extra(std::size_t ch, extra_request req) {
  auto& cs = m_channels[ch];
  for (auto& e : cs.extras) {
    // Requests of several sites merge into one session (sites holding a product answer held).
    if (e.kind != req.kind || e.unicast != req.unicast) continue;
    if (e.seqs.size() + req.seqs.size() > max_catch_up_ranges) continue;
    e.sites.insert(req.sites.begin(), req.sites.end());
    e.seqs.insert(req.seqs.begin(), req.seqs.end());
    e.products.merge(req.products);
    return;
  }
  cs.extras.push_back(std::move(req));
  maybe_start(ch);
}

std::optional<std::string> feed_daemon::retain(std::size_t ch, const product& p,
                                               const opened_product& o) {
  if (m_cfg.retention.count() <= 0) return std::nullopt;
  const auto& cc = *m_channels[ch].cfg;
  const auto target = m_cfg.retained_dir / cc.name / std::to_string(p.id) / p.name;
  if (auto ec = link_or_copy_fd(o.fd->get(), target)) {
    m_log->error("channel {}: cannot keep {} in {}: {} (it cannot be caught up or resent)", cc.name,
                 p.name, target.string(), ec.message());
    return std::nullopt;
  }
  return target.string();
}

void feed_daemon::dispose_spool(std::size_t ch, const product& p, const opened_product& o) {
  const auto& cc = *m_channels[ch].cfg;
  const auto root = spool_root_of(p.spool_path, p.name);
  if (!root || cc.after == after_send::keep) return;
  // Only while the spool name still leads to the file sent: a new version a producer renamed
  // over it during the session is its own product, queued for the next batch.
  const auto ec = cc.after == after_send::remove ? remove_if_same(*root, p.name, o.identity())
                                                 : move_if_same(*root, p.name, o.identity(),
                                                                o.fd->get(), cc.move_dir / p.name);
  if (ec == std::errc::file_exists) {
    m_log->info("channel {}: {} was replaced in the spool during its session; the new file stays",
                cc.name, p.name);
  } else if (ec && ec != std::errc::no_such_file_or_directory) {
    m_log->error("channel {}: after sending {}: {}", cc.name, p.spool_path, ec.message());
  }
  // Empty spool subdirectories stay: a producer may have just created or found one and be about
  // to write into it (removing it would fail that producer's write with ENOENT).
}

void feed_daemon::reject(const spooled_file& f, const std::string& why) {
  const auto& cc = m_cfg.channels[f.channel];
  // Whole in the journal (a name is at most a few KiB), cut in the log line.
  const auto shown = printable(f.name, std::string::npos);
  const auto root = spool_root_of(f.path.string(), f.name);
  std::string where = "left in the spool";
  if (root) {
    const auto aside = *root / rejected_dir_name / f.name;
    std::error_code ec;
    std::filesystem::create_directories(aside.parent_path(), ec);
    if (!ec && ::rename(f.path.c_str(), aside.c_str()) == 0) {
      where = "moved to " + printable((*root / rejected_dir_name).string());
    }
  }
  product p;
  p.channel = cc.name;
  p.name = shown;
  p.spool_path = printable(f.path.string(), std::string::npos);
  p.size = f.size;
  p.mtime_ns = f.mtime_ns;
  const auto id = m_journal->enqueue(p);
  m_journal->mark_failed(id, why + "; " + where);
  m_board.refused(f.channel);
  m_log->warn("channel {}: {} refused at intake: {}; {}", cc.name, printable(f.name), why, where);
}

void feed_daemon::do_expire() {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  // The journal and the retained copies are bounded by the same window.
  const auto keep =
      m_cfg.retention.count() > 0 ? m_cfg.retention : std::chrono::nanoseconds(min_journal_history);
  const auto before = std::chrono::system_clock::now() -
                      std::chrono::duration_cast<std::chrono::system_clock::duration>(keep);
  try {
    const auto r = m_journal->expire(before);
    const auto& paths = r.retained_paths;
    for (const auto& p : paths) {
      std::error_code ec;
      std::filesystem::remove(p, ec);
      prune_empty(std::filesystem::path(p).parent_path(), m_cfg.retained_dir);
    }
    if (r.products || !paths.empty()) {
      m_log->info(
          "retention: {} products, {} sessions, {} outcomes forgotten; {} retained files "
          "removed",
          r.products, r.sessions, r.outcomes, paths.size());
    }
    const auto seen_before =
        std::chrono::system_clock::now() -
        std::chrono::duration_cast<std::chrono::system_clock::duration>(m_cfg.wis2_dedupe_window);
    if (const auto n = m_wis2_seen ? m_wis2_seen->expire(seen_before) : 0) {
      m_log->debug("WIS2: {} notification{} forgotten (wis2_dedupe_window)", n, n == 1 ? "" : "s");
    }
  } catch (const std::exception& e) {
    m_log->error("retention: {}", e.what());
  }
  const auto every = std::clamp<std::chrono::nanoseconds>(
      m_cfg.retention / 20, std::chrono::seconds(1), std::chrono::minutes(10));
  m_expire_timer.expires_after(every);
  m_expire_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) do_expire();
  });
}

void feed_daemon::stop(std::function<void()> done) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  m_stopping = true;
  m_stopped = std::move(done);
  // Downloads under way stay pending in the journal: the next start resumes them.
  m_wis2_inputs.clear();
  m_watcher.reset();
  if (m_heartbeats) m_heartbeats->stop();
  m_expire_timer.cancel();
  for (auto& c : m_channels) {
    c.timer->cancel();
    for (auto& r : c.runs) r->app->abort("the feed is shutting down");
  }
  check_stopped();
}

void feed_daemon::check_stopped() {
  if (!m_stopping || !m_stopped) return;
  for (const auto& c : m_channels) {
    if (!c.runs.empty()) return;
  }
  // The standby takes over at its next round instead of after the lease.
  if (m_keeper) m_keeper->release();
  // After the posted destruction of the last app.
  boost::asio::post(m_io, [f = std::move(m_stopped)] { f(); });
  m_stopped = nullptr;
}

nlohmann::json feed_daemon::status() const {
  nlohmann::json j;
  j["rate_bps"] = m_cfg.rate_bps;
  j["stopping"] = m_stopping;
  auto& list = j["channels"] = nlohmann::json::array();
  j["config_reloads"] = {{"success", m_reloads_ok}, {"failure", m_reloads_failed}};
  j["rate"] = m_cfg.rate_auto ? "auto" : "fixed";
  j["journal_engine"] = m_journal->engine();
  if (m_keeper) {
    const auto now = steady::now();
    nlohmann::json c = to_json(m_lease.view);
    c["hub"] = m_cfg.cluster.hub;
    c["lease_s"] = std::chrono::duration<double>(m_cfg.cluster.lease).count();
    c["renew_s"] = std::chrono::duration<double>(m_cfg.cluster.renew).count();
    c["margin_s"] = std::chrono::duration<double>(m_cfg.cluster.margin).count();
    c["database"] = m_lease_failing ? "unreachable" : (m_lease_ok_at ? "ok" : "connecting");
    c["error"] = m_lease_failing ? m_lease.error : "";
    c["last_round_age_s"] =
        m_lease_ok_at ? std::chrono::duration<double>(now - *m_lease_ok_at).count() : -1.0;
    auto& others = c["other_hubs"] = nlohmann::json::array();
    for (const auto& h : m_lease.view.hubs) {
      if (h.hub != m_cfg.cluster.hub) others.push_back(h.hub);
    }
    j["cluster"] = std::move(c);
  }
  if (m_heartbeats) {
    const auto& h = m_heartbeats->counters();
    j["heartbeats"] = {{"sent", h.sent},
                       {"gap_reports", h.reports_taken},
                       {"gap_reports_refused", h.reports_refused},
                       {"gap_reports_too_soon", h.reports_too_soon}};
  }
  if (m_unicast) {
    const auto& u = m_unicast->counters();
    j["fallback"] = {
        {"sctp", m_unicast->sctp_udp_endpoint() ? m_unicast->sctp_udp_endpoint()->to_string() : ""},
        {"tcp", m_unicast->tcp_endpoint() ? m_unicast->tcp_endpoint()->to_string() : ""},
        {"sessions_active", m_unicast->active_sessions()},
        {"hellos_refused", u.hellos_refused},
        {"per_source_refused", u.per_source_refused},
        {"handshakes_evicted", u.handshakes_evicted}};
  }
  if (m_wis2) {
    const auto ws = m_wis2->stats();
    j["wis2"] = {{"topic", m_wis2->action().topic}, {"connected", ws.connected},
                 {"published", ws.published},       {"failed", ws.failed},
                 {"dropped", ws.dropped},           {"queued", ws.queued}};
  }
  if (!m_wis2_inputs.empty()) {
    auto& inputs = j["wis2_input"] = nlohmann::json::array();
    for (const auto& in : m_wis2_inputs) inputs.push_back(in->status());
  }
  for (const auto& c : m_channels) {
    nlohmann::json o;
    o["name"] = c.cfg->name;
    o["retired"] = c.retired;
    o["role"] = c.active ? "active" : "standby";
    if (m_keeper) {
      const auto now = steady::now();
      o["lease"] = {
          {"epoch", c.epoch},
          {"age_s", c.active && c.acquired ? std::chrono::duration<double>(
                                                 std::chrono::system_clock::now() - *c.acquired)
                                                 .count()
                                           : 0.0},
          {"fence_in_s", c.active ? std::chrono::duration<double>(c.fence - now).count() : 0.0},
          {"role_for_s", std::chrono::duration<double>(now - c.role_since).count()},
          {"takeovers", c.takeovers}};
      std::string holder;
      for (const auto& l : m_lease.view.leases) {
        if (l.channel == c.cfg->name) holder = l.holder;
      }
      o["lease"]["holder"] = holder;
      o["lost_reason"] = c.lost_reason;
    }
    o["group"] = c.cfg->group.to_string();
    o["priority"] = c.cfg->priority;
    o["waiting_products"] = c.batch.size();
    o["waiting_bytes"] = c.batch.bytes();
    o["pending_extra_sessions"] = c.extras.size();
    o["sessions"] = c.sessions;
    // The oldest session under way (the page's column), and every one of them.
    auto& list_running = o["sessions_running"] = nlohmann::json::array();
    for (const auto& r : c.runs) {
      list_running.push_back({{"kind", to_string(r->kind)},
                              {"seq", r->seq},
                              {"products", r->products.size()},
                              {"rate_bps", r->app->rate_bps()},
                              {"lingering", r->lingering}});
    }
    o["running"] = c.runs.empty() ? nlohmann::json(nullptr) : list_running.front();
    const auto& p = c.cfg->profile;
    o["profile"] = {{"fec_k", p.fec_k_auto ? nlohmann::json("auto") : nlohmann::json(p.fec_k)},
                    {"fec_k_now", c.fec_k_now},
                    {"fec_depth", p.fec_depth},
                    {"fec_overhead", p.fec_overhead},
                    {"silent_passes", p.silent_passes},
                    {"fallback", sender::to_string(p.fallback)},
                    {"register_window_s", std::chrono::duration<double>(p.register_window).count()},
                    {"concurrent_sessions", c.cfg->concurrent_sessions},
                    {"heartbeat_s", std::chrono::duration<double>(c.cfg->heartbeat).count()},
                    {"rate", m_cfg.rate_auto ? "auto" : "fixed"}};
    list.push_back(std::move(o));
  }
  return j;
}

resend_products feed_daemon::find_resend(hub_journal& journal, const resend_order& order) {
  if (order.sites.empty()) throw std::invalid_argument("resend: no site given");
  resend_products by_channel;
  if (order.missing_since) {
    std::set<std::int64_t> seen;
    for (const auto& site : order.sites) {
      for (const auto& m : journal.missing(site, *order.missing_since)) {
        if (!m.retained || !seen.insert(m.product_id).second) continue;
        if (order.filter.channel && m.channel != *order.filter.channel) continue;
        if (auto p = journal.get(m.product_id)) by_channel[p->channel].push_back(*p);
      }
    }
  } else {
    for (auto& p : journal.find_products(order.filter))
      by_channel[p.channel].push_back(std::move(p));
  }
  return by_channel;
}

nlohmann::json feed_daemon::resend(const resend_order& order) {
  return queue_resend(order, find_resend(*m_journal, order));
}

nlohmann::json feed_daemon::queue_resend(const resend_order& order, resend_products by_channel) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (order.sites.empty()) throw std::invalid_argument("resend: no site given");
  nlohmann::json j;
  std::size_t total = 0;
  std::uint64_t bytes = 0;
  j["channels"] = nlohmann::json::object();
  for (auto& [name, ps] : by_channel) {
    const auto ch = channel_index(name);
    if (!ch) continue;  // a channel no longer configured
    if (!m_channels[*ch].active) {
      std::string holder = "another hub";
      for (const auto& l : m_lease.view.leases) {
        if (l.channel == name) holder = "hub " + l.holder;
      }
      j["standby"][name] = holder;
      continue;
    }
    extra_request req;
    req.kind = session_kind::resend;
    req.sites.insert(order.sites.begin(), order.sites.end());
    req.unicast = order.unicast;
    for (auto& p : ps) req.products.emplace(p.id, std::move(p));
    for (const auto& [id, p] : req.products) bytes += p.size;
    j["channels"][name] = req.products.size();
    total += req.products.size();
    m_log->info("channel {}: resend of {} product{} to {} queued{}", name, req.products.size(),
                req.products.size() == 1 ? "" : "s", join(order.sites),
                order.unicast ? " (over unicast)" : "");
    add_extra(*ch, std::move(req));
  }
  if (total == 0 && j.contains("standby")) {
    throw std::invalid_argument("resend: this hub (" + m_cfg.cluster.hub +
                                ") is standby for the channels concerned (" + j["standby"].dump() +
                                "); ask the hub that sends them");
  }
  if (total == 0) {
    throw std::invalid_argument(
        "resend: no retained product matches (sent products are kept "
        "for the configured retention only)");
  }
  j["products"] = total;
  j["bytes"] = bytes;
  j["session"] = "";
  j["unicast"] = order.unicast;
  return j;
}

void feed_daemon::announce_wis2(std::size_t ch, const running& run) {
  const auto& name = m_cfg.channels[ch].name;
  if (!m_cfg.wis2_channels.empty() &&
      std::find(m_cfg.wis2_channels.begin(), m_cfg.wis2_channels.end(), name) ==
          m_cfg.wis2_channels.end()) {
    return;
  }
  for (std::size_t i = 0; i < run.products.size(); ++i) {
    const auto& p = run.products[i];
    // The descriptor the session sent from: the digest is of the file that was sent, whatever
    // the spool name leads to now. The session recorded the digest it announced in the file's
    // xattr (sender digest cache); a file system without user xattrs makes us hash it here, on
    // the io thread (products announced over WIS2 are usually small; a big one delays other
    // channels a moment).
    sender::source_file f;
    f.local = p.spool_path;
    f.fd = run.opened[i].fd;
    f.entry.size = p.size;
    f.entry.mtime_ns = p.mtime_ns;
    auto d = read_digest_xattr(f.fd->get(), p.size, p.mtime_ns);
    if (!d) {
      sha256_digest digest;
      std::string why;
      if (sender::hash_file(f, digest, why)) {
        m_log->warn("channel {}: {}: no WIS2 notification: {}", name, p.name, why);
        continue;
      }
      d = digest;
    }
    m_wis2->publish(p.name, p.size, p.mtime_ns, *d);
  }
}

}  // namespace mcdist::feed
