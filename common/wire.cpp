#include "common/wire.hpp"

#include <google/protobuf/message_lite.h>

namespace mcdist::wire {

bool valid_receiver_id(std::string_view id) noexcept {
  if (id.empty() || id.size() > max_receiver_id_bytes) return false;
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == ':' || c == '@';
    if (!ok) return false;
  }
  return true;
}

bool valid_channel_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > max_channel_name_bytes) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == ':' || c == '@' || c == '/';
    if (!ok) return false;
  }
  return true;
}

bool valid_seq_ranges(std::span<const seq_span> ranges, std::uint64_t below) noexcept {
  if (ranges.size() > max_seq_ranges) return false;
  std::uint64_t previous_last = 0;
  for (const auto& [first, last] : ranges) {
    if (first == 0 || first > last || last >= below || first <= previous_last) return false;
    previous_last = last;
  }
  return true;
}

std::vector<seq_span> subtract_seq_ranges(std::span<const seq_span> from,
                                          std::span<const seq_span> minus) {
  std::vector<seq_span> out;
  for (auto [first, last] : from) {
    bool rest = true;  // first..last is still to be placed
    for (const auto& [m_first, m_last] : minus) {
      if (m_last < first) continue;
      if (m_first > last) break;
      if (m_first > first) out.emplace_back(first, m_first - 1);
      if (m_last >= last) {
        rest = false;
        break;
      }
      first = m_last + 1;
    }
    if (rest) out.emplace_back(first, last);
  }
  return out;
}

const char* to_string(msg_type t) noexcept {
  switch (t) {
    case msg_type::data: return "data";
    case msg_type::announce: return "announce";
    case msg_type::register_request: return "register";
    case msg_type::register_reply: return "register_reply";
    case msg_type::marker: return "marker";
    case msg_type::nak: return "nak";
    case msg_type::digest_list: return "digest";
    case msg_type::complete: return "complete";
    case msg_type::complete_ack: return "complete_ack";
    case msg_type::session_end: return "end";
    case msg_type::fallback: return "fallback";
    case msg_type::parity: return "parity";
    case msg_type::repair_advert: return "repair_advert";
    case msg_type::block_digests: return "block_digests";
    case msg_type::heartbeat: return "heartbeat";
    case msg_type::gap_report: return "gap_report";
    case msg_type::relay_hello: return "relay_hello";
  }
  return "unknown";
}

std::error_code parse_header(std::span<const std::byte> datagram, header& out) noexcept {
  if (datagram.size() < header_size) return errc::truncated;
  if (datagram.size() > max_datagram_size) return errc::oversized;
  if (load_be16(datagram.data()) != magic) return errc::bad_magic;
  const auto v = std::to_integer<std::uint8_t>(datagram[2]);
  if (v != version && v != authenticated_version && v != digest_version) return errc::bad_version;
  const auto type = std::to_integer<std::uint8_t>(datagram[3]);
  // 1-12 (data to parity) and 14-18 (repair_advert to relay_hello); 13 is unassigned.
  if (type < static_cast<std::uint8_t>(msg_type::data) ||
      type > static_cast<std::uint8_t>(msg_type::relay_hello) || type == 13) {
    return errc::unknown_type;
  }
  out.type = static_cast<msg_type>(type);
  out.session = session_id{load_be32(datagram.data() + 4)};
  out.version = v;
  return {};
}

void write_header(std::span<std::byte> out, msg_type type, session_id session,
                  std::uint8_t v) noexcept {
  store_be16(out.data(), magic);
  out[2] = static_cast<std::byte>(v);
  out[3] = static_cast<std::byte>(type);
  store_be32(out.data() + 4, session.value);
}

void set_version(std::span<std::byte> datagram, std::uint8_t v) noexcept {
  datagram[2] = static_cast<std::byte>(v);
}

std::error_code parse_data(std::span<const std::byte> datagram, data_header& out,
                           std::span<const std::byte>& payload) noexcept {
  if (datagram.size() < data_header_size) return errc::truncated;
  out.session = session_id{load_be32(datagram.data() + 4)};
  out.seq = load_be32(datagram.data() + 8);
  out.file = file_index{load_be32(datagram.data() + 12)};
  out.block = block_index{load_be32(datagram.data() + 16)};
  payload = datagram.subspan(data_header_size);
  return {};
}

void write_data_header(std::span<std::byte> out, const data_header& h) noexcept {
  write_header(out, msg_type::data, h.session);
  store_be32(out.data() + 8, h.seq);
  store_be32(out.data() + 12, h.file.value);
  store_be32(out.data() + 16, h.block.value);
}

std::error_code parse_parity(std::span<const std::byte> datagram, parity_header& out,
                             std::span<const std::byte>& payload) noexcept {
  if (datagram.size() < data_header_size) return errc::truncated;
  out.session = session_id{load_be32(datagram.data() + 4)};
  out.seq = load_be32(datagram.data() + 8);
  out.fec_block = load_be32(datagram.data() + 12);
  out.index = load_be32(datagram.data() + 16);
  payload = datagram.subspan(data_header_size);
  return {};
}

void write_parity_header(std::span<std::byte> out, const parity_header& h) noexcept {
  write_header(out, msg_type::parity, h.session);
  store_be32(out.data() + 8, h.seq);
  store_be32(out.data() + 12, h.fec_block);
  store_be32(out.data() + 16, h.index);
}

std::size_t encode_control(std::span<std::byte> out, msg_type type, session_id session,
                           const google::protobuf::MessageLite& msg) {
  const std::size_t body = msg.ByteSizeLong();
  if (out.size() < header_size + body) return 0;
  write_header(out, type, session);
  auto* begin = reinterpret_cast<std::uint8_t*>(out.data() + header_size);
  const std::uint8_t* end = msg.SerializeWithCachedSizesToArray(begin);
  return header_size + static_cast<std::size_t>(end - begin);
}

std::error_code parse_control(std::span<const std::byte> datagram,
                              google::protobuf::MessageLite& msg) noexcept {
  const auto body = datagram.subspan(header_size);
  if (!msg.ParseFromArray(body.data(), static_cast<int>(body.size()))) return errc::bad_protobuf;
  return {};
}

}  // namespace mcdist::wire
