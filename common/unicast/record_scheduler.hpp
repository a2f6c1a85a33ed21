#pragma once
/// @file
/// Cuts a session's pending requests into records and decides which record goes next (pure;
/// no I/O). Up to `max_active` requests are served at once, round robin, one record each in
/// turn, so a small file is not stuck behind a large one and records of many files interleave:
/// on SCTP each active file feeds its own stream (Ladha & Amer's multistreamed, pipelined FTP,
/// section 5.3); over TCP the records go to whichever connection can take them (XFTP).

#include "common/unicast/types.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace mcdist::unicast {

class record_scheduler {
 public:
  /// @param record_size largest record payload, bytes (> 0)
  /// @param max_active  requests served round robin at once (>= 1)
  /// @param tail_spread connections the records are spread over (multi-socket TCP), or 0/1
  ///        when one transport carries them all (SCTP). With n > 1 the last bytes of the
  ///        session go out in shrinking records, each at most pending_bytes() / (4 n) and at
  ///        least min_tail_record, so the n connections run dry within a small record of one
  ///        another instead of one connection carrying the last full records alone at its
  ///        share of the link (measured on the Allman et al. satellite path:
  ///        tests/bench/fallback_bench.py, docs/benchmarks.md).
  record_scheduler(std::uint32_t record_size, std::size_t max_active, std::size_t tail_spread = 0);

  /// Queues a request (already validated: length > 0, inside its file), after the others.
  void push(const byte_range& r);

  /// Smallest record cut at the tail of a spread session, bytes (Allman et al.'s 8 KB records
  /// halved: on a 1.5 Mbit/s link cut 8 ways it is 0.17 s of one connection's share).
  static constexpr std::uint32_t min_tail_record = 4096;

  /// The next record to send, or std::nullopt when nothing is pending. Records of one request
  /// come in increasing offset order and are at most record_size; without a tail spread they
  /// are cut at multiples of record_size from the request's start, with one they shrink at the
  /// tail (see the constructor).
  std::optional<record> next();

  /// True when no byte is pending.
  bool empty() const noexcept { return m_active.empty() && m_waiting.empty(); }
  /// Requests not yet finished (active + waiting).
  std::size_t pending_requests() const noexcept { return m_active.size() + m_waiting.size(); }
  /// Bytes not yet handed out by next().
  std::uint64_t pending_bytes() const noexcept { return m_pending_bytes; }
  /// Drops everything pending.
  void clear() noexcept;

 private:
  std::uint32_t m_record_size;
  std::size_t m_max_active;
  std::size_t m_tail_spread;
  std::vector<byte_range> m_active;  ///< offset/length = what is left of each
  std::deque<byte_range> m_waiting;
  std::size_t m_cursor = 0;  ///< next active request to serve
  std::uint64_t m_pending_bytes = 0;
};

}  // namespace mcdist::unicast
