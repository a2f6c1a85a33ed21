#include "sender/io/sender_app.hpp"

#include "common/sys/key_file.hpp"
#include "common/units.hpp"
#include "common/wire.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

namespace mcdist::sender {

namespace {

/// Datagrams taken from the session per service() round before the loop yields to the socket
/// and timers: about 4 MB, so NAKs are read promptly even when sending unpaced.
constexpr std::size_t max_datagrams_per_round = 3000;
/// Source bytes of GF(2^16) parity coded per service() round at most (at least one parity
/// block): about 3 ms of a core at GF-Complete's 3 GB/s. A FEC block of k = 2,500 costs 1.2 ms
/// per parity block, and a pass of repairs after a full bucket would otherwise code a hundred
/// at once on the network thread every channel of a hub shares. GF(2^8) (ISA-L, 50 GB/s) is
/// not limited.
constexpr std::uint64_t gf16_parity_bytes_per_round = 8 << 20;
/// flush_control reads the socket after this many announce chunks of an authenticated session
/// (a poll that finds nothing costs one recvmmsg).
constexpr std::uint32_t announce_chunks_per_poll = 4;
/// Datagrams one such poll reads at most (the rest wait for the io loop).
constexpr std::size_t max_datagrams_per_poll = 64;
/// How often the progress line is redrawn.
constexpr auto progress_interval = std::chrono::milliseconds(500);
/// The socket's receive buffer, bytes: a burst of control datagrams (the REGISTERs of a whole
/// group answering one announce, 10,000 at once; NAKs after a fade) waits here while the thread
/// is busy sending. The kernel charges about 1-2 KiB per small datagram (its buffer overhead),
/// so 8 MiB held 6,000-10,000 of them; 32 MiB holds 25,000-40,000. Charged only while data
/// waits in it.
constexpr int control_receive_buffer = 32 << 20;
/// The send buffer, bytes: several GSO sends of 64 KiB queue here.
constexpr int data_send_buffer = 8 << 20;

}  // namespace

sender_app::sender_app(boost::asio::io_context& io, app_options opts, sender_config cfg,
                       std::vector<source_file> files, std::shared_ptr<spdlog::logger> log,
                       std::chrono::steady_clock::time_point started)
    : m_io(io), m_opts(std::move(opts)), m_files(std::move(files)), m_log(std::move(log)),
      m_started(started),
      m_socket(net::open_sender_socket(
          io, net::sender_socket_options{m_opts.interface, m_opts.ttl, data_send_buffer,
                                         control_receive_buffer, m_opts.interface_index})),
      m_timer(io), m_progress_timer(io), m_signals(io),
      m_session(
          [&] {
            if (cfg.created_unix_ms == 0) {
              cfg.created_unix_ms = static_cast<std::uint64_t>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
            }
            cfg.token_source = [] {
              fallback_token t{};
              crypto::random_bytes(t);
              return t;
            };
            if (m_opts.identity && cfg.silent_passes > 0) {
              // A silent signed session: its sites hold no session key, so its blocks are
              // checked against signed block digests instead of a GMAC (docs/security.md
              // "Block digests"): version 3, no trailer.
              cfg.block_digests = true;
            }
            if (m_opts.identity) {
              cfg.start_on_registration = true;
              cfg.data_trailer_bytes = cfg.block_digests ? 0 : auth::data_trailer_bytes;
              // Room in every announce chunk for its trailer (auth.hpp), and in an encrypted
              // session for sealing its body: a sealed announce fits wire::control_budget.
              cfg.announce_reserve_bytes = auth::announce_reserve(m_opts.encrypt);
              // Relays behind relays ask for their delegation through one that may complete
              // at once: the END waits a little for them (sender_config::relay_end_wait).
              if (!m_opts.encrypt && !cfg.relays.empty() && cfg.silent_passes == 0) {
                cfg.relay_end_wait = relay_end_wait;
              }
            }
            return cfg;
          }(),
          [&] {
            std::vector<manifest_entry> m;
            m.reserve(m_files.size());
            for (const auto& f : m_files) m.push_back(f.entry);
            return m;
          }(),
          std::random_device{}() ^ static_cast<std::uint64_t>(started.time_since_epoch().count()),
          m_log),
      m_reader(m_files), m_receiver(64, 2048), m_block_size(cfg.block_size),
      m_session_id(cfg.session),
      m_data_trailer(m_opts.identity && cfg.silent_passes == 0 ? auth::data_trailer_bytes : 0) {
  const std::size_t datagram = cfg.block_size + wire::data_header_size + m_data_trailer;
  // Room for several GSO runs: a round of small files goes in one sendmmsg(2) call of up to
  // four GSO sends' worth (batch_sender::send), not one call per 64 KiB.
  m_sends.resize(4 * net::batch_sender::max_segments(datagram));
  m_gso_buffer.resize(m_sends.size() * datagram);
  if (m_opts.identity) {
    m_keys = std::make_unique<auth::sender_keys>(*m_opts.identity, m_session_id, m_opts.site_keys,
                                                 m_opts.encrypt);
    // Relays whose key is pinned get a delegation to serve signed sessions to their sites.
    if (!m_opts.encrypt) m_keys->set_relays(cfg.relays);
    if (m_opts.encrypt) {
      m_log->info(
          "session {}: encrypted: manifest, digests and data readable only by the {} "
          "pinned sites",
          m_session_id, m_opts.site_keys.size());
    }
    m_log->info(
        "session {}: signed by {}{}", m_session_id,
        crypto::format_public_key(m_opts.identity->public_key),
        m_opts.site_keys.empty()
            ? std::string("; site keys not pinned (any host may register under an unused id)")
            : "; " + std::to_string(m_opts.site_keys.size()) + " site keys pinned");
  } else {
    m_log->warn(
        "session {}: not signed (no --key): receivers cannot tell this sender's "
        "products from anyone else's",
        m_session_id);
  }
  m_log->info("session {}: multicast to {} from {}{}", m_session_id, m_opts.group.to_string(),
              net::from_asio(m_socket.local_endpoint()).to_string(),
              m_opts.interface_index ? " on interface " + m_opts.interface_name + " (index " +
                                           std::to_string(m_opts.interface_index) + ")"
                                     : std::string());
  if (cfg.fallback != fallback_mode::off) start_unicast_server(cfg);
  if (const auto* layout = m_session.fec_layout()) {
    const std::uint32_t max_parity =
        cfg.fec_max_parity ? cfg.fec_max_parity : fec::default_max_parity(cfg.fec_k);
    m_parity = std::make_unique<parity_source>(*layout, m_files, max_parity, cfg.block_size);
    if (fec::field_for(cfg.fec_k, max_parity) == fec::field::gf16) {
      m_parity_per_round = std::max<std::uint64_t>(
          1, gf16_parity_bytes_per_round / (std::uint64_t{cfg.fec_k} * cfg.block_size));
    }
  }
  if (m_keys && m_session.silent()) {
    m_digest_source = std::make_unique<digest_source>(m_session_id, cfg.block_size, m_reader,
                                                      m_parity.get(), *m_keys);
    m_log->info(
        "session {}: silent and signed: the sites check every data and parity block against "
        "signed block digests sent ahead of it (wire version 3)",
        m_session_id);
  }
}

std::error_code sender_app::file_source::read(file_index f, std::uint64_t offset,
                                              std::span<std::byte> out) {
  // block_reader serves a read that crosses a chunk boundary by reading a longer chunk.
  std::span<const std::byte> got;
  std::string why;
  if (auto ec = m_reader.read(f.value, offset, static_cast<std::uint32_t>(out.size()), got, why)) {
    return ec;
  }
  std::memcpy(out.data(), got.data(), got.size());
  return {};
}

void sender_app::start_unicast_server(const sender_config& cfg) {
  m_source = std::make_unique<file_source>(m_files);
  if (auto* shared = m_opts.shared_unicast) {
    // The process's server: its listeners, whatever this session's transport, so a site may
    // be ordered onto any of them.
    if (auto e = shared->sctp_udp_endpoint()) {
      m_session.set_unicast_endpoint(transport_kind::sctp_udp, *e);
    }
    if (auto e = shared->tcp_endpoint()) m_session.set_unicast_endpoint(transport_kind::tcp, *e);
    return;
  }
  unicast::server_options so;
  endpoint local = m_opts.interface;
  local.port = m_opts.unicast_port;
  if (cfg.fallback == fallback_mode::automatic || cfg.fallback == fallback_mode::sctp)
    so.sctp_udp = local;
  if (cfg.fallback == fallback_mode::automatic || cfg.fallback == fallback_mode::tcp)
    so.tcp = local;
  if (cfg.fallback == fallback_mode::sctp_kernel) so.sctp_kernel = local;
  so.tcp_congestion = m_opts.tcp_congestion;
  so.tcp_max_rate_bps = cfg.unicast_max_rate_bps;
  unicast::server_events ev;
  ev.on_session_start = [this](const unicast::session_info& info) { on_unicast_start(info); };
  ev.on_session_end = [this](const unicast::session_info& info, const unicast::session_stats&,
                             const std::error_code& ec,
                             const std::string& detail) { on_unicast_end(info, ec, detail); };
  m_unicast = std::make_unique<unicast::server>(m_io, *m_source, so, ev);
  std::string detail;
  if (auto ec = m_unicast->start(detail)) {
    m_log->warn("unicast fallback unavailable: {}", detail);
    m_unicast.reset();
    return;
  }
  if (auto e = m_unicast->sctp_udp_endpoint())
    m_session.set_unicast_endpoint(transport_kind::sctp_udp, *e);
  if (auto e = m_unicast->tcp_endpoint()) m_session.set_unicast_endpoint(transport_kind::tcp, *e);
  if (auto e = m_unicast->sctp_kernel_endpoint()) {
    m_session.set_unicast_endpoint(transport_kind::sctp_kernel, *e);
  }
}

void sender_app::on_unicast_start(const unicast::session_info& info) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_session.done()) return;
  m_log->info("unicast: '{}' connected from {} ({})", info.receiver_id, info.remote.to_string(),
              connection_count_text(info.kind, info.connections));
  m_session.on_unicast_started(info.receiver_id, from_steady(std::chrono::steady_clock::now()));
  service();
}

void sender_app::on_unicast_end(const unicast::session_info& info, const std::error_code& ec,
                                const std::string& detail) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (!ec || m_session.done()) return;
  m_session.on_unicast_failed(info.receiver_id, detail,
                              from_steady(std::chrono::steady_clock::now()));
  service();
}

void sender_app::register_fallbacks() {
  fallback_order o;
  while (m_session.pop_fallback(o)) {
    auto* server = unicast_server();
    if (!server) continue;
    unicast::client_grant g;
    g.source = m_source.get();
    g.token = o.token;
    g.receiver_id = o.receiver_id;
    g.session = m_session_id;
    g.all_files = true;
    if (m_keys) {
      // Signed session: the connection must prove the site's key, not just show the token.
      g.proof_key = m_keys->fallback_key(o.receiver_id);
      if (!g.proof_key) {
        m_log->error("unicast: no key for '{}'; not letting it in", o.receiver_id);
        continue;
      }
      // Encrypted session: every frame after the hello is sealed under that site's keys
      // (common/unicast/record_seal.hpp), so records and requests are never in the clear.
      g.seal_records = m_keys->encrypted();
    }
    if (auto ec = server->register_client(std::move(g))) {
      m_log->error("unicast: cannot register '{}': {}", o.receiver_id, ec.message());
    }
  }
}

sender_app::~sender_app() = default;

void sender_app::fail(const std::string& why) {
  if (m_error.empty()) {
    m_error = why;
    if (m_log) m_log->error("{}", why);
    m_session.abort(from_steady(std::chrono::steady_clock::now()), why);
  }
}

void sender_app::begin() {
  const auto now = from_steady(std::chrono::steady_clock::now());
  m_session.start(now);
  for (std::uint32_t f = 0; f < m_files.size(); ++f) {
    if (!m_files[f].entry.digest) m_reader.hash_while_reading(f);
  }
}

run_result sender_app::result() const {
  run_result r;
  const auto end = std::chrono::steady_clock::now();
  r.report = m_session.report(from_steady(end));
  r.wall_seconds = std::chrono::duration<double>(end - m_started).count();
  r.succeeded = m_session.succeeded() && m_error.empty();
  r.signed_session = m_keys != nullptr;
  r.encrypted_session = m_keys && m_keys->encrypted();
  if (m_unicast) {
    const auto& c = m_unicast->counters();
    r.fallback_hellos_refused = c.hellos_refused;
    r.fallback_hellos_bad_proof = c.hellos_bad_proof;
    r.fallback_per_source_refused = c.per_source_refused;
    r.fallback_handshakes_evicted = c.handshakes_evicted;
    r.fallback_busy_refused = c.busy_refused;
    r.fallback_hello_timeouts = c.hello_timeouts;
  }
  if (m_keys) r.refused = m_keys->stats();
  r.error = m_error;
  return r;
}

run_result sender_app::run() {
  begin();
  m_signals.add(SIGINT);
  m_signals.add(SIGTERM);
  m_signals.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    ++m_interrupts;
    if (m_log) {
      m_log->warn("{}: ending the session early; interrupt again to quit at once",
                  sig == SIGINT ? "interrupted" : "terminated");
    }
    m_session.abort(from_steady(std::chrono::steady_clock::now()), "interrupted by the operator");
    service();
    m_signals.async_wait([this](const boost::system::error_code& ec2, int) {
      if (!ec2) m_io.stop();
    });
  });
  if (m_opts.progress) {
    m_last_progress_time = std::chrono::steady_clock::now();
    m_progress_timer.expires_after(progress_interval);
    m_progress_timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) draw_progress(false);
    });
  }
  do_receive();
  service();
  m_io.run();
  if (m_opts.progress) draw_progress(true);
  m_hashers.clear();
  return result();
}

void sender_app::start(std::function<void(run_result)> done) {
  m_done = std::move(done);
  begin();
  do_receive();
  // Through the queue, so `done` never runs inside start() even for a session that ends at once.
  boost::asio::post(m_io, [this] { service(); });
}

void sender_app::set_rate(std::uint64_t rate_bps) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_session.done() || m_session.rate_bps() == rate_bps) return;
  m_session.set_rate(rate_bps);
  // A higher rate moves the next deadline earlier: serve now and re-arm the timer.
  service();
}

void sender_app::stop_awaiting(const std::string& id) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_session.done()) return;
  if (m_session.stop_awaiting(id, from_steady(std::chrono::steady_clock::now()))) service();
}

void sender_app::abort(const std::string& why) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_session.done()) return;
  m_session.abort(from_steady(std::chrono::steady_clock::now()), why);
  service();
}

bool sender_app::fence_passed(std::chrono::steady_clock::time_point now) {
  if (!m_opts.fence) return false;
  if (m_fenced) return true;
  if (now.time_since_epoch().count() < m_opts.fence->load(std::memory_order_acquire)) return false;
  m_fenced = true;
  if (m_error.empty()) {
    m_error = "stopped: this hub may no longer hold the channel's lease";
    if (m_log) m_log->warn("session {}: {}", m_session_id, m_error);
  }
  // The core ends its receivers as failed; what it queues to say so is never sent.
  m_session.abort(from_steady(now), m_error);
  return true;
}

void sender_app::service() {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_session.done() || m_completed) return;
  const auto steady_now = std::chrono::steady_clock::now();
  const auto now = from_steady(steady_now);
  if (fence_passed(steady_now)) {
    finish(now);
    return;
  }
  m_session.on_timer(now);
  register_fallbacks();  // grants go in before the FALLBACK messages leave
  flush_control();
  if (!m_waiting_writable) send_data(now);
  register_fallbacks();
  flush_control();
  if (m_session.done()) {
    finish(now);
    return;
  }
  note_activity();
  arm_timer(now);
}

void sender_app::note_activity() {
  if (!m_opts.on_activity) return;
  const session_activity now{
      .wants_data = m_session.current_phase() == sender_session::phase::transferring,
      .lingering = m_session.lingering()};
  if (now == m_activity) return;
  m_activity = now;
  // Posted: the owner answers with set_rate, which serves the session again.
  boost::asio::post(m_io, [f = m_opts.on_activity, now] { f(now); });
}

void sender_app::finish(time_point now) {
  if (auto* server = unicast_server()) {
    // A receiver whose COMPLETE came in before its unicast bye and close is done, not
    // failed: its unicast session ends as completed.
    const auto report = m_session.report(now);
    const auto completed = [&report](const std::string& id) {
      return std::any_of(report.receivers.begin(), report.receivers.end(), [&](const auto& r) {
        return r.id == id && r.state == receiver_report::state_t::completed;
      });
    };
    if (m_unicast) {
      m_unicast->stop(completed);
    } else {
      server->end_session(m_session_id, completed);
    }
  }
  m_timer.cancel();
  m_progress_timer.cancel();
  m_signals.cancel();
  boost::system::error_code ignored;
  m_socket.cancel(ignored);
  if (!m_done) {
    m_io.stop();
    return;
  }
  if (m_completed) return;
  m_completed = true;
  m_hashers.clear();  // joins the hashing thread; nothing more is posted on its behalf
  // The handlers cancelled above are queued already: `done` runs after them, so it may
  // schedule the destruction of this object.
  boost::asio::post(m_io, [this] { m_done(result()); });
}

void sender_app::arm_timer(time_point now) {
  auto next = m_session.next_deadline(now);
  if (!next) return;
  // Never spin: a deadline that has already passed is served a few microseconds later.
  if (*next <= now) next = now + std::chrono::microseconds(20);
  if (m_timer_armed && m_timer_at && *m_timer_at <= *next) return;
  m_timer_at = next;
  m_timer_armed = true;
  m_timer.expires_at(to_steady(*next));
  m_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    m_timer_armed = false;
    service();
  });
}

void sender_app::send_key_reply(const endpoint& to, time_point now) {
  const std::string site = m_keys->key_reply_to();
  m_control_buffer.resize(wire::control_budget + auth::max_trailer_bytes);
  const auto delegations = m_keys->stats().delegations;
  const std::size_t n = m_keys->take_key_reply(m_control_buffer);
  if (n == 0) return;
  const bool delegated = m_keys->stats().delegations > delegations;
  if (delegated && m_log) {
    m_log->info("session {}: delegated to relay {} for the sites behind it", m_session_id, site);
  }
  std::error_code ec;
  if (!net::send_one(m_socket.native_handle(), to, {m_control_buffer.data(), n}, ec)) {
    // The site asks again after auth::key_request_interval.
    if (m_log) m_log->debug("could not send a key reply to {}: {}", to.to_string(), ec.message());
    return;
  }
  m_session.on_site_keyed(site, now);
  if (delegated) m_session.on_relay_delegated(site, now);
}

void sender_app::seal_batch() {
  if (m_sealed.size() < m_control_batch.size()) m_sealed.resize(m_control_batch.size());
  m_sealed_len.assign(m_control_batch.size(), 0);
  m_announce_slots.clear();
  m_announce_index.clear();
  for (std::size_t i = 0; i < m_control_batch.size(); ++i) {
    const auto& bytes = m_control_batch[i].bytes;
    auto& buf = m_sealed[i];
    buf.resize(bytes.size() + auth::max_trailer_bytes);
    std::memcpy(buf.data(), bytes.data(), bytes.size());
    if (m_control_batch[i].type == wire::msg_type::announce) {
      m_announce_slots.push_back({std::span<std::byte>(buf), bytes.size()});
      m_announce_index.push_back(i);
    } else {
      m_sealed_len[i] = m_keys->seal_control(buf, bytes.size());
    }
  }
  // The batch's announces, in their order, as one burst: one signature per announce tree.
  m_keys->seal_announces(m_announce_slots);
  for (std::size_t k = 0; k < m_announce_slots.size(); ++k) {
    m_sealed_len[m_announce_index[k]] = m_announce_slots[k].len;
  }
}

void sender_app::flush_control() {
  control_send c;
  std::uint32_t announces = 0;
  while (m_session.pop_control(c)) {
    // All the core queued: an authenticated session's announces are signed together.
    m_control_batch.clear();
    m_control_batch.push_back(std::move(c));
    while (m_session.pop_control(c)) m_control_batch.push_back(std::move(c));
    if (m_keys) seal_batch();
    for (std::size_t i = 0; i < m_control_batch.size(); ++i) {
      std::error_code ec;
      const control_send& b = m_control_batch[i];
      const endpoint& to = b.to ? *b.to : m_opts.group;
      std::span<const std::byte> bytes = b.bytes;
      if (m_keys) {
        const std::size_t n = m_sealed_len[i];
        if (n == 0) {
          // A per-site message to a site that never proved its key: nothing to seal it with.
          if (m_log) m_log->debug("no key to seal a control datagram to {}", to.to_string());
          continue;
        }
        bytes = std::span<const std::byte>(m_sealed[i].data(), n);
      }
      if (!net::send_one(m_socket.native_handle(), to, bytes, ec) && m_log) {
        // Control traffic is repeated by the protocol; a lost one costs a retransmission.
        m_log->debug("could not send a control datagram to {}: {}", to.to_string(), ec.message());
      }
      // The key requests a burst of announces provokes (two cycles back to back at the start)
      // are answered during it, so a site holds the key (and opens the rest of an encrypted
      // manifest at once) by the burst's end. poll_feedback may queue more control datagrams
      // in the core: the next round of the outer loop takes them.
      if (m_keys && b.type == wire::msg_type::announce &&
          ++announces % announce_chunks_per_poll == 0) {
        poll_feedback();
      }
    }
  }
}

bool sender_app::build_pending(std::string& why) {
  // GSO runs of equal-sized datagrams (the last of a run may be shorter: a file's short last
  // block ends its run), laid out one after the other in m_gso_buffer. m_pending holds at most
  // m_sends.size() datagrams of at most the session's datagram size: they always fit.
  m_runs.clear();
  const std::size_t trailer = m_data_trailer;
  std::size_t offset = 0;
  std::size_t first = m_pending_pos;
  while (first < m_pending.size()) {
    const std::size_t segment = m_pending[first].length + wire::data_header_size + trailer;
    std::size_t end = first;
    std::size_t bytes = 0;
    const std::size_t most = net::batch_sender::max_segments(segment);
    while (end < m_pending.size() && end - first < most) {
      const std::size_t size = m_pending[end].length + wire::data_header_size + trailer;
      if (size > segment) break;
      bytes += size;
      ++end;
      if (size < segment) break;
    }
    std::byte* base = m_gso_buffer.data() + offset;
    if (m_digest_source) {
      // Block digests: each datagram exactly as it was built and hashed a window ahead.
      if (!copy_built(first, end, segment, base)) return false;
    } else if (read_payloads(first, end, segment, base, why)) {
      // The payloads go from the file straight into their datagrams: one read per run of
      // consecutive blocks of a file (all of pass 1), no copy through the reader's chunks.
      fail(why);
      return false;
    }
    for (std::size_t i = first; i < end && !m_digest_source; ++i) {
      const auto& d = m_pending[i];
      std::byte* out = base + (i - first) * segment;
      if (d.parity) {
        // A parity block: a data header's shape, a full block's length, its bytes
        // encoded here from the FEC block's sources (read_payloads left its payload alone).
        wire::write_parity_header({out, wire::data_header_size},
                                  {m_session_id, d.seq, d.fec_block, d.parity_index});
        if (!m_parity || m_parity->parity(d.fec_block, d.parity_index,
                                          {out + wire::data_header_size, d.length}, why)) {
          fail(why.empty() ? "parity block requested in a session without FEC" : why);
          return false;
        }
      } else {
        wire::write_data_header({out, wire::data_header_size},
                                {m_session_id, d.seq, d.file, d.block});
        // Parity index 0 of its FEC block grows from the bytes as sent (before sealing), so
        // the FEC block's first repair needs no read of its sources.
        if (m_parity)
          m_parity->observe(d.file.value, d.block.value, {out + wire::data_header_size, d.length});
      }
      const std::size_t size = d.length + wire::data_header_size + trailer;
      if (m_keys) m_keys->seal_data({out, size}, size - trailer);
    }
    m_runs.push_back({first, {std::span<const std::byte>(base, bytes), segment}});
    offset += bytes;
    first = end;
  }
  m_built_end = first;
  return true;
}

bool sender_app::flush_pending(time_point) {
  const int fd = m_socket.native_handle();
  const auto drop = [this] {
    m_pending.clear();
    m_pending_pos = 0;
    m_built_end = 0;
  };
  while (m_pending_pos < m_pending.size()) {
    std::string why;
    if (m_built_end <= m_pending_pos && !build_pending(why)) {
      drop();
      return false;
    }
    // The runs not sent yet, the first of them possibly in part (without GSO a full socket
    // may stop a send inside a run): all of them in one call where the kernel takes GSO.
    m_run_views.clear();
    for (const built_run& r : m_runs) {
      if (r.first + r.run.count() <= m_pending_pos) continue;
      const std::size_t skip = m_pending_pos > r.first ? m_pending_pos - r.first : 0;
      m_run_views.push_back({r.run.bytes.subspan(skip * r.run.segment), r.run.segment});
    }
    std::error_code ec;
    const std::size_t sent = m_batch.send(fd, m_opts.group, m_run_views, ec);
    if (ec) {
      fail("cannot send to " + m_opts.group.to_string() + ": " + ec.message());
      drop();
      return false;
    }
    m_pending_pos += sent;
    if (m_pending_pos < m_built_end) {
      do_wait_writable();
      return false;
    }
  }
  drop();
  return true;
}

std::error_code sender_app::read_payloads(std::size_t first, std::size_t last, std::size_t segment,
                                          std::byte* base, std::string& why) {
  // Runs of consecutive blocks of one file, each read with one preadv; a parity datagram (its
  // payload is encoded, not read) ends a run.
  std::size_t run = first;  // the first datagram of the current run
  m_payload_iov.clear();
  const auto read_run = [&]() -> std::error_code {
    if (m_payload_iov.empty()) return {};
    auto ec =
        m_reader.read_into(m_pending[run].file.value, m_pending[run].offset, m_payload_iov, why);
    m_payload_iov.clear();
    return ec;
  };
  for (std::size_t i = first; i < last; ++i) {
    const auto& d = m_pending[i];
    if (d.parity) {
      if (auto ec = read_run()) return ec;
      continue;
    }
    // The run is not empty only when datagram i - 1 is in it (a parity datagram ends it).
    const bool continues = !m_payload_iov.empty() && d.file == m_pending[i - 1].file &&
                           d.offset == m_pending[i - 1].offset + m_pending[i - 1].length;
    if (!continues) {
      if (auto ec = read_run()) return ec;
      run = i;
    }
    std::byte* payload = base + (i - first) * segment + wire::data_header_size;
    m_payload_iov.push_back({payload, d.length});
  }
  return read_run();
}

void sender_app::collect_digests(time_point now) {
  for (const auto& [f, d] : m_reader.take_digests()) {
    m_session.on_digest(file_index{f}, d, now);
    if (m_opts.digest_cache) remember_digest(m_files[f], d);
  }
  auto broken = m_reader.take_unhashable();
  if (broken.empty()) return;
  // Read out of order (should not happen in pass 1): hash those files on a thread instead.
  std::vector<source_file> todo;
  for (const auto f : broken) {
    source_file sf = m_files[f];
    sf.entry.digest.reset();
    todo.push_back(sf);
    m_fallback_index.push_back(f);
  }
  m_hashers.push_back(std::make_unique<background_hasher>(
      todo, [this](std::function<void()> fn) { boost::asio::post(m_io, std::move(fn)); },
      [this, base = m_fallback_index.size() - broken.size()](file_index i, const sha256_digest& d) {
        m_session.on_digest(file_index{m_fallback_index[base + i.value]}, d,
                            from_steady(std::chrono::steady_clock::now()));
        service();
      },
      [this](file_index, const std::string& why) {
        fail(why);
        service();
      }));
}

void sender_app::send_data(time_point now) {
  if (!flush_pending(now)) return;
  std::size_t total = 0;
  std::size_t parity_left = m_parity_per_round;
  bool more_due = false;
  while (!more_due) {
    const std::size_t n = m_session.next_data(now, m_sends, parity_left);
    for (std::size_t i = 0; i < n && parity_left != SIZE_MAX; ++i) {
      if (m_sends[i].parity) --parity_left;
    }
    // The block digests due go out before the datagrams they cover.
    if (m_digest_source && !send_digest_windows()) return;
    if (n == 0) return;
    total += n;
    // Past either budget of the round, what is left goes after the socket and timers.
    more_due = total >= max_datagrams_per_round || parity_left == 0;
    m_pending.assign(m_sends.begin(), m_sends.begin() + static_cast<std::ptrdiff_t>(n));
    m_pending_pos = 0;
    m_built_end = 0;
    const bool sent_all = flush_pending(now);
    collect_digests(now);
    if (!sent_all) return;
    flush_control();
    if (!more_due && n < m_sends.size()) return;
  }
  boost::asio::post(m_io, [this] { service(); });
}

void sender_app::do_wait_writable() {
  if (m_waiting_writable) return;
  m_waiting_writable = true;
  m_socket.async_wait(net::udp::socket::wait_write, [this](const boost::system::error_code& ec) {
    if (ec == boost::asio::error::operation_aborted) return;  // this may be gone (start())
    m_waiting_writable = false;
    if (!ec) service();
  });
}

void sender_app::on_feedback(std::span<const std::byte> d, const endpoint& from, time_point now) {
  // Past the fence nothing is answered (a key reply goes out from here, not from service()).
  if (fence_passed(std::chrono::steady_clock::now())) return;
  // The one parse of the header: authentication and the session take it.
  wire::header h;
  if (const auto malformed = wire::parse_header(d, h)) {
    m_session.on_refused(malformed);
    return;
  }
  if (m_keys) {
    std::span<const std::byte> plain;
    if (const auto refused = m_keys->open(h, d, plain)) {
      // Refusals are counted in m_keys' stats; framing errors by the session, by reason.
      if (refused != errc::unauthenticated) m_session.on_refused(refused);
      return;
    }
    if (plain.empty()) {
      send_key_reply(from, now);  // a key request: answered here, not for the core
      return;
    }
    d = plain;
  }
  m_session.on_datagram(h, d, from, now);
  register_fallbacks();
}

void sender_app::poll_feedback() {
  std::error_code ec;
  const auto now = from_steady(std::chrono::steady_clock::now());
  m_receiver.drain(
      m_socket.native_handle(), max_datagrams_per_poll,
      [&](std::span<const std::byte> d, const endpoint& from) { on_feedback(d, from, now); }, ec);
  // A socket error is reported by do_receive's next drain.
}

void sender_app::do_receive() {
  m_socket.async_wait(net::udp::socket::wait_read, [this](const boost::system::error_code& ec) {
    MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
    if (ec) return;
    std::error_code rec;
    const auto now = from_steady(std::chrono::steady_clock::now());
    m_receiver.drain(
        m_socket.native_handle(), 4096,
        [&](std::span<const std::byte> d, const endpoint& from) { on_feedback(d, from, now); },
        rec);
    if (rec && m_log) m_log->warn("receive error on the sender socket: {}", rec.message());
    service();
    if (!m_session.done()) do_receive();
  });
}

void sender_app::draw_progress(bool final_line) {
  const auto now = std::chrono::steady_clock::now();
  const auto rep = m_session.report(from_steady(now));
  const double dt = std::chrono::duration<double>(now - m_last_progress_time).count();
  const double rate =
      dt > 0 ? static_cast<double>(rep.data_bytes - m_last_progress_bytes) * 8 / dt : 0;
  m_last_progress_bytes = rep.data_bytes;
  m_last_progress_time = now;
  std::size_t done = 0;
  for (const auto& r : rep.receivers) {
    if (r.state == receiver_report::state_t::completed ||
        r.state == receiver_report::state_t::failed) {
      ++done;
    }
  }
  const double pct = rep.bytes ? 100.0 * std::min<double>(1.0, static_cast<double>(rep.data_bytes) /
                                                                   static_cast<double>(rep.bytes))
                               : 100.0;
  std::fprintf(stderr, "\r\033[Kpass %u  sent %s of %s (%.0f%%)  %s  receivers %zu/%zu done%s",
               rep.passes, format_bytes(static_cast<double>(rep.data_bytes)).c_str(),
               format_bytes(static_cast<double>(rep.bytes)).c_str(), pct, format_rate(rate).c_str(),
               done, rep.receivers.size(), final_line ? "\n" : "");
  std::fflush(stderr);
  if (!final_line && !m_session.done()) {
    m_progress_timer.expires_after(progress_interval);
    m_progress_timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) draw_progress(false);
    });
  }
}

std::map<std::string, crypto::key32, std::less<>> read_site_keys(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw crypto::key_error("cannot read the site key file " + file);
  std::map<std::string, crypto::key32, std::less<>> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string id;
    std::string key;
    std::string extra;
    if (!(fields >> id)) continue;  // blank or comment
    const std::string where = file + " line " + std::to_string(n) + ": ";
    if (!(fields >> key) || (fields >> extra)) {
      throw crypto::key_error(
          where + "expected \"SITE-ID KEY\" (KEY: mcdist-ed25519:BASE64 or a key file)");
    }
    if (!wire::valid_receiver_id(id))
      throw crypto::key_error(where + "\"" + id + "\" is not a valid receiver id");
    try {
      if (!out.emplace(id, crypto::read_public_key(key)).second) {
        throw crypto::key_error("site " + id + " is listed twice");
      }
    } catch (const crypto::key_error& e) {
      throw crypto::key_error(where + e.what());
    }
  }
  return out;
}

}  // namespace mcdist::sender
