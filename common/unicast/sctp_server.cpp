// Server side of an SCTP association (usrsctp over UDP or kernel): Ladha & Amer's
// multistreamed FTP with command pipelining (section 5.3). One association per receiver;
// stream 0 carries control both ways; the records of file f go on stream 1 + f % (streams - 1)
// so up to streams - 1 files are in flight at once, each on its own stream, and a loss on one
// stream does not hold back the others (no head-of-line blocking across files).

#include "common/unicast/hello_proof.hpp"
#include "common/unicast/server_session.hpp"

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <deque>

namespace mcdist::unicast {

namespace {

/// Receive buffer of the server side, bytes: the server only receives control frames.
constexpr std::size_t server_receive_buffer = seal_overhead + frame_header_size + max_control_body;

class sctp_server_session final : public server_session, private frame_handler {
 public:
  sctp_server_session(std::shared_ptr<server_state> state, const client_grant& grant,
                      transport_kind kind, std::unique_ptr<sctp_assoc> assoc, std::uint16_t streams,
                      std::uint64_t nonce, const std::optional<seal_keys>& keys)
      : server_session(state, grant, kind, assoc->remote(), 1, streams - 1u, nonce),
        m_assoc(std::move(assoc)), m_streams(streams), m_reader(false),
        m_buffer(server_receive_buffer) {
    if (keys) {
      // Encrypted session: every frame after the hello is sealed, both ways (record_seal.hpp).
      m_sealer = std::make_unique<frame_sealer>(keys->to_client);
      m_opener = std::make_unique<frame_opener>(keys->to_server);
      m_reader.set_opener(m_opener.get(), 0);
    }
  }

  /// Takes over the association after a valid hello.
  void run() {
    auto self = std::static_pointer_cast<sctp_server_session>(shared_from_this());
    begin();
    if (finished()) return;
    welcome w;
    w.record_size = m_state->options.record_size;
    w.streams = m_streams;
    w.connection_count = 1;
    m_control.emplace_back();
    append_frame(m_control.back(), w);
    if (m_sealer) m_control.back() = m_sealer->seal_copy(0, m_control.back());
    m_assoc->set_ready_handler([w = weak_from_this()] {
      if (auto s = w.lock()) static_cast<sctp_server_session&>(*s).on_ready();
    });
    on_ready();
  }

 private:
  void on_ready() {
    auto self = shared_from_this();
    if (finished()) return;
    do_receive();
    if (finished()) return;
    do_send();
  }

  void do_receive() {
    for (;;) {
      sctp_assoc::received r;
      const auto ec = m_assoc->receive(m_buffer, r);
      if (ec == std::errc::operation_would_block) return;
      if (ec) {
        if (bye_received()) return finish({}, {});
        return finish(error::connection_lost,
                      "association with " + m_info.remote.to_string() + ": " + ec.message());
      }
      if (r.notification) continue;
      if (r.bytes == 0) {
        if (bye_received()) return finish({}, {});
        return finish(error::connection_lost, "the client shut the association down without bye");
      }
      touch();
      if (r.stream != 0) {
        m_state->count_error(error::protocol_violation);
        return finish(error::protocol_violation,
                      "data on stream " + std::to_string(r.stream) + " from the client");
      }
      if (m_message_frames < 0) m_message_frames = static_cast<std::int64_t>(m_reader.frames());
      std::string detail;
      m_detail = &detail;
      const auto fec = m_reader.feed(std::span(m_buffer).first(r.bytes), *this);
      m_detail = nullptr;
      if (finished()) return;
      if (fec) {
        m_state->count_error(fec);
        return finish(fec, detail.empty() ? "bad frame from the client: " + fec.message() : detail);
      }
      if (r.end_of_message) {
        const auto frames = static_cast<std::int64_t>(m_reader.frames()) - m_message_frames;
        m_message_frames = -1;
        if (!m_reader.at_boundary() || frames != 1) {
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

  std::error_code on_control(frame_type type, std::span<const std::byte> body) override {
    std::string local;
    return handle_control(type, body, m_detail ? *m_detail : local);
  }

  std::error_code on_data(file_index, std::uint64_t, std::span<const std::byte>) override {
    return error::protocol_violation;  // unreachable: the reader refuses data frames
  }

  std::uint16_t stream_of(file_index f) const noexcept {
    return static_cast<std::uint16_t>(1 + f.value % (m_streams - 1u));
  }

  void do_send() {
    for (;;) {
      if (finished()) return;
      if (!m_control.empty()) {
        const auto ec = m_assoc->send(0, m_control.front());
        if (ec == std::errc::operation_would_block) return m_assoc->want_write();
        if (ec) return finish(error::connection_lost, "sending on stream 0: " + ec.message());
        m_control.pop_front();
        continue;
      }
      if (!m_pending) {
        m_pending = next_record();
        if (!m_pending) return;
        if (const auto ec =
                fill_record(*m_pending, m_record, m_sealer.get(), stream_of(m_pending->file))) {
          return finish(
              error::source_failed,
              "reading file " + std::to_string(m_pending->file.value) + ": " + ec.message());
        }
      }
      const auto ec = m_assoc->send(stream_of(m_pending->file), m_record);
      if (ec == std::errc::operation_would_block) return m_assoc->want_write();
      if (ec) return finish(error::connection_lost, "sending a record: " + ec.message());
      record_sent(*m_pending);
      m_pending.reset();
    }
  }

  void close_transport(bool graceful) override {
    if (!m_assoc) return;
    if (graceful) {
      m_assoc->close();
    } else {
      m_assoc->abort();
    }
  }

  void on_new_requests() override {}  // on_ready sends after it has read

  std::uint64_t transport_backlog() override { return m_assoc ? m_assoc->backlog() : 0; }
  std::string transport_state() override { return m_assoc ? m_assoc->describe() : std::string(); }

  std::unique_ptr<sctp_assoc> m_assoc;
  std::uint16_t m_streams;
  frame_reader m_reader;
  std::vector<std::byte> m_buffer;
  std::deque<std::vector<std::byte>> m_control;
  std::optional<record> m_pending;  ///< read from the source, not yet taken by SCTP
  std::vector<std::byte> m_record;
  std::int64_t m_message_frames = -1;  ///< reader.frames() when the current message began
  std::string* m_detail = nullptr;
  std::unique_ptr<frame_sealer> m_sealer;  ///< encrypted sessions: to the client
  std::unique_ptr<frame_opener> m_opener;  ///< encrypted sessions: from the client
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
    ++m_state->handshakes;
    m_counted = true;
    // The server's table of pending handshakes owns us until the hello is handled.
    m_state->pending[this] = [self = shared_from_this()] { self->drop(); };
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
      --m_state->handshakes;
      m_counted = false;
    }
    m_state->pending.erase(this);
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
    if (h.connection_count != 1 || h.connection_index != 0) return error::protocol_violation;
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
    done();
    auto s = std::make_shared<sctp_server_session>(m_state, *g, m_kind, std::move(m_assoc), streams,
                                                   h.client_nonce, keys);
    s->run();
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
  bool m_counted = false;
};

}  // namespace

void start_sctp_session(std::shared_ptr<server_state> state, std::unique_ptr<sctp_assoc> a,
                        transport_kind kind) {
  std::make_shared<sctp_handshake>(std::move(state), std::move(a), kind)->start();
}

}  // namespace mcdist::unicast
