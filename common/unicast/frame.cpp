#include "common/unicast/frame.hpp"

#include "common/byte_order.hpp"
#include "common/unicast/record_seal.hpp"
#include "common/wire.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace mcdist::unicast {

namespace {

/// Largest body a frame of `t` may declare.
std::uint32_t body_limit(frame_type t) noexcept {
  switch (t) {
    case frame_type::hello: return max_hello_size;
    case frame_type::challenge: return challenge_size;
    case frame_type::welcome: return welcome_size;
    case frame_type::refuse: return 3 + max_refuse_text;
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

/// Reserves room for a frame of `body` bytes at the end of `out`, writes its header, and
/// returns where the body goes.
std::byte* grow(std::vector<std::byte>& out, frame_type t, std::size_t body) {
  const std::size_t at = out.size();
  out.resize(at + frame_header_size + body);
  write_frame_header(std::span(out).subspan(at), t, static_cast<std::uint32_t>(body));
  return out.data() + at + frame_header_size;
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

void write_frame_header(std::span<std::byte> out, frame_type type,
                        std::uint32_t length) noexcept {
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
                              std::uint64_t& offset,
                              std::span<const std::byte>& payload) noexcept {
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
  std::byte* p = grow(out, frame_type::challenge, challenge_size);
  std::memcpy(p, m.nonce.data(), challenge_size);
}

void append_frame(std::vector<std::byte>& out, const hello& m) {
  const std::size_t id = std::min(m.receiver_id.size(), max_hello_receiver_id);
  const std::size_t proof = m.proof ? hello_proof_size : 0;
  std::byte* p = grow(out, frame_type::hello, hello_fixed_size + id + proof);
  std::memcpy(p, m.token.data(), m.token.size());
  store_be32(p + 16, m.session.value);
  store_be64(p + 20, m.client_nonce);
  p[28] = std::byte{m.connection_index};
  p[29] = std::byte{m.connection_count};
  p[30] = std::byte{m.proof ? hello_flag_proof : std::uint8_t{0}};
  p[31] = std::byte{0};
  p[32] = std::byte{static_cast<std::uint8_t>(id)};
  std::memcpy(p + hello_fixed_size, m.receiver_id.data(), id);
  if (m.proof) std::memcpy(p + hello_fixed_size + id, m.proof->data(), hello_proof_size);
}

void append_frame(std::vector<std::byte>& out, const welcome& m) {
  std::byte* p = grow(out, frame_type::welcome, welcome_size);
  store_be32(p, m.record_size);
  store_be16(p + 4, m.streams);
  p[6] = std::byte{m.connection_count};
  p[7] = std::byte{0};
}

void append_frame(std::vector<std::byte>& out, const refuse& m) {
  const std::size_t n = std::min(m.text.size(), max_refuse_text);
  std::byte* p = grow(out, frame_type::refuse, 3 + n);
  p[0] = std::byte{static_cast<std::uint8_t>(m.reason)};
  store_be16(p + 1, static_cast<std::uint16_t>(n));
  std::memcpy(p + 3, m.text.data(), n);
}

void append_frame(std::vector<std::byte>& out, const request& m) {
  assert(m.ranges.size() <= max_request_ranges);
  std::byte* p = grow(out, frame_type::request, 4 + request_range_size * m.ranges.size());
  store_be32(p, static_cast<std::uint32_t>(m.ranges.size()));
  p += 4;
  for (const auto& r : m.ranges) {
    store_be32(p, r.file.value);
    store_be64(p + 4, r.offset);
    store_be64(p + 12, r.length);
    p += request_range_size;
  }
}

void append_frame(std::vector<std::byte>& out, const ack& m) {
  assert(m.files.size() <= max_ack_files);
  std::byte* p = grow(out, frame_type::ack, 4 + 4 * m.files.size());
  store_be32(p, static_cast<std::uint32_t>(m.files.size()));
  p += 4;
  for (const auto f : m.files) {
    store_be32(p, f.value);
    p += 4;
  }
}

void append_bye(std::vector<std::byte>& out) { grow(out, frame_type::bye, 0); }

std::error_code decode(std::span<const std::byte> body, challenge& out) {
  if (body.size() < challenge_size) return errc::truncated;
  if (body.size() != challenge_size) return errc::invalid_field;
  std::memcpy(out.nonce.data(), body.data(), challenge_size);
  return {};
}

std::error_code decode(std::span<const std::byte> body, hello& out) {
  if (body.size() < hello_fixed_size) return errc::truncated;
  const std::size_t id = std::to_integer<std::size_t>(body[32]);
  if (id > max_hello_receiver_id) return errc::oversized;
  const auto flags = std::to_integer<std::uint8_t>(body[30]);
  if ((flags & ~hello_flag_proof) != 0 || body[31] != std::byte{0}) return errc::invalid_field;
  const std::size_t proof = (flags & hello_flag_proof) ? hello_proof_size : 0;
  if (body.size() != hello_fixed_size + id + proof) return errc::invalid_field;
  const std::string_view rid(reinterpret_cast<const char*>(body.data()) + hello_fixed_size, id);
  if (!wire::valid_receiver_id(rid)) return errc::invalid_field;
  const auto index = std::to_integer<std::uint8_t>(body[28]);
  const auto count = std::to_integer<std::uint8_t>(body[29]);
  if (count == 0 || count > max_connections || index >= count) return errc::invalid_field;
  std::memcpy(out.token.data(), body.data(), out.token.size());
  out.session = session_id{load_be32(body.data() + 16)};
  out.client_nonce = load_be64(body.data() + 20);
  out.connection_index = index;
  out.connection_count = count;
  out.receiver_id.assign(rid);
  out.proof.reset();
  if (proof) {
    out.proof.emplace();
    std::memcpy(out.proof->data(), body.data() + hello_fixed_size + id, hello_proof_size);
  }
  return {};
}

std::error_code decode(std::span<const std::byte> body, welcome& out) {
  if (body.size() < welcome_size) return errc::truncated;
  if (body.size() != welcome_size) return errc::invalid_field;
  const std::uint32_t rs = load_be32(body.data());
  if (rs < min_record_size || rs > max_record_size) return errc::invalid_field;
  if (std::to_integer<std::uint8_t>(body[7]) != 0) return errc::invalid_field;
  out.record_size = rs;
  out.streams = load_be16(body.data() + 4);
  out.connection_count = std::to_integer<std::uint8_t>(body[6]);
  return {};
}

std::error_code decode(std::span<const std::byte> body, refuse& out) {
  if (body.size() < 3) return errc::truncated;
  const std::size_t n = load_be16(body.data() + 1);
  if (n > max_refuse_text) return errc::oversized;
  if (body.size() != 3 + n) return errc::invalid_field;
  const auto reason = std::to_integer<std::uint8_t>(body[0]);
  if (reason < 1 || reason > static_cast<std::uint8_t>(refuse_reason::shutting_down))
    return errc::invalid_field;
  out.reason = static_cast<refuse_reason>(reason);
  out.text.clear();
  // Operator-facing text from the network: keep printable ASCII only.
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = std::to_integer<unsigned char>(body[3 + i]);
    out.text.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  }
  return {};
}

std::error_code decode(std::span<const std::byte> body, request& out) {
  if (body.size() < 4) return errc::truncated;
  const std::uint32_t count = load_be32(body.data());
  if (count > max_request_ranges) return errc::oversized;
  if (body.size() != 4 + request_range_size * std::size_t{count}) return errc::invalid_field;
  out.ranges.clear();
  out.ranges.reserve(count);
  const std::byte* p = body.data() + 4;
  for (std::uint32_t i = 0; i < count; ++i, p += request_range_size) {
    const file_request r{file_index{load_be32(p)}, load_be64(p + 4), load_be64(p + 12)};
    if (r.length == 0 || r.offset > UINT64_MAX - r.length) return errc::invalid_field;
    out.ranges.push_back(r);
  }
  return {};
}

std::error_code decode(std::span<const std::byte> body, ack& out) {
  if (body.size() < 4) return errc::truncated;
  const std::uint32_t count = load_be32(body.data());
  if (count > max_ack_files) return errc::oversized;
  if (body.size() != 4 + 4 * std::size_t{count}) return errc::invalid_field;
  out.files.clear();
  out.files.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) out.files.push_back(file_index{load_be32(body.data() + 4 + 4 * i)});
  return {};
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
                  (m_accept_data ? record_prefix_size + std::size_t{m_max_record} : max_control_body))
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
