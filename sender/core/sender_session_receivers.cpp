// sender_session: receivers (registration, session keys, COMPLETE, time-outs).
#include "sender/core/sender_session_parts.hpp"

namespace mcdist::sender {

using namespace session_detail;

duration sender_session::late_key_window() const noexcept {
  return std::max<duration>(late_key_min_window, m_grtt.estimate() * 2);
}

duration sender_session::keyed_start_grace() const noexcept {
  // Two GRTT: the other sites' REGISTERs, sent on the same announce, arrive within about one
  // round trip of the first; their register_replies then reach them before the first blocks.
  return m_grtt.estimate() * 2;
}

bool sender_session::keyed_start_due(time_point now) const noexcept {
  if (!m_first_keyed) return false;
  const bool all_in = !m_cfg.receivers.empty() && m_awaited > 0 && m_awaited_keyed == m_awaited;
  return all_in || now >= *m_first_keyed + keyed_start_grace();
}

void sender_session::keyed(receiver_state& r, time_point now) {
  if (r.keyed) return;
  r.keyed = true;
  ++m_keyed;
  if (r.awaited) ++m_awaited_keyed;
  if (!m_first_keyed) m_first_keyed = now;
  // An open group learns of a site at its REGISTER, after the key reply that gave it K: what
  // went out before the REGISTER was checkable. Only a closed group knows when K left.
  if (!m_cfg.start_on_registration || silent() || m_cfg.receivers.empty()) return;
  // A site that got K after blocks went out could not check them (a far site of a closed
  // group that started on its near sites' keys): they are wanted again at once, as its NAK
  // would ask a round trip later. Sites keyed within a few ms of each other share the pass.
  const auto seen = m_passes.seq();
  if (seen == 0 || m_passes.pass() == 0) return;
  // Only the first moments of a session: a site keyed far into it (back from an outage in the
  // middle of a field) would have everything sent so far multicast to every site again; its
  // NAKs take the usual path instead, where the fallback policy moves such a site to unicast.
  // A site keyed within late_key_window of the start answered the first announces: it was
  // there all along, one round trip away, and every block sent before its key is one it would
  // NAK. Bounding that case in blocks would leave a geostationary site to NAK rounds whenever
  // a round trip carries more than the bound (a bulletin batch of 400 blocks at 50 Mbit/s).
  std::uint64_t total = 0;
  for (const auto b : m_file_blocks) total += b;
  if (now - m_start > late_key_window() &&
      seen > std::max<double>(late_key_max_blocks,
                              m_cfg.fallback_nak_ratio * static_cast<double>(total))) {
    return;
  }
  std::uint64_t fresh = 0;
  for (std::uint32_t f = 0; f < m_files.size(); ++f) {
    if (const auto n = m_passes.blocks(f)) {
      fresh += m_passes.nak(f, 0, n, seen, m_phase == phase::transferring, nullptr);
    }
  }
  m_late_key_blocks += fresh;
  if (fresh > 0 && m_phase == phase::waiting && !m_next_pass_at) {
    m_next_pass_at = now + late_key_gather;
  }
  if (fresh > 0 && m_log) {
    m_log->info(
        "session {}: receiver '{}' got the session key after {} blocks went out: sent again",
        m_cfg.session, r.rep.id, fresh);
  }
}

void sender_session::on_site_keyed(std::string_view receiver_id, time_point now) {
  if (m_cfg.receivers.empty()) {
    if (!m_first_keyed) m_first_keyed = now;
    return;
  }
  receiver_state* r = m_receivers.find(receiver_id);
  if (!r || r->keyed) return;
  keyed(*r, now);
  if (m_log) {
    m_log->debug("session {}: receiver '{}' holds the session key ({} of {})", m_cfg.session,
                 receiver_id, m_keyed, m_cfg.receivers.size());
  }
}

bool sender_session::stop_awaiting(std::string_view receiver_id, time_point now) {
  if (!m_registration_open || m_cfg.receivers.empty()) return false;
  receiver_state* r = m_receivers.find(receiver_id);
  if (!r || !r->awaited || r->rep.state != receiver_report::state_t::missing) return false;
  r->awaited = false;
  --m_awaited;
  if (r->keyed) --m_awaited_keyed;
  if (m_log) {
    m_log->info(
        "session {}: no longer waiting for '{}' to register (down: it missed another "
        "session of the channel)",
        m_cfg.session, receiver_id);
  }
  if (m_awaited == 0) {
    // Nobody listed is awaited any more: the open group's window, as at a start without any.
    m_register_deadline = std::min(m_register_deadline, m_start + m_cfg.register_window);
  } else if (awaited_all_in()) {
    close_registration(now);
  }
  return true;
}

bool sender_session::lingering() const noexcept {
  return m_registration_open && m_phase == phase::waiting && m_registered > 0 && m_active == 0;
}

void sender_session::handle_register(const wire::register_request& m, const endpoint& from,
                                     time_point now) {
  // Everything is validated before any state changes.
  std::vector<wire::seq_span> missing;
  if (!valid_register(m, missing)) {
    m_drops.add(errc::invalid_field);
    return;
  }
  if (!m_cfg.only_receivers.empty() &&
      std::find(m_cfg.only_receivers.begin(), m_cfg.only_receivers.end(), m.receiver_id()) ==
          m_cfg.only_receivers.end()) {
    answer_register(m.receiver_id(), from, "this session is a resend to other receivers");
    return;
  }
  receiver_state* r = m_receivers.find(m.receiver_id());
  if (r && r->rep.state != receiver_report::state_t::missing) {
    // A repeat (our reply was lost) or a restarted receiver: same answer again.
    sample_rtt(*r, m.echo_time_us(), m.hold_us(), now);
    r->last_heard = now;
    track(*r, true);
    r->rep.address = from;
    answer_register(m.receiver_id(), from,
                    r->rep.state == receiver_report::state_t::failed
                        ? "this receiver was failed in the session: " + r->rep.reason
                        : std::string());
    return;
  }
  if (const auto why = registration_refusal(r != nullptr)) {
    answer_register(m.receiver_id(), from, *why);
    return;
  }
  if (!r && m_receivers.size() >= m_cfg.max_receivers) {
    ++m_receivers_refused_full;
    // One line per refusal could be a flood: log the first, then rarely (log_limit.hpp).
    if (worth_logging(m_receivers_refused_full) && m_log) {
      m_log->warn(
          "session {}: registration of '{}' from {} refused: the session has its "
          "maximum of {} receivers ({} refused so far)",
          m_cfg.session, m.receiver_id(), from.to_string(), m_cfg.max_receivers,
          m_receivers_refused_full);
    }
    answer_register(m.receiver_id(), from, "the session has its maximum number of receivers",
                    false);
    return;
  }
  receiver_state& admitted = admit(m, from, r, std::move(missing), now);
  answer_register(m.receiver_id(), from, {});
  log_registered(admitted, from, m.resumed());
  if (awaited_all_in()) close_registration(now);
}

bool sender_session::awaited_all_in() const noexcept {
  return !m_cfg.receivers.empty() && m_awaited > 0 && m_awaited_in == m_awaited;
}

bool sender_session::valid_register(const wire::register_request& m,
                                    std::vector<wire::seq_span>& missing) const {
  if (!wire::valid_receiver_id(m.receiver_id())) return false;
  const auto file_count = static_cast<std::uint32_t>(m_files.size());
  if (for_each_range(
          std::span(m.held_files().data(), static_cast<std::size_t>(m.held_files_size())),
          file_count, [](std::uint32_t, std::uint32_t) {})) {
    return false;
  }
  for (const auto& hd : m.held_pending()) {
    if (hd.file() >= file_count || hd.sha256().size() != 32) return false;
  }
  // Sequence report: only in a sequenced session, bounded, ranges below this session's number.
  if (static_cast<std::size_t>(m.missing_seqs_size()) > wire::max_seq_ranges ||
      (m_cfg.channel_seq == 0 && (m.missing_seqs_size() > 0 || m.last_seq() != 0))) {
    return false;
  }
  missing.reserve(static_cast<std::size_t>(m.missing_seqs_size()));
  for (const auto& r : m.missing_seqs()) missing.emplace_back(r.first(), r.last());
  return wire::valid_seq_ranges(missing, m_cfg.channel_seq);
}

std::optional<std::string> sender_session::registration_refusal(bool known) const {
  if (!known && !m_cfg.receivers.empty()) return "not a member of the closed group";
  if (!m_registration_open) return "registration closed";
  return std::nullopt;
}

void sender_session::answer_register(const std::string& id, const endpoint& to,
                                     const std::string& refused, bool log_refusal) {
  wire::register_reply reply;
  reply.set_receiver_id(id);
  reply.set_accepted(refused.empty());
  if (!refused.empty()) reply.set_reason(refused);
  queue_unicast(to, encode(wire::msg_type::register_reply, m_cfg.session, reply));
  if (!refused.empty() && log_refusal && m_log) {
    m_log->warn("session {}: refused registration of '{}' from {}: {}", m_cfg.session, id,
                to.to_string(), refused);
  }
}

sender_session::receiver_state& sender_session::admit(const wire::register_request& m,
                                                      const endpoint& from, receiver_state* r,
                                                      std::vector<wire::seq_span> missing,
                                                      time_point now) {
  if (!r) {
    r = &m_receivers.emplace(m.receiver_id()).first;
    r->rep.id = m.receiver_id();
    r->relay = is_relay(r->rep.id);
  }
  r->rep.state = receiver_report::state_t::registered;
  r->rep.address = from;
  r->rep.last_seq = m.last_seq();
  r->rep.missing_seqs = std::move(missing);
  r->last_heard = now;
  track(*r, true);
  ++m_registered;
  if (r->awaited && !m_cfg.receivers.empty()) ++m_awaited_in;
  keyed(*r, now);
  ++m_active;
  sample_rtt(*r, m.echo_time_us(), m.hold_us(), now);
  for_each_range(std::span(m.held_files().data(), static_cast<std::size_t>(m.held_files_size())),
                 static_cast<std::uint32_t>(m_files.size()),
                 [&](std::uint32_t first, std::uint32_t count) {
                   for (std::uint32_t f = first; f < first + count; ++f) mark_held(*r, f);
                 });
  for (const auto& hd : m.held_pending()) {
    const auto claimed = *digest_from_bytes(hd.sha256());
    const auto& known = m_files[hd.file()].digest;
    if (known) {
      if (*known == claimed) mark_held(*r, hd.file());
    } else {
      r->pending_claims.emplace_back(hd.file(), claimed);
    }
  }
  return *r;
}

void sender_session::log_registered(const receiver_state& r, const endpoint& from,
                                    bool resumed) const {
  if (!m_log) return;
  m_log->info("session {}: receiver '{}' registered from {}{}, RTT {:.2f} ms, holds {} files",
              m_cfg.session, r.rep.id, from.to_string(), resumed ? " (resumed)" : "",
              to_ms(r.rep.rtt), r.rep.files_held);
  if (r.rep.missing_seqs.empty()) return;
  std::string ranges;
  for (const auto& [first, last] : r.rep.missing_seqs) {
    ranges += (ranges.empty() ? "" : ",") + std::to_string(first) +
              (first == last ? "" : "-" + std::to_string(last));
  }
  m_log->warn(
      "session {}: receiver '{}' never completed sessions {} of channel {} "
      "(its last completed: {})",
      m_cfg.session, r.rep.id, ranges, m_cfg.channel, r.rep.last_seq);
}

sender_session::receiver_state* sender_session::admitted(const std::string& id,
                                                         const endpoint& from, time_point now) {
  receiver_state* r = m_receivers.find(id);
  if (m_cfg.admit_on_feedback && m_registration_open &&
      (!r || r->rep.state == receiver_report::state_t::missing)) {
    wire::register_request reg;
    reg.set_receiver_id(id);
    handle_register(reg, from, now);
    r = m_receivers.find(id);
  }
  return r;
}

void sender_session::handle_complete(const wire::complete& m, const endpoint& from,
                                     time_point now) {
  receiver_state* r = admitted(m.receiver_id(), from, now);
  if (!r || r->rep.state == receiver_report::state_t::missing) {
    m_drops.add(errc::not_registered);
    return;
  }
  wire::complete_ack ack;
  ack.set_receiver_id(m.receiver_id());
  queue_unicast(from, encode(wire::msg_type::complete_ack, m_cfg.session, ack));
  r->last_heard = now;
  if (r->rep.state != receiver_report::state_t::registered) return;  // a repeat
  const bool via_unicast = is_unicast(r->rep.path);
  sample_rtt(*r, m.echo_time_us(), m.hold_us(), now);
  r->rep.state = receiver_report::state_t::completed;
  r->rep.files_stored = m.files_stored();
  r->rep.bytes_stored = m.bytes_stored();
  r->rep.files_held = std::max(r->rep.files_held, m.files_held());
  // What it says of its path, bounded by what this session multicast: an authenticated site
  // cannot claim more datagrams than there were to weigh the hub's loss estimate.
  const std::uint64_t issued = m_passes.seq();
  r->rep.datagrams_received = std::min<std::uint64_t>(m.datagrams_received(), issued);
  r->rep.datagrams_lost =
      std::min<std::uint64_t>(m.datagrams_lost(), issued - r->rep.datagrams_received);
  // The pass that brought its last missing block: one after the pass of its last NAK.
  r->rep.passes = via_unicast ? r->last_nak_pass : std::min(m_passes.pass(), r->last_nak_pass + 1);
  r->rep.completion_time = now - m_start;
  for (const auto& f : m.failures()) {
    r->rep.file_failures.emplace_back(f.file(), f.reason().substr(0, 256));
  }
  if (!r->rep.file_failures.empty()) {
    r->rep.state = receiver_report::state_t::failed;
    r->rep.reason = std::to_string(r->rep.file_failures.size()) + " files could not be stored";
  }
  --m_active;
  track(*r, false);
  forget_rate(*r, now);
  if (m_log) {
    if (r->rep.state != receiver_report::state_t::failed) {
      m_log->info(
          "session {}: receiver '{}' completed {} in {:.3f} s: {} files stored, {} "
          "held, {} bytes",
          m_cfg.session, r->rep.id,
          via_unicast ? fmt::format("over {}", *unicast_transport(r->rep.path))
                      : "after pass " + std::to_string(m_passes.pass()),
          to_seconds(r->rep.completion_time), r->rep.files_stored, r->rep.files_held,
          r->rep.bytes_stored);
    } else {
      m_log->warn(
          "session {}: receiver '{}' finished with {} files it could not store "
          "(first: file {}: {})",
          m_cfg.session, r->rep.id, r->rep.file_failures.size(), r->rep.file_failures.front().first,
          r->rep.file_failures.front().second);
    }
  }
  check_done(now);
}

bool sender_session::is_relay(const std::string& id) const noexcept {
  return std::find(m_cfg.relays.begin(), m_cfg.relays.end(), id) != m_cfg.relays.end();
}

bool sender_session::times_out(const receiver_state& r) const noexcept {
  // Every receiver the session waits for is answered by it within receiver_timeout while the
  // sender asks for status: registered ones by NAK or COMPLETE, unicast ones (connected) by a
  // NAK as a sign of life or COMPLETE. One that stops (a full disk, a crash) is failed, so the
  // session always ends. Unconnected unicast receivers are bounded by fallback_max_orders.
  return r.on_multicast() || (r.on_unicast() && r.unicast_started);
}

void sender_session::fail_receiver(receiver_state& r, std::string why, time_point now) {
  const bool was_active = r.rep.state == receiver_report::state_t::registered;
  r.rep.state = receiver_report::state_t::failed;
  r.rep.reason = std::move(why);
  r.rep.passes = m_passes.pass();
  r.rep.completion_time = now - m_start;
  if (was_active) --m_active;
  track(r, false);
  forget_rate(r, now);
  if (m_log) {
    m_log->warn("session {}: receiver '{}' failed: {}", m_cfg.session, r.rep.id, r.rep.reason);
  }
}

}  // namespace mcdist::sender
