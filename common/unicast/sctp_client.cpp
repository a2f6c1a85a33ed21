// Client side of an SCTP association (usrsctp over UDP, or kernel SCTP): hello and every
// request on stream 0 as soon as the association is up (in a signed session, as soon as the
// server's challenge has arrived, which the hello proves the site key over); records arrive on
// the data streams, each stream decoded on its own (a message is exactly one frame).

#include "common/unicast/client_core.hpp"

#include <boost/asio/post.hpp>

#include <unordered_map>

namespace mcdist::unicast {

namespace {

class sctp_client final : public client_impl {
 public:
  sctp_client(boost::asio::io_context& io, client_options o, client_events e)
      : client_impl(io, std::move(o), std::move(e)),
        m_buffer(seal_overhead + record_header_size + max_record_size) {}

  void start() override {
    begin_connect();
    std::error_code ec;
    std::string detail;
    if (m_options.kind == transport_kind::sctp_kernel) {
      m_assoc =
          kernel_sctp_connect(m_io, m_options.server, m_options.local, m_options.sctp, ec, detail);
    } else {
      m_assoc = usrsctp_connect(m_io, m_options.server, m_options.local, m_options.sctp,
                                m_options.usrsctp, ec, detail);
    }
    if (!m_assoc) return fail(ec, detail);
    m_assoc->set_ready_handler([w = weak_from_this()] {
      if (auto s = w.lock()) static_cast<sctp_client&>(*s).on_ready();
    });
    say_hello();
    do_send();
  }

 private:
  struct stream_reader final : frame_handler {
    stream_reader(sctp_client& o, std::uint16_t s) : owner(o), stream(s), reader(true) {}
    std::error_code on_control(frame_type type, std::span<const std::byte> body) override {
      if (stream != 0) {
        owner.m_detail = owner.where() + ": control frame on stream " + std::to_string(stream);
        return error::protocol_violation;
      }
      return owner.handle_control(type, body);
    }
    std::error_code on_data(file_index f, std::uint64_t off,
                            std::span<const std::byte> b) override {
      if (stream == 0) {
        owner.m_detail = owner.where() + ": data on the control stream";
        return error::protocol_violation;
      }
      return owner.deliver(f, off, b, stream);
    }
    sctp_client& owner;
    std::uint16_t stream;
    frame_reader reader;
    std::int64_t message_start = -1;  ///< reader.frames() when the current message began
  };

  void on_ready() {
    auto self = shared_from_this();
    if (dead()) return;
    if (!m_up) {
      const auto ec = m_assoc->connect_status();
      if (ec == std::errc::operation_in_progress) return;
      if (ec == std::errc::connection_reset && m_hello_early) {
        // Our hello and requests went with the COOKIE ECHO: the server may have read them and
        // aborted before we saw the association up, as it would have right after.
        return fail(error::connection_lost, where() + ": association aborted by the server");
      }
      if (ec) {
        const bool refused = ec == std::errc::connection_refused;
        return fail(ec, where() + ": " +
                            (refused && m_options.kind == transport_kind::sctp_udp
                                 ? "UDP port unreachable (is mcdist-send listening there?)"
                                 : "association not established: " + ec.message()));
      }
      m_up = true;
      transport_up();
      if (m_hello_early) connected({});
    }
    do_receive();
    if (dead()) return;
    say_hello();
    after_batch();
    if (dead()) return;
    do_send();
  }

  /// Queues the hello once it can be made: with the credentials, and in a signed session the
  /// server's challenge. An unsigned hello needs nothing from the server: queued before the
  /// association is up, it and every request queued so far go with the COOKIE ECHO (RFC 9260
  /// section 5.1), so the first record leaves the server one round trip earlier than if we
  /// waited for the association.
  void say_hello() {
    if (m_hello_queued || awaiting_credentials()) return;
    if (!proves()) {
      m_hello_queued = true;
      if (m_up) {
        connected(make_hello(0, 1));
      } else {
        m_hello_early = true;
        queue_hello_early(make_hello(0, 1));
      }
      return;
    }
    if (!received_challenge()) return;
    m_hello_queued = true;
    if (seals()) {
      // Everything after the hello is sealed, both ways, every stream (record_seal.hpp).
      const auto keys = record_keys(0, 1, *received_challenge());
      m_sealer = std::make_unique<frame_sealer>(keys.to_server);
      m_opener = std::make_unique<frame_opener>(keys.to_client);
      for (auto& [stream, sr] : m_readers) sr->reader.set_opener(m_opener.get(), stream);
    }
    connected(make_hello(0, 1, &*received_challenge()));
  }

  void credentials_ready() override {
    if (dead() || !m_assoc) return;
    say_hello();
    do_send();
  }

  void do_receive() {
    for (;;) {
      // Paused: leave messages in the association; its receive window holds the server back.
      if (paused()) return;
      sctp_assoc::received r;
      const auto ec = m_assoc->receive(m_buffer, r);
      if (ec == std::errc::operation_would_block) return;
      if (ec) {
        // After our bye the server aborts the association: that is the polite end.
        if (closing() && m_bye_sent) return closed_ok();
        return fail(error::connection_lost,
                    where() + ": association " +
                        (ec == std::errc::connection_reset ? std::string("aborted by the server")
                                                           : ec.message()));
      }
      if (r.notification) continue;
      if (r.bytes == 0) {
        if (closing() && m_bye_sent) return closed_ok();
        return fail(error::connection_lost, where() + ": the server shut the association down");
      }
      touch();
      if (r.stream >= max_sctp_streams) {
        return fail(error::protocol_violation,
                    where() + ": message on stream " + std::to_string(r.stream));
      }
      auto it = m_readers.find(r.stream);
      if (it == m_readers.end()) {
        it = m_readers.emplace(r.stream, std::make_unique<stream_reader>(*this, r.stream)).first;
        if (m_opener) it->second->reader.set_opener(m_opener.get(), r.stream);
      }
      stream_reader& sr = *it->second;
      if (sr.message_start < 0) sr.message_start = static_cast<std::int64_t>(sr.reader.frames());
      m_detail.clear();
      const auto fec = sr.reader.feed(std::span(m_buffer).first(r.bytes), sr);
      if (dead()) return;
      if (fec) {
        return fail(fec, m_detail.empty() ? where() + ": bad frame on stream " +
                                                std::to_string(r.stream) + ": " + fec.message()
                                          : m_detail);
      }
      if (r.end_of_message) {
        const auto frames = static_cast<std::int64_t>(sr.reader.frames()) - sr.message_start;
        sr.message_start = -1;
        if (!sr.reader.at_boundary() || frames != 1) {
          return fail(error::protocol_violation, where() + ": an SCTP message on stream " +
                                                     std::to_string(r.stream) +
                                                     " that is not exactly one frame");
        }
      }
    }
  }

  void do_send() {
    if (!m_hello_queued) return;  // nothing goes ahead of the hello
    while (!m_outbox.empty()) {
      if (m_sealer) seal_outgoing(*m_sealer, m_outbox.front(), 0);
      const auto ec = m_assoc->send(0, m_outbox.front());
      // Before the association is up a stack may refuse data it cannot queue yet: try again
      // when it is (on_ready).
      if (ec == std::errc::operation_would_block ||
          (!m_up && (ec == std::errc::not_connected || ec == std::errc::operation_in_progress))) {
        return m_assoc->want_write();
      }
      if (ec) return fail(error::connection_lost, where() + ": sending control: " + ec.message());
      m_outbox.pop_front();
    }
    if (closing()) m_bye_sent = true;
  }

  void flush_control() override {
    // Before the association is up, frames queued behind an early hello may still go with the
    // COOKIE ECHO.
    if ((m_up || m_hello_early) && !dead()) do_send();
  }

  void transport_abort() override {
    if (m_assoc) m_assoc->abort();
  }

  void transport_resume() override {
    boost::asio::post(m_io, [w = weak_from_this()] {
      if (auto s = w.lock()) static_cast<sctp_client&>(*s).on_ready();
    });
  }

  std::unique_ptr<sctp_assoc> m_assoc;
  std::vector<std::byte> m_buffer;
  std::unordered_map<std::uint16_t, std::unique_ptr<stream_reader>> m_readers;
  std::unique_ptr<frame_sealer> m_sealer;  ///< encrypted sessions: to the server
  std::unique_ptr<frame_opener> m_opener;  ///< encrypted sessions: from the server, all streams
  bool m_up = false;
  bool m_hello_queued = false;  ///< the hello is in the outbox (first) or sent
  bool m_hello_early = false;   ///< queued before the association was up (unsigned sessions)
  bool m_bye_sent = false;
};

}  // namespace

std::shared_ptr<client_impl> make_sctp_client(boost::asio::io_context& io, client_options o,
                                              client_events e) {
  return std::make_shared<sctp_client>(io, std::move(o), std::move(e));
}

}  // namespace mcdist::unicast
