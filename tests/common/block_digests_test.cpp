// Block digests (common/block_digests.hpp): the chunk format, checked at every length, and the
// bounded table a site checks blocks against.
#include "common/block_digests.hpp"

#include "common/byte_order.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace mcdist;
namespace bd = mcdist::block_digests;

namespace {

const session_id sid{0x01020304};

/// A datagram of `len` payload bytes whose bytes depend on `seed`.
std::vector<std::byte> datagram(std::uint32_t seed, std::size_t len = 1400) {
  std::vector<std::byte> d(wire::data_header_size + len);
  for (std::size_t i = 0; i < d.size(); ++i)
    d[i] = std::byte(static_cast<std::uint8_t>(i * 7 + seed));
  return d;
}

/// The digests of datagrams seed first .. first + n - 1.
std::vector<bd::digest> digests(std::uint32_t first, std::size_t n) {
  std::vector<bd::digest> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(bd::digest_of(datagram(first + i)));
  return out;
}

/// Chunk `offset` of a window of `count` datagrams starting at `first_seq` whose digests are
/// those of datagram seeds first_seq + i.
std::vector<std::byte> chunk_bytes(std::uint32_t first_seq, std::uint16_t count,
                                   std::uint16_t offset) {
  std::vector<std::byte> out(bd::chunk_body_bytes(count, offset));
  const auto ds = digests(first_seq + offset, bd::digests_at(count, offset));
  REQUIRE(bd::write_chunk(out, sid, first_seq, count, offset, ds) == out.size());
  return out;
}

bd::chunk parsed(const std::vector<std::byte>& bytes) {
  bd::chunk c;
  REQUIRE_FALSE(bd::parse_chunk(bytes, c));
  return c;
}

/// Adds every chunk of the window to `t`.
void add_window(bd::table& t, std::uint32_t first_seq, std::uint16_t count) {
  for (std::uint16_t off = 0; off < count; off += bd::digests_per_chunk) {
    const auto bytes = chunk_bytes(first_seq, count, off);
    REQUIRE(t.add(parsed(bytes)));
  }
}

}  // namespace

TEST_CASE("a block digest is the truncated SHA-256 of the whole datagram: any byte changes it",
          "[unit][block_digests]") {
  const auto d = datagram(1);
  const auto base = bd::digest_of(d);
  for (std::size_t i = 0; i < d.size(); i += 97) {
    auto x = d;
    x[i] ^= std::byte{1};
    REQUIRE(bd::digest_of(x) != base);
  }
  auto shorter = d;
  shorter.pop_back();
  REQUIRE(bd::digest_of(shorter) != base);
}

TEST_CASE("a window's chunks: 64 digests each, the last one shorter, every one within the budget",
          "[unit][block_digests]") {
  REQUIRE(bd::chunks_in(1) == 1);
  REQUIRE(bd::chunks_in(64) == 1);
  REQUIRE(bd::chunks_in(65) == 2);
  REQUIRE(bd::chunks_in(bd::max_window) == bd::max_chunks);
  REQUIRE(bd::digests_at(100, 64) == 36);
  REQUIRE(bd::digests_at(100, 128) == 0);
  for (std::size_t off = 0; off < bd::max_window; off += bd::digests_per_chunk) {
    // The largest chunk, with the longest path of a 16-leaf tree, fits a control datagram.
    REQUIRE(bd::chunk_wire_bytes(bd::max_window, off) <= wire::control_budget);
  }
  REQUIRE(bd::chunk_wire_bytes(bd::max_window, 0) ==
          bd::chunk_header_bytes + 64 * bd::digest_bytes + bd::trailer_fixed_bytes + 4 * 32);
  REQUIRE(bd::chunk_wire_bytes(1, 0) == bd::chunk_header_bytes + bd::digest_bytes + 68);
  REQUIRE(bd::chunk_wire_bytes(10, 10) == 0);
}

TEST_CASE("a chunk parses back to what was written, and every truncation or extension is refused",
          "[unit][block_digests]") {
  const auto bytes = chunk_bytes(0xfffffff0u, 100, 64);  // the window wraps past 2^32
  const auto c = parsed(bytes);
  REQUIRE(c.session == sid);
  REQUIRE(c.first_seq == 0xfffffff0u);
  REQUIRE(c.count == 100);
  REQUIRE(c.offset == 64);
  REQUIRE(c.leaf() == 1);
  REQUIRE(c.digests.size() == 36 * bd::digest_bytes);
  REQUIRE(std::to_integer<int>(bytes[2]) == wire::digest_version);
  wire::header h;
  REQUIRE_FALSE(wire::parse_header(bytes, h));
  REQUIRE(h.type == wire::msg_type::block_digests);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    bd::chunk x;
    INFO("length " << n);
    REQUIRE(bd::parse_chunk(std::span(bytes).first(n), x) == errc::truncated);
  }
  auto longer = bytes;
  longer.push_back(std::byte{0});
  bd::chunk x;
  REQUIRE(bd::parse_chunk(longer, x) == errc::oversized);
}

TEST_CASE("a chunk with a wrong version, type, count or offset is refused by name",
          "[unit][block_digests]") {
  const auto good = chunk_bytes(10, 200, 128);
  bd::chunk c;
  auto bad = good;
  bad[2] = std::byte{wire::authenticated_version};
  REQUIRE(bd::parse_chunk(bad, c) == errc::bad_version);
  bad = good;
  bad[3] = std::byte{1};
  REQUIRE(bd::parse_chunk(bad, c) == errc::unknown_type);
  auto fields = [&](std::uint16_t count, std::uint16_t offset) {
    auto d = good;
    store_be16(d.data() + 12, count);
    store_be16(d.data() + 14, offset);
    return bd::parse_chunk(d, c);
  };
  REQUIRE(fields(0, 0) == errc::invalid_field);
  REQUIRE(fields(bd::max_window + 1, 128) == errc::invalid_field);
  REQUIRE(fields(200, 100) == errc::invalid_field);  // not a multiple of 64
  REQUIRE(fields(128, 128) == errc::invalid_field);  // not below count
  REQUIRE(fields(200, 192) == errc::oversized);      // 64 digests where the last chunk has 8
  auto last = chunk_bytes(10, 200, 192);             // 8 digests where a full chunk has 64
  store_be16(last.data() + 14, 128);
  REQUIRE(bd::parse_chunk(last, c) == errc::truncated);
  std::vector<std::byte> out(2000);
  REQUIRE(bd::write_chunk(out, sid, 0, 0, 0, {}) == 0);
  REQUIRE(bd::write_chunk(out, sid, 0, 10, 0, digests(0, 9)) == 0);
  REQUIRE(bd::write_chunk(std::span(out).first(30), sid, 0, 10, 0, digests(0, 10)) == 0);
}

TEST_CASE("the table matches a block's digest by its sequence number, and tells absent from forged",
          "[unit][block_digests]") {
  bd::table t;
  const auto w = chunk_bytes(1000, 100, 0);  // the first 64 of the window only
  REQUIRE(t.add(parsed(w)));
  REQUIRE(t.check(1000, bd::digest_of(datagram(1000))) == bd::verdict::match);
  REQUIRE(t.check(1063, bd::digest_of(datagram(1063))) == bd::verdict::match);
  REQUIRE(t.check(1063, bd::digest_of(datagram(1062))) == bd::verdict::mismatch);
  REQUIRE(t.check(1064, bd::digest_of(datagram(1064))) == bd::verdict::absent);  // chunk 1 lost
  REQUIRE(t.check(999, bd::digest_of(datagram(999))) == bd::verdict::absent);
  REQUIRE(t.check(1100, bd::digest_of(datagram(1100))) == bd::verdict::absent);
  REQUIRE(t.add(parsed(chunk_bytes(1000, 100, 64))));  // its second copy
  REQUIRE(t.check(1099, bd::digest_of(datagram(1099))) == bd::verdict::match);
  REQUIRE(t.windows() == 1);
}

TEST_CASE(
    "the table holds at most windows_held windows: the oldest goes, a replay of an older one is "
    "ignored, an overlapping one replaces what it overlaps",
    "[unit][block_digests]") {
  bd::table t;
  // Windows of 1024 around the wrap of the sequence numbers.
  const std::uint32_t base = 0xffffffffu - 1500;
  for (std::uint32_t w = 0; w < 6; ++w) add_window(t, base + w * 1024, 1024);
  REQUIRE(t.windows() == bd::windows_held);
  REQUIRE(t.memory_bytes() <= bd::windows_held * (bd::max_window * bd::digest_bytes + 128));
  // Windows 2..5 are held (5 is past the wrap), 0 and 1 were dropped.
  REQUIRE(t.check(base + 5 * 1024 + 7, bd::digest_of(datagram(base + 5 * 1024 + 7))) ==
          bd::verdict::match);
  REQUIRE(t.check(base + 2 * 1024, bd::digest_of(datagram(base + 2 * 1024))) == bd::verdict::match);
  REQUIRE(t.check(base + 1024, bd::digest_of(datagram(base + 1024))) == bd::verdict::absent);
  // A replay of window 1 (older than every window held) changes nothing.
  REQUIRE_FALSE(t.add(parsed(chunk_bytes(base + 1024, 1024, 0))));
  REQUIRE(t.check(base + 2 * 1024, bd::digest_of(datagram(base + 2 * 1024))) == bd::verdict::match);
  // A window that overlaps windows 4 and 5 replaces both.
  add_window(t, base + 4 * 1024 + 512, 1024);
  REQUIRE(t.windows() == 3);
  REQUIRE(t.check(base + 4 * 1024, bd::digest_of(datagram(base + 4 * 1024))) ==
          bd::verdict::absent);
  REQUIRE(t.check(base + 3 * 1024, bd::digest_of(datagram(base + 3 * 1024))) == bd::verdict::match);
}

TEST_CASE("the table takes no chunk whose digests do not fit its fields", "[unit][block_digests]") {
  bd::table t;
  auto c = parsed(chunk_bytes(5, 100, 64));
  c.digests = c.digests.first(c.digests.size() - bd::digest_bytes);
  REQUIRE_FALSE(t.add(c));
  c = parsed(chunk_bytes(5, 100, 64));
  c.offset = 65;
  REQUIRE_FALSE(t.add(c));
  REQUIRE(t.windows() == 0);
}
