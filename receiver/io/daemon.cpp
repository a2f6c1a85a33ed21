#include "receiver/io/daemon.hpp"

#include "common/sys/key_file.hpp"
#include "common/sys/logging.hpp"
#include "common/units.hpp"
#include "common/wire.hpp"
#include "receiver/io/sequence_store.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mcdist::receiver {

namespace {

/// Datagrams handled per socket wake-up before other sockets and timers get a turn.
constexpr std::size_t max_datagrams_per_wake = 4096;
/// recvmmsg batch and buffer: 64 KiB buffers so UDP GRO can hand over coalesced datagrams.
constexpr std::size_t receive_batch = 16;
constexpr std::size_t receive_buffer_bytes = 65536;
/// Reading pauses while the storage pool has less room than this (two GRO buffers' worth).
constexpr std::size_t min_pool_room = 256 * 1024;
/// At SIGTERM, how long action attempts already running may take to finish (and be journaled
/// done) before they are killed (10 s: an ingest script's normal run, well inside systemd's
/// default TimeoutStopSec of 90 s).
constexpr std::chrono::seconds action_stop_grace{10};
/// How long a paused read waits before looking at the pool again.
constexpr auto read_pause = std::chrono::microseconds(500);

/// The configuration checked whole, then the interface its channels are joined on resolved
/// for their family (an interface that is not there is a configuration error).
net::resolved_interface checked_interface(const daemon_config& cfg) {
  validate(cfg);
  try {
    return net::resolve_interface(cfg.interface, cfg.channels.front().group.v6);
  } catch (const net::interface_error& e) {
    throw config_error(std::string("interface: ") + e.what());
  }
}

/// The unicast clients' settings: they connect from the interface's address unless that is
/// the any address, and pause as the multicast reads do.
unicast_slots::settings unicast_settings(const daemon_config& cfg,
                                         const net::resolved_interface& iface) {
  unicast_slots::settings st;
  st.receiver_id = cfg.id;
  const auto& a = iface.address;
  const bool any = std::all_of(a.addr.begin(), a.addr.begin() + (a.v6 ? 16 : 4),
                               [](std::uint8_t b) { return b == 0; });
  if (!any) st.local = a;
  st.min_pool_room = min_pool_room;
  st.poll = read_pause;
  return st;
}

/// The storage path's settings (without its finalizer hook).
storage_config storage_settings(const daemon_config& cfg, std::shared_ptr<spdlog::logger> log) {
  storage_config sc;
  sc.temp_dir = cfg.temp;
  sc.buffer_pool_bytes = cfg.buffer_pool_bytes;
  sc.sync = cfg.sync;
  sc.disk_reserve_bytes = cfg.disk_reserve_bytes;
  sc.disk_reserve_percent = cfg.disk_reserve_percent;
  sc.session_quota_bytes = cfg.session_quota_bytes;
  sc.parity_memory_bytes = cfg.parity_memory_bytes;
  sc.log = std::move(log);
  for (const auto& ch : cfg.channels) sc.dest_roots.push_back(ch.dest);
  return sc;
}

/// The engine's settings.
receiver_config engine_settings(const daemon_config& cfg) {
  receiver_config rc;
  rc.id = cfg.id;
  rc.session_timeout = cfg.session_timeout;
  rc.checkpoint_interval = cfg.checkpoint_interval;
  rc.max_sessions = cfg.max_sessions;
  rc.max_sessions_per_source = cfg.max_sessions_per_source;
  rc.session_memory_bytes = cfg.session_memory_bytes;
  rc.total_memory_bytes = cfg.total_memory_bytes;
  rc.channel_count = static_cast<std::uint32_t>(cfg.channels.size());
  rc.silent_channels = silent_channels(cfg.channels);
  rc.relay_channels = relay_channels(cfg.channels);
  rc.upstream_relays = upstream_relays(cfg.channels);
  return rc;
}

/// The signed sessions taken within max_session_age, from TEMP/replay.
std::unique_ptr<replay_store> open_replay(const daemon_config& cfg, spdlog::logger& log) {
  replay_guard::limits lim;
  lim.max_age = cfg.max_session_age;
  lim.max_skew = cfg.max_clock_skew;
  std::string notice;
  auto r = std::make_unique<replay_store>(cfg.temp / replay_file_name, lim, unix_ms_now(), notice);
  if (!notice.empty()) log.info("{}", notice);
  return r;
}

/// Loads the channels' completed session numbers (docs/design-notes.md "Session sequence
/// numbers") from TEMP/sequences into `book`; a damaged file is kept aside for inspection and
/// numbering starts afresh. @return the book's changes() as loaded
std::uint64_t load_sequence_state(const std::filesystem::path& temp, sequence_book& book,
                                  spdlog::logger& log) {
  const auto file = temp / sequences_file_name;
  std::string detail;
  if (auto ec = load_sequences(file, book, detail)) {
    std::error_code rec;
    std::filesystem::rename(file, file.string() + ".damaged", rec);
    log.warn(
        "{}; kept as {}.damaged: channels start numbering afresh (sessions missed "
        "before now are not reported)",
        detail, file.string());
  } else if (book.size() > 0) {
    log.info("sequence state of {} channel stream(s) loaded from {}", book.size(), file.string());
  }
  return book.changes();
}

void make_dir(const std::filesystem::path& p, const char* what) {
  std::error_code ec;
  std::filesystem::create_directories(p, ec);
  if (ec || !std::filesystem::is_directory(p)) {
    throw config_error(std::string("cannot create the ") + what + " directory " + p.string() +
                       ": " + (ec ? ec.message() : "not a directory"));
  }
}

dev_t device_of(const std::filesystem::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return st.st_dev;
}

/// p itself when it exists, else its nearest existing ancestor (what create_directories would
/// create below). An empty result: nothing exists (a relative path from a vanished directory).
std::filesystem::path existing_part(const std::filesystem::path& p) {
  std::filesystem::path a = std::filesystem::absolute(p).lexically_normal();
  std::error_code ec;
  while (!std::filesystem::exists(a, ec)) {
    if (!a.has_relative_path()) return {};
    a = a.parent_path();
  }
  return a;
}

/// Without creating anything: p is, or could be created as, a directory we can write in.
void check_dir(const std::filesystem::path& p, const char* what) {
  const auto a = existing_part(p);
  if (a.empty() || !std::filesystem::is_directory(a)) {
    throw config_error(std::string("the ") + what + " directory " + p.string() + " cannot be " +
                       (a == std::filesystem::absolute(p).lexically_normal() ? "used" : "created") +
                       ": " +
                       (a.empty() ? "no part of it exists" : a.string() + " is not a directory"));
  }
  if (::access(a.c_str(), W_OK | X_OK) != 0) {
    throw config_error(
        std::string("the ") + what + " directory " + p.string() + " cannot be " +
        (a == std::filesystem::absolute(p).lexically_normal() ? "written" : "created") + ": " +
        a.string() + ": " + std::strerror(errno));
  }
}

}  // namespace

void check_directories(const daemon_config& cfg, bool create) {
  const auto prepare = [create](const std::filesystem::path& p, const char* what) {
    if (create)
      make_dir(p, what);
    else
      check_dir(p, what);
  };
  prepare(cfg.temp, "temp");
  const dev_t temp_dev = device_of(existing_part(cfg.temp));
  for (const auto& ch : cfg.channels) {
    prepare(ch.dest, "destination");
    if (device_of(existing_part(ch.dest)) != temp_dev) {
      throw config_error("the temp directory " + cfg.temp.string() +
                         " is on another filesystem than the destination " + ch.dest.string() +
                         " of channel " + ch.name +
                         ": files are renamed atomically from temp to destination, so both must "
                         "be on one filesystem");
    }
  }
  if (!cfg.journal.empty() && cfg.journal.has_parent_path()) {
    prepare(cfg.journal.parent_path(), "journal");
  }
  if (!create) {
    if (cfg.log.file) check_dir(std::filesystem::path(*cfg.log.file).parent_path(), "log file");
    if (cfg.status_file) check_dir(cfg.status_file->parent_path(), "status file");
  }
}

daemon::daemon(boost::asio::io_context& io, daemon_config cfg, std::shared_ptr<spdlog::logger> log)
    : m_io(io), m_cfg(std::move(cfg)), m_log(std::move(log)),
      // Before anything is made on disk.
      m_channels(io, checked_interface(m_cfg), m_cfg.socket_buffer_bytes),
      m_relays(io, m_channels.interface(), m_log), m_timer(io), m_status_timer(io),
      m_shell(io, m_log,
              {[this] {
                 if (m_config_source) reload(m_config_source);
               },
               [this](const char* signal) {
                 m_log->info("{}: saving state and shutting down", signal);
                 stop();
               },
               [this](const char*) {
                 if (m_stop_finished) return;
                 m_log->warn(
                     "second signal: not waiting for running actions (they run again at the "
                     "next start)");
                 finish_stop();
               }}),
      m_receiver(receive_batch, receive_buffer_bytes), m_drop_rng(m_cfg.drop_seed),
      m_unicast(io, unicast_settings(m_cfg, m_channels.interface()), m_log, unicast_hooks()),
      m_heartbeats(m_cfg.id, m_cfg.max_session_age, m_cfg.max_clock_skew),
      m_board(m_cfg.channels.size()),
      // Its log ring before the store's threads exist: spdlog's sink list is not guarded.
      m_status(m_log, m_cfg.http, m_cfg.http_explicit, "--http"), m_sample_timer(io),
      m_catch_up(io, m_cfg.channels, m_cfg.temp, m_cfg.disk_reserve_bytes, m_log,
                 catch_up_hooks()) {
  check_directories(m_cfg, true);
  m_deliveries = std::make_unique<delivery_recorder>(m_io, m_cfg, m_log);
  m_retention = std::make_unique<retention_sweeper>(
      m_io, m_cfg, m_deliveries->journal(),
      [this](std::size_t c) { return !m_channels.retired(c); }, m_log);
  make_store();
  m_keys = std::make_unique<session_keys>(m_cfg, m_log);
  m_replay = open_replay(m_cfg, *m_log);
  for (std::size_t i = 0; i < m_cfg.channels.size(); ++i) {
    for (const auto& a : m_cfg.channels[i].wis2) {
      m_wis2.push_back({i, std::make_unique<wis2_publisher>(a, m_cfg.channels[i].name, m_log)});
    }
  }
  m_engine = std::make_unique<receiver_engine>(engine_settings(m_cfg), *this, *m_store,
                                               std::random_device{}(), m_log);
  m_relays.set_engine(m_engine.get());
  m_relays.set_state_dir(m_cfg.temp / "relay");
  m_relays.set_report_sender([this](const endpoint& hub, const wire::gap_report& r, bool sign) {
    return send_gap_report(r, sign, hub);
  });
  m_relays.set_keys_release([this](session_id s) {
    const auto it = m_keys_kept.find(s.value);
    if (it == m_keys_kept.end()) return;
    m_keys->forget(s, it->second);
    m_keys_kept.erase(it);
  });
  m_relays.set_upstream_sender([this](const endpoint& hub, std::span<const std::byte> d) {
    std::error_code ec;
    ++m_datagrams_sent;
    if (!net::send_one(m_control_socket->native_handle(), hub, d, ec)) {
      m_log->debug("cannot send a delegation request on to {}: {}", hub.to_string(), ec.message());
      return false;
    }
    return true;
  });
  m_relays.set_delegations([this](session_id s) {
    relay_forwarder::delegation_state d;
    const auto* k = m_keys->of(s);
    if (!k) return d;
    d.refused = k->encrypted(s) || k->delegation_refused(s);
    if (!d.refused) d.delegation = k->delegation(s);
    return d;
  });
  m_sequences_saved = load_sequence_state(m_cfg.temp, m_engine->sequences(), *m_log);
  m_deliveries->recover();
  for (const auto& ch : m_cfg.channels) {
    m_relays.open(m_channels.open(ch), ch);
    if (const auto w = ssm_warning(ch); !w.empty()) m_log->warn("{}", w);
  }
  m_deliveries->publish_config(m_cfg.channels, m_cfg.actions);
  m_control_socket.emplace(net::open_unicast_socket(io, m_channels.interface().address));
  restore_sessions();
  m_relays.forget_stale_states();
  channel_table::save(m_cfg.temp / channel_table::file_name, m_cfg.channels, *m_log);
  m_status.open(io,
                [this](status_view v, log_summary l) { return render_status(v, std::move(l)); });
}

void daemon::make_store() {
  auto sc = storage_settings(m_cfg, m_log);
  sc.before_renames = [this](std::span<const pending_rename> files) {
    m_deliveries->journal_deliveries(files);
  };
  sc.after_renames = [this](std::span<const pending_rename> failed) {
    m_deliveries->settle_renames(failed);
  };
  // Network thread (begin_file), where the session keys live.
  sc.sender_key_of = [this](session_id s) { return m_keys ? m_keys->signer(s) : std::string(); };
  // A store completion carries a whole finalize batch: its "stored" lines leave in one write.
  m_store = std::make_unique<file_store>(
      sc,
      [this](std::function<void()> fn) {
        boost::asio::post(m_io, [log = m_log, fn = std::move(fn)] {
          const log_batch batch(log.get());
          fn();
        });
      },
      [this](store_result r) {
        if (!m_engine) return;
        m_relays.on_file_stored(r.key.session, r.key.file, !r.ec);
        m_engine->on_file_stored(r.key.session, r.key.file, r.ec, r.detail,
                                 from_steady(std::chrono::steady_clock::now()));
        service();
      },
      [this](session_id s, std::vector<held_answer> held) {
        if (!m_engine) return;
        m_engine->on_held(s, held, from_steady(std::chrono::steady_clock::now()));
        service();
      },
      [this](session_id s, std::uint32_t fec_block, std::error_code ec) {
        if (!m_engine) return;
        m_engine->on_recovered(s, fec_block, ec, from_steady(std::chrono::steady_clock::now()));
        service();
      });
}

void daemon::restore_sessions() {
  const auto now = from_steady(std::chrono::steady_clock::now());
  std::vector<session_id> with_state;  // restored, or removed by close_session below
  const auto previous = channel_table::load(m_cfg.temp / channel_table::file_name, m_cfg.channels);
  for (const auto& [session, saved] : load_checkpoints(m_cfg.temp)) {
    with_state.push_back(session);
    const auto blob = previous.remap_checkpoint(saved);
    if (!blob) {
      m_log->warn(
          "session {}: its channel is no longer configured (name and dest); "
          "discarding its saved state",
          session);
      m_store->close_session(session, true);
      continue;
    }
    m_keys->restore(session, [&](std::uint32_t old) { return previous.index_now(old); });
    if (auto ec = m_engine->restore(*blob, now)) {
      m_log->warn("session {}: saved state is unusable ({}); discarding it", session, ec.message());
      m_store->close_session(session, true);
    }
  }
  sweep_temp(m_cfg.temp, with_state, *m_log);
  // Saved keys of sessions that left no usable state go with their temp directories.
  sweep_temp(m_cfg.temp / "keys", with_state, *m_log);
}

daemon::~daemon() {
  m_unicast.close_all();  // clients end without calling back
  m_catch_up.close();     // aborts transfers, joins its threads
  // The store drains its queues and joins its threads before the engine goes.
  m_store.reset();
  m_engine.reset();
  m_retention.reset();
  m_deliveries.reset();  // kills running children: their runs run again at the next start
  m_wis2.clear();        // disconnects and joins libmosquitto's threads
}

endpoint daemon::control_endpoint() const {
  return net::from_asio(m_control_socket->local_endpoint());
}

void daemon::run() {
  for (std::size_t i = 0; i < m_channels.size(); ++i) do_receive(i);
  do_receive(control_index);
  m_status_timer.expires_after(m_cfg.status_interval);
  m_status_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) log_status(false);
  });
  std::string channels;
  for (const auto& ch : m_cfg.channels) {
    channels += (channels.empty() ? "" : ", ") + ch.name + " " + ch.group.to_string() +
                (ch.source ? " from " + ch.source->address_string() : "") + " -> " +
                ch.dest.string();
  }
  m_log->info("mcdistd '{}' listening on {} (interface {}, control {}, temp {}, sync {})", m_cfg.id,
              channels, m_channels.interface().to_string(), control_endpoint().to_string(),
              m_cfg.temp.string(), to_string(m_cfg.sync));
  if (m_status.start()) do_sample();
  m_deliveries->resume_runs();
  m_retention->run();
  m_shell.ready("receiving on " + std::to_string(m_cfg.channels.size()) + " channel(s)");
  service();
  m_io.run();
  log_status(true);
}

void daemon::stop() {
  if (m_stopping) return;
  m_stopping = true;
  m_shell.stopping();
  m_engine->checkpoint_all(from_steady(std::chrono::steady_clock::now()));
  m_store->flush();
  save_sequences_if_changed();
  m_deliveries->flush();
  m_unicast.close_all();
  m_timer.cancel();
  m_status_timer.cancel();
  m_retention->stop();
  m_catch_up.stop();
  m_channels.cancel_all();
  m_relays.cancel_all();
  {
    boost::system::error_code ignored;
    m_control_socket->cancel(ignored);
  }
  // Attempts already running get a grace to finish and be journaled done, so a restart does
  // not run them again; what still runs after it is killed and runs again at the next start.
  if (m_deliveries->actions().running() > 0) {
    m_deliveries->actions().drain(action_stop_grace, [this] { finish_stop(); });
    return;
  }
  finish_stop();
}

void daemon::finish_stop() {
  if (m_stop_finished) return;
  m_stop_finished = true;
  m_deliveries->actions().stop();
  m_shell.close();
  m_status.stop();
  m_sample_timer.cancel();
  m_io.stop();
}

void daemon::do_receive(std::size_t index) {
  socket_at(index).async_wait(
      net::udp::socket::wait_read, [this, index](const boost::system::error_code& ec) {
        MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
        if (ec || m_stopping || !socket_at(index).is_open()) return;
        // Back-pressure: while the storage pool is nearly full, leave datagrams in the socket's
        // kernel buffer (32 MiB) and look again shortly, rather than take blocks we would drop.
        const std::size_t room = m_store->free_bytes();
        if (room < min_pool_room) {
          ++m_read_pauses;
          auto t = std::make_shared<boost::asio::steady_timer>(m_io, read_pause);
          t->async_wait([this, index, t](const boost::system::error_code& e) {
            if (!e && !m_stopping) do_receive(index);
          });
          return;
        }
        const auto now = from_steady(std::chrono::steady_clock::now());
        std::error_code rec;
        std::uniform_real_distribution<double> u(0, 1);
        m_keys->new_wake();
        const int fd = socket_at(index).native_handle();
        if (index != control_index) {
          // --rate auto: a channel socket filling up is this host falling behind; tell the
          // engine before the kernel has to drop (docs/design-notes.md "Receiver overrun").
          m_engine->on_socket_backlog(static_cast<std::uint32_t>(index),
                                      net::receive_buffer_fill(fd), now);
        }
        m_receiver.drain(
            fd, max_datagrams_per_wake,
            [&](std::span<const std::byte> d, const endpoint& from) {
              if (index != control_index) {
                if (m_channels.drops_rose(index, m_receiver.socket_drops())) {
                  m_engine->on_socket_drops(static_cast<std::uint32_t>(index));
                }
                if (!m_channels.admit(index, from)) return;
              }
              if (m_cfg.drop_rate > 0 && u(m_drop_rng) < m_cfg.drop_rate) {
                ++m_dropped_by_option;
                return;
              }
              const auto arrival = m_receiver.arrival();
              handle_datagram(index, d, from, now,
                              arrival ? std::optional(from_steady(*arrival)) : std::nullopt);
            },
            rec, room - min_pool_room / 2);
        // What this read relays leaves now, one sendmmsg per channel run (cut-through).
        m_relays.flush(from_steady(std::chrono::steady_clock::now()));
        if (rec) m_log->warn("receive error on socket {}: {}", index, rec.message());
        m_store->flush();
        service();
        do_receive(index);
      });
}

void daemon::handle_datagram(std::size_t index, std::span<const std::byte> d, const endpoint& from,
                             time_point now, std::optional<time_point> arrival) {
  const std::uint32_t channel =
      index != control_index ? static_cast<std::uint32_t>(index) : receiver_engine::control_channel;
  // The one parse of the header: every filter below, authentication and the engine take it.
  wire::header h;
  if (const auto malformed = wire::parse_header(d, h)) {
    if (index == control_index || !m_channels.retired(index)) m_engine->on_refused(malformed);
    return;
  }
  const bool relayed = index != control_index && m_relays.relays(index);
  if (index != control_index && m_relays.own_source(from)) {
    // What this host relayed came back to it (a router or another relay loops the group).
    m_engine->on_refused(errc::wrong_source);
    return;
  }
  if (index != control_index && h.type == wire::msg_type::heartbeat) {
    on_heartbeat(index, d, from, arrival);
    return;
  }
  if (index != control_index && !channel_takes(index, h)) return;
  if (relayed && h.type == wire::msg_type::session_end &&
      m_relays.end_repeat(index, h.session, d, now)) {
    // A repeat of an END this relay checked and relayed: its session closed at the first.
    m_relays.forward(index, h.session, d, arrival);
    return;
  }
  // The hub's answer to a delegation request this relay passed up for a relay behind it: sent
  // on unopened (it is sealed for that relay).
  if (index == control_index && h.type == wire::msg_type::register_reply &&
      m_relays.on_origin_reply(h, d, from, now)) {
    return;
  }
  // A relay checks every announce it sends on: an unchecked repeat is not relayed, and the
  // sites behind may need that copy.
  if (!relayed && m_keys->announce_repeat(index, h, now, *m_engine)) return;
  // A block, marker or announce of a session whose key this site asked for: the answer is
  // likely queued on the control socket behind this channel's batch. Read it first, so the
  // block is checked instead of refused for want of the key, and an encrypted announce is
  // opened instead of held.
  if (m_keys->poll_first(index, h)) poll_control(now);
  std::span<const std::byte> plain;
  if (const auto refused = m_keys->open(index, h, d, now, plain, from)) {
    // Framing errors (a trailer or digest datagram too short, ...) are counted by the engine
    // by reason like any malformed datagram; refusals are counted already.
    if (refused != errc::unauthenticated) m_engine->on_refused(refused);
    return;
  }
  // Silent before the engine takes it: a session's END closes it there.
  const bool silent_before = relayed && m_engine->silent(h.session);
  // Empty: taken by the authentication layer (a sealed announce before its key, a block
  // digest chunk, or the answer to a key request): nothing for the engine.
  if (!plain.empty()) {
    m_engine->on_datagram(h, plain, from, channel, now, arrival);
    if (h.type == wire::msg_type::announce && index < m_cfg.channels.size()) {
      m_keys->note_silent(index, m_cfg.channels[index], h.session, plain, *m_engine);
    }
  }
  if (relayed) {
    if (silent_before || m_engine->silent(h.session)) {
      m_relays.forward(index, h.session, d, arrival);
      if (h.type == wire::msg_type::session_end) m_relays.remember_end(index, h.session, d, now);
    } else if ((m_engine->channel_of(h.session) || m_relays.runs(index, h.session)) &&
               !plain.empty() && !m_relays.on_upstream(index, h, d, plain, from, now)) {
      m_relays.not_relayed(index, h.session);
    }
  }
  m_keys->after_open(*m_engine, [&](std::span<const std::byte> request) {
    std::error_code ec;
    ++m_datagrams_sent;
    if (!net::send_one(m_control_socket->native_handle(), from, request, ec)) {
      m_log->debug("cannot send a key request to {}: {}", from.to_string(), ec.message());
    }
  });
}

void daemon::service() {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_stopping) return;
  const auto now = from_steady(std::chrono::steady_clock::now());
  m_engine->on_timer(now);
  m_store->flush();
  close_idle_channels();
  save_sequences_if_changed();
  arm_timer(now);
}

void daemon::save_sequences_if_changed() {
  const auto changes = m_engine->sequences().changes();
  if (changes == m_sequences_saved) return;
  std::string detail;
  if (auto ec = save_sequences(m_cfg.temp / sequences_file_name, m_engine->sequences(), detail)) {
    // Tried again at the next change; until then a restart forgets the latest numbers.
    m_log->error("cannot save the channels' sequence state: {}", detail);
  }
  m_sequences_saved = changes;
}

void daemon::arm_timer(time_point now) {
  const auto next = m_engine->next_deadline();
  if (!next) return;
  const time_point at = std::max(*next, now + std::chrono::microseconds(50));
  if (m_timer_at && *m_timer_at <= at && *m_timer_at > now) return;
  m_timer_at = at;
  m_timer.expires_at(to_steady(at));
  m_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    m_timer_at.reset();
    service();
  });
}

void daemon::send(const endpoint& to, std::span<const std::byte> datagram) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  // The engine sends nothing for a silent session; this is the last gate before the socket.
  wire::header h;
  if (wire::parse_header(datagram, h) || m_engine->silent(h.session)) return;
  const auto sealed = m_keys->seal(h.session, datagram);
  if (!sealed) return;  // no key for it yet: the engine repeats the message
  std::error_code ec;
  ++m_datagrams_sent;
  if (!net::send_one(m_control_socket->native_handle(), to, *sealed, ec)) {
    m_log->debug("cannot send to {}: {}", to.to_string(), ec.message());
  }
}

void daemon::journal_delivery(const file_outcome& o, const std::string* key) {
  if (m_deliveries->take(o)) return;  // journaled before its rename
  if (o.channel >= m_cfg.channels.size()) return;
  const bool stored = o.stored && o.digest;
  m_deliveries->record(o, m_cfg.channels[o.channel],
                       stored ? (key ? *key : sender_key(o.session)) : std::string());
}

void daemon::session_closed(session_id s, bool remove_temp) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_relays.awaits_delegation(s)) {
    // The hub's delegation is still to come for the sites behind this relay: the keys it opens
    // under stay until the relay has it or gives up (keys_release).
    m_keys_kept.insert_or_assign(s.value, remove_temp);
    return;
  }
  m_keys->forget(s, remove_temp);  // kept for a resume: its keys too
}

}  // namespace mcdist::receiver
