#pragma once
/// @file
/// How a site's data reached it in one session (docs/design-notes.md "Unicast fallback"): over
/// the session's multicast group, or over the unicast transport it was moved to. One type for the
/// sender core's receiver reports and its summary, the receiver engine's sessions and the hub's
/// board, and one spelling of it in the summary's table and JSON and the hub's status page and
/// JSON: "multicast", "unicast-sctp", "unicast-sctp-kernel", "unicast-tcp" ("unicast-" and the
/// transport's name of common/transport.hpp).

#include "common/transport.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string_view>

namespace mcdist {

/// The path of a session's data to one site. The unicast values are those of transport_kind
/// (unicast_path, unicast_transport convert): a site starts on multicast and is moved at most
/// once, to one transport, which it keeps for the rest of the session.
enum class delivery_path : std::uint8_t {
  /// The session's multicast group: every block in passes, NAKs and parity for what was lost.
  multicast,
  /// A unicast fallback over SCTP from usrsctp, in UDP (transport_kind::sctp_udp).
  sctp_udp,
  /// A unicast fallback over the kernel's SCTP (transport_kind::sctp_kernel).
  sctp_kernel,
  /// A unicast fallback over several TCP connections (transport_kind::tcp).
  tcp,
};

/// True for every path but multicast: the site was moved to a unicast fallback.
constexpr bool is_unicast(delivery_path p) noexcept { return p != delivery_path::multicast; }

/// The path of a site moved to a unicast fallback over `k`.
constexpr delivery_path unicast_path(transport_kind k) noexcept {
  switch (k) {
    case transport_kind::sctp_udp: return delivery_path::sctp_udp;
    case transport_kind::sctp_kernel: return delivery_path::sctp_kernel;
    case transport_kind::tcp: return delivery_path::tcp;
  }
  return delivery_path::sctp_udp;
}

/// The unicast transport of `p`. @return std::nullopt for multicast
constexpr std::optional<transport_kind> unicast_transport(delivery_path p) noexcept {
  switch (p) {
    case delivery_path::multicast: return std::nullopt;
    case delivery_path::sctp_udp: return transport_kind::sctp_udp;
    case delivery_path::sctp_kernel: return transport_kind::sctp_kernel;
    case delivery_path::tcp: return transport_kind::tcp;
  }
  return std::nullopt;
}

/// "multicast", "unicast-sctp", "unicast-sctp-kernel", "unicast-tcp": the words of the sender's
/// summary (`path`), the hub's status page and JSON; scripts and tests compare them.
constexpr std::string_view to_string(delivery_path p) noexcept {
  switch (p) {
    case delivery_path::multicast: return "multicast";
    case delivery_path::sctp_udp: return "unicast-sctp";
    case delivery_path::sctp_kernel: return "unicast-sctp-kernel";
    case delivery_path::tcp: return "unicast-tcp";
  }
  return "unknown";
}

// The unicast names are "unicast-" and the transport's, and the conversions are inverse.
static_assert(to_string(delivery_path::sctp_udp).substr(8) == to_string(transport_kind::sctp_udp));
static_assert(to_string(delivery_path::sctp_kernel).substr(8) ==
              to_string(transport_kind::sctp_kernel));
static_assert(to_string(delivery_path::tcp).substr(8) == to_string(transport_kind::tcp));
static_assert(unicast_transport(unicast_path(transport_kind::sctp_udp)) ==
              transport_kind::sctp_udp);
static_assert(unicast_transport(unicast_path(transport_kind::sctp_kernel)) ==
              transport_kind::sctp_kernel);
static_assert(unicast_transport(unicast_path(transport_kind::tcp)) == transport_kind::tcp);
static_assert(!unicast_transport(delivery_path::multicast) &&
              !is_unicast(delivery_path::multicast));

}  // namespace mcdist

/// Formats a delivery_path as to_string does: fmt::format("via {}", p).
template <>
struct fmt::formatter<mcdist::delivery_path> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(mcdist::delivery_path p, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(mcdist::to_string(p), ctx);
  }
};
