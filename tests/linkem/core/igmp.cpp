#include "tests/linkem/core/igmp.hpp"

#include <algorithm>

#include "common/byte_order.hpp"
#include "tests/linkem/core/packet.hpp"

namespace mcdist::linkem {
namespace {

constexpr std::size_t k_igmp_v2_size = 8;
constexpr std::size_t k_igmp_v3_report_header = 8;
constexpr std::size_t k_igmp_v3_record_header = 8;

constexpr std::uint8_t k_mode_is_include = 1;
constexpr std::uint8_t k_mode_is_exclude = 2;
constexpr std::uint8_t k_change_to_include = 3;
constexpr std::uint8_t k_change_to_exclude = 4;
constexpr std::uint8_t k_allow_new_sources = 5;
constexpr std::uint8_t k_block_old_sources = 6;

}  // namespace

igmp_result parse_igmp(std::span<const std::byte> message,
                       std::vector<membership_change>& changes) {
  if (message.size() < k_igmp_v2_size) {
    return igmp_result::malformed;
  }
  if (checksum_fold(checksum_add(0, message)) != 0xFFFF) {
    return igmp_result::malformed;
  }
  const auto type = std::to_integer<std::uint8_t>(message[0]);
  switch (type) {
    case k_igmp_v1_report:
    case k_igmp_v2_report:
    case k_igmp_v2_leave: {
      const std::uint32_t group = load_be32(&message[4]);
      if (!is_multicast(group)) {
        return igmp_result::malformed;
      }
      changes.push_back({group, type != k_igmp_v2_leave});
      return igmp_result::ok;
    }
    case k_igmp_v3_report: {
      if (message.size() < k_igmp_v3_report_header) {
        return igmp_result::malformed;
      }
      const std::size_t records = load_be16(&message[6]);
      if (records > k_max_igmp_records) {
        return igmp_result::malformed;
      }
      std::size_t pos = k_igmp_v3_report_header;
      const std::size_t first_change = changes.size();
      for (std::size_t i = 0; i < records; ++i) {
        if (pos + k_igmp_v3_record_header > message.size()) {
          changes.resize(first_change);
          return igmp_result::malformed;
        }
        const auto record_type = std::to_integer<std::uint8_t>(message[pos]);
        const std::size_t aux_words = std::to_integer<std::size_t>(message[pos + 1]);
        const std::size_t sources = load_be16(&message[pos + 2]);
        const std::uint32_t group = load_be32(&message[pos + 4]);
        const std::size_t record_size = k_igmp_v3_record_header + sources * 4 + aux_words * 4;
        if (pos + record_size > message.size()) {
          changes.resize(first_change);
          return igmp_result::malformed;
        }
        pos += record_size;
        if (!is_multicast(group)) {
          continue;
        }
        switch (record_type) {
          case k_mode_is_exclude:
          case k_change_to_exclude: changes.push_back({group, true}); break;
          case k_mode_is_include:
          case k_change_to_include: changes.push_back({group, sources > 0}); break;
          case k_allow_new_sources:
            if (sources > 0) {
              changes.push_back({group, true});
            }
            break;
          case k_block_old_sources: break;
          default: break;  // unknown record types are skipped (RFC 3376 §4.2.12)
        }
      }
      return igmp_result::ok;
    }
    default: return igmp_result::ignored;
  }
}

void membership_table::apply(std::size_t host, const membership_change& change) {
  const auto h = static_cast<std::uint16_t>(host);
  if (change.join) {
    auto& hosts = m_groups[change.group];
    const auto it = std::lower_bound(hosts.begin(), hosts.end(), h);
    if (it == hosts.end() || *it != h) {
      hosts.insert(it, h);
    }
    return;
  }
  const auto g = m_groups.find(change.group);
  if (g == m_groups.end()) {
    return;
  }
  auto& hosts = g->second;
  const auto it = std::lower_bound(hosts.begin(), hosts.end(), h);
  if (it != hosts.end() && *it == h) {
    hosts.erase(it);
  }
  if (hosts.empty()) {
    m_groups.erase(g);
  }
}

std::span<const std::uint16_t> membership_table::members(std::uint32_t group) const noexcept {
  const auto g = m_groups.find(group);
  if (g == m_groups.end()) {
    return {};
  }
  return g->second;
}

}  // namespace mcdist::linkem
