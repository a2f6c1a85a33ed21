#include "receiver/io/daemon.hpp"

#include <spdlog/spdlog.h>

/// @file
/// The daemon's side of authentication (docs/security.md): the engine's questions about a
/// session's signer and freshness (session_keys, replay_store), and the read of the control
/// socket that session_keys asks for before a datagram whose key is awaited.

namespace mcdist::receiver {

std::string daemon::sender_key(session_id s) { return m_keys->signer(s); }

errc daemon::admit_signed_session(session_id s, std::string_view key,
                                  std::uint64_t created_unix_ms) {
  const auto now_ms = unix_ms_now();
  std::string detail;
  const auto verdict = m_replay->admit({created_unix_ms, s, std::string(key)}, now_ms, detail);
  if (verdict == errc::ok) return verdict;
  if (verdict == errc::replay_cache_unwritable) {
    m_log->error(
        "session {}: refused: {} (a signed session is taken only once its entry in the "
        "replay cache is durable)",
        s, detail);
    return verdict;
  }
  if (!m_stale_sessions_logged.tick()) return verdict;
  const double offset_s =
      (static_cast<double>(created_unix_ms) - static_cast<double>(now_ms)) / 1000.0;
  switch (verdict) {
    case errc::replayed:
      m_log->warn("session {} signed by {}: refused: this site took it already (a replay)", s, key);
      break;
    case errc::unstamped:
      m_log->warn(
          "session {} signed by {}: refused: its announce carries no timestamp (a sender older "
          "than this site: upgrade it; docs/security.md \"Freshness\")",
          s, key);
      break;
    case errc::clock_skew:
      m_log->warn(
          "session {} signed by {}: refused: stamped {:.1f} s ahead of this host's clock (at most "
          "{} s allowed, max_clock_skew): check NTP on both hosts",
          s, key, offset_s,
          std::chrono::duration_cast<std::chrono::seconds>(m_cfg.max_clock_skew).count());
      break;
    default:
      m_log->warn(
          "session {} signed by {}: refused: stamped {:.1f} s ago, before what this site takes "
          "(max_session_age {} s{}): a replay, or clocks apart (check NTP on both hosts)",
          s, key, -offset_s,
          std::chrono::duration_cast<std::chrono::seconds>(m_cfg.max_session_age).count(),
          m_replay->guard().floor_ms() >= created_unix_ms
              ? ", or before this site's replay cache began"
              : "");
      break;
  }
  return verdict;
}

void daemon::poll_control(time_point now) {
  std::error_code ec;
  m_key_poll_receiver.drain(
      m_control_socket->native_handle(), max_control_per_key_poll,
      [&](std::span<const std::byte> d, const endpoint& from) {
        handle_datagram(control_index, d, from, now);
      },
      ec);
}

}  // namespace mcdist::receiver
