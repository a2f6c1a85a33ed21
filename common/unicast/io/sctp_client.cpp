// Client side of SCTP (usrsctp over UDP, or kernel SCTP): n associations to the server
// (client_options::sctp_associations), each from its own UDP port, each with its own hello
// (same token and nonce, its index; in a signed session proving the site key over that
// association's challenge). Association 0 carries control both ways: the hello and every
// request on its stream 0 as soon as it is up (unsigned: with its COOKIE ECHO). Records arrive
// on the data streams of any association, each (association, stream) decoded on its own (a
// message is exactly one frame), and are placed by their offset.

#include "common/unicast/io/client_core.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_map>

namespace mcdist::unicast {

namespace {

class sctp_client final : public client_impl {
 public:
  sctp_client(boost::asio::io_context& io, client_options o, client_events e)
      : client_impl(io, std::move(o), std::move(e)),
        m_buffer(seal_overhead + record_header_size + max_record_size) {
    const std::size_t n = client_connection_count(m_options.kind, m_options.sctp_associations);
    for (std::size_t i = 0; i < n; ++i) m_slots.push_back(std::make_unique<slot>(*this, i));
  }

  void start() override {
    begin_connect();
    for (auto& p : m_slots) {
      open(*p);
      if (dead()) return;
    }
  }

 private:
  struct slot;

  struct stream_reader final : frame_handler {
    stream_reader(slot& o, std::uint16_t s) : owner(o), stream(s), reader(true) {}
    std::error_code on_control(frame_type type, std::span<const std::byte> body) override {
      sctp_client& c = owner.owner;
      if (stream != 0) {
        c.m_detail = c.where() + ": control frame on stream " + std::to_string(stream) + " of " +
                     c.name(owner);
        return error::protocol_violation;
      }
      if (type == frame_type::challenge) return c.on_challenge(owner, body);
      // A refused hello is answered on its own association; anything else comes on 0.
      if (owner.index != 0 && type != frame_type::refuse) {
        c.m_detail = c.where() + ": control frame on " + c.name(owner) + " (only 0 carries it)";
        return error::protocol_violation;
      }
      return c.handle_control(type, body);
    }
    std::error_code on_data(file_index f, std::uint64_t off,
                            std::span<const std::byte> b) override {
      sctp_client& c = owner.owner;
      if (stream == 0) {
        c.m_detail = c.where() + ": data on the control stream of " + c.name(owner);
        return error::protocol_violation;
      }
      return c.deliver(f, off, b, stream, owner.index);
    }
    slot& owner;
    std::uint16_t stream;
    frame_reader reader;
    std::int64_t message_start = -1;  ///< reader.frames() when the current message began
  };

  /// One association and what belongs to it.
  struct slot {
    slot(sctp_client& o, std::size_t i) : owner(o), index(i) {}
    sctp_client& owner;
    std::size_t index;  ///< its hello's connection index; 0 carries control
    std::unique_ptr<sctp_assoc> assoc;
    std::unordered_map<std::uint16_t, std::unique_ptr<stream_reader>> readers;
    std::optional<challenge> server_challenge;  ///< the first frame the server sent on it
    std::vector<std::byte> hello;          ///< associations other than 0: the hello not yet sent
    std::unique_ptr<frame_sealer> sealer;  ///< encrypted sessions, association 0: to the server
    std::unique_ptr<frame_opener> opener;  ///< encrypted sessions: from the server, all streams
    bool up = false;
    bool hello_queued = false;  ///< the hello is made (in the outbox or `hello`) or sent
    bool hello_early = false;   ///< made before the association was up (unsigned sessions)
    bool ended = false;         ///< never came up while others did: left out
  };

  std::string name(const slot& s) const {
    return m_slots.size() == 1
               ? std::string("the association")
               : "association " + std::to_string(s.index) + " of " + std::to_string(m_slots.size());
  }

  std::uint8_t count() const noexcept { return static_cast<std::uint8_t>(m_slots.size()); }

  /// Begins the handshake of `s`; a failure to begin it fails the client for association 0 and
  /// leaves any other out.
  void open(slot& s) {
    std::error_code ec;
    std::string detail;
    if (m_options.kind == transport_kind::sctp_kernel) {
      s.assoc =
          kernel_sctp_connect(m_io, m_options.server, m_options.local, m_options.sctp, ec, detail);
    } else {
      s.assoc = usrsctp_connect(m_io, m_options.server, m_options.local, m_options.sctp,
                                m_options.usrsctp, ec, detail);
    }
    if (!s.assoc) {
      if (s.index == 0) return fail(ec, detail);
      spdlog::debug("unicast client {}: {}: {}; going on without it", where(), name(s), detail);
      s.ended = true;
      return;
    }
    s.assoc->set_ready_handler([w = weak_from_this(), i = s.index] {
      if (auto c = w.lock()) static_cast<sctp_client&>(*c).on_ready(i);
    });
    say_hello(s);
    do_send(s);
  }

  bool grow_transport(std::size_t n) override {
    if (n <= m_slots.size()) return n == m_slots.size();
    // Kernel SCTP: one association (see the constructor).
    if (m_options.kind == transport_kind::sctp_kernel) return false;
    // No hello is made before the credentials, so none names the old count.
    const std::size_t first = m_slots.size();
    while (m_slots.size() < n) m_slots.push_back(std::make_unique<slot>(*this, m_slots.size()));
    if (started()) {
      for (std::size_t i = first; i < n && !dead(); ++i) open(*m_slots[i]);
    }
    return true;
  }

  std::error_code on_challenge(slot& s, std::span<const std::byte> body) {
    challenge c;
    if (auto ec = decode(body, c)) {
      m_detail = where() + ": malformed challenge on " + name(s);
      return ec;
    }
    // Unsigned: the hello went out without waiting and the challenge is not needed; kept
    // anyway, since a client still awaiting its credentials may learn the session is signed.
    if (!s.server_challenge) s.server_challenge = c;
    return {};
  }

  void on_ready(std::size_t i) {
    auto self = shared_from_this();
    if (dead()) return;
    slot& s = *m_slots[i];
    if (s.ended || !s.assoc) return;
    if (!s.up) {
      const auto ec = s.assoc->connect_status();
      if (ec == std::errc::operation_in_progress) return;
      if (ec == std::errc::connection_reset && s.hello_early) {
        // Our hello (and on association 0 the requests) went with the COOKIE ECHO: the server
        // may have read them and aborted before we saw the association up, as it would have
        // right after.
        return fail(error::connection_lost, where() + ": " + name(s) + " aborted by the server");
      }
      if (ec) {
        const bool refused = ec == std::errc::connection_refused;
        const std::string why = refused && m_options.kind == transport_kind::sctp_udp
                                    ? "UDP port unreachable (is mcdist-send listening there?)"
                                    : name(s) + " not established: " + ec.message();
        if (s.index != 0 &&
            std::any_of(m_slots.begin(), m_slots.end(), [](const auto& k) { return k->up; })) {
          // Others are up and carry the session; this one is left out.
          spdlog::debug("unicast client {}: {}; going on without it", where(), why);
          s.ended = true;
          s.assoc->abort();
          return;
        }
        return fail(ec, where() + ": " + why);
      }
      s.up = true;
      // Only association 0 carries the hello's requests and the server's control: the others
      // up without it cannot start the transfer, so the client is not established until it is
      // (a lost INIT or COOKIE ECHO of association 0 then still lets the receiver's hedge
      // connect afresh instead of waiting out RTO.Initial, docs/benchmarks.md).
      if (s.index == 0) transport_up();
      if (s.index == 0 && s.hello_early) connected({});
    }
    do_receive(s);
    if (dead()) return;
    say_hello(s);
    after_batch();
    if (dead()) return;
    do_send(s);
  }

  /// Makes the hello of `s` once it can be made: with the credentials, and in a signed session
  /// that association's challenge. An unsigned hello needs nothing from the server: made before
  /// the association is up, it (and on association 0 every request queued so far) goes with the
  /// COOKIE ECHO (RFC 9260 section 5.1), so the first record leaves the server one round trip
  /// earlier than if we waited for the association.
  void say_hello(slot& s) {
    if (s.hello_queued || s.ended || awaiting_credentials()) return;
    const auto index = static_cast<std::uint8_t>(s.index);
    if (!proves()) {
      s.hello_queued = true;
      auto h = make_hello(index, count());
      if (!s.up) s.hello_early = true;
      if (s.index != 0) {
        s.hello = std::move(h);
      } else if (s.up) {
        connected(std::move(h));
      } else {
        queue_hello_early(std::move(h));
      }
      return;
    }
    if (!s.server_challenge) return;
    s.hello_queued = true;
    if (seals()) {
      // Everything after the hello is sealed, both ways, every stream, under this
      // association's keys (record_seal.hpp); only association 0 sends anything after it.
      const auto keys = record_keys(index, count(), *s.server_challenge);
      if (s.index == 0) s.sealer = std::make_unique<frame_sealer>(keys.to_server);
      s.opener = std::make_unique<frame_opener>(keys.to_client);
      for (auto& [stream, sr] : s.readers) sr->reader.set_opener(s.opener.get(), stream);
    }
    auto h = make_hello(index, count(), &*s.server_challenge);
    if (s.index != 0) {
      s.hello = std::move(h);
    } else {
      connected(std::move(h));
    }
  }

  void credentials_ready() override {
    if (dead()) return;
    for (auto& p : m_slots) {
      if (!p->assoc || p->ended) continue;
      say_hello(*p);
      do_send(*p);
      if (dead()) return;
    }
  }

  void do_receive(slot& s) {
    for (;;) {
      // Paused: leave messages in the association; its receive window holds the server back.
      if (paused()) return;
      sctp_assoc::received r;
      const auto ec = s.assoc->receive(m_buffer, r);
      if (ec == std::errc::operation_would_block) return;
      if (ec) {
        // After our bye the server aborts the associations: that is the polite end.
        if (closing() && m_bye_sent) return closed_ok();
        return fail(error::connection_lost,
                    where() + ": " + name(s) + " " +
                        (ec == std::errc::connection_reset ? std::string("aborted by the server")
                                                           : ec.message()));
      }
      if (r.notification) continue;
      if (r.bytes == 0) {
        if (closing() && m_bye_sent) return closed_ok();
        return fail(error::connection_lost, where() + ": the server shut " + name(s) + " down");
      }
      touch();
      if (r.stream >= max_sctp_streams) {
        return fail(error::protocol_violation,
                    where() + ": message on stream " + std::to_string(r.stream));
      }
      auto it = s.readers.find(r.stream);
      if (it == s.readers.end()) {
        it = s.readers.emplace(r.stream, std::make_unique<stream_reader>(s, r.stream)).first;
        if (s.opener) it->second->reader.set_opener(s.opener.get(), r.stream);
      }
      stream_reader& sr = *it->second;
      if (sr.message_start < 0) sr.message_start = static_cast<std::int64_t>(sr.reader.frames());
      m_detail.clear();
      const auto fec = sr.reader.feed(std::span(m_buffer).first(r.bytes), sr);
      if (dead()) return;
      if (fec) {
        return fail(fec, m_detail.empty()
                             ? where() + ": bad frame on stream " + std::to_string(r.stream) +
                                   " of " + name(s) + ": " + fec.message()
                             : m_detail);
      }
      if (r.end_of_message) {
        const auto frames = static_cast<std::int64_t>(sr.reader.frames()) - sr.message_start;
        sr.message_start = -1;
        if (!sr.reader.at_boundary() || frames != 1) {
          return fail(error::protocol_violation, where() + ": an SCTP message on stream " +
                                                     std::to_string(r.stream) + " of " + name(s) +
                                                     " that is not exactly one frame");
        }
      }
    }
  }

  /// Hands `f` to the association; false when it cannot take it yet (want_write armed).
  bool send_frame(slot& s, std::span<const std::byte> f) {
    const auto ec = s.assoc->send(0, f);
    // Before the association is up a stack may refuse data it cannot queue yet: try again
    // when it is (on_ready).
    if (ec == std::errc::operation_would_block ||
        (!s.up && (ec == std::errc::not_connected || ec == std::errc::operation_in_progress))) {
      s.assoc->want_write();
      return false;
    }
    if (ec) {
      fail(error::connection_lost, where() + ": sending on " + name(s) + ": " + ec.message());
      return false;
    }
    return true;
  }

  void do_send(slot& s) {
    if (!s.hello_queued || s.ended || !s.assoc || dead()) return;  // nothing goes ahead of it
    if (s.index != 0) {
      if (!s.hello.empty() && send_frame(s, s.hello)) s.hello.clear();
      return;
    }
    while (!m_outbox.empty()) {
      if (s.sealer) seal_outgoing(*s.sealer, m_outbox.front(), 0);
      if (!send_frame(s, m_outbox.front())) return;
      m_outbox.pop_front();
    }
    if (closing()) m_bye_sent = true;
  }

  void flush_control() override {
    // Before association 0 is up, frames queued behind an early hello may still go with the
    // COOKIE ECHO.
    slot& s = *m_slots.front();
    if ((s.up || s.hello_early) && !dead()) do_send(s);
  }

  void transport_abort() override {
    for (auto& p : m_slots)
      if (p->assoc) p->assoc->abort();
  }

  void transport_resume() override {
    for (auto& p : m_slots) {
      boost::asio::post(m_io, [w = weak_from_this(), i = p->index] {
        if (auto s = w.lock()) static_cast<sctp_client&>(*s).on_ready(i);
      });
    }
  }

  std::vector<std::unique_ptr<slot>> m_slots;  ///< by association index
  std::vector<std::byte> m_buffer;
  bool m_bye_sent = false;
};

}  // namespace

std::shared_ptr<client_impl> make_sctp_client(boost::asio::io_context& io, client_options o,
                                              client_events e) {
  return std::make_shared<sctp_client>(io, std::move(o), std::move(e));
}

}  // namespace mcdist::unicast
