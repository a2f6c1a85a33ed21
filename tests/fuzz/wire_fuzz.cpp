/// @file
/// libFuzzer target: the datagram header, the data header and every control message body
/// (common/wire.hpp), as a receiver or sender parses them from the network.
///
/// Invariants checked (abort on violation): a data header the parser accepts is written back
/// byte for byte by write_data_header (but for the version byte: 1, or 2 when authenticated);
/// a control body that parses re-encodes with
/// encode_control into a datagram that parses again to the same message.

#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "tests/fuzz/quiet_protobuf.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace mcdist;

namespace {

template <class Msg>
void round_trip(std::span<const std::byte> d, const wire::header& h) {
  Msg m;
  if (wire::parse_control(d, m)) return;
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  if (wire::encode_control(out, h.type, h.session, m) != out.size()) std::abort();
  wire::header h2;
  if (wire::parse_header(out, h2) && out.size() <= wire::max_datagram_size) std::abort();
  Msg m2;
  if (wire::parse_control(out, m2)) std::abort();
  if (m2.SerializeAsString() != m.SerializeAsString()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> d(reinterpret_cast<const std::byte*>(data), size);
  (void)wire::valid_receiver_id(std::string_view(reinterpret_cast<const char*>(data), size));
  wire::header h;
  if (wire::parse_header(d, h)) return 0;
  (void)wire::to_string(h.type);
  switch (h.type) {
    case wire::msg_type::data: {
      wire::data_header dh;
      std::span<const std::byte> payload;
      if (wire::parse_data(d, dh, payload)) return 0;
      if (payload.data() != d.data() + wire::data_header_size) std::abort();
      std::array<std::byte, wire::data_header_size> back{};
      wire::write_data_header(back, dh);
      back[2] = d[2];  // version 1, or 2 (authenticated: the shells cut the trailer off)
      if (std::memcmp(back.data(), d.data(), back.size()) != 0) std::abort();
      break;
    }
    case wire::msg_type::parity: {
      wire::parity_header ph;
      std::span<const std::byte> payload;
      if (wire::parse_parity(d, ph, payload)) return 0;
      if (payload.data() != d.data() + wire::data_header_size) std::abort();
      std::array<std::byte, wire::data_header_size> back{};
      wire::write_parity_header(back, ph);
      back[2] = d[2];
      if (std::memcmp(back.data(), d.data(), back.size()) != 0) std::abort();
      break;
    }
    case wire::msg_type::announce: round_trip<wire::announce>(d, h); break;
    case wire::msg_type::register_request: round_trip<wire::register_request>(d, h); break;
    case wire::msg_type::register_reply: round_trip<wire::register_reply>(d, h); break;
    case wire::msg_type::marker: round_trip<wire::marker>(d, h); break;
    case wire::msg_type::nak: round_trip<wire::nak>(d, h); break;
    case wire::msg_type::digest_list: round_trip<wire::digest_list>(d, h); break;
    case wire::msg_type::complete: round_trip<wire::complete>(d, h); break;
    case wire::msg_type::complete_ack: round_trip<wire::complete_ack>(d, h); break;
    case wire::msg_type::session_end: round_trip<wire::session_end>(d, h); break;
    case wire::msg_type::fallback: round_trip<wire::fallback>(d, h); break;
    case wire::msg_type::repair_advert: round_trip<wire::repair_advert>(d, h); break;
  }
  return 0;
}
