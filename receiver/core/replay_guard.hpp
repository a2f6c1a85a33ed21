#pragma once
/// @file
/// Freshness of signed sessions at a site (docs/security.md "Freshness"): a site never takes a
/// signed session twice, nor one too old to remember, so a recorded session replayed later
/// (with the hub's source address, its key reply and all) cannot put an older version of a
/// product over a newer one, across restarts.
///
/// The construction is the replay cache of Kerberos (RFC 4120 section 3.2.3: an authenticator
/// is accepted only within the allowed clock skew and only once, the server remembering those
/// it took for as long as they stay acceptable), with the signed timestamp of TUF's timestamp
/// role (metadata older than its expiry is refused): every signed announce carries the sender's
/// wall-clock time when it made the session (session_params.created_unix_ms, under the
/// announce's Ed25519 signature), and a site takes a new signed session only when
///   - it is stamped (errc::unstamped otherwise: an older sender),
///   - its stamp is not older than `max_age` (errc::expired), nor ahead of the site's clock by
///     more than `max_skew` (errc::clock_skew),
///   - and (sender key, session id, stamp) is not in the cache (errc::replayed);
/// a session taken is added to the cache, which keeps each entry until its stamp is older than
/// `max_age` (by then the age check refuses it). The shell keeps the cache in a file, appended
/// and made durable before the session's first file can be stored (receiver/io/replay_store),
/// so a restart forgets nothing.
///
/// Clocks: hub and sites keep UTC with NTP; `max_skew` (5 min by default, Kerberos' usual) is
/// what they may differ by. A site whose clock is off by more refuses every signed session (as
/// clock_skew or expired, logged with the offset) until its clock is fixed: a visible failure,
/// never a silent acceptance.
///
/// Bounds: only sessions whose announce verified under a trusted key reach the cache, so its
/// size is set by the trusted senders' session rate (a busy hub: tens per second, a few
/// megabytes for an hour). Should it reach `max_entries` anyway, the oldest entry goes and the
/// cache's floor rises to its stamp: every session stamped at or before the floor is refused
/// (as expired), so forgetting an entry never lets its replay in.
///
/// Pure: no clock (the wall-clock time is passed in, Unix ms), no file I/O.

#include "common/error.hpp"
#include "common/ids.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

namespace mcdist::receiver {

/// The signed sessions a site took, for the freshness checks of new ones (see the file comment).
class replay_guard {
 public:
  /// Longest accepted sender key text (crypto::format_public_key: 59 bytes).
  static constexpr std::size_t max_key_bytes = 128;

  struct limits {
    /// Oldest session stamp taken, and how long an entry is kept. An hour: longer than any
    /// gap between a session's start and a site first hearing its announce (a hub announces
    /// at once; a session resumed from a checkpoint is not asked again), short enough that
    /// the cache of a busy hub's sessions stays small.
    std::chrono::milliseconds max_age = std::chrono::hours(1);
    /// How far ahead of this site's clock a stamp may be (clocks differing under NTP).
    std::chrono::milliseconds max_skew = std::chrono::minutes(5);
    /// Entries kept at most (see the file comment): 200,000, about 55 sessions a second for
    /// an hour, some 30 MB (a set node, the key's text).
    std::size_t max_entries = 200'000;
  };

  /// One session taken.
  struct entry {
    std::uint64_t stamp_ms = 0;  ///< session_params.created_unix_ms
    session_id session{};
    std::string sender;  ///< the signing key's text (crypto::format_public_key)
    auto operator<=>(const entry&) const = default;
  };

  explicit replay_guard(limits l) : m_limits(l) {}

  /// The verdict on a new signed session, and when it is errc::ok the session is added to the
  /// cache (the caller persists `e`). Expired entries are dropped first.
  /// @param now_ms  this site's wall clock, Unix ms
  /// @return errc::ok, unstamped, expired, clock_skew or replayed
  errc admit(const entry& e, std::uint64_t now_ms);

  /// Adds an entry read back from the cache file (no checks but the age: an entry already
  /// older than max_age is dropped). @return true when kept
  bool restore(const entry& e, std::uint64_t now_ms);

  /// Takes an entry back (its admission could not be made durable).
  void forget(const entry& e) { m_entries.erase(e); }

  /// Drops entries older than max_age at `now_ms`. @return how many
  std::size_t expire(std::uint64_t now_ms);

  std::size_t size() const noexcept { return m_entries.size(); }
  /// Sessions stamped at or before this are refused (0: none): the stamp of the newest entry
  /// evicted for max_entries.
  std::uint64_t floor_ms() const noexcept { return m_floor_ms; }
  /// Raises the floor (restoring it from the file).
  void raise_floor(std::uint64_t ms) noexcept { m_floor_ms = std::max(m_floor_ms, ms); }
  const limits& config() const noexcept { return m_limits; }

  /// The entries, oldest stamp first.
  const std::set<entry>& entries() const noexcept { return m_entries; }

  /// One line of the cache file: "<stamp_ms> <session hex> <sender>\n".
  static std::string encode(const entry& e);
  /// The whole cache as a file's text: a version line ("mcdist-replay 1"), the floor line
  /// ("floor <ms>"), then one line per entry.
  std::string encode() const;
  /// Parses a file's text (encode(), then lines appended by encode(entry)) into `out` (its
  /// limits kept; its entries replaced), dropping entries older than max_age at `now_ms`.
  /// @return empty, or why the text is not a version-1 cache (`out` is then left empty); a
  ///         truncated last line (a crash mid-append) is ignored, not an error
  static std::string decode(std::string_view text, std::uint64_t now_ms, replay_guard& out);

 private:
  limits m_limits;
  std::set<entry> m_entries;  ///< ordered by stamp: expiry and eviction take from the front
  std::uint64_t m_floor_ms = 0;
};

}  // namespace mcdist::receiver
