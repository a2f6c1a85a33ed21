#pragma once
/// @file
/// A network address and port, free of any socket library, so the protocol cores can name
/// where a datagram came from and where one goes.

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace mcdist {

/// IPv4 or IPv6 address + UDP/TCP port. For IPv4 only the first 4 bytes of `addr` are used.
struct endpoint {
  std::array<std::uint8_t, 16> addr{};
  std::uint16_t port = 0;
  bool v6 = false;

  auto operator<=>(const endpoint&) const = default;

  /// True for 224.0.0.0/4 or ff00::/8.
  bool is_multicast() const noexcept;
  /// True for the source-specific multicast ranges, 232.0.0.0/8 and ff3x::/32 (RFC 4607
  /// section 1: routers forward these only to (source, group) joins, RFC 3376 / RFC 3810).
  bool is_source_specific() const noexcept;
  /// "a.b.c.d:port" or "[v6]:port".
  std::string to_string() const;
  /// The address alone, without port.
  std::string address_string() const;
};

/// Parses "a.b.c.d:port", "[v6]:port", or an address alone when `default_port` is given.
/// @return std::nullopt on anything else.
/// True when `a` and `b` are the same host (address and family; ports differ per socket, and a
/// restarted daemon's socket gets another one).
inline bool same_host(const endpoint& a, const endpoint& b) noexcept {
  return a.v6 == b.v6 && a.addr == b.addr;
}

std::optional<endpoint> parse_endpoint(std::string_view text,
                                       std::optional<std::uint16_t> default_port = {});

/// Parses an address without port ("127.0.0.1", "::1").
std::optional<endpoint> parse_address(std::string_view text);

}  // namespace mcdist

template <>
struct std::hash<mcdist::endpoint> {
  std::size_t operator()(const mcdist::endpoint& e) const noexcept {
    std::size_t h = e.port ^ (e.v6 ? 0x9e3779b97f4a7c15ull : 0);
    for (auto b : e.addr) h = h * 131 + b;
    return h;
  }
};
