// receiver_engine: a file's end: data complete, digests, stored, failed.
#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

void receiver_engine::fail_file(session_rx& s, std::uint32_t f, std::error_code ec,
                                const std::string& detail, time_point now) {
  auto& fr = s.files[f];
  if (fr.terminal()) return;
  if (fr.state == file_rx::state_t::finalizing) --s.files_finalizing;
  if (fr.begun) m_store.discard_file({s.id, file_index{f}});
  fr.begun = false;
  fr.resume = false;
  fr.state = file_rx::state_t::failed;
  fr.failure = ec.message() + (detail.empty() ? "" : ": " + detail);
  // files_open counts the files left to do from the manifest's completion on.
  if (s.state != session_rx::state_t::manifest) --s.files_open;
  ++s.files_failed;
  ++m_stats.files_failed;
  s.dirty = true;
  if (m_log) {
    m_log->error("session {}: could not store '{}': {}", s.name(), printable(fr.entry.path),
                 fr.failure);
  }
  file_done(s, now);
}

void receiver_engine::file_data_complete(session_rx& s, std::uint32_t f) {
  auto& fr = s.files[f];
  if (!fr.entry.digest) {
    fr.state = file_rx::state_t::awaiting_digest;
    return;
  }
  if (!fr.begun) {
    m_store.begin_file({s.id, file_index{f}}, s.channel, fr.entry, fr.resume);
    fr.begun = true;
  }
  fr.state = file_rx::state_t::finalizing;
  ++s.files_finalizing;
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
      if (fr.begun) m_store.discard_file({s.id, file_index{d.file()}});
      fr.begun = false;
      fr.state = file_rx::state_t::held;
      --s.files_open;
      ++s.files_held;
      continue;
    }
    if (fr.state == file_rx::state_t::awaiting_digest) file_data_complete(s, d.file());
  }
  file_done(s, now);
}

void receiver_engine::file_done(session_rx& s, time_point now) {
  if (s.state != session_rx::state_t::receiving || s.files_open > 0) return;
  s.state = session_rx::state_t::completing;
  // A session counts as completed for its channel's numbering when every file was stored or
  // held; one failed or refused file leaves its number missing, so it is asked for again.
  if (s.files_stored + s.files_held == s.file_count && !s.seq_channel.empty()) {
    if (s.seq > 0) m_sequences.on_completed(s.seq_channel, s.seq_source, s.seq);
    if (!s.catch_up.empty()) m_sequences.on_caught_up(s.seq_channel, s.seq_source, s.catch_up);
  }
  if (m_log) {
    const auto& p = s.parity;
    m_log->info(
        "session {}: complete in {:.3f} s: {} files stored ({} bytes), {} held, {} failed, "
        "{} refused{}",
        s.name(), to_seconds(now - s.started), s.files_stored, s.bytes_stored, s.files_held,
        s.files_failed,
        std::count_if(s.files.begin(), s.files.end(),
                      [](const file_rx& fr) { return fr.state == file_rx::state_t::refused; }),
        p.kept + p.refused == 0
            ? std::string()
            : fmt::format("; parity: {} blocks kept, {} refused, {} FEC blocks decoded, {} "
                          "blocks recovered, {} decode failures",
                          p.kept, p.refused, p.fec_blocks, p.blocks, p.failures));
  }
  if (s.silent) {
    // Nobody to tell: the session is over for this site.
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
  auto& fr = s->files[f.value];
  if (fr.state != file_rx::state_t::finalizing) {
    // A storage error before finalize (open, preallocate, disk reserve, quota, write: ENOSPC,
    // EROFS, ...) fails this one file; its blocks are no longer taken, so nothing waits on it.
    if (ec && (fr.state == file_rx::state_t::receiving ||
               fr.state == file_rx::state_t::awaiting_digest)) {
      fail_file(*s, f.value, ec, detail, now);
    }
    return;
  }
  --s->files_finalizing;
  s->dirty = true;
  fr.begun = false;
  fr.resume = false;
  if (!ec) {
    fr.state = file_rx::state_t::stored;
    --s->files_open;
    ++s->files_stored;
    s->bytes_stored += fr.entry.size;
    ++m_stats.files_stored;
    m_sink.file_finished({s->id,
                          s->channel,
                          fr.entry.path,
                          fr.entry.size,
                          true,
                          {},
                          fr.entry.mtime_ns,
                          fr.entry.digest ? &*fr.entry.digest : nullptr});
    if (m_log) {
      m_log->info("session {}: stored '{}' ({} bytes)", s->name(), printable(fr.entry.path),
                  fr.entry.size);
    }
  } else if (ec == errc::digest_mismatch && fr.digest_retries < m_cfg.max_digest_retries) {
    ++fr.digest_retries;
    fr.received.clear_all();
    fr.state = file_rx::state_t::receiving;
    if (is_unicast(s->path) && !s->unicast_active) s->next_unicast = now;
    if (m_log) {
      m_log->warn("session {}: '{}' failed SHA-256 verification; fetching it again ({} of {})",
                  s->name(), printable(fr.entry.path), fr.digest_retries, m_cfg.max_digest_retries);
    }
  } else {
    fr.state = file_rx::state_t::failed;
    fr.failure = ec.message() + (detail.empty() ? "" : ": " + detail);
    --s->files_open;
    ++s->files_failed;
    ++m_stats.files_failed;
    m_sink.file_finished({s->id, s->channel, fr.entry.path, fr.entry.size, false, fr.failure,
                          fr.entry.mtime_ns, nullptr});
    if (m_log) {
      m_log->error("session {}: could not store '{}': {}", s->name(), printable(fr.entry.path),
                   fr.failure);
    }
  }
  file_done(*s, now);
}

void receiver_engine::late_file_stored(session_id id, file_index f, std::error_code ec,
                                       const std::string& detail) {
  const auto it = m_late_files.find({id.value, f.value});
  if (it == m_late_files.end()) return;
  const late_file lf = std::move(it->second);
  m_late_files.erase(it);
  if (!ec) {
    ++m_stats.files_stored;
    m_sink.file_finished({id,
                          lf.channel,
                          lf.path,
                          lf.size,
                          true,
                          {},
                          lf.mtime_ns,
                          lf.digest ? &*lf.digest : nullptr});
    if (m_log) {
      m_log->info("session {}: stored '{}' ({} bytes), finalized after the session ended", id,
                  printable(lf.path), lf.size);
    }
    return;
  }
  const std::string failure = ec.message() + (detail.empty() ? "" : ": " + detail);
  ++m_stats.files_failed;
  m_sink.file_finished({id, lf.channel, lf.path, lf.size, false, failure, lf.mtime_ns, nullptr});
  if (m_log) {
    m_log->error("session {}: could not store '{}': {}", id, printable(lf.path), failure);
  }
}

}  // namespace mcdist::receiver
