#include "common/net/interface.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace mcdist::net {

namespace {

/// The kernel's dev_valid_name(): what `ip link` accepts as a name.
bool valid_interface_name(std::string_view s) {
  if (s.empty() || s.size() > max_interface_name || s == "." || s == "..") return false;
  return std::none_of(s.begin(), s.end(), [](char c) {
    return c == '/' || c == ':' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
  });
}

bool is_wildcard(const endpoint& e) {
  return std::all_of(e.addr.begin(), e.addr.begin() + (e.v6 ? 16 : 4),
                     [](std::uint8_t b) { return b == 0; });
}

/// fe80::/10: valid only with the scope (interface) it was given on.
bool is_link_local_v6(const endpoint& e) {
  return e.v6 && e.addr[0] == 0xfe && (e.addr[1] & 0xc0) == 0x80;
}

bool same_address(const endpoint& a, const endpoint& b) {
  return a.v6 == b.v6 &&
         std::equal(a.addr.begin(), a.addr.begin() + (a.v6 ? 16 : 4), b.addr.begin());
}

/// True when `a` lies in `net`/`prefix` (IPv4).
bool in_prefix_v4(const endpoint& a, const endpoint& net, unsigned prefix) {
  if (a.v6 || net.v6 || prefix == 0 || prefix > 32) return false;
  const auto word = [](const endpoint& e) {
    return std::uint32_t{e.addr[0]} << 24 | std::uint32_t{e.addr[1]} << 16 |
           std::uint32_t{e.addr[2]} << 8 | std::uint32_t{e.addr[3]};
  };
  const std::uint32_t mask = prefix == 32 ? ~std::uint32_t{0} : ~(~std::uint32_t{0} >> prefix);
  return (word(a) & mask) == (word(net) & mask);
}

endpoint wildcard(bool v6) {
  endpoint e;
  e.v6 = v6;
  return e;
}

const char* family_name(bool v6) { return v6 ? "IPv6" : "IPv4"; }

}  // namespace

std::string interface_spec::to_string() const {
  if (address) return address->address_string();
  if (!name.empty()) return name;
  return "any";
}

std::optional<interface_spec> parse_interface(std::string_view text) {
  interface_spec s;
  if (text.empty()) return s;
  if (auto a = parse_address(text)) {
    s.address = *a;
    return s;
  }
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return c == '.' || (c >= '0' && c <= '9'); }))
    return std::nullopt;  // "10.0.0.256": an address mistyped, not a name
  if (!valid_interface_name(text)) return std::nullopt;
  s.name = std::string(text);
  return s;
}

std::string resolved_interface::to_string() const {
  if (index == 0) return is_wildcard(address) ? "any" : address.address_string();
  return name + " (" + address.address_string() + ", index " + std::to_string(index) + ")";
}

resolved_interface resolve_interface(const interface_spec& spec, bool v6,
                                     const std::vector<local_interface>& table) {
  resolved_interface r;
  r.address = wildcard(v6);
  if (spec.any()) return r;
  if (spec.address) {
    const endpoint& a = *spec.address;
    if (a.v6 != v6) {
      throw interface_error("interface " + a.address_string() + " is an " + family_name(a.v6) +
                            " address; the group is " + family_name(v6));
    }
    r.address = a;
    r.address.port = 0;
    if (is_wildcard(a)) return r;
    if (is_link_local_v6(a)) {
      throw interface_error("interface " + a.address_string() +
                            " is link-local (fe80::/10): give the interface a global or "
                            "unique-local address, which replies and the unicast fallback can "
                            "reach without a scope");
    }
    for (const auto& itf : table) {
      for (const auto& e : itf.addresses) {
        if (same_address(e.address, a)) {
          r.index = itf.index;
          r.name = itf.name;
          return r;
        }
      }
    }
    if (v6) {
      throw interface_error("interface " + a.address_string() +
                            " is not an address of any interface of this host");
    }
    for (const auto& itf : table) {
      for (const auto& e : itf.addresses) {
        if (in_prefix_v4(a, e.address, e.prefix)) {
          r.index = itf.index;
          r.name = itf.name;
          return r;
        }
      }
    }
    return r;  // the kernel looks the address up itself (and bind says if it is not local)
  }
  const auto it = std::find_if(table.begin(), table.end(),
                               [&](const local_interface& i) { return i.name == spec.name; });
  if (it == table.end() || it->index == 0) {
    throw interface_error("no interface named '" + spec.name + "' on this host");
  }
  const auto& list = it->addresses;
  auto found = std::find_if(list.begin(), list.end(), [&](const local_interface::address_entry& e) {
    return e.address.v6 == v6 && !is_link_local_v6(e.address);
  });
  if (found == list.end()) {
    const bool link_local_only =
        v6 && std::any_of(list.begin(), list.end(), [](const local_interface::address_entry& e) {
          return is_link_local_v6(e.address);
        });
    throw interface_error(
        "interface " + spec.name + " has no " + family_name(v6) + " address" +
        (link_local_only ? " beyond link-local (fe80::/10): give it a global or unique-local one, "
                           "which replies and the unicast fallback can reach without a scope"
                         : ""));
  }
  r.address = found->address;
  r.address.port = 0;
  r.index = it->index;
  r.name = it->name;
  return r;
}

std::vector<local_interface> list_interfaces() {
  ifaddrs* head = nullptr;
  if (::getifaddrs(&head) != 0) {
    throw std::system_error(errno, std::generic_category(), "getifaddrs");
  }
  std::vector<local_interface> out;
  for (const ifaddrs* i = head; i; i = i->ifa_next) {
    if (!i->ifa_name) continue;
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const local_interface& l) { return l.name == i->ifa_name; });
    if (it == out.end()) {
      local_interface l;
      l.name = i->ifa_name;
      l.index = ::if_nametoindex(i->ifa_name);
      out.push_back(std::move(l));
      it = out.end() - 1;
    }
    if (!i->ifa_addr) continue;
    local_interface::address_entry e;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      std::memcpy(e.address.addr.data(), &a->sin_addr, 4);
      if (i->ifa_netmask) {
        const auto* m = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask);
        e.prefix = static_cast<unsigned>(std::popcount(m->sin_addr.s_addr));
      }
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      e.address.v6 = true;
      std::memcpy(e.address.addr.data(), &a->sin6_addr, 16);
      if (i->ifa_netmask) {
        const auto* m = reinterpret_cast<const sockaddr_in6*>(i->ifa_netmask);
        for (const auto b : m->sin6_addr.s6_addr)
          e.prefix += static_cast<unsigned>(std::popcount(b));
      }
    } else {
      continue;  // AF_PACKET: the link itself
    }
    it->addresses.push_back(e);
  }
  ::freeifaddrs(head);
  return out;
}

resolved_interface resolve_interface(const interface_spec& spec, bool v6) {
  if (spec.any() || (spec.address && is_wildcard(*spec.address)))
    return resolve_interface(spec, v6, {});
  return resolve_interface(spec, v6, list_interfaces());
}

}  // namespace mcdist::net
