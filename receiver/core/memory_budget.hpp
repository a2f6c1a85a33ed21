#pragma once
/// @file
/// Memory the receiver may spend on sessions, charged before it is allocated (budgets before
/// trust: docs/design-notes.md "Budgets"). On a channel that allows unsigned sessions any host
/// can announce one, and a trusted sender's can be large, so what an announce or a block makes
/// the engine allocate (file table, manifest
/// bitmaps, a file's block map) is bounded twice: per session, so one session cannot take
/// everything, and in total, so many sessions cannot either. Pure bookkeeping: it counts bytes
/// the caller says it is about to allocate; the caller allocates only when charge() agrees and
/// releases what it charged when it frees it (all of a session's at once when it closes).
///
/// The idea is libtorrent's per-torrent and session-wide disk-cache quotas and Beast's
/// header_limit_: a limit checked before the allocation, never an allocation that fails late.

#include "common/ids.hpp"

#include <cstdint>
#include <unordered_map>

namespace mcdist::receiver {

/// Per-session and total byte budgets.
class memory_budget {
 public:
  /// @param per_session  most bytes charged to one session
  /// @param total        most bytes charged to all sessions together
  memory_budget(std::uint64_t per_session, std::uint64_t total) noexcept
      : m_per_session(per_session), m_total(total) {}

  /// Charges `bytes` to session `s` if both its budget and the total have room.
  /// @return true when charged; false when either budget would be exceeded (nothing charged)
  bool charge(session_id s, std::uint64_t bytes) {
    auto& mine = m_sessions[s];
    if (bytes > m_per_session - mine || bytes > m_total - m_used) {
      if (mine == 0) m_sessions.erase(s);
      return false;
    }
    mine += bytes;
    m_used += bytes;
    return true;
  }

  /// Gives back `bytes` charged earlier to `s` (at most what it holds).
  void release(session_id s, std::uint64_t bytes) noexcept {
    const auto it = m_sessions.find(s);
    if (it == m_sessions.end()) return;
    const std::uint64_t n = bytes < it->second ? bytes : it->second;
    it->second -= n;
    m_used -= n;
    if (it->second == 0) m_sessions.erase(it);
  }

  /// Gives back everything charged to `s` (the session closed).
  void release_session(session_id s) noexcept {
    const auto it = m_sessions.find(s);
    if (it == m_sessions.end()) return;
    m_used -= it->second;
    m_sessions.erase(it);
  }

  /// Bytes charged to `s`.
  std::uint64_t used(session_id s) const noexcept {
    const auto it = m_sessions.find(s);
    return it == m_sessions.end() ? 0 : it->second;
  }
  /// Bytes charged to all sessions.
  std::uint64_t used() const noexcept { return m_used; }
  std::uint64_t per_session_limit() const noexcept { return m_per_session; }
  std::uint64_t total_limit() const noexcept { return m_total; }

 private:
  std::uint64_t m_per_session;
  std::uint64_t m_total;
  std::uint64_t m_used = 0;
  std::unordered_map<session_id, std::uint64_t> m_sessions;
};

}  // namespace mcdist::receiver
