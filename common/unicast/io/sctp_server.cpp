// Server side of an SCTP association (usrsctp over UDP or kernel): Ladha & Amer's
// multistreamed FTP with command pipelining (section 5.3). One association per receiver;
// stream 0 carries control both ways; the records of file f go on stream 1 + f % (streams - 1)
// so up to streams - 1 files are in flight at once, each on its own stream, and a loss on one
// stream does not hold back the others (no head-of-line blocking across files).

#include "common/unicast/hello_proof.hpp"
#include "common/unicast/io/server_session.hpp"

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <deque>

namespace mcdist::unicast {

namespace {

/// Receive buffer of the server side, bytes: the server only receives control frames.
constexpr std::size_t server_receive_buffer = seal_overhead + frame_header_size + max_control_body;

/// One session over the client's n associations (n = the hello's connection_count, 1 to
/// max_connections). Association 0 carries control both ways; records go to whichever
/// association has room in its congestion window (see can_take), each on the stream of its
/// file within that association, so n associations share the client's files as n TCP
/// connections do (XFTP) and a loss holds back one association's window, not the session's.
class sctp_server_session final : public server_session {
 public:
  sctp_server_session(std::shared_ptr<server_state> state, const client_grant& grant,
                      transport_kind kind, const endpoint& remote, std::size_t associations,
                      std::uint16_t streams, std::uint64_t nonce)
      : server_session(state, grant, kind, remote, associations, streams - 1u, nonce),
        m_buffer(server_receive_buffer) {
    m_slots.resize(associations);
  }

  /// Takes over association `index` after its valid hello, with `streams` outbound streams
  /// negotiated and, in an encrypted session, its record keys. The first association to come
  /// registers the session (begin()). @return false when that index is taken already.
  bool attach(std::unique_ptr<sctp_assoc> assoc, std::size_t index, std::uint16_t streams,
              const std::optional<seal_keys>& keys) {
    if (index >= m_slots.size() || m_slots[index]) return false;
    auto self = std::static_pointer_cast<sctp_server_session>(shared_from_this());
    const bool first =
        std::none_of(m_slots.begin(), m_slots.end(), [](const auto& s) { return s != nullptr; });
    m_slots[index] = std::make_unique<slot>(*this, index, std::move(assoc), streams);
    slot& s = *m_slots[index];
    if (keys) {
      // Encrypted session: every frame after the hello is sealed, both ways, every stream of
      // this association, under its own keys (record_seal.hpp).
      s.sealer = std::make_unique<frame_sealer>(keys->to_client);
      s.opener = std::make_unique<frame_opener>(keys->to_server);
      s.reader.set_opener(s.opener.get(), 0);
    }
    if (first) {
      begin();
      if (finished()) return true;
    }
    if (index == 0) {
      welcome w;
      w.record_size = m_state->options.record_size;
      w.streams = streams;
      w.connection_count = static_cast<std::uint8_t>(m_slots.size());
      s.control.emplace_back();
      append_frame(s.control.back(), w);
      if (s.sealer) s.control.back() = s.sealer->seal_copy(0, s.control.back());
    }
    s.assoc->set_ready_handler([w = weak_from_this(), index] {
      if (auto p = w.lock()) static_cast<sctp_server_session&>(*p).on_ready(index);
    });
    on_ready(index);
    return true;
  }

 private:
  struct slot final : frame_handler {
    slot(sctp_server_session& o, std::size_t i, std::unique_ptr<sctp_assoc> a, std::uint16_t n)
        : owner(o), index(i), assoc(std::move(a)), streams(n), reader(false) {}
    std::error_code on_control(frame_type type, std::span<const std::byte> body) override {
      return owner.control(index, type, body);
    }
    std::error_code on_data(file_index, std::uint64_t, std::span<const std::byte>) override {
      return error::protocol_violation;  // unreachable: the reader refuses data frames
    }
    std::uint16_t stream_of(file_index f) const noexcept {
      return static_cast<std::uint16_t>(1 + f.value % (streams - 1u));
    }

    sctp_server_session& owner;
    std::size_t index;
    std::unique_ptr<sctp_assoc> assoc;
    std::uint16_t streams;
    frame_reader reader;
    std::deque<std::vector<std::byte>> control;  ///< association 0 only
    std::optional<record> pending;               ///< read from the source, not yet taken by SCTP
    std::vector<std::byte> out;            ///< its frame (sealed for this association and stream)
    std::int64_t message_frames = -1;      ///< reader.frames() when the current message began
    std::unique_ptr<frame_sealer> sealer;  ///< encrypted sessions: to the client
    std::unique_ptr<frame_opener> opener;  ///< encrypted sessions: from the client
  };

  std::string name(std::size_t index) const {
    return m_slots.size() == 1
               ? std::string("association")
               : "association " + std::to_string(index) + " of " + std::to_string(m_slots.size());
  }

  void on_ready(std::size_t index) {
    auto self = shared_from_this();
    if (finished()) return;
    do_receive(*m_slots[index]);
    if (finished()) return;
    do_send();
  }

  void do_receive(slot& s) {
    for (;;) {
      sctp_assoc::received r;
      const auto ec = s.assoc->receive(m_buffer, r);
      if (ec == std::errc::operation_would_block) return;
      if (ec) {
        if (bye_received()) return finish({}, {});
        return finish(
            error::connection_lost,
            name(s.index) + " with " + s.assoc->remote().to_string() + ": " + ec.message());
      }
      if (r.notification) continue;
      if (r.bytes == 0) {
        if (bye_received()) return finish({}, {});
        return finish(error::connection_lost,
                      "the client shut " + name(s.index) + " down without bye");
      }
      touch();
      if (r.stream != 0) {
        m_state->count_error(error::protocol_violation);
        return finish(error::protocol_violation,
                      "data on stream " + std::to_string(r.stream) + " from the client");
      }
      if (s.message_frames < 0) s.message_frames = static_cast<std::int64_t>(s.reader.frames());
      std::string detail;
      m_detail = &detail;
      const auto fec = s.reader.feed(std::span(m_buffer).first(r.bytes), s);
      m_detail = nullptr;
      if (finished()) return;
      if (fec) {
        m_state->count_error(fec);
        return finish(fec, detail.empty() ? "bad frame from the client: " + fec.message() : detail);
      }
      if (r.end_of_message) {
        const auto frames = static_cast<std::int64_t>(s.reader.frames()) - s.message_frames;
        s.message_frames = -1;
        if (!s.reader.at_boundary() || frames != 1) {
          m_state->count_error(error::protocol_violation);
          return finish(error::protocol_violation, "an SCTP message that is not exactly one frame");
        }
      }
      if (bye_received()) {
        // The client has everything it wants; nothing we still hold matters to it.
        return finish({}, {});
      }
    }
  }

  std::error_code control(std::size_t index, frame_type type, std::span<const std::byte> body) {
    std::string local;
    std::string& detail = m_detail ? *m_detail : local;
    if (index != 0) {
      detail = "control frame on " + name(index) + " (only 0 carries it)";
      return error::protocol_violation;
    }
    return handle_control(type, body, detail);
  }

  /// True when association `s` should take another record now. One association takes records
  /// as long as the stack takes them (its send buffer holds the whole remainder, as before).
  /// Of several, each takes one only while what it holds (unacknowledged + unsent bytes) is
  /// below its congestion window, so the others get the rest: without this rule the first
  /// association to become writable would queue the whole session in its 8 MiB send buffer.
  /// An association whose stack cannot tell (kernel SCTP) takes records as one does.
  bool can_take(slot& s) const {
    if (m_slots.size() == 1) return true;
    const auto q = s.assoc->send_queue();
    return !q || q->queued_bytes < q->cwnd_bytes;
  }

  void do_send() {
    for (auto& s : m_slots) {
      if (finished()) return;
      if (s) send_on(*s);
    }
  }

  /// Hands the message `m` to association `s` on `stream`. @return false when it would block
  /// (a ready call follows when it may not) or failed, which finishes the session with
  /// `what` + the association's name + the error.
  bool hand_over(slot& s, std::uint16_t stream, std::span<const std::byte> m, const char* what) {
    const auto ec = s.assoc->send(stream, m);
    if (ec == std::errc::operation_would_block) {
      s.assoc->want_write();
      return false;
    }
    if (ec) {
      finish(error::connection_lost, what + name(s.index) + ": " + ec.message());
      return false;
    }
    return true;
  }

  /// Sends control (association 0) and records on `s` until it would block, may take no more
  /// (can_take) or nothing is left.
  void send_on(slot& s) {
    for (;;) {
      if (finished()) return;
      if (!s.control.empty()) {
        if (!hand_over(s, 0, s.control.front(), "sending on stream 0 of ")) return;
        s.control.pop_front();
        continue;
      }
      if (!s.pending) {
        if (!has_pending() || !can_take(s)) return;
        s.pending = next_record();
        if (!s.pending) return;
        if (const auto ec =
                fill_record(*s.pending, s.out, s.sealer.get(), s.stream_of(s.pending->file))) {
          finish(error::source_failed,
                 "reading file " + std::to_string(s.pending->file.value) + ": " + ec.message());
          return;
        }
      }
      if (!hand_over(s, s.stream_of(s.pending->file), s.out, "sending a record on ")) return;
      record_sent(*s.pending);
      s.pending.reset();
    }
  }

  void close_transport(bool graceful) override {
    for (auto& s : m_slots) {
      if (!s || !s->assoc) continue;
      if (graceful) {
        s->assoc->close();
      } else {
        s->assoc->abort();
      }
    }
  }

  void on_new_requests() override {}  // on_ready sends after it has read

  std::uint64_t transport_backlog() override {
    std::uint64_t b = 0;
    for (auto& s : m_slots)
      if (s && s->assoc) b += s->assoc->backlog();
    return b;
  }

  std::string transport_state() override {
    std::string out;
    for (auto& s : m_slots) {
      if (!s || !s->assoc) continue;
      if (!out.empty()) out += " | ";
      if (m_slots.size() > 1) out += std::to_string(s->index) + ": ";
      out += s->assoc->describe();
    }
    return out;
  }

  std::vector<std::unique_ptr<slot>> m_slots;  ///< by association index; null until attached
  std::vector<std::byte> m_buffer;
  std::string* m_detail = nullptr;
};

/// Owns a new association until its hello arrives (or the hello timeout fires).
class sctp_handshake final : public std::enable_shared_from_this<sctp_handshake>,
                             private frame_handler {
 public:
  sctp_handshake(std::shared_ptr<server_state> state, std::unique_ptr<sctp_assoc> a,
                 transport_kind kind)
      : m_state(std::move(state)), m_assoc(std::move(a)), m_kind(kind), m_reader(false),
        m_timer(m_state->io) {}

  void start() {
    // The server's table of pending handshakes owns us until the hello is handled.
    const auto ticket =
        m_state->begin_handshake(m_assoc->remote(), [self = shared_from_this()] { self->drop(); });
    if (!ticket) {
      m_assoc->abort();  // refused for its source's limit: an ABORT frees its state at once
      m_assoc.reset();
      return;
    }
    m_ticket = *ticket;
    m_counted = true;
    m_assoc->set_ready_handler([w = weak_from_this()] {
      if (auto s = w.lock()) s->on_ready();
    });
    m_timer.expires_after(m_state->options.hello_timeout);
    m_timer.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
      auto s = w.lock();
      if (!s || ec || !s->m_assoc) return;
      ++s->m_state->counters.hello_timeouts;
      spdlog::debug("unicast: no hello from {} over SCTP within the hello timeout",
                    s->m_assoc->remote().to_string());
      s->drop();
    });
    // The server speaks first: the association's challenge on stream 0.
    m_challenge = make_challenge();
    append_frame(m_challenge_frame, m_challenge);
    on_ready();
  }

 private:
  void drop() {
    done();
    if (m_assoc) m_assoc->abort();
    m_assoc.reset();
  }

  void done() {
    auto keep = shared_from_this();  // erasing our table entry may drop the last reference
    m_timer.cancel();
    if (m_counted) {
      m_counted = false;
      m_state->end_handshake(m_ticket);
    }
  }

  void on_ready() {
    auto self = shared_from_this();
    if (m_assoc && !m_challenge_frame.empty()) {
      const auto ec = m_assoc->send(0, m_challenge_frame);
      if (ec == std::errc::operation_would_block) {
        m_assoc->want_write();
      } else if (ec) {
        return drop();
      } else {
        m_challenge_frame.clear();
      }
    }
    while (m_assoc) {
      sctp_assoc::received r;
      // Read at most what a hello can be, so nothing after it is consumed here.
      const auto ec = m_assoc->receive(std::span(m_buffer), r);
      if (ec == std::errc::operation_would_block) return;
      if (ec || (r.bytes == 0 && !r.notification)) return drop();
      if (r.notification) continue;
      if (r.stream != 0) {
        m_state->count_error(error::protocol_violation);
        return drop();
      }
      if (const auto fec = m_reader.feed(std::span(m_buffer).first(r.bytes), *this)) {
        m_state->count_error(fec);
        return drop();
      }
      if (!m_assoc) return;  // handed over or refused inside on_control
      if (r.end_of_message) {
        // A whole message without a complete hello.
        m_state->count_error(errc::truncated);
        return drop();
      }
    }
  }

  std::error_code on_control(frame_type type, std::span<const std::byte> body) override {
    if (type != frame_type::hello) return error::protocol_violation;
    hello h;
    if (auto ec = decode(body, h)) return ec;
    const endpoint from = m_assoc->remote();
    refuse why;
    const client_grant* g = m_state->authenticate(h, m_challenge, from, why);
    if (g == nullptr) {
      std::vector<std::byte> out;
      append_frame(out, why);
      (void)m_assoc->send(0, out);
      // Requests may have come with the hello (sctp_client sends them with its COOKIE ECHO):
      // discard them, since closing with unread data aborts and the refuse would be lost.
      for (int i = 0; i < 64; ++i) {
        sctp_assoc::received r;
        if (m_assoc->receive(std::span(m_buffer), r)) break;
      }
      done();
      m_assoc->close();  // graceful: the refuse is delivered before the SHUTDOWN
      m_assoc.reset();
      return {};
    }
    const std::uint16_t negotiated = m_assoc->outbound_streams();
    const std::uint16_t streams =
        negotiated == 0 ? m_state->options.sctp.streams
                        : std::min<std::uint16_t>(negotiated, m_state->options.sctp.streams);
    if (streams < 2) return error::protocol_violation;
    std::optional<seal_keys> keys;
    if (g->seal_records) keys = derive_seal_keys(*g->proof_key, m_challenge, h);
    // The client's other associations carry the same token and nonce: the first of them to
    // arrive made the session, the others join it.
    std::shared_ptr<sctp_server_session> s;
    if (auto it = m_state->sessions.find(h.token); it != m_state->sessions.end()) {
      auto existing = std::dynamic_pointer_cast<sctp_server_session>(it->second);
      if (existing && !existing->finished() && existing->nonce() == h.client_nonce &&
          existing->info().kind == m_kind && existing->info().connections == h.connection_count)
        s = existing;
    }
    done();
    if (!s && m_state->is_late(h)) {
      ++m_state->counters.late_hellos;
      spdlog::debug(
          "unicast: receiver '{}': an association from {} came up after its session "
          "ended; closed",
          h.receiver_id, from.to_string());
      m_assoc->abort();
      m_assoc.reset();
      return {};
    }
    if (!s) {
      s = std::make_shared<sctp_server_session>(m_state, *g, m_kind, from, h.connection_count,
                                                streams, h.client_nonce);
    }
    auto assoc = std::move(m_assoc);
    if (!s->attach(std::move(assoc), h.connection_index, streams, keys)) {
      // A second association with the same index: dropped on its own, the session goes on.
      return error::protocol_violation;
    }
    return {};
  }

  std::error_code on_data(file_index, std::uint64_t, std::span<const std::byte>) override {
    return error::protocol_violation;
  }

  std::shared_ptr<server_state> m_state;
  std::unique_ptr<sctp_assoc> m_assoc;
  transport_kind m_kind;
  frame_reader m_reader;
  boost::asio::steady_timer m_timer;
  std::array<std::byte, frame_header_size + max_hello_size> m_buffer{};
  challenge m_challenge;  ///< sent first; a signed session's hello proves over it
  std::vector<std::byte> m_challenge_frame;  ///< the challenge until the association took it
  handshake_gate::ticket m_ticket = 0;       ///< its slot while m_counted
  bool m_counted = false;
};

}  // namespace

void start_sctp_session(std::shared_ptr<server_state> state, std::unique_ptr<sctp_assoc> a,
                        transport_kind kind) {
  std::make_shared<sctp_handshake>(std::move(state), std::move(a), kind)->start();
}

}  // namespace mcdist::unicast
