#include "common/unicast/hello_proof.hpp"

#include "tests/common/unicast/token.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::unicast;

namespace {

hello sample() {
  hello h;
  h.token = test::tok(0x1234);
  h.session = session_id{77};
  h.client_nonce = 99;
  h.connection_index = 1;
  h.connection_count = 4;
  h.receiver_id = "site-a";
  return h;
}

crypto::key32 key_of(std::uint8_t b) {
  crypto::key32 k{};
  k.fill(b);
  return k;
}

}  // namespace

TEST_CASE("a proof verifies under its key and challenge only", "[unit][unicast][proof]") {
  const auto c = make_challenge();
  auto h = sample();
  h.proof = hello_proof(key_of(1), c, h);
  REQUIRE(verify_hello_proof(key_of(1), c, h));
  REQUIRE_FALSE(verify_hello_proof(key_of(2), c, h));  // a forged site's key
  auto other = c;
  other.nonce[15] ^= 1;
  REQUIRE_FALSE(verify_hello_proof(key_of(1), other, h));  // replayed on another connection
  h.proof.reset();
  REQUIRE_FALSE(verify_hello_proof(key_of(1), c, h));  // no proof at all
}

TEST_CASE("a proof covers every credential of the hello", "[unit][unicast][proof]") {
  const auto c = make_challenge();
  const auto base = sample();
  const auto proof = hello_proof(key_of(1), c, base);
  std::vector<hello> changed(6, base);
  changed[0].token[0] ^= 1;
  changed[1].session = session_id{78};
  changed[2].client_nonce = 100;
  changed[3].connection_index = 2;
  changed[4].connection_count = 5;
  changed[5].receiver_id = "site-b";
  for (auto& h : changed) {
    h.proof = proof;
    REQUIRE_FALSE(verify_hello_proof(key_of(1), c, h));
  }
}

TEST_CASE("challenges do not repeat", "[unit][unicast][proof]") {
  const auto a = make_challenge();
  const auto b = make_challenge();
  REQUIRE(a.nonce != b.nonce);
}
