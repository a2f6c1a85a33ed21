#include "common/unicast/frame.hpp"

#include "common/byte_order.hpp"
#include "common/unicast/record_seal.hpp"
#include "common/wire.hpp"
#include "unicast.pb.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace mcdist::unicast {

namespace {

/// Largest body a frame of `t` may declare.
std::uint32_t body_limit(frame_type t) noexcept {
  switch (t) {
    case frame_type::hello: return max_hello_size;
    case frame_type::challenge: return challenge_body_size;
    case frame_type::welcome: return max_welcome_size;
    case frame_type::refuse: return max_refuse_size;
    case frame_type::request: return max_control_body;
    case frame_type::ack: return max_control_body;
    case frame_type::bye: return 0;
    case frame_type::data: return record_prefix_size + max_record_size;
    case frame_type::sealed:
      return frame_header_size + record_prefix_size + max_record_size + crypto::gcm_tag_bytes;
  }
  return 0;
}

bool known_type(std::uint8_t t) noexcept {
  return t >= static_cast<std::uint8_t>(frame_type::hello) &&
         t <= static_cast<std::uint8_t>(frame_type::sealed);
}

/// Appends a frame of type `t` whose body is `m` (which must be under the type's limit).
void append_message(std::vector<std::byte>& out, frame_type t,
                    const google::protobuf::MessageLite& m) {
  const std::size_t body = m.ByteSizeLong();
  assert(body <= body_limit(t));
  const std::size_t at = out.size();
  out.resize(at + frame_header_size + body);
  write_frame_header(std::span(out).subspan(at), t, static_cast<std::uint32_t>(body));
  auto* p = reinterpret_cast<std::uint8_t*>(out.data() + at + frame_header_size);
  m.SerializeWithCachedSizesToArray(p);
}

/// Parses `body` as `m` after checking it against the type's limit.
std::error_code parse_message(std::span<const std::byte> body, frame_type t,
                              google::protobuf::MessageLite& m) {
  if (body.size() > body_limit(t)) return errc::oversized;
  if (!m.ParseFromArray(body.data(), static_cast<int>(body.size()))) return errc::invalid_field;
  return {};
}

template <std::size_t N>
std::string as_bytes(const std::array<std::uint8_t, N>& a) {
  return {reinterpret_cast<const char*>(a.data()), N};
}

template <std::size_t N>
bool copy_exact(const std::string& from, std::array<std::uint8_t, N>& to) {
  if (from.size() != N) return false;
  std::memcpy(to.data(), from.data(), N);
  return true;
}

/// Runs a decoder, turning an allocation failure into errc::oversized (never a throw).
template <class Fn>
std::error_code guarded(Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return errc::oversized;
  }
}

}  // namespace

std::string_view to_string(frame_type t) noexcept {
  switch (t) {
    case frame_type::hello: return "hello";
    case frame_type::welcome: return "welcome";
    case frame_type::refuse: return "refuse";
    case frame_type::request: return "request";
    case frame_type::ack: return "ack";
    case frame_type::bye: return "bye";
    case frame_type::data: return "data";
    case frame_type::challenge: return "challenge";
    case frame_type::sealed: return "sealed";
  }
  return "unknown";
}

std::string_view to_string(refuse_reason r) noexcept {
  switch (r) {
    case refuse_reason::bad_credentials: return "bad_credentials";
    case refuse_reason::busy: return "busy";
    case refuse_reason::bad_hello: return "bad_hello";
    case refuse_reason::shutting_down: return "shutting_down";
  }
  return "unknown";
}

std::error_code decode_frame_header(std::span<const std::byte> in, frame_header& out) noexcept {
  if (in.size() < frame_header_size) return errc::truncated;
  if (load_be16(in.data()) != frame_magic) return errc::bad_magic;
  if (std::to_integer<std::uint8_t>(in[2]) != frame_version) return errc::bad_version;
  const auto type = std::to_integer<std::uint8_t>(in[3]);
  if (!known_type(type)) return errc::unknown_type;
  const auto t = static_cast<frame_type>(type);
  const std::uint32_t length = load_be32(in.data() + 4);
  if (length > body_limit(t)) return errc::oversized;
  if (t == frame_type::data && length <= record_prefix_size) return errc::invalid_field;
  if (t == frame_type::sealed && length < frame_header_size + crypto::gcm_tag_bytes)
    return errc::invalid_field;
  out.type = t;
  out.length = length;
  return {};
}

void write_frame_header(std::span<std::byte> out, frame_type type, std::uint32_t length) noexcept {
  assert(out.size() >= frame_header_size);
  store_be16(out.data(), frame_magic);
  out[2] = std::byte{frame_version};
  out[3] = std::byte{static_cast<std::uint8_t>(type)};
  store_be32(out.data() + 4, length);
}

void write_record_header(std::span<std::byte> out, file_index file, std::uint64_t offset,
                         std::uint32_t payload_length) noexcept {
  assert(out.size() >= record_header_size);
  write_frame_header(out, frame_type::data,
                     static_cast<std::uint32_t>(record_prefix_size + payload_length));
  store_be32(out.data() + frame_header_size, file.value);
  store_be64(out.data() + frame_header_size + 4, offset);
}

std::error_code decode_record(std::span<const std::byte> body, file_index& file,
                              std::uint64_t& offset, std::span<const std::byte>& payload) noexcept {
  if (body.size() <= record_prefix_size) return errc::truncated;
  const std::uint64_t o = load_be64(body.data() + 4);
  const std::uint64_t n = body.size() - record_prefix_size;
  if (o > UINT64_MAX - n) return errc::invalid_field;
  file = file_index{load_be32(body.data())};
  offset = o;
  payload = body.subspan(record_prefix_size);
  return {};
}

void append_frame(std::vector<std::byte>& out, const challenge& m) {
  pb::challenge msg;
  msg.set_nonce(as_bytes(m.nonce));
  append_message(out, frame_type::challenge, msg);
}

void append_frame(std::vector<std::byte>& out, const hello& m) {
  pb::hello msg;
  msg.set_token(as_bytes(m.token));
  msg.set_session(m.session.value);
  msg.set_client_nonce(m.client_nonce);
  msg.set_connection_index(m.connection_index);
  msg.set_connection_count(m.connection_count);
  if (m.proof) msg.set_proof(as_bytes(*m.proof));
  msg.set_receiver_id(m.receiver_id.substr(0, max_hello_receiver_id));
  append_message(out, frame_type::hello, msg);
}

void append_frame(std::vector<std::byte>& out, const welcome& m) {
  pb::welcome msg;
  msg.set_streams(m.streams);
  msg.set_connection_count(m.connection_count);
  msg.set_record_size(m.record_size);
  append_message(out, frame_type::welcome, msg);
}

void append_frame(std::vector<std::byte>& out, const refuse& m) {
  pb::refuse msg;
  msg.set_text(m.text.substr(0, max_refuse_text));
  msg.set_reason(static_cast<pb::refuse::reason_t>(m.reason));
  append_message(out, frame_type::refuse, msg);
}

void append_frame(std::vector<std::byte>& out, const request& m) {
  assert(!m.ranges.empty() && m.ranges.size() <= max_request_ranges);
  pb::request msg;
  msg.mutable_file()->Reserve(static_cast<int>(m.ranges.size()));
  msg.mutable_offset()->Reserve(static_cast<int>(m.ranges.size()));
  msg.mutable_length()->Reserve(static_cast<int>(m.ranges.size()));
  for (const auto& r : m.ranges) {
    msg.add_file(r.file.value);
    msg.add_offset(r.offset);
    msg.add_length(r.length);
  }
  append_message(out, frame_type::request, msg);
}

void append_frame(std::vector<std::byte>& out, const ack& m) {
  assert(!m.files.empty() && m.files.size() <= max_ack_files);
  pb::ack msg;
  msg.mutable_file()->Reserve(static_cast<int>(m.files.size()));
  for (const auto f : m.files) msg.add_file(f.value);
  append_message(out, frame_type::ack, msg);
}

void append_bye(std::vector<std::byte>& out) {
  const std::size_t at = out.size();
  out.resize(at + frame_header_size);
  write_frame_header(std::span(out).subspan(at), frame_type::bye, 0);
}

std::error_code decode(std::span<const std::byte> body, challenge& out) noexcept {
  return guarded([&]() -> std::error_code {
    pb::challenge msg;
    if (auto ec = parse_message(body, frame_type::challenge, msg)) return ec;
    challenge c;
    if (!copy_exact(msg.nonce(), c.nonce)) return errc::invalid_field;
    out = c;
    return {};
  });
}

std::error_code decode(std::span<const std::byte> body, hello& out) noexcept {
  return guarded([&]() -> std::error_code {
    pb::hello msg;
    if (auto ec = parse_message(body, frame_type::hello, msg)) return ec;
    if (msg.receiver_id().size() > max_hello_receiver_id) return errc::oversized;
    hello h;
    if (!copy_exact(msg.token(), h.token)) return errc::invalid_field;
    if (!wire::valid_receiver_id(msg.receiver_id())) return errc::invalid_field;
    if (msg.connection_count() == 0 || msg.connection_count() > max_connections ||
        msg.connection_index() >= msg.connection_count())
      return errc::invalid_field;
    if (!msg.proof().empty() && !copy_exact(msg.proof(), h.proof.emplace()))
      return errc::invalid_field;
    h.session = session_id{msg.session()};
    h.client_nonce = msg.client_nonce();
    h.connection_index = static_cast<std::uint8_t>(msg.connection_index());
    h.connection_count = static_cast<std::uint8_t>(msg.connection_count());
    h.receiver_id = msg.receiver_id();
    out = std::move(h);
    return {};
  });
}

std::error_code decode(std::span<const std::byte> body, welcome& out) noexcept {
  return guarded([&]() -> std::error_code {
    pb::welcome msg;
    if (auto ec = parse_message(body, frame_type::welcome, msg)) return ec;
    if (msg.record_size() < min_record_size || msg.record_size() > max_record_size ||
        msg.streams() > UINT16_MAX || msg.connection_count() > UINT8_MAX)
      return errc::invalid_field;
    out.record_size = msg.record_size();
    out.streams = static_cast<std::uint16_t>(msg.streams());
    out.connection_count = static_cast<std::uint8_t>(msg.connection_count());
    return {};
  });
}

std::error_code decode(std::span<const std::byte> body, refuse& out) noexcept {
  return guarded([&]() -> std::error_code {
    pb::refuse msg;
    if (auto ec = parse_message(body, frame_type::refuse, msg)) return ec;
    if (msg.text().size() > max_refuse_text) return errc::oversized;
    const int reason = msg.reason();
    if (reason < static_cast<int>(refuse_reason::bad_credentials) ||
        reason > static_cast<int>(refuse_reason::shutting_down))
      return errc::invalid_field;
    refuse r;
    r.reason = static_cast<refuse_reason>(reason);
    // Operator-facing text from the network: keep printable ASCII only.
    r.text.reserve(msg.text().size());
    for (const char ch : msg.text()) {
      const auto c = static_cast<unsigned char>(ch);
      r.text.push_back(c >= 0x20 && c < 0x7f ? ch : '?');
    }
    out = std::move(r);
    return {};
  });
}

std::error_code decode(std::span<const std::byte> body, request& out) noexcept {
  return guarded([&]() -> std::error_code {
    pb::request msg;
    if (auto ec = parse_message(body, frame_type::request, msg)) return ec;
    const auto n = static_cast<std::size_t>(msg.file_size());
    if (n > max_request_ranges) return errc::oversized;
    if (n == 0 || static_cast<std::size_t>(msg.offset_size()) != n ||
        static_cast<std::size_t>(msg.length_size()) != n)
      return errc::invalid_field;
    std::vector<byte_range> ranges;
    ranges.reserve(n);
    for (int i = 0; i < static_cast<int>(n); ++i) {
      const byte_range r{file_index{msg.file(i)}, msg.offset(i), msg.length(i)};
      if (r.length == 0 || r.offset > UINT64_MAX - r.length) return errc::invalid_field;
      ranges.push_back(r);
    }
    out.ranges = std::move(ranges);
    return {};
  });
}

std::error_code decode(std::span<const std::byte> body, ack& out) noexcept {
  return guarded([&]() -> std::error_code {
    pb::ack msg;
    if (auto ec = parse_message(body, frame_type::ack, msg)) return ec;
    const auto n = static_cast<std::size_t>(msg.file_size());
    if (n > max_ack_files) return errc::oversized;
    if (n == 0) return errc::invalid_field;
    std::vector<file_index> files;
    files.reserve(n);
    for (const auto f : msg.file()) files.push_back(file_index{f});
    out.files = std::move(files);
    return {};
  });
}

frame_reader::frame_reader(bool accept_data, std::uint32_t max_record_bytes)
    : m_accept_data(accept_data), m_max_record(std::min(max_record_bytes, max_record_size)) {}

std::error_code frame_reader::finish() const noexcept {
  if (m_error) return m_error;
  return at_boundary() ? std::error_code{} : make_error_code(errc::truncated);
}

std::error_code frame_reader::feed(std::span<const std::byte> in, frame_handler& h) {
  if (m_error) return m_error;
  while (!in.empty()) {
    switch (m_state) {
      case state::header: {
        const std::size_t take = std::min(in.size(), frame_header_size - m_have);
        std::memcpy(m_head.data() + m_have, in.data(), take);
        m_have += take;
        in = in.subspan(take);
        if (m_have < frame_header_size) break;
        if (auto ec = decode_frame_header(std::span(m_head).first(frame_header_size), m_header))
          return fail(ec);
        if (m_opener != nullptr) {
          if (m_header.type != frame_type::sealed &&
              !(m_accept_data && m_header.type == frame_type::refuse))
            return fail(error::protocol_violation);
          if (m_header.type == frame_type::sealed &&
              m_header.length - seal_overhead >
                  (m_accept_data ? record_prefix_size + std::size_t{m_max_record}
                                 : max_control_body))
            return fail(errc::oversized);
        } else if (m_header.type == frame_type::sealed) {
          return fail(error::protocol_violation);
        }
        if (m_header.type == frame_type::data) {
          if (!m_accept_data) return fail(error::protocol_violation);
          if (m_header.length - record_prefix_size > m_max_record) return fail(errc::oversized);
          m_state = state::prefix;
        } else {
          m_body.clear();
          m_have = 0;
          m_state = state::control;
          if (m_header.length == 0) {
            m_state = state::header;
            ++m_frames;
            if (auto ec = h.on_control(m_header.type, {})) return fail(ec);
          }
        }
        break;
      }
      case state::prefix: {
        const std::size_t take = std::min(in.size(), record_header_size - m_have);
        std::memcpy(m_head.data() + m_have, in.data(), take);
        m_have += take;
        in = in.subspan(take);
        if (m_have < record_header_size) break;
        m_file = file_index{load_be32(m_head.data() + frame_header_size)};
        m_offset = load_be64(m_head.data() + frame_header_size + 4);
        m_left = m_header.length - record_prefix_size;
        if (m_offset > UINT64_MAX - m_left) return fail(errc::invalid_field);
        m_state = state::payload;
        break;
      }
      case state::payload: {
        const std::size_t take =
            static_cast<std::size_t>(std::min<std::uint64_t>(in.size(), m_left));
        const auto piece = in.first(take);
        in = in.subspan(take);
        const std::uint64_t at = m_offset;
        m_offset += take;
        m_left -= take;
        if (m_left == 0) {
          m_state = state::header;
          m_have = 0;
          ++m_frames;
        }
        if (auto ec = h.on_data(m_file, at, piece)) return fail(ec);
        break;
      }
      case state::control: {
        if (m_body.empty()) m_body.reserve(m_header.length);
        const std::size_t take = std::min<std::size_t>(in.size(), m_header.length - m_body.size());
        m_body.insert(m_body.end(), in.begin(), in.begin() + static_cast<std::ptrdiff_t>(take));
        in = in.subspan(take);
        if (m_body.size() < m_header.length) break;
        m_state = state::header;
        m_have = 0;
        ++m_frames;
        if (m_header.type == frame_type::sealed) {
          if (auto ec = open_sealed(h)) return fail(ec);
          break;
        }
        if (auto ec = h.on_control(m_header.type, m_body)) return fail(ec);
        break;
      }
    }
  }
  return {};
}

std::error_code frame_reader::open_sealed(frame_handler& h) {
  std::span<const std::byte> inner;
  if (auto ec = m_opener->open(m_stream, std::span(m_head).first(frame_header_size), m_body, inner))
    return ec;
  frame_header fh;
  (void)decode_frame_header(inner, fh);  // checked by open()
  const auto body = inner.subspan(frame_header_size);
  if (fh.type != frame_type::data) return h.on_control(fh.type, body);
  if (!m_accept_data) return error::protocol_violation;
  file_index file;
  std::uint64_t offset = 0;
  std::span<const std::byte> payload;
  if (auto ec = decode_record(body, file, offset, payload)) return ec;
  if (payload.size() > m_max_record) return errc::oversized;
  return h.on_data(file, offset, payload);
}

}  // namespace mcdist::unicast
