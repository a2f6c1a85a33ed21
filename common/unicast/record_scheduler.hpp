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
  record_scheduler(std::uint32_t record_size, std::size_t max_active);

  /// Queues a request (already validated: length > 0, inside its file), after the others.
  void push(const file_request& r);

  /// The next record to send, or std::nullopt when nothing is pending. Records of one request
  /// come in increasing offset order; records are at most record_size and cut at multiples of
  /// record_size from the request's start.
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
  std::vector<file_request> m_active;  ///< offset/length = what is left of each
  std::deque<file_request> m_waiting;
  std::size_t m_cursor = 0;            ///< next active request to serve
  std::uint64_t m_pending_bytes = 0;
};

}  // namespace mcdist::unicast
