// receiver_engine: a file's end: data complete, digests, stored, failed.
#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

void receiver_engine::fail_file(session_rx& s, std::uint32_t f, std::error_code ec,
                                const std::string& detail, time_point now) {
  const auto& fr = s.files[f];
  if (fr.terminal()) return;
  if (s.files.fail(f, ec.message() + (detail.empty() ? "" : ": " + detail))) {
    m_store.discard_file({s.id, file_index{f}});
  }
  ++m_stats.files_failed;
  s.dirty = true;
  if (m_log) {
    m_log->error("session {}: could not store '{}': {}", s.name(), printable(fr.entry.path),
                 fr.failure);
  }
  file_done(s, now);
}

void receiver_engine::begin_file(session_rx& s, std::uint32_t f) {
  auto& fr = s.files[f];
  if (fr.begun) return;
  m_store.begin_file({s.id, file_index{f}}, s.channel, fr.entry, fr.resume);
  fr.begun = true;
}

void receiver_engine::file_data_complete(session_rx& s, std::uint32_t f) {
  const auto& fr = s.files[f];
  if (!fr.entry.digest) {
    s.files.await_digest(f);
    return;
  }
  begin_file(s, f);
  s.files.finalize(f);
  m_store.finalize({s.id, file_index{f}}, *fr.entry.digest);
}

void receiver_engine::handle_digests(session_rx& s, const wire::digest_list& m, time_point now) {
  for (const auto& d : m.digests()) {
    if (d.file() >= s.file_count || d.sha256().size() != 32) {
      m_stats.drops.add(errc::invalid_field);
      continue;
    }
    if (d.file() >= s.files.size()) continue;  // its entry has not arrived yet
    auto& fr = s.files[d.file()];
    if (fr.entry.digest || fr.state == file_rx::state_t::pending ||
        fr.state == file_rx::state_t::refused) {
      continue;
    }
    fr.entry.digest = digest_from_bytes(d.sha256());
    s.dirty = true;
    if (fr.held_digest && *fr.held_digest == *fr.entry.digest &&
        (fr.state == file_rx::state_t::receiving ||
         fr.state == file_rx::state_t::awaiting_digest)) {
      if (s.files.hold(d.file())) m_store.discard_file({s.id, file_index{d.file()}});
      continue;
    }
    if (fr.state == file_rx::state_t::awaiting_digest) file_data_complete(s, d.file());
  }
  file_done(s, now);
}

void receiver_engine::file_done(session_rx& s, time_point now) {
  if (s.state != session_rx::state_t::receiving || s.files.open() > 0) return;
  s.state = session_rx::state_t::completing;
  // A session counts as completed for its channel's numbering when every file was stored or
  // held; one failed or refused file leaves its number missing, so it is asked for again.
  if (s.files.stored() + s.files.held() == s.file_count && !s.seq_channel.empty()) {
    if (s.seq > 0) m_sequences.on_completed(s.seq_channel, s.seq_source, s.seq);
    if (!s.catch_up.empty()) m_sequences.on_caught_up(s.seq_channel, s.seq_source, s.catch_up);
  }
  if (m_log) {
    const auto& p = s.parity.stats();
    m_log->info(
        "session {}: complete in {:.3f} s: {} files stored ({} bytes), {} held, {} failed, "
        "{} refused{}",
        s.name(), to_seconds(now - s.started), s.files.stored(), s.files.bytes_stored(),
        s.files.held(), s.files.failed(), s.files.refused(),
        p.kept + p.refused == 0
            ? std::string()
            : fmt::format("; parity: {} blocks kept, {} refused, {} FEC blocks decoded, {} "
                          "blocks recovered, {} decode failures",
                          p.kept, p.refused, p.fec_blocks, p.blocks, p.failures));
  }
  if (s.silent) {
    // Nobody to tell: the session is over for this site, unless it relays the session, whose
    // later passes and END the sites behind it still need checked (closed at the END).
    if (s.channel < m_cfg.relay_channels.size() && m_cfg.relay_channels[s.channel]) {
      s.next_complete = time_point::max();
      return;
    }
    close_session(s, true, {}, now);
    return;
  }
  send_complete(s, now);
}

void receiver_engine::on_file_stored(session_id id, file_index f, std::error_code ec,
                                     const std::string& detail, time_point now) {
  session_rx* s = find(id);
  if (!s) {
    late_file_stored(id, f, ec, detail);
    return;
  }
  if (f.value >= s->files.size()) return;
  const auto& fr = s->files[f.value];
  if (fr.state != file_rx::state_t::finalizing) {
    // A storage error before finalize (open, preallocate, disk reserve, quota, write: ENOSPC,
    // EROFS, ...) fails this one file; its blocks are no longer taken, so nothing waits on it.
    if (ec && (fr.state == file_rx::state_t::receiving ||
               fr.state == file_rx::state_t::awaiting_digest)) {
      fail_file(*s, f.value, ec, detail, now);
    }
    return;
  }
  s->dirty = true;
  if (!ec) {
    s->files.on_stored(f.value);
    finish_file({s->id,
                 s->channel,
                 fr.entry.path,
                 fr.entry.size,
                 true,
                 {},
                 fr.entry.mtime_ns,
                 fr.entry.digest ? &*fr.entry.digest : nullptr},
                false);
  } else if (ec == errc::digest_mismatch && fr.digest_retries < m_cfg.max_digest_retries) {
    s->files.refetch(f.value);
    s->unicast.retry_now(now);
    if (m_log) {
      m_log->warn("session {}: '{}' failed SHA-256 verification; fetching it again ({} of {})",
                  s->name(), printable(fr.entry.path), fr.digest_retries, m_cfg.max_digest_retries);
    }
  } else {
    s->files.on_store_failed(f.value, ec.message() + (detail.empty() ? "" : ": " + detail));
    finish_file({s->id, s->channel, fr.entry.path, fr.entry.size, false, fr.failure,
                 fr.entry.mtime_ns, nullptr},
                false);
  }
  file_done(*s, now);
}

void receiver_engine::finish_file(const file_outcome& o, bool late) {
  ++(o.stored ? m_stats.files_stored : m_stats.files_failed);
  m_sink.file_finished(o);
  if (!m_log) return;
  if (o.stored) {
    m_log->info("session {}: stored '{}' ({} bytes){}", o.session, printable(o.path), o.size,
                late ? ", finalized after the session ended" : "");
  } else {
    m_log->error("session {}: could not store '{}': {}", o.session, printable(o.path), o.failure);
  }
}

void receiver_engine::late_file_stored(session_id id, file_index f, std::error_code ec,
                                       const std::string& detail) {
  const auto it = m_late_files.find({id.value, f.value});
  if (it == m_late_files.end()) return;
  const late_file lf = std::move(it->second);
  m_late_files.erase(it);
  const std::string failure = ec ? ec.message() + (detail.empty() ? "" : ": " + detail) : "";
  finish_file({id, lf.channel, lf.path, lf.size, !ec, failure, lf.mtime_ns,
               !ec && lf.digest ? &*lf.digest : nullptr},
              true);
}

}  // namespace mcdist::receiver
