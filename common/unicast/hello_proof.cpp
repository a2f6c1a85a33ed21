#include "common/unicast/hello_proof.hpp"

#include <string_view>
#include <vector>

namespace mcdist::unicast {

namespace {

/// Domain separation: this MAC input can never be taken for another message of the protocol.
constexpr std::string_view proof_label = "mcdist v2 fallback hello";

std::vector<std::byte> proof_input(const challenge& c, const hello& h) {
  std::vector<std::byte> m;
  m.reserve(proof_label.size() + challenge_size + hello_fixed_size + h.receiver_id.size());
  const auto put = [&m](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    m.insert(m.end(), b, b + n);
  };
  const auto put_be = [&m](std::uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) m.push_back(std::byte(v >> (8 * i)));
  };
  put(proof_label.data(), proof_label.size());
  put(c.nonce.data(), c.nonce.size());
  put(h.token.data(), h.token.size());
  put_be(h.session.value, 4);
  put_be(h.client_nonce, 8);
  put_be(h.connection_index, 1);
  put_be(h.connection_count, 1);
  put_be(h.receiver_id.size(), 1);
  put(h.receiver_id.data(), h.receiver_id.size());
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
