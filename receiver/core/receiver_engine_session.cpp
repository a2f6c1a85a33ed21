// receiver_engine: a session's start: announces, the manifest, registration, held files.
#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

bool receiver_engine::new_session(const wire::announce& m, session_id id, const endpoint& from,
                                  std::uint32_t channel, time_point now) {
  const auto& p = m.params();
  std::vector<wire::seq_span> catch_up;
  if (!valid_params(p, catch_up)) {
    m_stats.drops.add(errc::invalid_field);
    return false;
  }
  // Named sites: this one, or the relay this channel comes through (a catch-up or resend for
  // the relay's subtree, whose signed announce the relay cannot change).
  const auto names = [&p](const std::string& rid) {
    return !rid.empty() && std::find(p.only_receivers().begin(), p.only_receivers().end(), rid) !=
                               p.only_receivers().end();
  };
  const std::string& upstream =
      channel < m_cfg.upstream_relays.size() ? m_cfg.upstream_relays[channel] : std::string();
  if (p.only_receivers_size() > 0 && !names(m_cfg.id) && !names(upstream)) {
    m_sessions.tombstone(id, now + m_cfg.session_timeout);
    if (m_log) {
      m_log->info("session {} from {}: a resend for other receivers; not taking part", id,
                  from.address_string());
    }
    return false;
  }
  if (!within_limits(p, id, from)) return false;
  // What is allocated now: the session and its two manifest bitmaps. The file table grows
  // with the entries, block maps come with the blocks; each is charged as it is allocated.
  const std::uint64_t now_bytes =
      session_overhead_bytes + manifest_assembler::state_bytes(p.manifest_chunks(), p.file_count());
  if (!m_budget.charge(id, now_bytes)) {
    m_stats.drops.add(errc::over_budget);
    return false;
  }
  // Freshness last, once nothing else can refuse the session: the shell records a session it
  // admits, and a session recorded but refused here for a limit would be refused as a replay
  // when it is announced again.
  const auto signer = m_sink.sender_key(id);
  if (!signer.empty()) {
    if (const auto verdict = m_sink.admit_signed_session(id, signer, p.created_unix_ms());
        verdict != errc::ok) {
      m_budget.release_session(id);
      m_stats.drops.add(verdict);
      m_sessions.tombstone(id, now + m_cfg.session_timeout);
      return false;
    }
  }
  const session_rx& s = open_session(p, id, from, channel, signer, std::move(catch_up), now);
  if (m_log) {
    m_log->info(
        "session {} from {} ({}, {}): {} files, {} bytes announced, block {} bytes, rate {} "
        "bit/s{}",
        s.name(), from.to_string(), s.sender_name,
        signer.empty() ? std::string("UNSIGNED") : "signed by " + signer, s.file_count,
        s.total_bytes, s.block_size, p.rate_bps(),
        !s.silent ? std::string()
        : s.silent_passes > 0
            ? fmt::format("; silent session of {} passes: this site sends nothing", s.silent_passes)
            : std::string("; silent channel: this site sends nothing"));
  }
  return true;
}

bool receiver_engine::valid_params(const wire::session_params& p,
                                   std::vector<wire::seq_span>& catch_up) const {
  if (p.block_size() < wire::min_block_size || p.block_size() > wire::max_block_size ||
      p.manifest_chunks() == 0 ||
      p.manifest_chunks() > std::max<std::uint32_t>(1, p.file_count())) {
    return false;
  }
  // Session numbering: a channel name we can key state by, ranges within the limits.
  if (static_cast<std::size_t>(p.catch_up_seqs_size()) > wire::max_seq_ranges ||
      (!p.channel().empty() && !wire::valid_channel_name(p.channel())) ||
      ((p.channel_seq() > 0 || p.catch_up_seqs_size() > 0) && p.channel().empty()) ||
      (p.channel_seq() > 0 && p.catch_up_seqs_size() > 0)) {
    return false;
  }
  for (const auto& r : p.catch_up_seqs()) catch_up.emplace_back(r.first(), r.last());
  return wire::valid_seq_ranges(catch_up, std::numeric_limits<std::uint64_t>::max());
}

bool receiver_engine::within_limits(const wire::session_params& p, session_id id,
                                    const endpoint& from) {
  // Totals first, before anything is allocated: the declared files and blocks must fit the
  // limits and the session's memory budget (file table and block maps at their full size).
  const std::uint64_t blocks = p.total_bytes() / p.block_size() + p.file_count();
  const std::uint64_t need = session_overhead_bytes +
                             manifest_assembler::state_bytes(p.manifest_chunks(), p.file_count()) +
                             std::uint64_t{p.file_count()} * sizeof(file_rx) + bitmap_bytes(blocks);
  if (p.file_count() > std::min(m_cfg.max_files, max_files_per_session) ||
      need > m_cfg.session_memory_bytes) {
    m_stats.drops.add(errc::over_budget);
    if (m_log) {
      m_log->warn(
          "session {} from {}: refused: {} files, {} bytes in {}-byte blocks would "
          "need {} bytes of state, over the session budget of {} (session_memory_bytes) "
          "or the file limit {}",
          id, from.address_string(), p.file_count(), p.total_bytes(), p.block_size(), need,
          m_cfg.session_memory_bytes, m_cfg.max_files);
    }
    return false;
  }
  if (!m_sessions.admits(from, m_cfg.max_sessions, m_cfg.max_sessions_per_source)) {
    m_stats.drops.add(errc::too_many_sessions);
    return false;
  }
  return true;
}

receiver_engine::session_rx& receiver_engine::open_session(
    const wire::session_params& p, session_id id, const endpoint& from, std::uint32_t channel,
    const std::string& signer, std::vector<wire::seq_span> catch_up, time_point now) {
  auto owned = std::make_unique<session_rx>(p.block_size(), m_cfg.max_nak_datagrams, m_id_hash);
  session_rx& s = *owned;
  s.id = id;
  s.sender = from;
  s.channel = channel;
  s.file_count = p.file_count();
  s.chunks = p.manifest_chunks();
  s.total_bytes = p.total_bytes();
  s.sender_name = printable(p.sender_name().substr(0, 64));
  s.seq_channel = p.channel();
  s.seq = p.channel_seq();
  s.catch_up = std::move(catch_up);
  // Parity repairs: a shape the codec cannot have means no FEC here (explicit NAKs still work).
  s.parity = parity_repair(p.fec_k(), p.fec_max_parity(), p.fec_depth(), s.block_size);
  if (!s.seq_channel.empty()) s.seq_source = sequence_book::source_of(signer, p.sender_name());
  s.silent_passes = p.silent_passes();
  s.silent = p.silent_passes() > 0 ||
             (channel < m_cfg.silent_channels.size() && m_cfg.silent_channels[channel]);
  s.manifest = manifest_assembler(p, sizeof(file_rx));
  s.started = now;
  return m_sessions.insert(id, std::move(owned));
}

void receiver_engine::handle_announce(const wire::announce& m, session_id id, const endpoint& from,
                                      std::uint32_t channel, time_point now) {
  const auto& p = m.params();
  session_rx* s = find(id);
  if (!s) {
    if (m_sessions.ended(id)) {
      m_stats.drops.add(errc::stale);
      return;
    }
    if (!new_session(m, id, from, channel, now)) return;
    s = find(id);
    if (p.has_unicast_start()) note_unicast_start(*s, p, from);
  } else {
    if (!same_host(from, s->sender)) {
      m_stats.drops.add(errc::wrong_source);
      return;
    }
    if (p.block_size() != s->block_size || p.file_count() != s->file_count ||
        p.manifest_chunks() != s->chunks || p.total_bytes() != s->total_bytes) {
      m_stats.drops.add(errc::invalid_field);
      return;
    }
  }
  s->last_heard = now;
  s->echo_us = m.sender_time_us();
  s->echo_at = now;
  s->grtt = std::min(from_us(p.grtt_us()), m_cfg.max_grtt);
  s->sender.port = from.port;
  if (s->state == session_rx::state_t::manifest) take_chunk(*s, m, now);
}

void receiver_engine::take_chunk(session_rx& s, const wire::announce& m, time_point now) {
  switch (s.manifest.admit(m, m_budget, s.id)) {
    case manifest_assembler::fit::ignored: return;
    case manifest_assembler::fit::invalid: m_stats.drops.add(errc::invalid_field); return;
    // The chunk is not taken: a later copy may fit once other sessions end.
    case manifest_assembler::fit::over_budget: m_stats.drops.add(errc::over_budget); return;
    case manifest_assembler::fit::admitted: break;
  }
  s.files.grow(s.manifest.table_capacity(), s.manifest.table_size());
  std::vector<taken_entry> taken;
  const auto progress = s.manifest.take(m, m_budget, s.id, taken);
  for (auto& t : taken) {
    // Blocks of a file are taken as soon as its entry is known, even before the manifest is
    // complete and registration done: the sender does not wait a round trip for those.
    const std::uint32_t f = t.index;
    const errc why = t.refused;
    if (!s.files.take(std::move(t))) continue;
    ++m_stats.files_refused;
    if (m_log) {
      m_log->warn("session {}: refused file {} path '{}': {}", s.name(), f,
                  printable(s.files[f].entry.path), make_error_code(why).message());
    }
  }
  if (progress == manifest_assembler::progress::malformed) {
    if (m_log) {
      m_log->error("session {}: manifest chunks do not cover every file; ignoring the session",
                   s.name());
    }
    m_stats.drops.add(errc::invalid_field);
    close_session(s, false, "malformed manifest", now);
    return;
  }
  if (progress == manifest_assembler::progress::complete) manifest_complete(s, now);
}

void receiver_engine::manifest_complete(session_rx& s, time_point now) {
  // Two entries may not name the same file, nor may a file sit where another entry needs a
  // directory: the second of each pair is refused.
  for (const auto& [i, begun] : s.files.close_manifest()) {
    if (begun) m_store.discard_file({s.id, file_index{i}});
    ++m_stats.files_refused;
    if (m_log) {
      m_log->warn(
          "session {}: refused file {} path '{}': conflicts with another file of the "
          "manifest",
          s.name(), i, printable(s.files[i].entry.path));
    }
  }
  s.state = session_rx::state_t::checking_held;
  std::vector<held_query> q;
  for (std::uint32_t i = 0; i < s.file_count; ++i) {
    const auto& fr = s.files[i];
    if (fr.state != file_rx::state_t::receiving) continue;
    q.push_back({file_index{i}, fr.entry.path, fr.entry.size, fr.entry.mtime_ns});
  }
  if (q.empty()) {
    on_held(s.id, {}, now);
  } else {
    m_store.query_held(s.id, s.channel, std::move(q));
  }
}

void receiver_engine::on_held(session_id id, const std::vector<held_answer>& held, time_point now) {
  session_rx* s = find(id);
  if (!s || s->state != session_rx::state_t::checking_held) return;
  for (const auto& [f, digest] : held) {
    if (f.value >= s->file_count) continue;
    auto& fr = s->files[f.value];
    if (fr.state != file_rx::state_t::receiving) continue;
    if (fr.entry.digest) {
      if (*fr.entry.digest == digest && s->files.hold(f.value)) m_store.discard_file({s->id, f});
    } else {
      fr.held_digest = digest;
    }
  }
  // Files whose every block arrived while the manifest was being assembled.
  for (std::uint32_t i = 0; i < s->file_count; ++i) {
    auto& fr = s->files[i];
    if (fr.state == file_rx::state_t::receiving && fr.blocks > 0 && fr.all_received()) {
      file_data_complete(*s, i);
    }
  }
  if (s->silent) {
    // No registration: the blocks are taken and the files delivered as they complete. The
    // channel's numbering learns of the session all the same, so one that ends short stays
    // missing for the heartbeats and the catch-up over HTTP.
    open_sequence(*s);
    start_receiving(*s, now);
    return;
  }
  s->state = session_rx::state_t::registering;
  send_register(*s, now);
}

void receiver_engine::open_sequence(session_rx& s) {
  if (s.seq == 0 || s.seq_report) return;
  s.seq_report = m_sequences.on_session(s.seq_channel, s.seq_source, s.seq);
  if (s.seq_report->reset && m_log) {
    m_log->warn(
        "session {}: channel {} from {}: session number {} is below {} seen before "
        "(the sender's numbering was reset); starting this channel's sequence over",
        s.name(), s.seq_channel, s.seq_source, s.seq, s.seq_report->previous_seen);
  } else if (!s.seq_report->missing.empty() && m_log) {
    std::string ranges;
    for (const auto& [first, last] : s.seq_report->missing) {
      ranges += (ranges.empty() ? "" : ",") + std::to_string(first) +
                (first == last ? "" : "-" + std::to_string(last));
    }
    m_log->warn(
        "session {}: channel {} session {}: never completed sessions {}; {}", s.name(),
        s.seq_channel, s.seq, ranges,
        s.silent ? "a catch-up over another path must bring them" : "reporting them for catch-up");
  }
}

void receiver_engine::send_register(session_rx& s, time_point now) {
  if (s.silent) {
    ++m_stats.silent_suppressed;
    return;
  }
  wire::register_request m;
  m.set_receiver_id(m_cfg.id);
  set_echo(m, s, now);
  if (s.seq > 0) {
    open_sequence(s);
    m.set_last_seq(s.seq_report->last_seq);
    for (const auto& [first, last] : s.seq_report->missing) {
      auto* r = m.add_missing_seqs();
      r->set_first(first);
      r->set_last(last);
    }
  }
  // The sequence report goes first; the held files fill what is left of the budget.
  s.files.add_held(m);
  const auto bytes = encode(wire::msg_type::register_request, s.id, m);
  m_sink.send(s.sender, bytes);
  // Served over unicast from the start: the association (or the connections) opens now, its
  // handshake overlapping the REGISTER -> FALLBACK round trip. REGISTER leaves first, so on a
  // slow link the FALLBACK order reaches us ahead of the INIT ACK and the hello and the
  // requests go with the COOKIE ECHO (RFC 9260 section 5.1).
  if (s.register_sends == 0) {
    if (const unicast_order* o = s.unicast.prepare()) m_sink.prepare_unicast(s.id, *o);
  }
  // Retransmit soon, then back off to the GRTT: before the sender has measured anyone its
  // GRTT is a 0.5 s guess, and a lost REGISTER should not cost a second. Jittered, so that
  // receivers restarted together do not retry together.
  s.next_register = now + register_retry_delay(s.register_sends, m_cfg.retransmit_min,
                                               retransmit_interval(s), random());
  if (s.register_sends == 0) s.register_sent = now;
  ++s.register_sends;
}

void receiver_engine::note_register_answer(session_rx& s, time_point now) {
  if (s.state == session_rx::state_t::registering && s.register_sends == 1) {
    s.register_rtt = now - s.register_sent;
  }
}

void receiver_engine::handle_register_reply(session_rx& s, const wire::register_reply& m,
                                            time_point now) {
  if (m.receiver_id() != m_cfg.id || s.state != session_rx::state_t::registering) return;
  note_register_answer(s, now);
  if (!m.accepted()) {
    if (m_log) {
      m_log->warn("session {}: sender {} refused our registration: {}", s.name(),
                  s.sender.address_string(), printable(m.reason()));
    }
    close_session(s, false, "registration refused", now);
    return;
  }
  start_receiving(s, now);
}

void receiver_engine::start_receiving(session_rx& s, time_point now) {
  s.state = session_rx::state_t::receiving;
  s.next_checkpoint = now + m_cfg.checkpoint_interval;
  // Markers seen while registering moved the NAK position, but their rounds were dropped
  // (on_timer: the sender ignores a receiver it does not know). The first round from here
  // starts at the beginning of the pass, so the holes of what arrived during registration
  // (a GRTT's worth of data when pass 1 starts while registration is open) are NAKed now,
  // not at the next pass's full scan a round trip later, with hashing stalled behind them.
  s.naks.restart_scan();
  if (m_log) {
    m_log->info("session {}: {}; {} files to receive, {} already held", s.name(),
                s.silent ? "silent, receiving without registration" : "registered", s.files.open(),
                s.files.held());
  }
  for (std::uint32_t i = 0; i < s.file_count; ++i) {
    auto& fr = s.files[i];
    if (fr.state != file_rx::state_t::receiving) continue;
    if (fr.blocks == 0) {
      file_data_complete(s, i);
    } else {
      // NAKs and the unicast fallback read every receiving file's block map from here on.
      ensure_block_map(s, i, now);
    }
  }
  file_done(s, now);
}

}  // namespace mcdist::receiver
