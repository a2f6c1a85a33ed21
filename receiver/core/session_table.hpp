#pragma once
/// @file
/// The receiver's session table: the sessions it tracks, by id, and the ids of sessions that
/// ended here (or were not for it), remembered until they expire so that their late datagrams
/// are dropped quietly as stale instead of opening them again. It also answers the admission
/// question of a new announce: are there slots left, in all and from its source host
/// (docs/design-notes.md "Budgets")? Pure bookkeeping; the engine decides when a session opens
/// and ends.

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "common/ids.hpp"
#include "common/time.hpp"

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mcdist::receiver {

/// Ids of ended sessions with their expiry, the oldest forgotten first past a cap.
class tombstone_list {
 public:
  /// @param max  most ids remembered (receiver_config::max_tombstones; 4096 ids and expiry
  ///             times: about 200 KB)
  explicit tombstone_list(std::size_t max) noexcept : m_max(max) {}

  /// Remembers `id` until `until` (again: the later expiry replaces the earlier one). Past the
  /// cap the oldest added is forgotten.
  void add(session_id id, time_point until);
  /// True while `id` is remembered (added and not expired or evicted).
  bool contains(session_id id) const noexcept { return m_until.count(id) > 0; }
  /// Forgets every id whose expiry is at or before `now`.
  void expire(time_point now);
  std::size_t size() const noexcept { return m_until.size(); }

 private:
  std::size_t m_max;
  std::unordered_map<session_id, time_point> m_until;
  /// Ids in the order they were added, for evicting the oldest past m_max (an id may appear
  /// more than once; stale entries are skipped).
  std::deque<std::pair<session_id, time_point>> m_order;
};

/// What the table needs of a session: the host it came from and its channel.
template <class Session>
concept table_session = requires(const Session& s) {
  { s.sender } -> std::convertible_to<const endpoint&>;
  { s.channel } -> std::convertible_to<std::uint32_t>;
};

/// Sessions by id, in id order, and the tombstones of ended ones. Not thread-safe (the
/// engine's single thread owns it). `Session` may be incomplete where the table is declared (a
/// class's private nested type); it must be a table_session where the table is used.
template <class Session>
class session_table {
 public:
  /// @param max_tombstones  tombstone_list's cap
  explicit session_table(std::size_t max_tombstones) noexcept : m_tombstones(max_tombstones) {}

  /// The session `id`, or nullptr when none is tracked.
  Session* find(session_id id) noexcept {
    const auto it = m_sessions.find(id);
    return it == m_sessions.end() ? nullptr : it->second.get();
  }
  const Session* find(session_id id) const noexcept {
    const auto it = m_sessions.find(id);
    return it == m_sessions.end() ? nullptr : it->second.get();
  }
  /// Tracks `s` as session `id` (none is tracked by that id). @return the session
  Session& insert(session_id id, std::unique_ptr<Session> s) {
    Session& ref = *s;
    m_sessions.emplace(id, std::move(s));
    return ref;
  }
  /// Stops tracking session `id` and remembers it as ended until `until`.
  void retire(session_id id, time_point until) {
    m_tombstones.add(id, until);
    m_sessions.erase(id);
  }
  /// Remembers `id`, never tracked, as not for this receiver until `until` (a resend for other
  /// receivers, a refused replay).
  void tombstone(session_id id, time_point until) { m_tombstones.add(id, until); }
  /// True while `id` ended here (or was not for us) and has not expired.
  bool ended(session_id id) const noexcept { return m_tombstones.contains(id); }
  /// Why a datagram of session `id`, which is not tracked, is dropped: errc::stale for an
  /// ended session, errc::unknown_session otherwise.
  errc untracked_reason(session_id id) const noexcept {
    return ended(id) ? errc::stale : errc::unknown_session;
  }
  /// Forgets the tombstones that expired at `now`.
  void expire(time_point now) { m_tombstones.expire(now); }

  /// True when a new session from `from` fits: fewer than `max_sessions` tracked in all and
  /// fewer than `max_per_source` from its host (receiver_config::max_sessions,
  /// max_sessions_per_source).
  bool admits(const endpoint& from, std::uint32_t max_sessions,
              std::uint32_t max_per_source) const noexcept {
    static_assert(table_session<Session>);
    if (m_sessions.size() >= max_sessions) return false;
    const auto here = std::count_if(m_sessions.begin(), m_sessions.end(), [&](const auto& kv) {
      return same_host(kv.second->sender, from);
    });
    return static_cast<std::uint64_t>(here) < max_per_source;
  }
  /// Sessions tracked that came on `channel`.
  std::size_t on_channel(std::uint32_t channel) const noexcept {
    static_assert(table_session<Session>);
    return static_cast<std::size_t>(
        std::count_if(m_sessions.begin(), m_sessions.end(),
                      [channel](const auto& kv) { return kv.second->channel == channel; }));
  }
  /// Every session tracked now, in id order: a list that stays valid while the caller retires
  /// some of them (each pointer until its own session is retired).
  std::vector<Session*> snapshot() const {
    std::vector<Session*> list;
    list.reserve(m_sessions.size());
    for (const auto& [id, s] : m_sessions) list.push_back(s.get());
    return list;
  }

  std::size_t size() const noexcept { return m_sessions.size(); }
  std::size_t tombstones() const noexcept { return m_tombstones.size(); }
  /// Iteration in id order over (id, owning pointer) pairs.
  auto begin() noexcept { return m_sessions.begin(); }
  auto end() noexcept { return m_sessions.end(); }
  auto begin() const noexcept { return m_sessions.cbegin(); }
  auto end() const noexcept { return m_sessions.cend(); }

 private:
  std::map<session_id, std::unique_ptr<Session>> m_sessions;
  tombstone_list m_tombstones;
};

}  // namespace mcdist::receiver
