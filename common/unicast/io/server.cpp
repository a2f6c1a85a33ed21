#include "common/unicast/io/server.hpp"

#include "common/log_limit.hpp"

#include "common/unicast/hello_proof.hpp"
#include "common/unicast/io/server_session.hpp"

#include <spdlog/spdlog.h>

#include <bit>

namespace mcdist::unicast {

/// Most ranges one session may have pending: a receiver may need every file of the largest
/// session (manifest max_files_per_session = 1,000,000) in one range each; 24 bytes each.
inline constexpr std::size_t max_pending_ranges = std::size_t{1} << 20;

/// Starts serving a new SCTP association (sctp_server.cpp).
void start_sctp_session(std::shared_ptr<server_state> state, std::unique_ptr<sctp_assoc> a,
                        transport_kind kind);

void server_state::count_error(const std::error_code& ec) {
  if (ec.category() == mcdist::error_category()) {
    counters.frames.add(static_cast<errc>(ec.value()));
  } else if (ec == error::protocol_violation) {
    ++counters.protocol_violations;
  } else if (ec == error::request_invalid) {
    ++counters.invalid_requests;
  }
}

const client_grant* server_state::authenticate(const hello& h, const challenge& c,
                                               const endpoint& from, refuse& why) {
  MCDIST_ASSERT_SINGLE_THREAD(io_thread);
  if (stopped) {
    why = {refuse_reason::shutting_down, "the server is shutting down"};
    return nullptr;
  }
  const client_grant* g = grants.find(h.token, h.session, h.receiver_id);
  if (g == nullptr) {
    ++counters.hellos_refused;
    if (worth_logging(counters.hellos_refused))
      spdlog::warn(
          "unicast: refused hello from {} claiming receiver '{}' session {}: "
          "credentials not registered ({} refused so far)",
          from.to_string(), h.receiver_id, h.session, counters.hellos_refused);
    why = {refuse_reason::bad_credentials,
           "token, receiver id '" + h.receiver_id + "' and session not accepted by this sender"};
    return nullptr;
  }
  if (g->proof_key && !verify_hello_proof(*g->proof_key, c, h)) {
    ++counters.hellos_refused;
    ++counters.hellos_bad_proof;
    if (worth_logging(counters.hellos_bad_proof))
      spdlog::warn(
          "unicast: refused hello from {} claiming receiver '{}' session {}: right "
          "token but {} proof of the site key ({} such hellos so far)",
          from.to_string(), h.receiver_id, h.session, h.proof ? "a wrong" : "no",
          counters.hellos_bad_proof);
    why = {refuse_reason::bad_credentials,
           "receiver id '" + h.receiver_id + "' did not prove its site key"};
    return nullptr;
  }
  if (!sessions.contains(h.token) && sessions.size() >= options.max_sessions) {
    ++counters.busy_refused;
    why = {refuse_reason::busy,
           "session limit (" + std::to_string(options.max_sessions) + ") reached; retry later"};
    return nullptr;
  }
  return g;
}

bool server_state::is_late(const hello& h) const {
  const auto it = ended_nonces.find(h.token);
  return it != ended_nonces.end() && it->second == h.client_nonce;
}

void server_state::on_sctp_association(std::unique_ptr<sctp_assoc> a, transport_kind kind) {
  MCDIST_ASSERT_SINGLE_THREAD(io_thread);
  ++counters.connections_accepted;
  start_sctp_session(shared_from_this(), std::move(a), kind);
}

std::optional<handshake_gate::ticket> server_state::begin_handshake(const endpoint& from,
                                                                    std::function<void()> abort) {
  MCDIST_ASSERT_SINGLE_THREAD(io_thread);
  if (stopped) {
    ++counters.busy_refused;
    return std::nullopt;
  }
  const auto a = gate.admit(source_of(from));
  if (a.outcome == handshake_gate::admission::verdict::refused_per_source) {
    ++counters.per_source_refused;
    if (per_source_log.tick())
      spdlog::warn(
          "unicast: closed a connection from {}: its address holds {} connections without a "
          "hello already ({} refused so far)",
          from.to_string(), options.max_handshakes_per_source, counters.per_source_refused);
    return std::nullopt;
  }
  pending.emplace(a.id, std::move(abort));
  if (a.evicted) {
    ++counters.handshakes_evicted;
    if (eviction_log.tick())
      spdlog::warn(
          "unicast: {} connections without a hello: closed the oldest of {}, which held {} of "
          "them, for a new one from {} ({} closed so far)",
          options.max_handshakes, to_string(a.evicted_source), a.evicted_source_pending,
          from.to_string(), counters.handshakes_evicted);
    // Out of the table before it runs: the abort ends the handshake, which erases its entry.
    if (auto it = pending.find(*a.evicted); it != pending.end()) {
      auto victim = std::move(it->second);
      pending.erase(it);
      victim();
    }
  }
  return a.id;
}

void server_state::end_handshake(handshake_gate::ticket id) {
  gate.release(id);
  pending.erase(id);
}

server_session::server_session(std::shared_ptr<server_state> state, const client_grant& grant,
                               transport_kind kind, endpoint remote, std::size_t connections,
                               std::size_t active_files, std::uint64_t nonce)
    : m_state(std::move(state)), m_grant(grant),
      m_source(grant.source ? *grant.source : *m_state->source), m_nonce(nonce),
      m_scheduler(m_state->options.record_size, active_files, connections),
      m_watchdog(m_state->io) {
  m_info.token = grant.token;
  m_info.receiver_id = grant.receiver_id;
  m_info.session = grant.session;
  m_info.kind = kind;
  m_info.remote = remote;
  m_info.connections = connections;
}

void server_session::begin() {
  auto self = shared_from_this();
  auto& table = m_state->sessions;
  if (auto it = table.find(m_info.token); it != table.end() && it->second.get() != this) {
    auto old = it->second;
    table.erase(it);
    old->finish(error::aborted,
                "replaced by a new session of the same receiver from " + m_info.remote.to_string());
  }
  table[m_info.token] = self;
  m_registered = true;
  m_start = std::chrono::steady_clock::now();
  touch();
  ++m_state->counters.sessions_started;
  spdlog::info("unicast: receiver '{}' session {} connected over {} from {} ({})",
               m_info.receiver_id, m_info.session, to_string(m_info.kind),
               m_info.remote.to_string(), connection_count_text(m_info.kind, m_info.connections));
  if (!m_state->silent && m_state->events.on_session_start)
    m_state->events.on_session_start(m_info);
  if (!m_finished) do_watchdog();
}

void server_session::do_watchdog() {
  MCDIST_ASSERT_SINGLE_THREAD(m_state->io_thread);
  const auto idle = m_state->options.idle_timeout;
  const auto period = std::max<std::chrono::milliseconds>(idle / 4, std::chrono::milliseconds(10));
  m_watchdog.expires_after(period);
  m_watchdog.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
    auto self = w.lock();
    if (!self || ec || self->m_finished) return;
    if (spdlog::should_log(spdlog::level::debug)) {
      spdlog::debug("unicast: receiver '{}' over {}: {} bytes sent, {} pending; {}",
                    self->m_info.receiver_id, to_string(self->m_info.kind),
                    self->m_stats.bytes_sent, self->m_scheduler.pending_bytes(),
                    self->transport_state());
    }
    if (const auto b = self->transport_backlog(); b != self->m_last_backlog) {
      self->m_last_backlog = b;
      self->touch();
    }
    const auto quiet = std::chrono::steady_clock::now() - self->m_last_activity;
    if (quiet >= self->m_state->options.idle_timeout) {
      ++self->m_state->counters.idle_timeouts;
      self->finish(
          error::idle_timeout,
          "nothing moved for " +
              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(quiet).count()) +
              " ms");
      return;
    }
    self->do_watchdog();
  });
}

void server_session::finish(const std::error_code& ec, const std::string& detail, bool graceful) {
  MCDIST_ASSERT_SINGLE_THREAD(m_state->io_thread);
  if (m_finished) return;
  m_finished = true;
  auto self = shared_from_this();
  m_watchdog.cancel();
  m_scheduler.clear();
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("unicast: receiver '{}' over {} at the end: {}", m_info.receiver_id,
                  to_string(m_info.kind), transport_state());
  }
  close_transport(graceful);
  if (!m_registered) return;  // never past the hello: nothing to report
  if (auto it = m_state->sessions.find(m_info.token);
      it != m_state->sessions.end() && it->second.get() == this)
    m_state->sessions.erase(it);
  // Only while the grant stands: unregister_client erases it, so one entry per grant at most.
  if (m_state->grants.find(m_info.token, m_info.session, m_info.receiver_id) != nullptr)
    m_state->ended_nonces[m_info.token] = m_nonce;
  m_stats.elapsed = std::chrono::steady_clock::now() - m_start;
  if (ec) {
    ++m_state->counters.sessions_failed;
    spdlog::warn(
        "unicast: receiver '{}' session {} over {} from {} failed after {} bytes: "
        "{}: {}",
        m_info.receiver_id, m_info.session, to_string(m_info.kind), m_info.remote.to_string(),
        m_stats.bytes_sent, ec.message(), detail);
  } else {
    ++m_state->counters.sessions_completed;
    spdlog::info(
        "unicast: receiver '{}' session {} over {} done: {} bytes in {} records, {} "
        "files acknowledged",
        m_info.receiver_id, m_info.session, to_string(m_info.kind), m_stats.bytes_sent,
        m_stats.records_sent, m_stats.files_acked);
  }
  if (!m_state->silent && m_state->events.on_session_end)
    m_state->events.on_session_end(m_info, m_stats, ec, detail);
}

std::error_code server_session::handle_control(frame_type type, std::span<const std::byte> body,
                                               std::string& detail) {
  MCDIST_ASSERT_SINGLE_THREAD(m_state->io_thread);
  auto self = shared_from_this();
  touch();
  switch (type) {
    case frame_type::request: {
      request req;
      if (auto ec = decode(body, req)) {
        detail = "malformed request frame";
        return ec;
      }
      if (m_scheduler.pending_requests() + req.ranges.size() > max_pending_ranges) {
        detail = "more than " + std::to_string(max_pending_ranges) + " ranges pending";
        return error::request_invalid;
      }
      const std::uint32_t files = m_source.file_count();
      // Check every range before taking any, so a bad request changes nothing.
      for (const auto& r : req.ranges) {
        if (r.file.value >= files || !grant_table::allows(m_grant, r.file)) {
          detail = "request for file " + std::to_string(r.file.value) + ", not granted";
          return error::request_invalid;
        }
        const std::uint64_t size = m_source.size(r.file);
        if (r.offset > size || r.length > size - r.offset) {
          detail = "request for bytes [" + std::to_string(r.offset) + ", " +
                   std::to_string(r.offset + r.length) + ") of file " +
                   std::to_string(r.file.value) + ", which has " + std::to_string(size);
          return error::request_invalid;
        }
      }
      for (const auto& r : req.ranges) m_scheduler.push(r);
      m_stats.requests += req.ranges.size();
      on_new_requests();
      return {};
    }
    case frame_type::ack: {
      ack a;
      if (auto ec = decode(body, a)) {
        detail = "malformed ack frame";
        return ec;
      }
      for (const auto f : a.files) {
        if (!grant_table::allows(m_grant, f) || f.value >= m_source.file_count()) {
          detail = "ack for file " + std::to_string(f.value) + ", not granted";
          return error::protocol_violation;
        }
      }
      for (const auto f : a.files) {
        ++m_stats.files_acked;
        if (!m_state->silent && m_state->events.on_file_acked) {
          m_state->events.on_file_acked(m_info, f);
          if (m_finished) return {};
        }
      }
      return {};
    }
    case frame_type::bye: m_bye = true; return {};
    case frame_type::hello:
    case frame_type::welcome:
    case frame_type::refuse:
    case frame_type::data:
    case frame_type::challenge:
    case frame_type::sealed: break;
  }
  detail = "unexpected " + std::string(to_string(type)) + " frame from the client";
  return error::protocol_violation;
}

std::error_code server_session::fill_record(const record& r, std::vector<std::byte>& buf,
                                            frame_sealer* sealer, std::uint32_t stream) {
  if (sealer == nullptr) {
    buf.resize(record_header_size + r.length);
    write_record_header(buf, r.file, r.offset, r.length);
    return m_source.read(r.file, r.offset, std::span(buf).subspan(record_header_size));
  }
  // Room for the outer header in front and the tag behind, so sealing moves nothing.
  buf.reserve(seal_overhead + record_header_size + r.length);
  buf.resize(seal_front + record_header_size + r.length);
  write_record_header(std::span(buf).subspan(seal_front), r.file, r.offset, r.length);
  if (auto ec =
          m_source.read(r.file, r.offset, std::span(buf).subspan(seal_front + record_header_size)))
    return ec;
  return sealer->seal(stream, buf);
}

// ---- the facade ----

server::server(boost::asio::io_context& io, byte_source& source, server_options options,
               server_events events)
    : m_state(std::make_shared<server_state>(io, &source, std::move(options), std::move(events))) {}

server::server(boost::asio::io_context& io, server_options options, server_events events)
    : m_state(std::make_shared<server_state>(io, nullptr, std::move(options), std::move(events))) {}

server::~server() {
  m_state->silent = true;
  stop();
}

std::error_code server::start(std::string& detail) {
  MCDIST_ASSERT_SINGLE_THREAD(m_state->io_thread);
  auto& s = *m_state;
  const auto& o = s.options;
  if (o.record_size < min_record_size || o.record_size > max_record_size) {
    detail = "record size " + std::to_string(o.record_size) + " outside " +
             std::to_string(min_record_size) + ".." + std::to_string(max_record_size);
    return errc::invalid_field;
  }
  if (o.sctp.streams < 2 || o.sctp.streams > max_sctp_streams) {
    detail = "SCTP streams " + std::to_string(o.sctp.streams) + " outside 2.." +
             std::to_string(max_sctp_streams);
    return errc::invalid_field;
  }
  if (!o.sctp_udp && !o.tcp && !o.sctp_kernel) {
    detail = "no listener configured (sctp over UDP, tcp or kernel sctp)";
    return errc::invalid_field;
  }
  std::error_code ec;
  std::weak_ptr<server_state> w = m_state;
  if (o.sctp_udp) {
    sctp_listener_limits limits;
    // A client may open up to max_connections associations, each from its own UDP port.
    limits.max_peers = o.max_sessions * max_connections + o.max_handshakes;
    limits.handshake_timeout = std::max(o.hello_timeout, std::chrono::milliseconds(30'000));
    s.sctp_udp = open_usrsctp_listener(s.io, *o.sctp_udp, o.sctp, o.usrsctp, limits, ec, detail);
    if (!s.sctp_udp) return ec;
    s.sctp_udp->set_accept_handler([w](std::unique_ptr<sctp_assoc> a) {
      if (auto st = w.lock()) st->on_sctp_association(std::move(a), transport_kind::sctp_udp);
    });
  }
  if (o.tcp) {
    s.tcp = open_tcp_listener(m_state, *o.tcp, ec, detail);
    if (!s.tcp) return ec;
  }
  if (o.sctp_kernel) {
    s.sctp_kernel = open_kernel_sctp_listener(s.io, *o.sctp_kernel, o.sctp, ec, detail);
    if (!s.sctp_kernel) return ec;
    s.sctp_kernel->set_accept_handler([w](std::unique_ptr<sctp_assoc> a) {
      if (auto st = w.lock()) st->on_sctp_association(std::move(a), transport_kind::sctp_kernel);
    });
  }
  return {};
}

std::optional<endpoint> server::sctp_udp_endpoint() const {
  if (!m_state->sctp_udp) return std::nullopt;
  return m_state->sctp_udp->local();
}

std::optional<endpoint> server::tcp_endpoint() const {
  if (!m_state->tcp) return std::nullopt;
  return tcp_listener_endpoint(*m_state->tcp);
}

std::optional<endpoint> server::sctp_kernel_endpoint() const {
  if (!m_state->sctp_kernel) return std::nullopt;
  return m_state->sctp_kernel->local();
}

std::error_code server::register_client(client_grant grant) {
  MCDIST_ASSERT_SINGLE_THREAD(m_state->io_thread);
  if (!grant.source && !m_state->source) return errc::invalid_field;
  return m_state->grants.add(std::move(grant));
}

void server::end_session(session_id session,
                         const std::function<bool(const std::string& receiver_id)>& completed) {
  MCDIST_ASSERT_SINGLE_THREAD(m_state->io_thread);
  auto& s = *m_state;
  std::vector<std::shared_ptr<server_session>> mine;
  for (auto& [token, sess] : s.sessions) {
    if (sess->info().session == session) mine.push_back(sess);
  }
  for (auto& sess : mine) {
    if (completed && completed(sess->info().receiver_id)) {
      sess->finish({}, "the receiver completed the session");
    } else {
      sess->finish(error::aborted, "the session ended");
    }
  }
  for (const auto& token : s.grants.tokens_of(session)) {
    s.grants.remove(token);
    s.ended_nonces.erase(token);
  }
}

bool server::unregister_client(const fallback_token& token) {
  const bool known = m_state->grants.remove(token);
  abort_client(token);
  m_state->ended_nonces.erase(token);
  return known;
}

bool server::abort_client(const fallback_token& token) {
  MCDIST_ASSERT_SINGLE_THREAD(m_state->io_thread);
  const auto it = m_state->sessions.find(token);
  if (it == m_state->sessions.end()) return false;
  auto s = it->second;
  s->finish(error::aborted, "aborted by the sender");
  return true;
}

void server::stop(const std::function<bool(const std::string& receiver_id)>& completed) {
  MCDIST_ASSERT_SINGLE_THREAD(m_state->io_thread);
  auto& s = *m_state;
  s.stopped = true;
  if (s.tcp) close_tcp_listener(*s.tcp);
  if (s.sctp_udp) s.sctp_udp->close();
  if (s.sctp_kernel) s.sctp_kernel->close();
  auto pending = std::move(s.pending);
  s.pending.clear();
  for (auto& [id, abort] : pending) abort();
  std::vector<std::shared_ptr<server_session>> all;
  for (auto& [token, sess] : s.sessions) all.push_back(sess);
  for (auto& sess : all) {
    if (completed && completed(sess->info().receiver_id)) {
      sess->finish({}, "the receiver completed the session");
    } else {
      sess->finish(error::aborted, "the server stopped");
    }
  }
}

std::size_t server::active_sessions() const { return m_state->sessions.size(); }

const server_counters& server::counters() const { return m_state->counters; }

sctp_listener_counters server::sctp_udp_counters() const {
  return m_state->sctp_udp ? m_state->sctp_udp->counters() : sctp_listener_counters{};
}

}  // namespace mcdist::unicast
