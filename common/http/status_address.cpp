#include "common/http/status_address.hpp"

#include <stdexcept>
#include <string>

namespace mcdist::http {

endpoint loopback_status_address(std::uint16_t port) {
  auto e = *parse_address("127.0.0.1");
  e.port = port;
  return e;
}

std::optional<endpoint> parse_status_address(std::string_view text, std::uint16_t default_port) {
  if (text == "off") return std::nullopt;
  // parse_endpoint refuses port 0; tests ask for it to get any free port.
  const bool any_port = text.size() > 2 && text.ends_with(":0");
  const auto e =
      any_port ? parse_endpoint(text.substr(0, text.size() - 2), 0) : parse_endpoint(text);
  if (!e || e->is_multicast()) {
    throw std::invalid_argument("\"" + std::string(text) +
                                "\" is not a local ADDR:PORT to serve status on (e.g. "
                                "127.0.0.1:" +
                                std::to_string(default_port) + ") or \"off\"");
  }
  return e;
}

}  // namespace mcdist::http
