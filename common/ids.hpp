#pragma once
/// @file
/// Strong typedefs for the identifiers and indexes that must never mix (after libtorrent's
/// strong_typedef<std::int32_t, piece_index_tag>): a file index is not a block index, a pass
/// number is not a session id.

#include <fmt/format.h>

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <string_view>

namespace mcdist {

/// A value of type T that only compares and converts explicitly. `Tag` makes distinct types.
template <class T, class Tag>
struct strong_id {
  T value{};

  constexpr strong_id() = default;
  constexpr explicit strong_id(T v) : value(v) {}
  constexpr auto operator<=>(const strong_id&) const = default;
  constexpr strong_id& operator++() {
    ++value;
    return *this;
  }
};

/// 32-bit session identifier chosen at random by the sender (docs/architecture.md "Vocabulary").
/// Its text form, in logs, file names, journals and status pages, is 8 lower-case hex digits,
/// written by the fmt formatter below and nowhere else: fmt::format("session {}", id).
using session_id = strong_id<std::uint32_t, struct session_id_tag>;
/// Index of a file in a session's manifest, 0-based.
using file_index = strong_id<std::uint32_t, struct file_index_tag>;
/// Index of a block within one file, 0-based; block b covers bytes [b*block_size,
/// (b+1)*block_size).
using block_index = strong_id<std::uint32_t, struct block_index_tag>;

/// Secret that lets one receiver fetch one session's remainder over the unicast fallback
/// (docs/design-notes.md "Unicast fallback"): 128 bits from the kernel's CSPRNG (getrandom), so
/// neither guessing nor predicting one from another is possible; all zero is not a valid token. In
/// a signed session knowing it is not enough: the connection must also prove the site's pairwise
/// key (common/unicast/hello_proof.hpp).
using fallback_token = std::array<std::uint8_t, 16>;

/// Serial-number comparison of 32-bit sequence numbers (RFC 1982 section 3.2): true when `a`
/// is after `b`, valid while the two are less than 2^31 apart.
constexpr bool seq_after(std::uint32_t a, std::uint32_t b) noexcept {
  return a != b && static_cast<std::uint32_t>(a - b) < 0x80000000u;
}

}  // namespace mcdist

template <class T, class Tag>
struct std::hash<mcdist::strong_id<T, Tag>> {
  std::size_t operator()(const mcdist::strong_id<T, Tag>& id) const noexcept {
    return std::hash<T>{}(id.value);
  }
};

/// A session id as 8 lower-case hex digits ("0000abcd"): fmt::format("{}", id). Format
/// specifications apply to the text (e.g. "{:>10}").
template <>
struct fmt::formatter<mcdist::session_id> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(mcdist::session_id id, FormatContext& ctx) const {
    static constexpr char digits[] = "0123456789abcdef";
    char text[8];
    for (int i = 0; i < 8; ++i) text[i] = digits[(id.value >> (28 - 4 * i)) & 0xfu];
    return fmt::formatter<std::string_view>::format(std::string_view(text, sizeof text), ctx);
  }
};
