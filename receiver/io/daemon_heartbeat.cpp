#include "receiver/io/daemon.hpp"

#include "common/beacon.hpp"
#include "common/wire.hpp"

#include <spdlog/spdlog.h>

/// @file
/// The daemon's side of a hub's heartbeats and the catch-up they start: heartbeat_intake
/// decides what a heartbeat asks for, catch_up_runner fetches what a silent channel missed; the
/// daemon sends the gap report and routes fetched files to the storage path, the journal, the
/// status board and WIS2 as any delivery.

namespace mcdist::receiver {

void daemon::on_heartbeat(std::size_t index, std::span<const std::byte> d, const endpoint& from,
                          std::optional<time_point> arrival) {
  if (index >= m_cfg.channels.size() || m_channels.retired(index)) return;
  const auto& ch = m_cfg.channels[index];
  const auto p = m_heartbeats.on_heartbeat(index, ch, d, m_engine->sequences(),
                                           std::chrono::steady_clock::now(), unix_ms_now());
  if (!p) return;
  // Taken (verified, fresh, newer than the last): the sites behind a relay learn of the
  // hub's sessions from it as this site does.
  m_relays.forward_heartbeat(index, d, arrival);
  if (p->catch_up) m_catch_up.note_missing(index, p->channel, p->source, p->signer, p->missing);
  if (p->gap_report && m_relays.gathers_gaps(index)) {
    // A relay answers for the sites behind it too: its report (signed by this site for a
    // signed hub) goes up once their answers to this heartbeat are in
    // (relay_forwarder::gap_gather).
    m_relays.on_hub_heartbeat(index, from, std::move(*p->gap_report), p->newest_seq,
                              p->signer.has_value());
    return;
  }
  if (p->missing.empty()) return;
  if (!p->gap_report) {
    m_log->debug("channel {}: the hub's newest session is {}; {} missed, recorded (silent{})",
                 ch.name, p->newest_seq, p->missed,
                 ch.catch_up_url.empty() ? "" : "; fetched from " + ch.catch_up_url);
    return;
  }
  if (!send_gap_report(*p->gap_report, p->signer.has_value(), from)) return;
  m_log->info(
      "channel {}: the hub's newest session is {}, this site misses {} session{} below it: gap "
      "report sent to {}",
      ch.name, p->newest_seq, p->missed, p->missed == 1 ? "" : "s", from.to_string());
}

bool daemon::send_gap_report(const wire::gap_report& r, bool sign, const endpoint& to) {
  std::vector<std::byte> buf(wire::control_budget + beacon::gap_report_trailer_bytes);
  const auto n = beacon::encode_gap_report(buf, r, sign ? &m_keys->site() : nullptr);
  if (n == 0) return false;
  std::error_code ec;
  ++m_datagrams_sent;
  if (!net::send_one(m_control_socket->native_handle(), to, std::span(buf).first(n), ec)) {
    m_log->debug("channel {}: cannot send a gap report to {}: {}", r.channel(), to.to_string(),
                 ec.message());
    return false;
  }
  m_heartbeats.gap_report_sent();
  return true;
}

catch_up_port daemon::catch_up_hooks() {
  catch_up_port port;
  port.live = [this](std::size_t index) { return !m_channels.retired(index); };
  port.deliver = [this](file_key key, std::uint32_t channel, file_spec spec, std::string temp,
                        const sha256_digest& expected, std::function<void(store_result)> done) {
    m_store->deliver_file(key, channel, std::move(spec), std::move(temp), expected,
                          std::move(done));
  };
  port.finished = [this](const file_outcome& fo, const std::string& key) {
    if (!fo.stored) return;  // the finalizer deleted its journaled delivery, if any
    m_board.file_finished(fo, std::chrono::system_clock::now());
    journal_delivery(fo, &key);
    publish_wis2(fo);
  };
  port.caught_up = [this](const catch_up_queue::stream& s, std::uint64_t seq) {
    const wire::seq_span done{seq, seq};
    m_engine->sequences().on_caught_up(s.channel, s.source, std::span(&done, 1));
    save_sequences_if_changed();
  };
  return port;
}

}  // namespace mcdist::receiver
