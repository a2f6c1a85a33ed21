#include "common/unicast/record_seal.hpp"

#include "common/byte_order.hpp"

#include <array>
#include <cstring>
#include <string_view>

namespace mcdist::unicast {

namespace {

/// HKDF info strings: one per direction, so the two directions never share a key, and
/// distinct from every other derivation of the protocol (common/auth.hpp, hello_proof.hpp).
constexpr std::string_view info_to_client = "mcdist v2 fallback records server to client";
constexpr std::string_view info_to_server = "mcdist v2 fallback records client to server";

/// The nonce of the frame numbered `seq` on `stream`: stream u32 || sequence u64, big-endian.
std::array<std::uint8_t, crypto::gcm_nonce_bytes> nonce_of(std::uint32_t stream,
                                                           std::uint64_t seq) noexcept {
  std::array<std::uint8_t, crypto::gcm_nonce_bytes> n{};
  auto* p = reinterpret_cast<std::byte*>(n.data());
  store_be32(p, stream);
  store_be64(p + 4, seq);
  return n;
}

/// Types that travel sealed after the hello.
bool sealable(frame_type t) noexcept {
  return t == frame_type::data || t == frame_type::welcome || t == frame_type::request ||
         t == frame_type::ack || t == frame_type::bye;
}

/// The record counter of `stream` in `counters` (one per stream, grown on first use, so a
/// connection pays only for the streams it uses; stream < max_seal_streams bounds it).
/// @return nullptr when the memory for it could not be had
std::uint64_t* counter_of(std::vector<std::uint64_t>& counters, std::uint32_t stream) noexcept {
  if (counters.size() <= stream) {
    try {
      counters.resize(stream + 1, 0);
    } catch (...) {
      return nullptr;
    }
  }
  return &counters[stream];
}

}  // namespace

seal_keys derive_seal_keys(const crypto::key32& fallback_key, const challenge& c, const hello& h) {
  std::array<std::uint8_t, challenge_size + 8 + 1> salt{};
  std::memcpy(salt.data(), c.nonce.data(), challenge_size);
  store_be64(reinterpret_cast<std::byte*>(salt.data() + challenge_size), h.client_nonce);
  salt[challenge_size + 8] = h.connection_index;
  seal_keys k;
  crypto::hkdf_sha256(fallback_key, salt, info_to_client, k.to_client);
  crypto::hkdf_sha256(fallback_key, salt, info_to_server, k.to_server);
  return k;
}

frame_sealer::frame_sealer(const crypto::key32& key)
    : m_gcm(key, crypto::gcm::direction::encrypt) {}

std::error_code frame_sealer::seal(std::uint32_t stream, std::vector<std::byte>& buf) noexcept {
  if (stream >= max_seal_streams) return errc::invalid_field;
  if (buf.size() < seal_front + frame_header_size ||
      buf.size() - seal_front > frame_header_size + record_prefix_size + max_record_size)
    return errc::invalid_field;
  std::uint64_t* const next = counter_of(m_next, stream);
  if (next == nullptr) return errc::out_of_memory;
  if (*next == UINT64_MAX) return errc::oversized;
  const auto inner = buf.size() - seal_front;
  try {
    buf.resize(buf.size() + crypto::gcm_tag_bytes);
  } catch (...) {
    return errc::out_of_memory;
  }
  const auto span = std::span(buf);
  write_frame_header(span, frame_type::sealed,
                     static_cast<std::uint32_t>(inner + crypto::gcm_tag_bytes));
  const auto n = nonce_of(stream, (*next)++);
  const auto tag = m_gcm.seal(n, span.first(frame_header_size), span.subspan(seal_front, inner));
  std::memcpy(buf.data() + seal_front + inner, tag.data(), tag.size());
  ++m_sealed;
  return {};
}

std::vector<std::byte> frame_sealer::seal_copy(std::uint32_t stream,
                                               std::span<const std::byte> frame) {
  std::vector<std::byte> out;
  out.reserve(seal_overhead + frame.size());
  out.resize(seal_front);
  out.insert(out.end(), frame.begin(), frame.end());
  if (auto ec = seal(stream, out)) throw std::system_error(ec, "sealing a frame");
  return out;
}

frame_opener::frame_opener(const crypto::key32& key)
    : m_gcm(key, crypto::gcm::direction::decrypt) {}

std::error_code frame_opener::open(std::uint32_t stream, std::span<const std::byte> header,
                                   std::span<std::byte> body,
                                   std::span<const std::byte>& inner) noexcept {
  if (stream >= max_seal_streams) return errc::invalid_field;
  if (header.size() != frame_header_size) return errc::truncated;
  if (body.size() < frame_header_size + crypto::gcm_tag_bytes) return errc::truncated;
  std::uint64_t* const next = counter_of(m_next, stream);
  if (next == nullptr) return errc::out_of_memory;
  if (*next == UINT64_MAX) return errc::oversized;
  const auto cipher_len = body.size() - crypto::gcm_tag_bytes;
  const auto cipher = body.first(cipher_len);
  std::array<std::uint8_t, crypto::gcm_tag_bytes> tag{};
  std::memcpy(tag.data(), body.data() + cipher_len, tag.size());
  const auto n = nonce_of(stream, *next);
  if (!m_gcm.open(n, header, cipher, tag, cipher)) {
    // Unauthenticated bytes: wipe them so nobody uses them by mistake.
    std::memset(cipher.data(), 0, cipher.size());
    return errc::unauthenticated;
  }
  ++*next;
  ++m_opened;
  frame_header fh;
  if (auto ec = decode_frame_header(cipher, fh)) return ec;
  if (!sealable(fh.type)) return errc::invalid_field;
  if (fh.length != cipher_len - frame_header_size) return errc::invalid_field;
  inner = cipher;
  return {};
}

}  // namespace mcdist::unicast
