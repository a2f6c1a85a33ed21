#pragma once
/// @file
/// The transport of a unicast fallback (docs/design-notes.md "Unicast fallback"), one enum for the
/// sender core, its summary and the unicast subsystem, and one spelling of it in logs, summaries
/// and on the command line: SCTP over UDP (usrsctp, the default) is "sctp", the kernel's SCTP is
/// "sctp-kernel", multi-socket TCP is "tcp" (mcdist-send --fallback takes the same words).

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mcdist {

/// The transport under a unicast session.
enum class transport_kind : std::uint8_t {
  /// SCTP multistream from usrsctp (userland), encapsulated in UDP (RFC 6951); the default:
  /// needs no kernel SCTP and crosses NATs and firewalls that drop IP protocol 132.
  sctp_udp,
  /// SCTP multistream from the kernel (lksctp), IP protocol 132; only where the kernel has it.
  sctp_kernel,
  /// n persistent TCP connections with records striped over them (XFTP, Allman et al.).
  tcp,
};

/// Number of transport_kind values (arrays indexed by transport).
inline constexpr std::size_t transport_kinds = 3;

/// "sctp", "sctp-kernel", "tcp".
constexpr std::string_view to_string(transport_kind k) noexcept {
  switch (k) {
    case transport_kind::sctp_udp: return "sctp";
    case transport_kind::sctp_kernel: return "sctp-kernel";
    case transport_kind::tcp: return "tcp";
  }
  return "unknown";
}

/// "1 connection", "4 connections" (TCP) or "1 association", "8 associations" (SCTP): the
/// words logs and summaries use for a unicast session's n connections or associations.
inline std::string connection_count_text(transport_kind k, std::uint64_t n) {
  return fmt::format("{} {}{}", n, k == transport_kind::tcp ? "connection" : "association",
                     n == 1 ? "" : "s");
}

/// Parses the names of to_string; also "sctp-udp" and the enumerator spellings ("sctp_udp",
/// "sctp_kernel") that older scripts pass. @return std::nullopt for anything else
constexpr std::optional<transport_kind> parse_transport_kind(std::string_view text) noexcept {
  if (text == "sctp" || text == "sctp-udp" || text == "sctp_udp") return transport_kind::sctp_udp;
  if (text == "sctp-kernel" || text == "sctp_kernel") return transport_kind::sctp_kernel;
  if (text == "tcp") return transport_kind::tcp;
  return std::nullopt;
}

}  // namespace mcdist

/// Formats a transport_kind as to_string does: fmt::format("over {}", k).
template <>
struct fmt::formatter<mcdist::transport_kind> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(mcdist::transport_kind k, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(mcdist::to_string(k), ctx);
  }
};
