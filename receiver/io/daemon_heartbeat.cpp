#include "receiver/io/daemon.hpp"

#include "common/beacon.hpp"
#include "common/wire.hpp"
#include "receiver/core/sequence_book.hpp"

#include <spdlog/spdlog.h>

/// @file
/// The daemon's side of a hub's heartbeats (docs/design-notes.md "Heartbeats";
/// common/beacon.hpp): a channel's heartbeat names the hub's newest session number; the site
/// records it (a silent site learns what it missed) and, when it misses numbers and may
/// transmit, answers with a gap report to the heartbeat's source, so the hub catches it up
/// without waiting for the channel's next product.

namespace mcdist::receiver {

namespace {

/// Heartbeats checked per channel and second: a hub sends one per interval (1 s at the
/// shortest), a few hubs on one channel a few; beyond this a flood of forged heartbeats is
/// dropped before its signature check.
constexpr std::uint32_t max_heartbeats_per_second = 8;

}  // namespace

void daemon::on_heartbeat(std::size_t index, std::span<const std::byte> d, const endpoint& from) {
  if (index >= m_cfg.channels.size() || m_retired[index]) return;
  if (m_heartbeat_budget.size() < m_cfg.channels.size()) {
    m_heartbeat_budget.resize(m_cfg.channels.size());
  }
  auto& budget = m_heartbeat_budget[index];
  const auto now = std::chrono::steady_clock::now();
  if (now - budget.window_start >= std::chrono::seconds(1)) {
    budget.window_start = now;
    budget.used = 0;
  }
  if (++budget.used > max_heartbeats_per_second) {
    ++m_heartbeats_refused;
    return;
  }
  const auto& ch = m_cfg.channels[index];
  wire::heartbeat m;
  std::optional<crypto::key32> signer;
  if (beacon::open_heartbeat(d, ch.trusted_senders, m, signer)) {
    ++m_heartbeats_refused;
    return;
  }
  // Fresh, and newer than the last one of its stream: a replayed heartbeat changes nothing.
  const auto now_ms = unix_ms_now();
  const auto age = static_cast<std::uint64_t>(m_cfg.max_session_age.count());
  const auto skew = static_cast<std::uint64_t>(m_cfg.max_clock_skew.count());
  if (m.sent_unix_ms() + age < now_ms || m.sent_unix_ms() > now_ms + skew) {
    ++m_heartbeats_refused;
    return;
  }
  const auto source = sequence_book::source_of(
      signer ? crypto::format_public_key(*signer) : std::string(), m.sender_name());
  // An unsigned channel's heartbeats may name made-up senders: the table forgets them all
  // beyond sequence_book's bound on streams (a replayed heartbeat is harmless anyway).
  if (m_heartbeat_last.size() >= sequence_book::max_streams) m_heartbeat_last.clear();
  auto& last = m_heartbeat_last[{m.channel(), source}];
  if (m.sent_unix_ms() <= last) return;
  last = m.sent_unix_ms();
  ++m_heartbeats_taken;
  std::vector<wire::seq_span> running;
  for (const auto& r : m.running()) running.emplace_back(r.first(), r.last());
  const auto rep = m_engine->sequences().on_heartbeat(m.channel(), source, m.newest_seq(), running);
  if (ch.silent && !ch.catch_up_url.empty()) {
    // Also with nothing missing: numbers caught up another way are forgotten.
    note_missing(index, m.channel(), source, signer, rep.missing);
  }
  if (rep.missing.empty()) return;
  std::uint64_t missed = 0;
  for (const auto& [first, last_seq] : rep.missing) missed += last_seq - first + 1;
  if (ch.silent) {
    m_log->debug("channel {}: the hub's newest session is {}; {} missed, recorded (silent{})",
                 ch.name, m.newest_seq(), missed,
                 ch.catch_up_url.empty() ? "" : "; fetched from " + ch.catch_up_url);
    return;
  }
  wire::gap_report r;
  r.set_receiver_id(m_cfg.id);
  r.set_channel(m.channel());
  r.set_last_seq(rep.last_seq);
  r.set_heartbeat_unix_ms(m.sent_unix_ms());
  for (const auto& [first, last_seq] : rep.missing) {
    auto* s = r.add_missing();
    s->set_first(first);
    s->set_last(last_seq);
  }
  std::vector<std::byte> buf(wire::control_budget + beacon::gap_report_trailer_bytes);
  const auto n = beacon::encode_gap_report(buf, r, signer ? &m_site : nullptr);
  if (n == 0) return;
  std::error_code ec;
  ++m_datagrams_sent;
  if (!net::send_one(m_control_socket->native_handle(), from, std::span(buf).first(n), ec)) {
    m_log->debug("channel {}: cannot send a gap report to {}: {}", ch.name, from.to_string(),
                 ec.message());
    return;
  }
  ++m_gap_reports_sent;
  m_log->info(
      "channel {}: the hub's newest session is {}, this site misses {} session{} below it: gap "
      "report sent to {}",
      ch.name, m.newest_seq(), missed, missed == 1 ? "" : "s", from.to_string());
}

}  // namespace mcdist::receiver
