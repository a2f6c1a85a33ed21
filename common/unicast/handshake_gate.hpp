#pragma once
/// @file
/// Admission of unauthenticated connections to the unicast server (pure: no I/O, no clock).
/// A TCP connection or SCTP association holds a slot from its accept until its hello is
/// handled (or it is closed); until then anyone can hold one by connecting and saying nothing.
/// Under a total limit alone one flooding host could hold every slot and starve the sites, so
/// slots are also limited per source address, and when the total is reached a newcomer takes
/// the slot of the oldest pending handshake of the source holding the most: a host never holds
/// more than its share, and a site's connection gets in while fewer sources than
/// total / per_source flood, or while each of them holds more than the site does
/// (docs/security.md "Unicast fallback").

#include "common/endpoint.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace mcdist::unicast {

/// The part of a peer's address that the per-source limit counts by: the IPv4 address, or
/// the /64 prefix of an IPv6 address (an IPv6 host is commonly given a whole /64 and may use
/// any address in it, RFC 7421 section 1, so counting by /128 would let one host take every
/// slot). An IPv4-mapped IPv6 address (::ffff:a.b.c.d, a dual-stack socket's view of an IPv4
/// peer) counts as its IPv4 address. The port never counts.
struct handshake_source {
  std::array<std::uint8_t, 8> prefix{};  ///< IPv4: the 4 address bytes, then zeros
  bool v6 = false;
  auto operator<=>(const handshake_source&) const = default;
};

/// The source a connection from `peer` is counted under.
handshake_source source_of(const endpoint& peer) noexcept;

/// "192.0.2.7" or "2001:db8:1:2::/64", for logs.
std::string to_string(const handshake_source& s);

/// Limits of a handshake_gate.
struct handshake_limits {
  /// Most pending handshakes of one source; 0 = no per-source limit.
  std::size_t per_source = 0;
  /// Most pending handshakes of all sources together; at least 1.
  std::size_t total = 1;
};

/// The pending handshakes of one server, by source, in the order they were admitted.
class handshake_gate {
 public:
  /// Names one pending handshake; increasing in admission order, never reused, never 0.
  using ticket = std::uint64_t;

  /// What admit() decided.
  struct admission {
    enum class verdict : std::uint8_t {
      admitted,            ///< the new handshake holds a slot: `id`
      refused_per_source,  ///< its source already holds per_source slots: close it
    };
    verdict outcome = verdict::admitted;
    ticket id = 0;  ///< the new handshake's ticket when admitted
    /// When admitted at the total limit: the handshake that gave up its slot, already removed
    /// from the gate; the caller closes its connection (its release() is then a no-op).
    std::optional<ticket> evicted;
    handshake_source evicted_source{};       ///< the evicted handshake's source, for the log
    std::size_t evicted_source_pending = 0;  ///< what that source held before the eviction
  };

  /// @param limits limits.total 0 is taken as 1
  explicit handshake_gate(handshake_limits limits);

  /// Admits a new handshake from `from`: refused when its source holds per_source slots;
  /// otherwise admitted, and when the gate already holds `total`, the oldest handshake of the
  /// source holding the most (of two such sources, the one whose oldest handshake is older,
  /// which may be the newcomer's own) is evicted to make room.
  admission admit(const handshake_source& from);

  /// Ends a handshake (its hello was handled, it timed out or it closed). @return false when
  /// `id` is not pending (already released or evicted): calling it twice is harmless.
  bool release(ticket id);

  /// Pending handshakes, all sources together.
  std::size_t pending() const noexcept { return m_sources_of.size(); }
  /// Pending handshakes of `from`.
  std::size_t pending(const handshake_source& from) const;
  /// Sources with a pending handshake.
  std::size_t sources() const noexcept { return m_by_source.size(); }
  const handshake_limits& limits() const noexcept { return m_limits; }

 private:
  /// Removes `id` of `from` (both indexes).
  void erase(ticket id, const handshake_source& from);

  handshake_limits m_limits;
  ticket m_next = 1;
  /// Each source's pending tickets, oldest first (tickets grow with admission order).
  std::map<handshake_source, std::set<ticket>> m_by_source;
  /// The source of each pending ticket.
  std::map<ticket, handshake_source> m_sources_of;
};

}  // namespace mcdist::unicast
