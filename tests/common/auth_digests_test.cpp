// Block digests in the authentication layer (common/auth_digests.cpp; docs/security.md "Block
// digests"): a silent signed session's window of chunks costs one signature, every chunk opens
// alone, and each version-3 block is taken when its digest matches and dropped by name when
// forged, unknown, or not version 3.
#include "common/auth.hpp"

#include "common/byte_order.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

using namespace mcdist;
namespace bd = mcdist::block_digests;

namespace {

const session_id sid{0x0a0b0c0d};
const time_point t0{std::chrono::seconds(100)};

/// A version-3 data datagram of the session: seq, file 0, block seq, 1400 bytes from `fill`.
std::vector<std::byte> block(std::uint32_t seq, std::uint8_t fill = 0x5a,
                             wire::msg_type type = wire::msg_type::data) {
  std::vector<std::byte> d(wire::data_header_size + 1400, std::byte{fill});
  if (type == wire::msg_type::parity) {
    wire::write_parity_header(d, {sid, seq, 3, seq % 7});
  } else {
    wire::write_data_header(d, {sid, seq, file_index{0}, block_index{seq}});
  }
  d[2] = std::byte{wire::digest_version};
  return d;
}

/// A sender, a site that trusts it, and a signed announce of a silent session that says
/// block_digests (or not: an older sender).
struct session {
  crypto::identity sender_id = crypto::generate_identity();
  crypto::identity site_id = crypto::generate_identity();
  auth::sender_keys sender{sender_id, sid, {}};
  auth::receiver_keys site{auth::receiver_auth_options{{sender_id.public_key}, site_id, 256, 100}};
  std::span<const std::byte> out;

  explicit session(bool digests = true) {
    wire::announce a;
    a.mutable_params()->set_block_size(1400);
    a.mutable_params()->set_file_count(1);
    a.mutable_params()->set_manifest_chunks(1);
    a.mutable_params()->set_silent_passes(2);
    a.mutable_params()->set_block_digests(digests ? 1 : 0);
    auto* e = a.add_files();
    e->set_path("f");
    e->set_size(1400 * 4000);
    std::vector<std::byte> buf(wire::control_budget + auth::max_trailer_bytes);
    const std::size_t n = wire::encode_control(buf, wire::msg_type::announce, sid, a);
    const std::size_t sealed = sender.seal_control(buf, n);
    REQUIRE(sealed > n);
    buf.resize(sealed);
    REQUIRE_FALSE(site.open(buf, t0, out));
    REQUIRE(site.block_digests(sid) == digests);
  }

  /// The sealed chunks of a window of `count` datagrams from `first_seq`, as block() makes them.
  std::vector<std::vector<std::byte>> window(std::uint32_t first_seq, std::uint16_t count) {
    std::vector<bd::digest> ds;
    for (std::uint32_t i = 0; i < count; ++i) ds.push_back(bd::digest_of(block(first_seq + i)));
    std::vector<std::vector<std::byte>> chunks(bd::chunks_in(count));
    std::vector<auth::sender_keys::announce_slot> slots;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const std::size_t off = c * bd::digests_per_chunk;
      chunks[c].resize(bd::chunk_body_bytes(count, off) + auth::max_trailer_bytes);
      const std::size_t n =
          bd::write_chunk(chunks[c], sid, first_seq, count, static_cast<std::uint16_t>(off),
                          std::span(ds).subspan(off, bd::digests_at(count, off)));
      REQUIRE(n > 0);
      slots.push_back({std::span<std::byte>(chunks[c]), n});
    }
    sender.seal_block_digests(slots);
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      REQUIRE(slots[c].len == bd::chunk_wire_bytes(count, c * bd::digests_per_chunk));
      chunks[c].resize(slots[c].len);
      REQUIRE(auth::digest_trailer_bytes(chunks[c]) ==
              slots[c].len - bd::chunk_body_bytes(count, c * bd::digests_per_chunk));
    }
    return chunks;
  }
};

}  // namespace

TEST_CASE(
    "a window of block digests costs one signature; each chunk opens alone, by its path once "
    "the root verified, and is taken by the authentication layer",
    "[unit][auth][block_digests]") {
  session s;
  const auto signatures = s.sender.stats().signatures;
  const auto chunks = s.window(5000, 1000);  // 16 chunks, the last of 40 digests
  REQUIRE(chunks.size() == 16);
  REQUIRE(s.sender.stats().signatures == signatures + 1);
  const auto checked = s.site.stats().signatures;
  // Every other chunk, in reverse: each opens alone.
  for (std::size_t i = chunks.size(); i-- > 0;) {
    if (i % 2) continue;
    REQUIRE_FALSE(s.site.open(chunks[i], t0, s.out));
    REQUIRE(s.out.empty());  // nothing for the core
  }
  REQUIRE(s.site.stats().signatures == checked + 1);
  REQUIRE(s.site.stats().digest_chunks == 8);
  REQUIRE(s.site.stats().total() == 0);
  // A block whose chunk arrived opens to itself; one whose chunk was lost is refused.
  for (std::uint32_t seq : {5000u, 5063u, 5128u, 5959u}) {
    const auto d = block(seq);
    REQUIRE_FALSE(s.site.open(d, t0, s.out));
    REQUIRE(s.out.data() == d.data());
    REQUIRE(s.out.size() == d.size());
  }
  REQUIRE(s.site.open(block(5064), t0, s.out) == errc::unauthenticated);
  REQUIRE(s.site.stats().no_digest == 1);
  // Its second copy fills the hole, by path.
  REQUIRE_FALSE(s.site.open(chunks[1], t0, s.out));
  REQUIRE_FALSE(s.site.open(block(5064), t0, s.out));
  REQUIRE(s.site.stats().signatures == checked + 1);
  REQUIRE(s.site.stats().blocks_checked == 5);
  REQUIRE(s.site.digest_bytes_held(sid) >= 1000 * bd::digest_bytes);
}

TEST_CASE(
    "a forged block in the place of a real one is dropped as bad_digest, and the real one "
    "that comes after it is taken",
    "[unit][auth][block_digests]") {
  session s;
  for (const auto& c : s.window(1, 64)) REQUIRE_FALSE(s.site.open(c, t0, s.out));
  for (const auto type : {wire::msg_type::data, wire::msg_type::parity}) {
    // The same header, another payload; the real payload under another header.
    REQUIRE(s.site.open(block(7, 0x66, type), t0, s.out) == errc::unauthenticated);
    auto moved = block(8);
    store_be32(moved.data() + 8, 9);
    REQUIRE(s.site.open(moved, t0, s.out) == errc::unauthenticated);
  }
  REQUIRE(s.site.stats().bad_digest == 4);
  REQUIRE_FALSE(s.site.open(block(7), t0, s.out));
  // Ahead of every window the site holds: no digest.
  REQUIRE(s.site.open(block(65), t0, s.out) == errc::unauthenticated);
  REQUIRE(s.site.stats().no_digest == 1);
  // The version-2 form (with a tag the site cannot check) and the unsigned form of a real
  // block: a block-digest session sends neither.
  auto v2 = block(7);
  v2[2] = std::byte{wire::authenticated_version};
  v2.resize(v2.size() + auth::data_trailer_bytes);
  REQUIRE(s.site.open(v2, t0, s.out) == errc::unauthenticated);
  REQUIRE(s.site.stats().no_digest == 2);
  auto v1 = block(7);
  v1[2] = std::byte{wire::version};
  REQUIRE(s.site.open(v1, t0, s.out) == errc::unauthenticated);
  REQUIRE(s.site.stats().unauthenticated == 1);
  // A version-3 block shorter than its header.
  const auto whole = block(7);
  REQUIRE(s.site.open(std::span(whole).first(wire::data_header_size - 1), t0, s.out) ==
          errc::unauthenticated);
}

TEST_CASE(
    "block digest chunks that are altered, signed by another key, out of place or of an "
    "unknown session are refused and never fill the table",
    "[unit][auth][block_digests]") {
  session s;
  auto chunks = s.window(100, 300);
  REQUIRE_FALSE(s.site.open(chunks[0], t0, s.out));  // the root verified
  const auto checked = s.site.stats().signatures;
  // A digest changed: the copied signature's root is not where the path leads.
  auto altered = chunks[2];
  altered[bd::chunk_header_bytes + 3] ^= std::byte{1};
  REQUIRE(s.site.open(altered, t0, s.out) == errc::unauthenticated);
  REQUIRE(s.site.stats().bad_path == 1);
  REQUIRE(s.site.stats().signatures == checked);
  // Another window signed by a key the site does not trust (a second sender's).
  session other;
  for (const auto& c : other.window(100, 300)) {
    REQUIRE(s.site.open(c, t0, s.out) == errc::unauthenticated);
  }
  REQUIRE(s.site.stats().bad_signature >= 1);
  // Leaf index or count that does not match the chunk's fields.
  auto moved = chunks[3];
  store_be16(moved.data() + moved.size() - 4, 2);
  REQUIRE(s.site.open(moved, t0, s.out) == errc::unauthenticated);
  auto too_many = chunks[3];
  store_be16(too_many.data() + too_many.size() - 2, bd::max_chunks + 1);
  REQUIRE(s.site.open(too_many, t0, s.out) == errc::unauthenticated);
  // A session this site never verified an announce of.
  auto unknown = chunks[1];
  store_be32(unknown.data() + 4, 0x99);
  REQUIRE(s.site.open(unknown, t0, s.out) == errc::unauthenticated);
  REQUIRE(s.site.stats().no_key == 1);
  // Truncated at every length: refused, no crash.
  for (std::size_t n = 0; n < chunks[4].size(); ++n) {
    REQUIRE(s.site.open(std::span(chunks[4]).first(n), t0, s.out));
  }
  // A block of a session this site holds no keys of.
  auto stranger = block(100);
  store_be32(stranger.data() + 4, 0x99);
  REQUIRE(s.site.open(stranger, t0, s.out) == errc::unauthenticated);
  REQUIRE(s.site.stats().no_key == 2);
  // None of it reached the table: only chunk 0's blocks open.
  REQUIRE_FALSE(s.site.open(block(100), t0, s.out));
  REQUIRE(s.site.open(block(100 + 128), t0, s.out) == errc::unauthenticated);
  REQUIRE(s.site.open(block(100 + 256), t0, s.out) == errc::unauthenticated);
}

TEST_CASE(
    "a silent signed session of an older sender (no block_digests) passes its version-2 blocks "
    "unchecked as before, and refuses block digest chunks",
    "[unit][auth][block_digests]") {
  session s(false);
  REQUIRE(s.site.set_silent(sid));
  REQUIRE_FALSE(s.site.set_silent(sid));  // once
  auto v2 = block(7);
  v2[2] = std::byte{wire::authenticated_version};
  v2.resize(v2.size() + auth::data_trailer_bytes);
  REQUIRE_FALSE(s.site.open(v2, t0, s.out));
  REQUIRE(s.out.size() == v2.size() - auth::data_trailer_bytes);
  const auto chunks = s.window(1, 10);
  REQUIRE(s.site.open(chunks[0], t0, s.out) == errc::unauthenticated);
  REQUIRE(s.site.open(block(1), t0, s.out) == errc::unauthenticated);
  REQUIRE(s.site.stats().no_digest == 1);
  // A block-digest session is silent by its announce: set_silent has nothing to do.
  session d;
  REQUIRE_FALSE(d.site.set_silent(sid));
  std::vector<std::byte> buf(wire::control_budget + auth::max_trailer_bytes);
  REQUIRE(d.site.take_key_request(buf) == 0);  // and never asks for the key
}
