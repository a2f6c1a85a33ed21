// Announce trees (common/auth_announce.cpp): one signature per burst, each announce verified
// alone, a copied signature caught by its path.
#include "common/auth.hpp"
#include "common/packet.hpp"

#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

using namespace mcdist;

namespace {

const session_id sid{0x0a0b0c0d};
const time_point t0{std::chrono::seconds(100)};

/// Chunk `i` of a manifest, encoded; `size`, when given, pads the first path so the encoded
/// chunk has exactly that many bytes.
std::vector<std::byte> chunk(std::uint32_t i, std::size_t size = 0) {
  wire::announce a;
  a.mutable_params()->set_block_size(1400);
  a.mutable_params()->set_file_count(1000);
  a.mutable_params()->set_manifest_chunks(150);
  a.set_chunk(i);
  a.set_first_file(i * 7);
  for (int f = 0; f < 7; ++f) {
    auto* e = a.add_files();
    e->set_path("obs/" + std::to_string(i) + "/" + std::to_string(f) + ".bufr");
    e->set_size(10000);
  }
  // Each padding byte adds one byte, except where a length prefix grows: step until exact (a
  // size that only a prefix's growth jumps over would oscillate; the bound makes that a failure).
  for (int step = 0; size > 0 && wire::header_size + a.ByteSizeLong() != size; ++step) {
    REQUIRE(step < 4096);
    auto* path = a.mutable_files(0)->mutable_path();
    if (wire::header_size + a.ByteSizeLong() < size) {
      path->push_back('p');
    } else {
      path->pop_back();
    }
  }
  std::vector<std::byte> out(wire::header_size + a.ByteSizeLong() + auth::max_trailer_bytes);
  const std::size_t n = wire::encode_control(out, wire::msg_type::announce, sid, a);
  REQUIRE(n > 0);
  out.resize(n);
  return out;
}

/// A sender, a site that trusts it, and a burst of `n` announces (of `size` bytes each, when
/// given) the sender sealed at once; `encrypted`: the sender of an encrypted session.
struct burst {
  crypto::identity sender_id = crypto::generate_identity();
  crypto::identity site_id = crypto::generate_identity();
  auth::sender_keys sender;
  auth::receiver_keys site{auth::receiver_auth_options{{sender_id.public_key}, site_id, 256, 100}};
  std::vector<std::vector<std::byte>> core;    ///< the core's datagrams
  std::vector<std::vector<std::byte>> sealed;  ///< as sent
  std::span<const std::byte> out;

  explicit burst(std::size_t n, std::size_t size = 0, bool encrypted = false)
      : sender(sender_id, sid, {}, encrypted) {
    std::vector<std::vector<std::byte>> bufs;
    std::vector<auth::sender_keys::announce_slot> slots;
    for (std::uint32_t i = 0; i < n; ++i) {
      core.push_back(chunk(i, size));
      bufs.push_back(core.back());
      bufs.back().resize(core.back().size() + auth::max_trailer_bytes);
    }
    for (std::size_t i = 0; i < n; ++i)
      slots.push_back({std::span<std::byte>(bufs[i]), core[i].size()});
    sender.seal_announces(slots);
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(slots[i].len > core[i].size());
      bufs[i].resize(slots[i].len);
      sealed.push_back(bufs[i]);
    }
  }
};

}  // namespace

TEST_CASE(
    "a burst of announces costs one signature per tree of max_leaves, and every announce "
    "opens alone, in any order, with one signature check per tree",
    "[unit][auth]") {
  burst b(150);  // three trees: 64, 64, 22
  REQUIRE(b.sender.stats().signatures == 3);
  for (std::size_t i = 0; i < b.sealed.size(); ++i) {
    // No longer than the core's datagram plus the trailer it reserved room for.
    REQUIRE(b.sealed[i].size() <= b.core[i].size() + auth::largest_trailer_bytes);
    REQUIRE(auth::announce_trailer_bytes(b.sealed[i]) == b.sealed[i].size() - b.core[i].size());
  }
  // Shuffled, every seventh lost: each opens to the core's bytes (version byte aside).
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < b.sealed.size(); ++i) {
    if (i % 7 != 3) order.push_back(i);
  }
  std::mt19937_64 rng(8);
  std::shuffle(order.begin(), order.end(), rng);
  for (const std::size_t i : order) {
    REQUIRE_FALSE(b.site.open(b.sealed[i], t0, b.out));
    REQUIRE(b.out.size() == b.core[i].size());
    REQUIRE(std::equal(b.out.begin() + 3, b.out.end(), b.core[i].begin() + 3));
  }
  REQUIRE(b.site.stats().signatures == 3);
  REQUIRE(b.site.stats().by_path == order.size() - 3);
  REQUIRE(b.site.stats().total() == 0);
  // The exact repeat of one is a repeat: no path, no signature.
  REQUIRE_FALSE(b.site.open(b.sealed[order[0]], t0, b.out));
  REQUIRE(b.site.stats().signatures == 3);
  REQUIRE(b.site.stats().by_path == order.size() - 3);
}

TEST_CASE(
    "the largest chunk the sender's core makes with the announce reserve is, signed or sealed, "
    "no longer than the control budget: one unfragmented frame over IPv6",
    "[unit][auth]") {
  for (const bool encrypted : {false, true}) {
    INFO("encrypted " << encrypted);
    // The core fills a chunk up to control_budget - reserve (announce_test.cpp checks that).
    const std::size_t largest = wire::control_budget - auth::announce_reserve(encrypted);
    burst b(130, largest, encrypted);  // trees of 64, 64 and 2 leaves: the longest paths
    for (std::size_t i = 0; i < b.sealed.size(); ++i) {
      REQUIRE(b.core[i].size() == largest);
      REQUIRE(b.sealed[i].size() <= wire::control_budget);
      REQUIRE(b.sealed[i].size() + packet::ipv6_header + packet::udp_header <=
              packet::ethernet_mtu);
    }
    // The first 128 sit in full trees: their trailers take the whole reserve but the sealed
    // body's two length bytes at most (the bound is tight).
    REQUIRE(b.sealed[0].size() + 2 >= wire::control_budget);
  }
}

TEST_CASE(
    "a forged announce carrying a verified root's signature is refused by its path, "
    "without a signature check, and the real ones still open",
    "[unit][auth]") {
  burst b(10);
  REQUIRE_FALSE(b.site.open(b.sealed[0], t0, b.out));  // the root's signature checked
  REQUIRE(b.site.stats().signatures == 1);

  // Chunk 5 with one manifest byte changed: same key, path, signature, index and count.
  auto altered = b.sealed[5];
  altered[wire::header_size + 10] ^= std::byte{0x20};
  REQUIRE(b.site.open(altered, t0, b.out) == errc::unauthenticated);
  REQUIRE(b.site.stats().bad_path == 1);

  // A forger's own announce with chunk 5's whole trailer copied behind it.
  const auto forged_body = chunk(77);
  const std::size_t trailer = auth::announce_trailer_bytes(b.sealed[5]);
  std::vector<std::byte> forged(forged_body);
  forged[2] = std::byte{wire::authenticated_version};
  forged.insert(forged.end(), b.sealed[5].end() - static_cast<std::ptrdiff_t>(trailer),
                b.sealed[5].end());
  REQUIRE(b.site.open(forged, t0, b.out) == errc::unauthenticated);
  REQUIRE(b.site.stats().bad_path == 2);
  REQUIRE(b.site.stats().signatures == 1);  // neither cost a signature check

  // The real chunks of the tree open by their paths.
  for (std::size_t i = 1; i < b.sealed.size(); ++i)
    REQUIRE_FALSE(b.site.open(b.sealed[i], t0, b.out));
  REQUIRE(b.site.stats().signatures == 1);
  REQUIRE(b.site.stats().by_path == 9);
}

TEST_CASE("a copied signature of a root not yet verified costs one budgeted check and fails",
          "[unit][auth]") {
  burst b(4);
  auto altered = b.sealed[2];
  altered[wire::header_size + 10] ^= std::byte{0x20};
  REQUIRE(b.site.open(altered, t0, b.out) == errc::unauthenticated);
  REQUIRE(b.site.stats().bad_signature == 1);
  REQUIRE(b.site.stats().signatures == 1);
  // The real root is not poisoned by it: the real chunks open.
  for (const auto& d : b.sealed) REQUIRE_FALSE(b.site.open(d, t0, b.out));
  REQUIRE(b.site.stats().signatures == 2);
}

TEST_CASE(
    "an announce whose leaf index or count is out of bounds, or too short for its path, is "
    "refused before any hashing or check",
    "[unit][auth]") {
  burst b(5);
  auto set = [](std::vector<std::byte> d, std::uint16_t index, std::uint16_t count) {
    d[d.size() - 4] = std::byte(index >> 8);
    d[d.size() - 3] = std::byte(index & 0xff);
    d[d.size() - 2] = std::byte(count >> 8);
    d[d.size() - 1] = std::byte(count & 0xff);
    return d;
  };
  const auto& d = b.sealed[1];
  for (const auto& [index, count] : std::vector<std::pair<std::uint16_t, std::uint16_t>>{
           {0, 0}, {5, 5}, {1, 65}, {0xffff, 0xffff}}) {
    const auto bad = set(d, index, count);
    REQUIRE(auth::announce_trailer_bytes(bad) == 0);
    REQUIRE(b.site.open(bad, t0, b.out) == errc::unauthenticated);
  }
  // A count of 64 asks for a 6-hash path: longer than this datagram's body can hold.
  std::vector<std::byte> tiny(d.begin(), d.begin() + wire::header_size);
  tiny.resize(wire::header_size + auth::announce_trailer_fixed_bytes + 32);
  tiny = set(tiny, 63, 64);
  REQUIRE(auth::announce_trailer_bytes(tiny) == 0);
  REQUIRE(b.site.open(tiny, t0, b.out) == errc::unauthenticated);
  REQUIRE(b.site.stats().unauthenticated == 5);
  REQUIRE(b.site.stats().signatures == 0);
}
