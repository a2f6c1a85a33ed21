#include "common/unicast/types.hpp"

namespace mcdist::unicast {

std::string_view to_string(transport_kind k) noexcept {
  switch (k) {
    case transport_kind::sctp_udp: return "sctp-udp";
    case transport_kind::sctp_kernel: return "sctp-kernel";
    case transport_kind::tcp: return "tcp";
  }
  return "unknown";
}

std::optional<transport_kind> parse_transport_kind(std::string_view text) noexcept {
  if (text == "sctp-udp" || text == "sctp" || text == "sctp_udp") return transport_kind::sctp_udp;
  if (text == "sctp-kernel" || text == "sctp_kernel") return transport_kind::sctp_kernel;
  if (text == "tcp") return transport_kind::tcp;
  return std::nullopt;
}

}  // namespace mcdist::unicast
