#include "common/unicast/record_seal.hpp"

#include "common/unicast/hello_proof.hpp"
#include "tests/common/unicast/token.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <set>

using namespace mcdist;
using namespace mcdist::unicast;

namespace {

hello sample(std::uint8_t index = 0) {
  hello h;
  h.token = test::tok(0x4242);
  h.session = session_id{7};
  h.client_nonce = 12345;
  h.connection_index = index;
  h.connection_count = 4;
  h.receiver_id = "site-a";
  return h;
}

crypto::key32 site_key() {
  crypto::key32 k{};
  k.fill(0x5a);
  return k;
}

/// A data frame of `n` bytes of payload for file `f` at `off`, payload bytes = (off + i) & 0xff.
std::vector<std::byte> data_frame(std::uint32_t f, std::uint64_t off, std::size_t n) {
  std::vector<std::byte> v(record_header_size + n);
  write_record_header(v, file_index{f}, off, static_cast<std::uint32_t>(n));
  for (std::size_t i = 0; i < n; ++i) v[record_header_size + i] = std::byte((off + i) & 0xff);
  return v;
}

std::vector<std::byte> request_frame() {
  std::vector<std::byte> v;
  append_frame(v, request{{{file_index{3}, 0, 100}, {file_index{4}, 10, 20}}});
  return v;
}

/// Opens a whole sealed frame (a copy) with `o` on `stream`; the inner frame or the error.
std::error_code open_copy(frame_opener& o, std::uint32_t stream, std::vector<std::byte> sealed,
                          std::vector<std::byte>* inner_out = nullptr) {
  const auto head = std::span<const std::byte>(sealed).first(frame_header_size);
  std::span<const std::byte> inner;
  const auto ec = o.open(stream, head, std::span(sealed).subspan(frame_header_size), inner);
  if (!ec && inner_out) inner_out->assign(inner.begin(), inner.end());
  return ec;
}

bool contains(const std::vector<std::byte>& hay, std::span<const std::byte> needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

struct collector final : frame_handler {
  std::vector<frame_type> controls;
  std::vector<std::byte> bytes;
  std::uint64_t pieces = 0;
  std::error_code on_control(frame_type type, std::span<const std::byte>) override {
    controls.push_back(type);
    return {};
  }
  std::error_code on_data(file_index, std::uint64_t, std::span<const std::byte> b) override {
    ++pieces;
    bytes.insert(bytes.end(), b.begin(), b.end());
    return {};
  }
};

}  // namespace

TEST_CASE("sealed frames open in order and hide their content", "[unit][unicast][seal]") {
  const auto c = make_challenge();
  const auto k = derive_seal_keys(site_key(), c, sample());
  frame_sealer s(k.to_client);
  frame_opener o(k.to_client);
  const auto plain = data_frame(5, 65536, 4000);
  for (std::uint32_t stream : {0u, 3u, 3u, 0u, 255u}) {
    const auto sealed = s.seal_copy(stream, plain);
    REQUIRE(sealed.size() == plain.size() + seal_overhead);
    frame_header fh;
    REQUIRE_FALSE(decode_frame_header(sealed, fh));
    REQUIRE(fh.type == frame_type::sealed);
    REQUIRE(fh.length == plain.size() + crypto::gcm_tag_bytes);
    // Neither the record prefix nor the payload is visible.
    REQUIRE_FALSE(contains(sealed, std::span(plain).subspan(frame_header_size, 64)));
    std::vector<std::byte> inner;
    REQUIRE_FALSE(open_copy(o, stream, sealed, &inner));
    REQUIRE(inner == plain);
  }
  REQUIRE(s.sealed() == 5);
  REQUIRE(o.opened() == 5);
  REQUIRE(s.seal(max_seal_streams, *std::make_unique<std::vector<std::byte>>(std::vector<std::byte>(
                                       seal_front + 8))) == make_error_code(errc::invalid_field));
}

TEST_CASE("a tampered sealed frame is refused", "[unit][unicast][seal]") {
  const auto k = derive_seal_keys(site_key(), make_challenge(), sample());
  frame_sealer s(k.to_server);
  const auto sealed = s.seal_copy(0, request_frame());
  // Every single-bit flip anywhere in the body (ciphertext or tag) or in the authenticated
  // header's length is refused.
  for (std::size_t at = frame_header_size; at < sealed.size(); ++at) {
    frame_opener o(k.to_server);
    auto t = sealed;
    t[at] ^= std::byte{0x01};
    REQUIRE(open_copy(o, 0, t) == make_error_code(errc::unauthenticated));
    REQUIRE(o.opened() == 0);
    // The failure does not advance the sequence: the genuine frame still opens afterwards
    // (the connection is closed at the first failure anyway).
    REQUIRE_FALSE(open_copy(o, 0, sealed));
  }
  {
    frame_opener o(k.to_server);
    auto t = sealed;
    t[7] ^= std::byte{0x01};  // header (associated data): not the length the tag covers
    const auto head = std::span<const std::byte>(t).first(frame_header_size);
    std::span<const std::byte> inner;
    REQUIRE(o.open(0, head, std::span(t).subspan(frame_header_size), inner) ==
            make_error_code(errc::unauthenticated));
  }
  // The wrong key (another site's, or the other direction's) opens nothing.
  frame_opener other_direction(k.to_client);
  REQUIRE(open_copy(other_direction, 0, sealed) == make_error_code(errc::unauthenticated));
  crypto::key32 other_site{};
  other_site.fill(0x11);
  const auto k2 = derive_seal_keys(other_site, make_challenge(), sample());
  frame_opener wrong_site(k2.to_server);
  REQUIRE(open_copy(wrong_site, 0, sealed) == make_error_code(errc::unauthenticated));
}

TEST_CASE("replayed, reordered, dropped or moved sealed frames are refused",
          "[unit][unicast][seal]") {
  const auto k = derive_seal_keys(site_key(), make_challenge(), sample());
  frame_sealer s(k.to_client);
  const auto a = s.seal_copy(1, data_frame(1, 0, 100));
  const auto b = s.seal_copy(1, data_frame(1, 100, 100));
  const auto c = s.seal_copy(1, data_frame(1, 200, 100));
  SECTION("replay") {
    frame_opener o(k.to_client);
    REQUIRE_FALSE(open_copy(o, 1, a));
    REQUIRE(open_copy(o, 1, a) == make_error_code(errc::unauthenticated));
  }
  SECTION("reorder") {
    frame_opener o(k.to_client);
    REQUIRE(open_copy(o, 1, b) == make_error_code(errc::unauthenticated));
  }
  SECTION("drop") {
    frame_opener o(k.to_client);
    REQUIRE_FALSE(open_copy(o, 1, a));
    REQUIRE(open_copy(o, 1, c) == make_error_code(errc::unauthenticated));
  }
  SECTION("moved to another stream") {
    frame_opener o(k.to_client);
    REQUIRE(open_copy(o, 2, a) == make_error_code(errc::unauthenticated));
  }
  SECTION("in order") {
    frame_opener o(k.to_client);
    REQUIRE_FALSE(open_copy(o, 1, a));
    REQUIRE_FALSE(open_copy(o, 1, b));
    REQUIRE_FALSE(open_copy(o, 1, c));
  }
}

TEST_CASE("keys and nonces never repeat across directions, connections and streams",
          "[unit][unicast][seal]") {
  const auto c1 = make_challenge();
  const auto c2 = make_challenge();
  REQUIRE(c1.nonce != c2.nonce);
  std::set<crypto::key32> keys;
  for (const auto& c : {c1, c2}) {
    for (std::uint8_t i = 0; i < 4; ++i) {
      const auto k = derive_seal_keys(site_key(), c, sample(i));
      keys.insert(k.to_client);
      keys.insert(k.to_server);
    }
  }
  // 2 challenges x 4 connections x 2 directions: all distinct.
  REQUIRE(keys.size() == 16);
  // Deterministic: both ends derive the same keys from the same inputs.
  REQUIRE(derive_seal_keys(site_key(), c1, sample(2)).to_client ==
          derive_seal_keys(site_key(), c1, sample(2)).to_client);
  // Under one key, the same plaintext sealed on every stream and many times per stream never
  // gives the same ciphertext twice (a repeated nonce would: GCM is a stream cipher).
  const auto k = derive_seal_keys(site_key(), c1, sample());
  frame_sealer s(k.to_client);
  const auto plain = data_frame(0, 0, 64);
  std::set<std::vector<std::byte>> seen;
  for (std::uint32_t stream = 0; stream < 8; ++stream)
    for (int i = 0; i < 50; ++i) REQUIRE(seen.insert(s.seal_copy(stream, plain)).second);
  // Two connections of one session (other challenge or index) seal the same first frame
  // differently.
  frame_sealer s_other(derive_seal_keys(site_key(), c2, sample()).to_client);
  frame_sealer s_index(derive_seal_keys(site_key(), c1, sample(1)).to_client);
  frame_sealer s_same(k.to_client);
  REQUIRE(s_other.seal_copy(0, plain) != s_same.seal_copy(0, plain));
  frame_sealer s_same2(k.to_client);
  REQUIRE(s_index.seal_copy(0, plain) != s_same2.seal_copy(0, plain));
}

TEST_CASE("a frame_reader with an opener takes sealed frames only", "[unit][unicast][seal]") {
  const auto k = derive_seal_keys(site_key(), make_challenge(), sample());
  frame_sealer s(k.to_client);
  std::vector<std::byte> stream;
  std::vector<std::byte> w;
  append_frame(w, welcome{65536, 0, 4});
  for (const auto& f : {s.seal_copy(0, w), s.seal_copy(0, data_frame(2, 0, 70000)),
                        s.seal_copy(0, data_frame(2, 70000, 10))})
    stream.insert(stream.end(), f.begin(), f.end());
  SECTION("byte by byte, a record arrives whole") {
    frame_opener o(k.to_client);
    frame_reader r(true);
    r.set_opener(&o);
    collector h;
    for (const auto b : stream) REQUIRE_FALSE(r.feed(std::span(&b, 1), h));
    REQUIRE(r.at_boundary());
    REQUIRE(h.controls == std::vector<frame_type>{frame_type::welcome});
    REQUIRE(h.pieces == 2);
    REQUIRE(h.bytes.size() == 70010);
    for (std::size_t i = 0; i < h.bytes.size(); ++i) REQUIRE(h.bytes[i] == std::byte(i & 0xff));
  }
  SECTION("a plain frame after the hello is a violation, a plain refuse is not") {
    frame_opener o(k.to_client);
    frame_reader r(true);
    r.set_opener(&o);
    collector h;
    std::vector<std::byte> rf;
    append_frame(rf, refuse{refuse_reason::busy, "later"});
    REQUIRE_FALSE(r.feed(rf, h));
    REQUIRE(r.feed(data_frame(2, 0, 10), h) == error::protocol_violation);
    frame_reader server_side(false);
    server_side.set_opener(&o);
    REQUIRE(server_side.feed(rf, h) == error::protocol_violation);
  }
  SECTION("a sealed frame without an opener is a violation") {
    frame_reader r(true);
    collector h;
    REQUIRE(r.feed(stream, h) == error::protocol_violation);
  }
  SECTION("a tampered record ends the reader") {
    frame_opener o(k.to_client);
    frame_reader r(true);
    r.set_opener(&o);
    collector h;
    stream[stream.size() - 20] ^= std::byte{0x80};  // inside the last frame
    REQUIRE(r.feed(stream, h) == make_error_code(errc::unauthenticated));
    REQUIRE(h.bytes.size() == 70000);  // the two frames before it only
    REQUIRE(r.feed(stream, h) == make_error_code(errc::unauthenticated));
  }
  SECTION("a sealed record over the reader's record limit is refused before buffering") {
    frame_opener o(k.to_client);
    frame_reader r(true, 1024);
    r.set_opener(&o);
    collector h;
    const auto big = s.seal_copy(0, data_frame(1, 0, 4096));
    REQUIRE(r.feed(std::span(big).first(frame_header_size), h) == make_error_code(errc::oversized));
  }
}
