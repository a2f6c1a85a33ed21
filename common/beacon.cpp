#include "common/beacon.hpp"

#include "common/wire.hpp"

#include <algorithm>
#include <cstring>

namespace mcdist::beacon {

namespace {

/// Encodes `m` after a header of `type`, then (when `sign`) sets the version to 2 and appends
/// `extra` and the signature of everything before it.
std::size_t encode_signed(std::span<std::byte> out, wire::msg_type type,
                          const google::protobuf::MessageLite& m, const crypto::identity* id,
                          std::span<const std::uint8_t> extra) {
  const std::size_t trailer = id ? extra.size() + crypto::signature_bytes : 0;
  if (out.size() < trailer) return 0;
  const std::size_t n =
      wire::encode_control(out.first(out.size() - trailer), type, session_id{0}, m);
  if (n == 0 || !id) return n;
  wire::set_version(out, wire::authenticated_version);
  // memcpy's source must not be null, even for 0 bytes (C17 7.24.1): an empty span's may be.
  if (!extra.empty()) std::memcpy(out.data() + n, extra.data(), extra.size());
  const auto sig = crypto::sign(*id, out.first(n + extra.size()));
  std::memcpy(out.data() + n + extra.size(), sig.data(), sig.size());
  return n + trailer;
}

bool valid_ranges(const google::protobuf::RepeatedPtrField<wire::seq_range>& rs,
                  std::uint64_t below) {
  std::vector<wire::seq_span> spans;
  spans.reserve(static_cast<std::size_t>(rs.size()));
  for (const auto& r : rs) spans.emplace_back(r.first(), r.last());
  return wire::valid_seq_ranges(spans, below);
}

}  // namespace

std::size_t encode_heartbeat(std::span<std::byte> out, const wire::heartbeat& m,
                             const crypto::identity* hub) {
  return encode_signed(out, wire::msg_type::heartbeat, m, hub, {});
}

std::error_code open_heartbeat(std::span<const std::byte> d, std::span<const crypto::key32> trusted,
                               wire::heartbeat& out, std::optional<crypto::key32>& signer) {
  signer.reset();
  wire::header h;
  if (auto ec = wire::parse_header(d, h)) return ec;
  if (h.type != wire::msg_type::heartbeat) return errc::unknown_type;
  const auto v = h.version;
  std::span<const std::byte> body = d;
  if (trusted.empty()) {
    if (v != wire::version) return errc::unauthenticated;
  } else {
    if (v != wire::authenticated_version ||
        d.size() < wire::header_size + heartbeat_trailer_bytes) {
      return errc::unauthenticated;
    }
    body = d.first(d.size() - heartbeat_trailer_bytes);
    crypto::signature sig{};
    std::memcpy(sig.data(), d.data() + body.size(), sig.size());
    const auto it = std::find_if(trusted.begin(), trusted.end(), [&](const crypto::key32& k) {
      return crypto::verify(k, body, sig);
    });
    if (it == trusted.end()) return errc::unauthenticated;
    signer = *it;
  }
  if (auto ec = wire::parse_control(body, out)) return ec;
  if (!wire::valid_channel_name(out.channel()) || out.newest_seq() == 0 ||
      !valid_ranges(out.running(), out.newest_seq() + 1)) {
    signer.reset();
    return errc::invalid_field;
  }
  return {};
}

std::size_t encode_gap_report(std::span<std::byte> out, const wire::gap_report& m,
                              const crypto::identity* site) {
  if (!site) return encode_signed(out, wire::msg_type::gap_report, m, nullptr, {});
  return encode_signed(out, wire::msg_type::gap_report, m, site, site->public_key);
}

std::error_code parse_gap_report(std::span<const std::byte> d, wire::gap_report& out) {
  wire::header h;
  if (auto ec = wire::parse_header(d, h)) return ec;
  if (h.type != wire::msg_type::gap_report) return errc::unknown_type;
  std::span<const std::byte> body = d;
  if (h.version == wire::authenticated_version) {
    if (d.size() < wire::header_size + gap_report_trailer_bytes) return errc::truncated;
    body = d.first(d.size() - gap_report_trailer_bytes);
  } else if (h.version != wire::version) {
    return errc::bad_version;
  }
  if (auto ec = wire::parse_control(body, out)) return ec;
  if (!wire::valid_receiver_id(out.receiver_id()) || !wire::valid_channel_name(out.channel()) ||
      !valid_ranges(out.missing(), UINT64_MAX)) {
    return errc::invalid_field;
  }
  return {};
}

std::error_code open_gap_report(std::span<const std::byte> d, bool require_signed,
                                wire::gap_report& out, std::optional<crypto::key32>& site_key) {
  site_key.reset();
  wire::header h;
  if (auto ec = wire::parse_header(d, h)) return ec;
  if (h.type != wire::msg_type::gap_report) return errc::unknown_type;
  const auto v = h.version;
  std::span<const std::byte> body = d;
  if (v == wire::authenticated_version) {
    if (d.size() < wire::header_size + gap_report_trailer_bytes) return errc::truncated;
    body = d.first(d.size() - gap_report_trailer_bytes);
    crypto::key32 key{};
    crypto::signature sig{};
    std::memcpy(key.data(), d.data() + body.size(), key.size());
    std::memcpy(sig.data(), d.data() + body.size() + key.size(), sig.size());
    if (!crypto::verify(key, d.first(body.size() + key.size()), sig)) return errc::unauthenticated;
    site_key = key;
  } else if (v != wire::version || require_signed) {
    return errc::unauthenticated;
  }
  if (auto ec = wire::parse_control(body, out)) {
    site_key.reset();
    return ec;
  }
  if (!wire::valid_receiver_id(out.receiver_id()) || !wire::valid_channel_name(out.channel()) ||
      !valid_ranges(out.missing(), UINT64_MAX)) {
    site_key.reset();
    return errc::invalid_field;
  }
  return {};
}

}  // namespace mcdist::beacon
