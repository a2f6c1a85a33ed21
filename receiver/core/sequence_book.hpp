#pragma once
/// @file
/// What a receiving site completed of each channel's numbered sessions (docs/design-notes.md
/// "Session sequence numbers"). A hub numbers the sessions of each channel
/// 1, 2, 3, ... (session_params.channel_seq); a site remembers, per stream, which numbers it
/// completed, and its REGISTER in the next sequenced session names the numbers below that
/// session's it never completed, so the hub can catch it up (LDM's catch-up from the product
/// queue after an outage, EUMETCast's recovery of missed files).
///
/// A stream is (channel name as announced, source): the source is "key:" and the sender's
/// Ed25519 key (crypto::format_public_key) for signed sessions, else "name:" and the sender's
/// name, so two hubs numbering the same channel do not mix.
///
/// Per stream: a floor (every number at or below it was completed or given up), the numbers
/// above it that were completed (at most `window` of them), the highest number seen and the
/// highest completed. Numbers more than `window` below the newest one seen are given up: a
/// site down for longer than `window` sessions reports the newest window of them.
///
/// Pure: no files, no clock. The shell persists serialize()'s text (receiver/io/
/// sequence_store.hpp) whenever changes() moves.
///
/// Text format, version 1 (strict: anything else is refused whole):
///
///     mcdist-sequences 1
///     CHANNEL SOURCE FLOOR LAST_SEEN LAST_COMPLETED DONE
///
/// one line per stream, least recently used first; numbers in decimal without sign or leading
/// zeros; DONE is "-" or the completed numbers above FLOOR, ascending, comma-separated.

#include "common/error.hpp"
#include "common/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mcdist::receiver {

/// What a sequenced REGISTER carries (register_request.last_seq / missing_seqs).
struct sequence_report {
  /// Highest number of the stream this site completed; 0 = none.
  std::uint64_t last_seq = 0;
  /// Numbers below the session's own that were never completed, ascending, inclusive ranges,
  /// the oldest wire::max_seq_ranges of them.
  std::vector<wire::seq_span> missing;
  /// The stream was unknown: numbering starts at this session, nothing is missing.
  bool created = false;
  /// The number went backwards past what was completed (the hub's journal was reset): the
  /// stream's state was started over at this session. The caller logs a warning.
  bool reset = false;
  /// The stream's highest number seen before this session (for the reset warning).
  std::uint64_t previous_seen = 0;
};

/// One stream, for status pages and metrics.
struct sequence_status {
  std::string channel;
  std::string source;
  std::uint64_t last_seen = 0;       ///< highest number announced
  std::uint64_t last_completed = 0;  ///< highest number completed; 0 = none
  std::uint64_t missing = 0;         ///< numbers below last_seen never completed (in the window)
};

/// Completed session numbers of every stream this site has seen. Not thread-safe.
class sequence_book {
 public:
  /// Completed numbers remembered above a stream's floor, and how far below the newest
  /// number a gap is still reported: 1024 sessions are 17 hours of a channel batching every
  /// minute, beyond any hub's retention window (24 h of products at a few sessions an hour
  /// for model channels); 1024 numbers of 8 bytes bound a stream's memory.
  static constexpr std::uint64_t window = 1024;
  /// Streams remembered; the least recently used is forgotten beyond (1024 x at most ~10 kB:
  /// an unsigned channel lets any host invent sender names, which must not grow the file
  /// without bound).
  static constexpr std::size_t max_streams = 1024;
  /// Longest source string, bytes (a 64-byte sender name escaped as %XX is 197 bytes).
  static constexpr std::size_t max_source_bytes = 200;
  /// A number at most this far below the floor of a stream that has completed nothing yet is an
  /// older session still under way (a hub runs up to 16 sessions of a channel at once: feed
  /// concurrent_sessions), heard by a site that joined after a newer one started: neither
  /// missed nor a sign that the hub started numbering again.
  static constexpr std::uint64_t concurrent_margin = 16;

  /// The source of a session from its signing key (format_public_key text; empty when
  /// unsigned) and its sender name: "key:KEY", or "name:" and the name with bytes outside
  /// '!'..'~' and '%' written as %XX.
  static std::string source_of(std::string_view signing_key, std::string_view sender_name);
  /// True for a source as source_of makes them: "key:" or "name:", then up to
  /// max_source_bytes in all of '!'..'~' (a key in the text form: no spaces, no newlines).
  static bool valid_source(std::string_view source) noexcept;

  /// A sequenced session of the stream arrived and is about to register.
  /// @param seq  its number, >= 1
  /// @return what its REGISTER carries
  sequence_report on_session(const std::string& channel, const std::string& source,
                             std::uint64_t seq);
  /// A heartbeat of the stream: the hub's newest number is `newest` (>= 1) and `running` are
  /// still being sent. Records `newest` as seen (so a silent site counts what it missed) and
  /// returns what a gap report carries: the numbers in (floor, newest] never completed and not
  /// running, oldest first, at most wire::max_seq_ranges ranges, and last_seq. A stream never
  /// seen is created at `newest` + 1: nothing before a site first hears of a channel is asked
  /// for. A `newest` far below the stream's (a hub that started numbering again) changes
  /// nothing: the next session resets the stream (on_session).
  sequence_report on_heartbeat(const std::string& channel, const std::string& source,
                               std::uint64_t newest, std::span<const wire::seq_span> running);
  /// Every file of the stream's session `seq` was stored or held.
  void on_completed(const std::string& channel, const std::string& source, std::uint64_t seq);
  /// A catch-up session (session_params.catch_up_seqs) completed: its numbers count as
  /// completed. Ranges are clamped to the window; a stream never seen is not created.
  void on_caught_up(const std::string& channel, const std::string& source,
                    std::span<const wire::seq_span> ranges);

  /// Every stream, sorted by channel then source.
  std::vector<sequence_status> status() const;
  /// Streams held.
  std::size_t size() const noexcept { return m_streams.size(); }
  /// Moves on every change of state: the shell saves when it differs from what it saved.
  std::uint64_t changes() const noexcept { return m_changes; }

  /// The state as text (format above).
  std::string serialize() const;
  /// Replaces the state with serialize()'s text.
  /// @return empty, or errc::invalid_field naming nothing more: the text is refused whole and
  ///         the book left empty
  std::error_code parse(std::string_view text);

 private:
  struct stream {
    std::uint64_t floor = 0;  ///< every number <= floor completed or given up
    std::uint64_t last_seen = 0;
    std::uint64_t last_completed = 0;
    std::set<std::uint64_t> done;  ///< completed numbers > floor, <= last_seen
    std::uint64_t used = 0;        ///< m_clock when last used (least recently used goes)
  };
  using key = std::pair<std::string, std::string>;  ///< channel, source

  stream& create(const key& k, std::uint64_t seq);
  void touch(stream& st) noexcept { st.used = ++m_clock; }
  static void normalize(stream& st);

  std::map<key, stream> m_streams;
  std::uint64_t m_clock = 0;
  std::uint64_t m_changes = 0;
};

}  // namespace mcdist::receiver
