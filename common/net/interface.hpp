#pragma once
/// @file
/// The local interface a program sends multicast from and joins groups on, as the operator
/// names it (`interface = "eth1"` or `"10.0.0.7"`, `-i eth1`), and its resolution against the
/// host's interfaces into what the socket options take: an address of the group's family (to
/// bind, and IP_MULTICAST_IF's ip_mreqn.imr_address) and an interface index (ip_mreqn's
/// imr_ifindex, IPV6_MULTICAST_IF, ipv6_mreq.ipv6mr_interface, group_source_req.gsr_interface;
/// RFC 3493 section 5.2, RFC 3678 section 5). Without an index a host with several interfaces
/// sends and joins where the routing table says, whatever the operator configured
/// (docs/design-notes.md "Interfaces and source-specific multicast").
///
/// Parsing (parse_interface) and resolution against a given table (resolve_interface with a
/// table) are pure; list_interfaces reads the host's table with getifaddrs(3).

#include "common/endpoint.hpp"

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist::net {

/// Longest interface name, bytes: the kernel's IFNAMSIZ (16) less its terminating NUL.
inline constexpr std::size_t max_interface_name = 15;

/// An interface as configured: nothing (the kernel's routes decide, as a socket does by
/// default), an address, or an interface name.
struct interface_spec {
  std::optional<endpoint> address;  ///< set when configured by address (port 0)
  std::string name;                 ///< set when configured by name

  /// Neither: the wildcard address and no index.
  bool any() const noexcept { return !address && name.empty(); }
  /// As the operator wrote it ("eth1", "10.0.0.7"; "any" when unset), for messages.
  std::string to_string() const;

  bool operator==(const interface_spec&) const = default;
};

/// Parses an `interface` setting: an IPv4 or IPv6 address, or an interface name as the kernel
/// accepts one (1 to max_interface_name bytes, not "." or "..", no '/', ':' or white space).
/// Empty text is interface_spec{} (any). A text of digits and dots only is taken for a
/// mistyped IPv4 address, not a name.
/// @return std::nullopt when the text is neither
std::optional<interface_spec> parse_interface(std::string_view text);

/// One interface of the host: what getifaddrs(3) and if_nametoindex(3) say of it.
struct local_interface {
  std::string name;
  unsigned index = 0;  ///< if_nametoindex; 0 when the kernel gave none
  /// Its addresses with their prefix lengths, in the order the kernel lists them (for IPv4
  /// the primary address first).
  struct address_entry {
    endpoint address;
    unsigned prefix = 0;  ///< bits of the netmask
  };
  std::vector<address_entry> addresses;
};

/// What a socket needs to use the configured interface.
struct resolved_interface {
  /// A local address of the family asked for, port 0; the wildcard (0.0.0.0 or ::) when the
  /// interface was not configured.
  endpoint address;
  /// Interface index; 0 when none was configured, or when an IPv4 address was configured that
  /// the table does not hold (the kernel then finds the device by the address, as before
  /// interfaces could be named: 127.0.0.2 is on lo through its /8).
  unsigned index = 0;
  std::string name;  ///< the interface's name; empty when index is 0

  /// "eth1 (10.0.0.7, index 3)", "10.0.0.7", "any": for logs.
  std::string to_string() const;
};

/// An interface that cannot be used as configured: the message says why.
class interface_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Resolves `spec` for sockets of the family `v6` against `table` (pure):
///  - any: the wildcard address of the family, index 0;
///  - an address: it must be of the family and not IPv6 link-local (see below); the
///    wildcard resolves as `any`; otherwise the
///    interface that holds exactly this address gives its index and name. An IPv4 address
///    that none holds takes the index of the interface whose prefix contains it (127.0.0.2 on
///    lo), else index 0 (the kernel's own lookup by address decides, and binding it fails
///    where it is not local). An IPv6 address that no interface holds is an error (it could
///    not be bound);
///  - a name: the interface must exist and hold an address of the family: IPv4, its first
///    (primary) address; IPv6, its first address of global scope (unique-local included),
///    never a link-local one: an endpoint here carries no scope id, so a link-local source
///    could not be replied to (docs/design-notes.md "IPv6 scope").
/// @throws interface_error naming the interface and the problem
resolved_interface resolve_interface(const interface_spec& spec, bool v6,
                                     const std::vector<local_interface>& table);

/// The host's interfaces (getifaddrs(3) grouped by name, if_nametoindex(3) for the index).
/// @throws std::system_error when getifaddrs fails
std::vector<local_interface> list_interfaces();

/// resolve_interface against list_interfaces(); `any` without reading the table.
/// @throws interface_error, std::system_error
resolved_interface resolve_interface(const interface_spec& spec, bool v6);

}  // namespace mcdist::net
