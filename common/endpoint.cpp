#include "common/endpoint.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace mcdist {

bool endpoint::is_multicast() const noexcept {
  return v6 ? addr[0] == 0xff : (addr[0] & 0xf0) == 0xe0;
}

bool endpoint::is_source_specific() const noexcept {
  if (!v6) return addr[0] == 232;
  // ff3x::/32: flags 3 (P and T, RFC 3306 section 4), any scope x, prefix length and prefix 0.
  return addr[0] == 0xff && (addr[1] & 0xf0) == 0x30 && addr[2] == 0 && addr[3] == 0;
}

std::string endpoint::address_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(v6 ? AF_INET6 : AF_INET, addr.data(), buf, sizeof buf);
  return buf;
}

std::string endpoint::to_string() const {
  return (v6 ? "[" + address_string() + "]" : address_string()) + ":" + std::to_string(port);
}

std::optional<endpoint> parse_address(std::string_view text) {
  endpoint e;
  const std::string s(text);
  if (inet_pton(AF_INET, s.c_str(), e.addr.data()) == 1) return e;
  if (inet_pton(AF_INET6, s.c_str(), e.addr.data()) == 1) {
    e.v6 = true;
    return e;
  }
  return std::nullopt;
}

std::optional<endpoint> parse_endpoint(std::string_view text,
                                       std::optional<std::uint16_t> default_port) {
  std::string_view host = text;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = text.substr(1, close - 1);
    const auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
    }
  } else if (const auto colon = text.rfind(':');
             colon != std::string_view::npos && text.find(':') == colon) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  auto e = parse_address(host);
  if (!e) return std::nullopt;
  if (port.empty()) {
    if (!default_port) return std::nullopt;
    e->port = *default_port;
    return e;
  }
  unsigned p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc{} || ptr != port.data() + port.size() || p == 0 || p > 65535) {
    return std::nullopt;
  }
  e->port = static_cast<std::uint16_t>(p);
  return e;
}

}  // namespace mcdist
