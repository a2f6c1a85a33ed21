#pragma once
/// @file
/// Big-endian (network byte order, RFC 1700 "Data Notations") loads and stores of unsigned
/// integers at unaligned byte addresses: the one byte-order helper of every hand-rolled binary
/// layout of mcdist (the datagram header of common/wire.hpp, the unicast frames of
/// common/unicast/frame.hpp, the HKDF salt and marker counter of common/auth.cpp).
///
/// Written as shifts, not memcpy plus bswap: constexpr, independent of the host's byte order
/// and alignment, and compilers turn each into one load or store and a byte swap.
///
/// Every function reads or writes exactly sizeof(T) bytes from `p`; the caller has checked
/// that they are there (the parsers check lengths first, docs/architecture.md "House style").

#include <cstddef>
#include <cstdint>

namespace mcdist {

/// Reads the big-endian u16 at p[0..2).
constexpr std::uint16_t load_be16(const std::byte* p) noexcept {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) << 8 |
                                    std::to_integer<unsigned>(p[1]));
}

/// Reads the big-endian u32 at p[0..4).
constexpr std::uint32_t load_be32(const std::byte* p) noexcept {
  return std::uint32_t{load_be16(p)} << 16 | load_be16(p + 2);
}

/// Reads the big-endian u64 at p[0..8).
constexpr std::uint64_t load_be64(const std::byte* p) noexcept {
  return std::uint64_t{load_be32(p)} << 32 | load_be32(p + 4);
}

/// Writes `v` big-endian to p[0..2).
constexpr void store_be16(std::byte* p, std::uint16_t v) noexcept {
  p[0] = static_cast<std::byte>(v >> 8);
  p[1] = static_cast<std::byte>(v);
}

/// Writes `v` big-endian to p[0..4).
constexpr void store_be32(std::byte* p, std::uint32_t v) noexcept {
  store_be16(p, static_cast<std::uint16_t>(v >> 16));
  store_be16(p + 2, static_cast<std::uint16_t>(v));
}

/// Writes `v` big-endian to p[0..8).
constexpr void store_be64(std::byte* p, std::uint64_t v) noexcept {
  store_be32(p, static_cast<std::uint32_t>(v >> 32));
  store_be32(p + 4, static_cast<std::uint32_t>(v));
}

}  // namespace mcdist
