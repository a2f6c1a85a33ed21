#include "common/unicast/io/client_core.hpp"

#include "common/unicast/hello_proof.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

namespace mcdist::unicast {

namespace {

/// Ranges in the client's first request frame. Over SCTP the hello and the first requests ride
/// in the packet of the COOKIE ECHO (sctp_client.cpp), which has about 1 kB left for data after
/// the cookie: the hello (~80 bytes with its chunk header) and 40 ranges (8 + 4 + 40 x 20 =
/// 812 bytes, + 16) fit, more than the 31 files the server keeps in flight over SCTP, so the
/// first round trip after the handshake already carries records. The rest follow at once in
/// frames of up to max_request_ranges.
constexpr std::size_t first_request_ranges = 40;

std::uint64_t random_nonce() {
  std::random_device rd;
  return (std::uint64_t{rd()} << 32) ^ rd();
}

}  // namespace

client_impl::client_impl(boost::asio::io_context& io, client_options options, client_events events)
    : m_io(io), m_options(std::move(options)), m_events(std::move(events)), m_nonce(random_nonce()),
      m_where(std::string(to_string(m_options.kind)) + " to " + m_options.server.to_string()),
      m_connect_timer(io), m_watchdog(io), m_close_timer(io) {
  m_awaiting_credentials = m_options.await_credentials;
}

hello client_impl::hello_fields(std::uint8_t index, std::uint8_t count) const {
  hello h;
  h.token = m_options.token;
  h.session = m_options.session;
  h.client_nonce = m_nonce;
  h.connection_index = index;
  h.connection_count = count;
  h.receiver_id = m_options.receiver_id;
  return h;
}

std::vector<std::byte> client_impl::make_hello(std::uint8_t index, std::uint8_t count,
                                               const challenge* c) const {
  hello h = hello_fields(index, count);
  if (m_options.proof_key && c != nullptr) h.proof = hello_proof(*m_options.proof_key, *c, h);
  std::vector<std::byte> out;
  append_frame(out, h);
  return out;
}

seal_keys client_impl::record_keys(std::uint8_t index, std::uint8_t count,
                                   const challenge& c) const {
  return derive_seal_keys(*m_options.proof_key, c, hello_fields(index, count));
}

void client_impl::seal_outgoing(frame_sealer& s, std::vector<std::byte>& f, std::uint32_t stream) {
  if (f.size() < frame_header_size) return;
  const auto type = static_cast<frame_type>(std::to_integer<std::uint8_t>(f[3]));
  if (type == frame_type::hello || type == frame_type::sealed) return;
  f = s.seal_copy(stream, f);
}

void client_impl::begin_connect() {
  m_phase = phase::connecting;
  m_start = std::chrono::steady_clock::now();
  touch();
  m_connect_timer.expires_after(m_options.connect_timeout);
  m_connect_timer.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
    auto self = w.lock();
    if (!self || ec || self->dead() || self->m_connected_once) return;
    self->fail(error::connect_timeout,
               self->m_where + ": not connected within " +
                   std::to_string(self->m_options.connect_timeout.count()) +
                   " ms (is mcdist-send listening there, and does the path let " +
                   (self->m_options.kind == transport_kind::sctp_udp ? "UDP" : "it") +
                   " through?)");
  });
  do_watchdog();
}

void client_impl::set_credentials(const client_credentials& c) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (!m_awaiting_credentials || dead() || m_abandoned) return;
  m_options.token = c.token;
  m_options.proof_key = c.proof_key;
  m_options.seal_records = c.seal_records;
  m_awaiting_credentials = false;
  if (m_phase == phase::idle) return;  // start() says hello when it is called
  credentials_ready();
}

bool client_impl::grow(std::size_t count) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  // Only before any hello: every hello carries the count, and the server keeps the first's.
  if (!m_awaiting_credentials || dead() || closing() || m_abandoned) return false;
  if (count > max_connections) return false;
  return grow_transport(count);
}

void client_impl::transport_up() {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_connected_once) return;
  spdlog::debug("unicast client {}: up after {} ms{}", m_where,
                std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - m_start)
                    .count(),
                m_awaiting_credentials ? "; the hello waits for the token" : "");
  m_connected_once = true;
  m_connect_timer.cancel();
  touch();
}

void client_impl::queue_hello_early(std::vector<std::byte> hello_frame) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  m_outbox.push_front(std::move(hello_frame));
}

void client_impl::connected(std::vector<std::byte> hello_frame) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (!hello_frame.empty()) m_outbox.push_front(std::move(hello_frame));
  spdlog::debug("unicast client {}: hello after {} ms", m_where,
                std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - m_start)
                    .count());
  m_connected_once = true;
  m_connect_timer.cancel();
  if (m_phase == phase::connecting) m_phase = phase::running;
  touch();
}

void client_impl::do_watchdog() {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  const auto period = std::max<std::chrono::milliseconds>(m_options.idle_timeout / 4,
                                                          std::chrono::milliseconds(10));
  m_watchdog.expires_after(period);
  m_watchdog.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
    auto self = w.lock();
    if (!self || ec || self->dead()) return;
    const auto quiet = std::chrono::steady_clock::now() - self->m_last_activity;
    if (self->m_phase == phase::running && self->m_tracker.outstanding_bytes() > 0 &&
        quiet >= self->m_options.idle_timeout) {
      self->fail(
          error::idle_timeout,
          self->m_where + ": nothing received for " +
              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(quiet).count()) +
              " ms with " + std::to_string(self->m_tracker.outstanding_bytes()) +
              " bytes outstanding");
      return;
    }
    self->do_watchdog();
  });
}

std::error_code client_impl::request(std::span<const byte_range> ranges) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_phase == phase::closing || m_phase == phase::closed) return error::aborted;
  // Validate the whole call first: nothing is requested unless everything is acceptable.
  std::vector<byte_range> wanted;
  std::vector<file_index> empty;
  for (const auto& r : ranges) {
    if (r.length == 0) {
      empty.push_back(r.file);
      continue;
    }
    if (r.offset > UINT64_MAX - r.length || m_tracker.overlaps(r)) return errc::invalid_field;
    wanted.push_back(r);
  }
  std::vector<byte_range> sorted = wanted;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].file == sorted[i - 1].file &&
        sorted[i].offset < sorted[i - 1].offset + sorted[i - 1].length)
      return errc::invalid_field;
  }
  for (const auto& r : wanted) (void)m_tracker.add(r);
  for (std::size_t at = 0; at < wanted.size();) {
    unicast::request frame;
    const std::size_t cap = m_requests_framed ? max_request_ranges : first_request_ranges;
    m_requests_framed = true;
    const std::size_t n = std::min(cap, wanted.size() - at);
    frame.ranges.assign(wanted.begin() + static_cast<std::ptrdiff_t>(at),
                        wanted.begin() + static_cast<std::ptrdiff_t>(at + n));
    m_outbox.emplace_back();
    append_frame(m_outbox.back(), frame);
    at += n;
  }
  if (!wanted.empty()) m_complete_reported = false;
  if (!empty.empty()) {
    boost::asio::post(m_io, [w = weak_from_this(), empty] {
      auto self = w.lock();
      if (!self || self->dead() || self->m_abandoned) return;
      for (const auto f : empty) {
        if (self->m_events.on_file_done) self->m_events.on_file_done(f);
        if (self->dead() || self->m_abandoned) return;
      }
    });
  }
  if (!wanted.empty() && m_phase != phase::idle) flush_control();
  return {};
}

void client_impl::close() {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_phase == phase::closing || m_phase == phase::closed) return;
  const bool was_idle = m_phase == phase::idle;
  m_phase = phase::closing;
  if (was_idle) {
    closed_ok();
    return;
  }
  m_outbox.emplace_back();
  append_bye(m_outbox.back());
  m_close_timer.expires_after(m_options.close_timeout);
  m_close_timer.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
    auto self = w.lock();
    if (!self || ec || self->dead()) return;
    spdlog::debug("unicast client {}: the server did not end the session after bye; dropping it",
                  self->m_where);
    self->closed_ok();
  });
  flush_control();
}

void client_impl::abandon() {
  m_abandoned = true;
  if (m_phase != phase::closed) {
    m_phase = phase::closed;
    m_connect_timer.cancel();
    m_watchdog.cancel();
    m_close_timer.cancel();
    transport_abort();
  }
}

std::error_code client_impl::deliver(file_index file, std::uint64_t offset,
                                     std::span<const std::byte> bytes, std::size_t channel,
                                     std::size_t connection) {
  if (dead() || m_abandoned) return error::aborted;
  if (m_phase == phase::closing) return {};  // close() was called: not delivered any more
  bool file_done = false;
  if (m_tracker.take(file, offset, bytes.size(), file_done)) {
    m_detail = m_where + ": the server sent bytes [" + std::to_string(offset) + ", " +
               std::to_string(offset + bytes.size()) + ") of file " + std::to_string(file.value) +
               ", which were not requested or arrived already";
    return error::protocol_violation;
  }
  m_stats.bytes_received += bytes.size();
  ++m_stats.pieces;
  if (m_stats.bytes_per_channel.size() <= channel) m_stats.bytes_per_channel.resize(channel + 1);
  m_stats.bytes_per_channel[channel] += bytes.size();
  if (m_stats.bytes_per_connection.size() <= connection)
    m_stats.bytes_per_connection.resize(connection + 1);
  m_stats.bytes_per_connection[connection] += bytes.size();
  if (m_events.on_data) {
    m_events.on_data(file, offset, bytes);
    if (dead() || m_abandoned) return error::aborted;
  }
  if (file_done) {
    ++m_stats.files_done;
    m_acks.push_back(file);
    if (m_events.on_file_done) {
      m_events.on_file_done(file);
      if (dead() || m_abandoned) return error::aborted;
    }
  }
  return {};
}

std::error_code client_impl::handle_control(frame_type type, std::span<const std::byte> body) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  switch (type) {
    case frame_type::challenge: {
      challenge c;
      if (auto ec = decode(body, c)) {
        m_detail = m_where + ": malformed challenge";
        return ec;
      }
      // Read here only where no hello needs it: a TCP connection of an unsigned session (a
      // signed one reads it before its hello); SCTP keeps each association's own.
      return {};
    }
    case frame_type::welcome: {
      welcome w;
      if (auto ec = decode(body, w)) {
        m_detail = m_where + ": malformed welcome";
        return ec;
      }
      spdlog::debug("unicast client {}: welcome after {} ms", m_where,
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - m_start)
                        .count());
      m_stats.record_size = w.record_size;
      m_stats.streams = w.streams;
      m_stats.connections = w.connection_count;
      return {};
    }
    case frame_type::refuse: {
      refuse r;
      if (auto ec = decode(body, r)) {
        m_detail = m_where + ": malformed refuse";
        return ec;
      }
      m_detail = m_where + " refused receiver '" + m_options.receiver_id + "' (" +
                 std::string(to_string(r.reason)) + "): " + r.text;
      return r.reason == refuse_reason::busy ? error::server_busy : error::refused;
    }
    default:
      m_detail =
          m_where + ": unexpected " + std::string(to_string(type)) + " frame from the server";
      return error::protocol_violation;
  }
}

void client_impl::after_batch() {
  if (dead() || m_abandoned) return;
  if (!m_acks.empty() && m_phase == phase::running) {
    for (std::size_t at = 0; at < m_acks.size(); at += max_ack_files) {
      ack a;
      const std::size_t n = std::min(max_ack_files, m_acks.size() - at);
      a.files.assign(m_acks.begin() + static_cast<std::ptrdiff_t>(at),
                     m_acks.begin() + static_cast<std::ptrdiff_t>(at + n));
      m_outbox.emplace_back();
      append_frame(m_outbox.back(), a);
    }
    m_acks.clear();
    flush_control();
    if (dead() || m_abandoned) return;
  }
  if (!m_complete_reported && m_tracker.complete() && m_phase == phase::running) {
    m_complete_reported = true;
    if (m_events.on_complete) m_events.on_complete();
  }
}

void client_impl::post_closed(const std::error_code& ec, const std::string& detail) {
  m_connect_timer.cancel();
  m_watchdog.cancel();
  m_close_timer.cancel();
  transport_abort();
  if (m_abandoned) return;
  boost::asio::post(m_io, [self = shared_from_this(), ec, detail] {
    if (self->m_abandoned) return;
    if (self->m_events.on_closed) self->m_events.on_closed(ec, detail);
  });
}

void client_impl::fail(const std::error_code& ec, const std::string& detail) {
  if (m_phase == phase::closed) return;
  m_phase = phase::closed;
  spdlog::debug("unicast client {}: {}: {}", m_where, ec.message(), detail);
  post_closed(ec, detail);
}

void client_impl::closed_ok() {
  if (m_phase == phase::closed) return;
  m_phase = phase::closed;
  post_closed({}, {});
}

void client_impl::set_paused(bool paused) {
  if (m_paused == paused) return;
  m_paused = paused;
  // Paused time is not silence from the server: start the idle clock afresh either way.
  touch();
  if (!paused && !dead()) transport_resume();
}

}  // namespace mcdist::unicast
