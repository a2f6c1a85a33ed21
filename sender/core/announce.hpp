#pragma once
/// @file
/// A session's announce (docs/architecture.md "Data flow in one session", step 1): the session
/// parameters and the manifest, cut into chunks that each fit one control datagram
/// (wire::control_budget), and the schedule that repeats them while registration is open: two
/// cycles back to back at the start, then a cycle every announce interval plus a jitter of up to
/// 1/8 of it, so that many senders do not synchronise (Floyd & Jacobson, "The Synchronization of
/// Periodic Routing Messages", 1994). Pure: the session passes the time and draws from its own
/// seeded generator; sealing an encrypted session's bodies is the shell's work (common/auth.hpp),
/// for which the chunks leave room.

#include "common/endpoint.hpp"
#include "common/ids.hpp"
#include "common/manifest.hpp"
#include "common/time.hpp"
#include "common/transport.hpp"
#include "common/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mcdist::wire {
class announce;
}

namespace mcdist::sender {

/// session_params.unicast_start: where a site of a session served over unicast from the start
/// connects while it registers (docs/design-notes.md "Unicast fallback").
struct unicast_start_settings {
  transport_kind transport = transport_kind::sctp_udp;
  endpoint server;                ///< the unicast server; an unspecified address: the sender's
  std::uint32_t connections = 0;  ///< TCP connections; 0 = the receiver's default
};

/// What an announce says besides the manifest: sender_config's fields (sender_session.hpp).
struct announce_settings {
  std::uint32_t block_size = 1400;  ///< payload bytes per data datagram
  std::uint64_t rate_bps = 0;       ///< multicast rate, bit/s; 0 = unpaced
  std::uint32_t max_passes = 0;
  bool closed_group = false;                ///< the sender waits for a list of receivers
  std::string sender_name;                  ///< for receivers' logs; cut to 64 bytes
  std::vector<std::string> only_receivers;  ///< resend: only these take part
  std::string channel;                      ///< empty: unsequenced
  std::uint64_t channel_seq = 0;            ///< 0: unsequenced
  /// A catch-up session's ranges of the channel's sequence numbers, inclusive.
  std::vector<wire::seq_span> catch_up_seqs;
  /// Parity repairs (session_params.fec_*, common/fec/fec_layout.hpp): sources per FEC block, 0 for
  /// none (the three fields are then left out); parity indexes per FEC block; interleaving depth.
  std::uint32_t fec_k = 0;
  std::uint32_t fec_max_parity = 0;
  std::uint32_t fec_depth = 1;
  /// Silent session (session_params.silent_passes): passes it sends; 0 for a normal session.
  std::uint32_t silent_passes = 0;
  /// Block digests (session_params.block_digests): the session's data and parity are version 3,
  /// checked against signed block digests (docs/security.md "Block digests").
  bool block_digests = false;
  /// A session served over unicast from the start: its unicast server (unset: sites connect
  /// when their FALLBACK order arrives).
  std::optional<unicast_start_settings> unicast_start;
  /// session_params.created_unix_ms: when the session was made, Unix ms (0: not stamped).
  std::uint64_t created_unix_ms = 0;
  /// Bytes each chunk leaves unused below wire::control_budget for what the shell adds to its
  /// body (auth::sealed_body_overhead in an encrypted session).
  std::uint32_t reserve_bytes = 0;
};

/// Encoded session parameters beyond this many bytes leave too little room for manifest entries
/// in a chunk (an only_receivers list of hundreds of ids); refused at start-up.
inline constexpr std::size_t max_announce_params_bytes = 700;

/// Cuts the manifest into announce chunks: entries in order, each chunk filled while its
/// datagram (header, parameters, chunk, first_file and timestamp fields at their largest,
/// entries) stays within wire::control_budget - reserve_bytes; a chunk holds at least one
/// entry, and an empty manifest is one chunk without entries. Every chunk carries the same
/// parameters with manifest_chunks set and grtt_us 0 (filled per send).
/// @param s      the parameters; validated by the session (channel, ranges, receiver ids)
/// @param files  the manifest; entries without a digest are announced without one
/// @return chunks 0..n-1, n >= 1, chunk and first_file set
/// @throws std::invalid_argument when the parameters exceed max_announce_params_bytes (the
///         operator named too many receivers)
std::vector<std::unique_ptr<wire::announce>> build_announce_chunks(
    const announce_settings& s, const std::vector<manifest_entry>& files);

/// The announce chunks of one session and when each goes out.
class announcer {
 public:
  /// Cycles sent back to back at the start: a receiver that lost a chunk of the first has it
  /// again at once instead of an announce interval later (two cycles of 1e-3 loss leave a
  /// 430-chunk manifest incomplete with probability 4e-4, one cycle with 0.35).
  static constexpr std::uint32_t initial_cycles = 2;

  /// No chunks: a placeholder until the session has checked its configuration.
  announcer();
  /// @param s         see build_announce_chunks (which may throw std::invalid_argument)
  /// @param files     the manifest
  /// @param interval  between cycles after the initial ones (core-clock duration)
  announcer(const announce_settings& s, const std::vector<manifest_entry>& files,
            duration interval);
  announcer(announcer&&) noexcept;
  announcer& operator=(announcer&&) noexcept;
  ~announcer();

  /// Chunks in one cycle.
  std::size_t chunks() const noexcept { return m_chunks.size(); }
  /// Chunk `i` (< chunks()) as built; sender_time_us and grtt_us are those of its last send.
  const wire::announce& chunk(std::size_t i) const { return *m_chunks[i]; }

  /// The first cycle starts at `now`, from chunk 0.
  void start(time_point now) noexcept {
    m_next_cycle = now;
    m_next_chunk = 0;
  }
  /// A chunk is due at `now`: a cycle is under way, or the next cycle's time has come.
  bool due(time_point now) const noexcept { return m_next_chunk > 0 || now >= m_next_cycle; }
  /// When the next cycle starts (while no cycle is under way).
  time_point next_cycle() const noexcept { return m_next_cycle; }
  /// The chunk that goes out next, < chunks().
  std::size_t next_chunk() const noexcept { return m_next_chunk; }
  /// Cycles sent in full.
  std::uint32_t cycles() const noexcept { return m_cycles; }
  /// The initial back-to-back cycles are out (pass 1 may follow them).
  bool initial_cycles_sent() const noexcept { return m_cycles >= initial_cycles; }

  /// Sends the due chunk: stamps it with `now` and the GRTT, encodes it and moves to the next.
  /// After the last chunk of a cycle past the initial ones, the next cycle is due interval +
  /// jitter after `now`, the jitter uniform in [0, interval / 8) from one draw of `random`
  /// (none when the interval is 8 clock ticks or less).
  /// @param session  the session id of the datagram's header
  /// @param grtt     the sender's GRTT estimate, announced in microseconds
  /// @param random   callable returning a uniformly random std::uint64_t (the session's seeded
  ///                 generator, shared with its other draws)
  /// @return the datagram: wire header + announce
  template <class Random>
  std::vector<std::byte> send_next(time_point now, session_id session, duration grtt,
                                   Random&& random) {
    std::vector<std::byte> out = encode_next(now, session, grtt);
    if (++m_next_chunk < m_chunks.size()) return out;
    m_next_chunk = 0;
    if (++m_cycles < initial_cycles) return out;  // the next cycle follows at once
    const duration::rep eighth = m_interval.count() / 8;
    const duration jitter =
        m_interval.count() > 8
            ? duration(static_cast<duration::rep>(random() % static_cast<std::uint64_t>(eighth)))
            : duration::zero();
    m_next_cycle = now + m_interval + jitter;
    return out;
  }

 private:
  /// The due chunk stamped with `now` and `grtt`, encoded.
  std::vector<std::byte> encode_next(time_point now, session_id session, duration grtt);

  std::vector<std::unique_ptr<wire::announce>> m_chunks;
  duration m_interval{};
  time_point m_next_cycle{};
  std::size_t m_next_chunk = 0;
  std::uint32_t m_cycles = 0;
};

}  // namespace mcdist::sender
