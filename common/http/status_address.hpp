#pragma once
/// @file
/// Where a daemon serves its status port (the `http` setting of mcdistd and mcdist-feed).

#include "common/endpoint.hpp"

#include <cstdint>
#include <optional>
#include <string_view>

namespace mcdist::http {

/// 127.0.0.1:`port`: the default, so that status stays on the host unless the operator opens
/// it.
endpoint loopback_status_address(std::uint16_t port);

/// Parses an `http` setting: "ADDR:PORT" (a unicast IPv4 or [IPv6] address; port 0, any
/// free port logged at start, is for tests) or "off".
/// @param default_port  the daemon's default port, shown in the error's example
/// @return the address, or std::nullopt for "off"
/// @throws std::invalid_argument  saying what is wrong: "\"TEXT\" is not a local ADDR:PORT to
///         serve status on (e.g. 127.0.0.1:PORT) or \"off\""
std::optional<endpoint> parse_status_address(std::string_view text, std::uint16_t default_port);

}  // namespace mcdist::http
