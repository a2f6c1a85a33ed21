#include "common/unicast/hello_proof.hpp"

#include "common/byte_order.hpp"

#include <cstring>
#include <string_view>
#include <vector>

namespace mcdist::unicast {

namespace {

/// Domain separation: this MAC input can never be taken for another message of the protocol.
constexpr std::string_view proof_label = "mcdist v2 fallback hello";

/// The MAC input of a hello (the layout in hello_proof.hpp): a fixed binary layout of its
/// own, not the hello's wire encoding, so the proof does not depend on how protobuf writes the
/// hello. Bytes after the label and challenge: token 16, session 4, client nonce 8, connection
/// index 1, connection count 1, id length 1, then the id.
std::vector<std::byte> proof_input(const challenge& c, const hello& h) {
  constexpr std::size_t fixed = sizeof h.token + 4 + 8 + 3;
  std::vector<std::byte> m(proof_label.size() + challenge_size + fixed + h.receiver_id.size());
  std::byte* p = m.data();
  std::memcpy(p, proof_label.data(), proof_label.size());
  p += proof_label.size();
  std::memcpy(p, c.nonce.data(), challenge_size);
  p += challenge_size;
  std::memcpy(p, h.token.data(), sizeof h.token);
  p += sizeof h.token;
  store_be32(p, h.session.value);
  store_be64(p + 4, h.client_nonce);
  p[12] = std::byte{h.connection_index};
  p[13] = std::byte{h.connection_count};
  p[14] = std::byte{static_cast<std::uint8_t>(h.receiver_id.size())};
  std::memcpy(p + 15, h.receiver_id.data(), h.receiver_id.size());
  return m;
}

}  // namespace

crypto::hmac_tag hello_proof(const crypto::key32& key, const challenge& c, const hello& h) {
  return crypto::hmac(key, proof_input(c, h));
}

bool verify_hello_proof(const crypto::key32& key, const challenge& c, const hello& h) noexcept {
  if (!h.proof || h.receiver_id.size() > max_hello_receiver_id) return false;
  try {
    return crypto::hmac_verify(key, proof_input(c, h), *h.proof);
  } catch (...) {  // out of memory building the input: not verified
    return false;
  }
}

challenge make_challenge() noexcept {
  challenge c;
  crypto::random_bytes(c.nonce);
  return c;
}

}  // namespace mcdist::unicast
