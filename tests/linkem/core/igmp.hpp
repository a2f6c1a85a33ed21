// IGMP snooping: which emulated host listens to which multicast group.
//
// The hosts' kernels announce their group memberships on their TUN device with IGMP
// (RFC 2236 for version 2, RFC 3376 for version 3; Linux sends unsolicited v3 reports
// when no querier is present). The forwarder reads those reports like an IGMP-snooping
// switch (RFC 4541) and delivers a group's traffic only to hosts that joined it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace mcdist::linkem {

/// IGMP message types (RFC 3376 §4, RFC 2236 §2.1).
inline constexpr std::uint8_t k_igmp_query = 0x11;
inline constexpr std::uint8_t k_igmp_v1_report = 0x12;
inline constexpr std::uint8_t k_igmp_v2_report = 0x16;
inline constexpr std::uint8_t k_igmp_v2_leave = 0x17;
inline constexpr std::uint8_t k_igmp_v3_report = 0x22;

/// Most group records read from one IGMPv3 report. A 1500-byte report holds at most
/// (1500 - 24 - 8) / 8 = 183 records without sources; the limit bounds the work one
/// malformed report can cause.
inline constexpr std::size_t k_max_igmp_records = 256;

/// A host's change of interest in one group.
struct membership_change {
  std::uint32_t group = 0;  ///< multicast address, host byte order
  bool join = false;        ///< true: now listening; false: left
};

enum class igmp_result : std::uint8_t {
  ok,         ///< a report or leave; changes appended (possibly none)
  ignored,    ///< a query or another type that carries no membership
  malformed,  ///< too short, bad checksum, inconsistent record lengths
};

/// Parses one IGMP message (the IP payload, starting at the IGMP type byte).
///
/// Version 3 record semantics, ignoring source filtering (we deliver a group's traffic
/// from every source to a host that wants any source of it, which over-delivers for
/// source-specific joins, never under-delivers):
///  - MODE_IS_EXCLUDE, CHANGE_TO_EXCLUDE: join (an exclude list wants all other sources);
///  - MODE_IS_INCLUDE, CHANGE_TO_INCLUDE with no sources: leave;
///  - MODE_IS_INCLUDE, CHANGE_TO_INCLUDE, ALLOW_NEW_SOURCES with sources: join;
///  - BLOCK_OLD_SOURCES: no change.
/// Records for non-multicast addresses are skipped.
/// @param message IGMP bytes; its checksum (RFC 1071 over the message) is verified
/// @param changes receives the membership changes, in message order
igmp_result parse_igmp(std::span<const std::byte> message, std::vector<membership_change>& changes);

/// Group memberships of the emulated hosts, as learnt from their IGMP messages.
class membership_table {
 public:
  /// Applies one change for host index `host`. Idempotent.
  void apply(std::size_t host, const membership_change& change);

  /// Hosts (ascending indexes) that joined `group`; empty if none.
  [[nodiscard]] std::span<const std::uint16_t> members(std::uint32_t group) const noexcept;

  /// Number of groups with at least one member.
  [[nodiscard]] std::size_t group_count() const noexcept { return m_groups.size(); }

 private:
  std::unordered_map<std::uint32_t, std::vector<std::uint16_t>> m_groups;
};

}  // namespace mcdist::linkem
