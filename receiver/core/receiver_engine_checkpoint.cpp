// receiver_engine: resume state (checkpoints and restore).
#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

void receiver_engine::do_checkpoint(session_rx& s, time_point now) {
  saved_session head;
  head.id = s.id;
  head.sender = s.sender;
  head.channel = s.channel;
  head.block_size = s.block_size;
  head.file_count = s.file_count;
  head.chunks = s.chunks;
  head.total_bytes = s.total_bytes;
  head.sender_name = s.sender_name;
  head.seq_channel = s.seq_channel;
  head.seq = s.seq;
  head.silent_passes = s.silent_passes;
  head.catch_up = s.catch_up;
  head.seq_source = s.seq_source;
  head.seen_seq = s.seen_seq;
  head.bytes_received = s.bytes_received;
  checkpoint_writer w(head);
  s.files.save(w);
  m_store.checkpoint(s.id, w.finish());
  s.dirty = false;
  s.next_checkpoint = now + m_cfg.checkpoint_interval;
}

void receiver_engine::checkpoint_all(time_point now) {
  for (auto& [id, s] : m_sessions) {
    if (s->state == session_rx::state_t::receiving || s->state == session_rx::state_t::completing) {
      do_checkpoint(*s, now);
    }
  }
}

std::error_code receiver_engine::restore(std::string_view blob, time_point now) {
  saved_session saved;
  if (auto ec = read_checkpoint(blob, m_cfg.channel_count, saved)) return ec;
  const session_id id = saved.id;
  if (find(id)) return errc::invalid_field;
  // A restored session is charged like an announced one; what does not fit is not resumed.
  const std::uint64_t table_bytes = std::uint64_t{saved.file_count} * sizeof(file_rx);
  if (!m_budget.charge(id, session_overhead_bytes + table_bytes)) {
    return errc::over_budget;
  }
  struct release_unless_kept {
    memory_budget& budget;
    session_id id;
    bool kept = false;
    ~release_unless_kept() {
      if (!kept) budget.release_session(id);
    }
  } guard{m_budget, id};
  auto owned = std::make_unique<session_rx>(saved.block_size, m_cfg.max_nak_datagrams, m_id_hash);
  auto& s = *owned;
  s.id = id;
  s.sender = saved.sender;
  s.channel = saved.channel;
  s.file_count = saved.file_count;
  s.chunks = saved.chunks;
  s.total_bytes = saved.total_bytes;
  s.sender_name = printable(saved.sender_name);
  s.catch_up = std::move(saved.catch_up);
  s.seq_channel = std::move(saved.seq_channel);
  s.seq = saved.seq;
  s.silent_passes = saved.silent_passes;
  s.silent = saved.silent_passes > 0 ||
             (saved.channel < m_cfg.silent_channels.size() && m_cfg.silent_channels[saved.channel]);
  s.seq_source = std::move(saved.seq_source);
  s.seen_seq = saved.seen_seq;
  s.bytes_received = saved.bytes_received;
  s.started = now;
  s.last_heard = now;
  if (!s.files.restore(saved.files, m_budget, id)) return errc::over_budget;
  s.state = session_rx::state_t::receiving;
  s.next_checkpoint = now + m_cfg.checkpoint_interval;
  guard.kept = true;
  session_rx& ref = m_sessions.insert(id, std::move(owned));
  if (m_log) {
    m_log->info(
        "session {}: resumed from checkpoint: {} of {} files to go, {} bytes received "
        "earlier",
        ref.name(), ref.files.open(), ref.file_count, ref.bytes_received);
  }
  for (std::uint32_t i = 0; i < ref.file_count; ++i) {
    auto& fr = ref.files[i];
    if (fr.state == file_rx::state_t::receiving && fr.received.all()) file_data_complete(ref, i);
  }
  file_done(ref, now);
  return {};
}

}  // namespace mcdist::receiver
