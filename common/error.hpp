#pragma once
/// @file
/// The project's error codes (std::error_code with an mcdist category, like Boost.Beast's
/// http/error.hpp). Every reason a datagram is dropped is one of these, so the drop counters
/// are indexed by them too.

#include <array>
#include <cstdint>
#include <string_view>
#include <system_error>

namespace mcdist {

/// Why something from the network or the filesystem was refused.
enum class errc : std::uint8_t {
  ok = 0,
  // Datagram framing (checked in this order, after docs/architecture.md "House style").
  truncated,      ///< shorter than the fixed header, or than a declared length
  bad_magic,      ///< first two bytes are not the mcdist magic
  bad_version,    ///< protocol version this build does not speak
  unknown_type,   ///< message type byte not defined
  oversized,      ///< larger than the limit for its type
  bad_protobuf,   ///< control payload failed to parse
  invalid_field,  ///< a parsed value is out of range (index past end, bad size, ...)
  // Session routing.
  unknown_session,  ///< data or control for a session this receiver does not know
  wrong_source,     ///< datagram for a known session from another source address
  not_registered,   ///< message from a receiver id the sender does not have registered
  stale,            ///< message for an earlier pass or answered state; harmless
  duplicate,        ///< block already held
  // Manifest paths (docs/architecture.md "Data flow in one session").
  path_empty,
  path_absolute,
  path_dot_dot,
  path_empty_component,
  path_control_char,
  path_too_long,
  path_component_too_long,
  path_too_deep,
  path_conflict,  ///< two manifest entries map to the same file, or a file and a directory
  // Files.
  file_too_large,
  digest_mismatch,  ///< received file does not hash to the manifest's SHA-256
  storage_full,     ///< the write buffer pool is full; the block is dropped and will be NAKed
  registration_closed,
  not_in_group,
  cancelled,
  // Budgets (an unverified datagram costs bounded memory and disk).
  over_budget,        ///< the session's or the daemon's memory budget cannot cover the state
  too_many_sessions,  ///< the daemon's or this source's session limit is reached
  wrong_socket,       ///< an announce arrived on the unicast reply socket, not a channel
  out_of_memory,      ///< an allocation failed while handling a datagram; it was dropped
  disk_reserve,       ///< storing the file would eat into the temp filesystem's free reserve
  quota,              ///< the session's files being written would exceed its disk quota
  // Authentication (common/auth.hpp).
  unauthenticated,  ///< not authenticated as required: no trailer, bad signature or tag, no key
  // Added later, kept last so the earlier codes keep their numbers.
  path_not_utf8,  ///< a manifest path that is not valid UTF-8 (RFC 3629)
  // Freshness of signed sessions (common/replay_guard.hpp).
  replayed,    ///< a signed session this site has already seen: a replay
  expired,     ///< a signed session stamped longer ago than the site's max_session_age
  clock_skew,  ///< a signed session stamped ahead of the site's clock by more than max_clock_skew
  unstamped,   ///< a signed session whose announce carries no timestamp (an older sender)
  replay_cache_unwritable,  ///< the site cannot make its replay cache durable: fails closed
  count_                    ///< number of codes; not an error
};

/// The category of mcdist::errc; name() is "mcdist".
const std::error_category& error_category() noexcept;

/// Makes errc usable as std::error_code.
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// Short stable name of an error, snake_case, as used in counters, logs and JSON.
std::string_view to_string(errc e) noexcept;

/// Counts of refused inputs by reason. Not thread-safe: each network thread owns its own.
struct drop_counters {
  std::array<std::uint64_t, static_cast<std::size_t>(errc::count_)> counts{};

  void add(errc e) noexcept { ++counts[static_cast<std::size_t>(e)]; }
  std::uint64_t operator[](errc e) const noexcept { return counts[static_cast<std::size_t>(e)]; }
  /// Sum over every reason.
  std::uint64_t total() const noexcept;
};

}  // namespace mcdist

template <>
struct std::is_error_code_enum<mcdist::errc> : std::true_type {};
