// receiver_engine: NAK rounds and COMPLETE.
#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

void receiver_engine::send_naks(session_rx& s, time_point now) {
  for (const auto& r : s.naks.take_due(now)) send_round(s, r, now);
}

void receiver_engine::send_round(session_rx& s, const nak_round& r, time_point now) {
  if (s.silent) {
    ++m_stats.silent_suppressed;
    return;
  }
  wire::nak header = nak_header(s, m_cfg.id, now);
  fill_rate(s, header, now);
  const fec_tracker* fec = !s.unicast.moved() && ensure_fec(s) ? s.parity.tracker() : nullptr;
  auto out = s.naks.build_round(r, std::move(header), s.files, fec, now);
  m_stats.fec_lacks_covered += out.lacks_covered;
  for (const auto& m : out.datagrams) {
    m_sink.send(s.sender, encode(wire::msg_type::nak, s.id, m));
    ++m_stats.naks_sent;
  }
}

void receiver_engine::send_complete(session_rx& s, time_point now) {
  if (s.silent) {
    ++m_stats.silent_suppressed;
    return;
  }
  wire::complete m;
  m.set_receiver_id(m_cfg.id);
  set_echo(m, s, now);
  m.set_files_stored(s.files.stored());
  m.set_bytes_stored(s.files.bytes_stored());
  m.set_files_held(s.files.held());
  m.set_datagrams_received(s.sequenced_received);
  m.set_datagrams_lost(s.rate.loss().lost());
  for (std::uint32_t i = 0; i < s.file_count && m.failures_size() < max_reported_failures; ++i) {
    const auto& fr = s.files[i];
    if (fr.state == file_rx::state_t::failed || fr.state == file_rx::state_t::refused) {
      auto* ff = m.add_failures();
      ff->set_file(i);
      ff->set_reason(fr.failure.substr(0, max_reason_bytes));
    }
  }
  const auto bytes = encode(wire::msg_type::complete, s.id, m);
  m_sink.send(s.sender, bytes);
  ++s.complete_sends;
  s.complete_sent = now;
  s.next_complete = now + retransmit_interval(s);
}

}  // namespace mcdist::receiver
