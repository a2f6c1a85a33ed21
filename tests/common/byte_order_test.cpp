#include "common/byte_order.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>

using namespace mcdist;

namespace {

template <std::size_t N>
constexpr std::array<std::byte, N> bytes_of(const std::uint8_t (&v)[N]) {
  std::array<std::byte, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = std::byte{v[i]};
  return out;
}

// Checked at compile time: the helpers are constexpr and big-endian on any host.
constexpr bool round_trips() {
  std::array<std::byte, 8> b{};
  store_be64(b.data(), 0x0102030405060708ull);
  if (b[0] != std::byte{1} || b[7] != std::byte{8}) return false;
  if (load_be64(b.data()) != 0x0102030405060708ull) return false;
  store_be32(b.data(), 0xdeadbeefu);
  if (load_be32(b.data()) != 0xdeadbeefu || b[0] != std::byte{0xde}) return false;
  store_be16(b.data(), 0x4d44);
  return load_be16(b.data()) == 0x4d44 && b[0] == std::byte{'M'} && b[1] == std::byte{'D'};
}
static_assert(round_trips());

}  // namespace

TEST_CASE("loads read network byte order, most significant byte first") {
  constexpr auto b = bytes_of({0x80, 0x01, 0xfe, 0x02, 0x7f, 0x03, 0x00, 0xff, 0x11});
  CHECK(load_be16(b.data()) == 0x8001);
  CHECK(load_be32(b.data()) == 0x8001fe02u);
  CHECK(load_be64(b.data()) == 0x8001fe027f0300ffull);
  // Unaligned: one byte in.
  CHECK(load_be16(b.data() + 1) == 0x01fe);
  CHECK(load_be32(b.data() + 1) == 0x01fe027fu);
  CHECK(load_be64(b.data() + 1) == 0x01fe027f0300ff11ull);
}

TEST_CASE("stores write exactly their width, most significant byte first") {
  std::array<std::byte, 10> b{};
  b.fill(std::byte{0xaa});
  store_be16(b.data() + 1, 0x1234);
  CHECK(b == bytes_of({0xaa, 0x12, 0x34, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa}));
  b.fill(std::byte{0xaa});
  store_be32(b.data() + 1, 0x12345678u);
  CHECK(b == bytes_of({0xaa, 0x12, 0x34, 0x56, 0x78, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa}));
  b.fill(std::byte{0xaa});
  store_be64(b.data() + 1, 0x0123456789abcdefull);
  CHECK(b == bytes_of({0xaa, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xaa}));
}

TEST_CASE("every value of the extremes round-trips") {
  std::array<std::byte, 8> b{};
  for (const std::uint64_t v : {0ull, 1ull, 0xffull, 0x100ull, 0x8000000000000000ull,
                                0xffffffffffffffffull, 0x00000000ffffffffull}) {
    store_be64(b.data(), v);
    CHECK(load_be64(b.data()) == v);
    store_be32(b.data(), static_cast<std::uint32_t>(v));
    CHECK(load_be32(b.data()) == static_cast<std::uint32_t>(v));
    store_be16(b.data(), static_cast<std::uint16_t>(v));
    CHECK(load_be16(b.data()) == static_cast<std::uint16_t>(v));
  }
}
