#include "receiver/core/receiver_engine.hpp"

#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

receiver_engine::receiver_engine(receiver_config cfg, receiver_sink& sink, storage_port& store,
                                 std::uint64_t seed, std::shared_ptr<spdlog::logger> log)
    : m_cfg(std::move(cfg)), m_sink(sink), m_store(store), m_log(std::move(log)), m_rng_state(seed),
      m_id_hash(nak_scheduler::id_hash(m_cfg.id)),
      m_budget(m_cfg.session_memory_bytes, m_cfg.total_memory_bytes) {}

receiver_engine::~receiver_engine() = default;

std::uint64_t receiver_engine::random() noexcept {
  std::uint64_t z = (m_rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::size_t receiver_engine::active_sessions() const noexcept { return m_sessions.size(); }

std::size_t receiver_engine::active_sessions_on(std::uint32_t channel) const noexcept {
  return static_cast<std::size_t>(
      std::count_if(m_sessions.begin(), m_sessions.end(),
                    [channel](const auto& kv) { return kv.second->channel == channel; }));
}

std::optional<std::uint32_t> receiver_engine::channel_of(session_id s) const noexcept {
  const auto it = m_sessions.find(s);
  if (it == m_sessions.end()) return std::nullopt;
  return it->second->channel;
}

bool receiver_engine::manifest_complete(session_id s) const noexcept {
  const auto it = m_sessions.find(s);
  return it != m_sessions.end() && it->second->state != session_rx::state_t::manifest;
}

receiver_engine::session_rx* receiver_engine::find(session_id s) {
  const auto it = m_sessions.find(s);
  return it == m_sessions.end() ? nullptr : it->second.get();
}

duration receiver_engine::retransmit_interval(const session_rx& s) const {
  return std::max(s.grtt * 2, m_cfg.retransmit_min);
}

duration receiver_engine::session_timeout(const session_rx& s) const {
  return std::max(m_cfg.session_timeout, s.grtt * 10);
}

void receiver_engine::add_tombstone(session_id id, time_point until) {
  m_tombstones[id] = until;
  m_tombstone_order.emplace_back(id, until);
  // Forget the oldest past the cap; entries of ids re-added or expired since are skipped.
  while (m_tombstones.size() > m_cfg.max_tombstones && !m_tombstone_order.empty()) {
    const auto [old, at] = m_tombstone_order.front();
    m_tombstone_order.pop_front();
    const auto it = m_tombstones.find(old);
    if (it != m_tombstones.end() && it->second == at) m_tombstones.erase(it);
  }
  // The order list holds at most twice the cap: drop entries that no longer match.
  if (m_tombstone_order.size() > 2 * m_cfg.max_tombstones + 16) {
    std::erase_if(m_tombstone_order, [this](const auto& e) {
      const auto it = m_tombstones.find(e.first);
      return it == m_tombstones.end() || it->second != e.second;
    });
  }
}

void receiver_engine::on_datagram(std::span<const std::byte> datagram, const endpoint& from,
                                  std::uint32_t channel, time_point now) {
  ++m_stats.datagrams;
  // The datagram boundary: an allocation that fails while handling one datagram costs that
  // datagram, never the daemon (budgets make it rare; this makes it harmless).
  try {
    dispatch(datagram, from, channel, now);
  } catch (const std::bad_alloc&) {
    m_stats.drops.add(errc::out_of_memory);
    if (m_log)
      m_log->error("out of memory while handling a datagram from {}; dropped it",
                   from.address_string());
  } catch (const std::length_error&) {
    m_stats.drops.add(errc::out_of_memory);
  }
}

void receiver_engine::dispatch(std::span<const std::byte> datagram, const endpoint& from,
                               std::uint32_t channel, time_point now) {
  wire::header h;
  if (auto ec = wire::parse_header(datagram, h)) {
    m_stats.drops.add(static_cast<errc>(ec.value()));
    return;
  }
  if (h.type == wire::msg_type::data) {
    handle_data(datagram, from, now);
    return;
  }
  if (h.type == wire::msg_type::parity) {
    handle_parity(datagram, from, now);
    return;
  }
  if (h.type == wire::msg_type::announce) {
    if (channel == control_channel) {
      // Announces come from the channel's group; one sent straight to our reply port is not
      // from a sender on the channel.
      m_stats.drops.add(errc::wrong_socket);
      return;
    }
    wire::announce m;
    if (wire::parse_control(datagram, m)) {
      m_stats.drops.add(errc::bad_protobuf);
      return;
    }
    handle_announce(m, h.session, from, channel, now);
    return;
  }
  session_rx* s = find(h.session);
  if (!s) {
    m_stats.drops.add(m_tombstones.count(h.session) ? errc::stale : errc::unknown_session);
    return;
  }
  if (!same_host(from, s->sender)) {
    m_stats.drops.add(errc::wrong_source);
    return;
  }
  auto parse = [&](auto& msg) {
    if (wire::parse_control(datagram, msg)) {
      m_stats.drops.add(errc::bad_protobuf);
      return false;
    }
    s->last_heard = now;
    return true;
  };
  switch (h.type) {
    case wire::msg_type::marker: {
      wire::marker m;
      if (parse(m)) handle_marker(*s, m, now);
      break;
    }
    case wire::msg_type::digest_list: {
      wire::digest_list m;
      if (parse(m)) handle_digests(*s, m, now);
      break;
    }
    case wire::msg_type::register_reply: {
      wire::register_reply m;
      if (parse(m)) handle_register_reply(*s, m, now);
      break;
    }
    case wire::msg_type::complete_ack: {
      wire::complete_ack m;
      if (parse(m)) {
        if (m.receiver_id() == m_cfg.id) handle_complete_ack(*s, now);
      }
      break;
    }
    case wire::msg_type::session_end: {
      wire::session_end m;
      if (parse(m)) handle_end(*s, m, now);
      break;
    }
    case wire::msg_type::fallback: {
      wire::fallback m;
      if (parse(m)) handle_fallback(*s, m, from, now);
      break;
    }
    case wire::msg_type::repair_advert: {
      wire::repair_advert m;
      if (parse(m)) handle_advert(*s, m, now);
      break;
    }
    default: m_stats.drops.add(errc::unknown_type); break;
  }
}

bool receiver_engine::new_session(const wire::announce& m, session_id id, const endpoint& from,
                                  std::uint32_t channel, time_point now) {
  const auto& p = m.params();
  if (p.block_size() < wire::min_block_size || p.block_size() > wire::max_block_size ||
      p.manifest_chunks() == 0 ||
      p.manifest_chunks() > std::max<std::uint32_t>(1, p.file_count())) {
    m_stats.drops.add(errc::invalid_field);
    return false;
  }
  // Session numbering: a channel name we can key state by, ranges within the limits.
  std::vector<wire::seq_span> catch_up;
  if (static_cast<std::size_t>(p.catch_up_seqs_size()) > wire::max_seq_ranges ||
      (!p.channel().empty() && !wire::valid_channel_name(p.channel())) ||
      ((p.channel_seq() > 0 || p.catch_up_seqs_size() > 0) && p.channel().empty()) ||
      (p.channel_seq() > 0 && p.catch_up_seqs_size() > 0)) {
    m_stats.drops.add(errc::invalid_field);
    return false;
  }
  for (const auto& r : p.catch_up_seqs()) catch_up.emplace_back(r.first(), r.last());
  if (!wire::valid_seq_ranges(catch_up, std::numeric_limits<std::uint64_t>::max())) {
    m_stats.drops.add(errc::invalid_field);
    return false;
  }
  if (p.only_receivers_size() > 0 && std::find(p.only_receivers().begin(), p.only_receivers().end(),
                                               m_cfg.id) == p.only_receivers().end()) {
    add_tombstone(id, now + m_cfg.session_timeout);
    if (m_log) {
      m_log->info("session {} from {}: a resend for other receivers; not taking part", id,
                  from.address_string());
    }
    return false;
  }
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
  if (m_sessions.size() >= m_cfg.max_sessions) {
    m_stats.drops.add(errc::too_many_sessions);
    return false;
  }
  const auto from_here = std::count_if(m_sessions.begin(), m_sessions.end(), [&](const auto& kv) {
    return same_host(kv.second->sender, from);
  });
  if (static_cast<std::uint64_t>(from_here) >= m_cfg.max_sessions_per_source) {
    m_stats.drops.add(errc::too_many_sessions);
    return false;
  }
  // What is allocated now: the session and its two manifest bitmaps. The file table grows
  // with the entries, block maps come with the blocks; each is charged as it is allocated.
  const std::uint64_t now_bytes =
      session_overhead_bytes + manifest_assembler::state_bytes(p.manifest_chunks(), p.file_count());
  if (!m_budget.charge(id, now_bytes)) {
    m_stats.drops.add(errc::over_budget);
    return false;
  }
  auto owned = std::make_unique<session_rx>();
  session_rx* s = owned.get();
  s->id = id;
  s->sender = from;
  s->channel = channel;
  s->block_size = p.block_size();
  s->file_count = p.file_count();
  s->chunks = p.manifest_chunks();
  s->total_bytes = p.total_bytes();
  s->sender_name = printable(p.sender_name().substr(0, 64));
  s->seq_channel = p.channel();
  s->seq = p.channel_seq();
  s->catch_up = std::move(catch_up);
  // Parity repairs: a shape the codec cannot have means no FEC here (explicit NAKs still work).
  if (p.fec_k() > 0 && p.fec_max_parity() > 0 && p.fec_k() < fec::max_blocks &&
      p.fec_max_parity() < fec::max_blocks && p.fec_k() + p.fec_max_parity() <= fec::max_blocks &&
      p.fec_depth() >= 1 && p.fec_depth() <= fec::max_depth) {
    s->fec_k = p.fec_k();
    s->fec_max_parity = p.fec_max_parity();
    s->fec_depth = p.fec_depth();
  }
  if (!s->seq_channel.empty()) {
    s->seq_source = sequence_book::source_of(m_sink.sender_key(id), p.sender_name());
  }
  s->silent_passes = p.silent_passes();
  s->silent = p.silent_passes() > 0 ||
              (channel < m_cfg.silent_channels.size() && m_cfg.silent_channels[channel]);
  s->manifest = manifest_assembler(p, sizeof(file_rx));
  s->started = now;
  m_sessions.emplace(id, std::move(owned));
  if (m_log) {
    m_log->info(
        "session {} from {} ({}): {} files, {} bytes announced, block {} bytes, rate {} "
        "bit/s{}",
        s->name(), from.address_string(), s->sender_name, s->file_count, s->total_bytes,
        s->block_size, p.rate_bps(),
        !s->silent ? std::string()
        : s->silent_passes > 0
            ? fmt::format("; silent session of {} passes: this site sends nothing",
                          s->silent_passes)
            : std::string("; silent channel: this site sends nothing"));
  }
  return true;
}

bool receiver_engine::ensure_block_map(session_rx& s, std::uint32_t f, time_point now) {
  auto& fr = s.files[f];
  if (fr.blocks == 0 || fr.received.size() == fr.blocks) return true;
  if (!m_budget.charge(s.id, bitmap_bytes(fr.blocks))) {
    fail_file(s, f, errc::over_budget,
              "its block map (" + std::to_string(bitmap_bytes(fr.blocks)) +
                  " bytes) does not fit the memory budget (session_memory_bytes, "
                  "total_memory_bytes)",
              now);
    return false;
  }
  fr.received = block_map(fr.blocks);
  return true;
}

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

void receiver_engine::handle_announce(const wire::announce& m, session_id id, const endpoint& from,
                                      std::uint32_t channel, time_point now) {
  const auto& p = m.params();
  session_rx* s = find(id);
  if (!s) {
    if (m_tombstones.count(id)) {
      m_stats.drops.add(errc::stale);
      return;
    }
    if (!new_session(m, id, from, channel, now)) return;
    s = find(id);
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
  if (s->state != session_rx::state_t::manifest) return;
  switch (s->manifest.admit(m, m_budget, s->id)) {
    case manifest_assembler::fit::ignored: return;
    case manifest_assembler::fit::invalid: m_stats.drops.add(errc::invalid_field); return;
    // The chunk is not taken: a later copy may fit once other sessions end.
    case manifest_assembler::fit::over_budget: m_stats.drops.add(errc::over_budget); return;
    case manifest_assembler::fit::admitted: break;
  }
  s->files.reserve(s->manifest.table_capacity());
  s->files.resize(s->manifest.table_size());
  std::vector<taken_entry> taken;
  const auto progress = s->manifest.take(m, m_budget, s->id, taken);
  for (auto& t : taken) {
    auto& fr = s->files[t.index];
    fr.entry = std::move(t.entry);
    if (t.refused != errc::ok) {
      fr.state = file_rx::state_t::refused;
      fr.failure = std::string(to_string(t.refused));
      ++m_stats.files_refused;
      if (m_log) {
        m_log->warn("session {}: refused file {} path '{}': {}", s->name(), t.index,
                    printable(fr.entry.path), make_error_code(t.refused).message());
      }
    } else {
      // Blocks of a file are taken as soon as its entry is known, even before the manifest is
      // complete and registration done: the sender does not wait a round trip for those.
      fr.blocks = t.blocks;
      fr.state = file_rx::state_t::receiving;
    }
  }
  if (progress == manifest_assembler::progress::malformed) {
    if (m_log) {
      m_log->error("session {}: manifest chunks do not cover every file; ignoring the session",
                   s->name());
    }
    m_stats.drops.add(errc::invalid_field);
    close_session(*s, false, "malformed manifest", now);
    return;
  }
  if (progress == manifest_assembler::progress::complete) manifest_complete(*s, now);
}

void receiver_engine::manifest_complete(session_rx& s, time_point now) {
  // Two entries may not name the same file, nor may a file sit where another entry needs a
  // directory: the second of each pair is refused.
  std::unordered_set<std::string_view> paths;
  std::unordered_set<std::string_view> dirs;
  for (std::uint32_t i = 0; i < s.file_count; ++i) {
    auto& fr = s.files[i];
    if (fr.state == file_rx::state_t::refused) continue;
    const std::string_view path = fr.entry.path;
    if (fr.state == file_rx::state_t::failed) {
      // Failed while the manifest was assembled (storage, budget): its path still counts.
      paths.insert(path);
      continue;
    }
    bool conflict = paths.count(path) > 0 || dirs.count(path) > 0;
    for (std::size_t pos = path.find('/'); !conflict && pos != std::string_view::npos;
         pos = path.find('/', pos + 1)) {
      conflict = paths.count(path.substr(0, pos)) > 0;
    }
    if (conflict) {
      if (fr.begun) m_store.discard_file({s.id, file_index{i}});
      fr.begun = false;
      fr.state = file_rx::state_t::refused;
      fr.failure = "path_conflict";
      ++m_stats.files_refused;
      if (m_log) {
        m_log->warn(
            "session {}: refused file {} path '{}': conflicts with another file of the "
            "manifest",
            s.name(), i, printable(path));
      }
      continue;
    }
    paths.insert(path);
    for (std::size_t pos = path.find('/'); pos != std::string_view::npos;
         pos = path.find('/', pos + 1)) {
      dirs.insert(path.substr(0, pos));
    }
    ++s.files_open;
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
      if (*fr.entry.digest == digest) {
        if (fr.begun) m_store.discard_file({s->id, f});
        fr.begun = false;
        fr.state = file_rx::state_t::held;
        --s->files_open;
        ++s->files_held;
      }
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
    // No registration: the blocks are taken and the files delivered as they complete.
    start_receiving(*s, now);
    return;
  }
  s->state = session_rx::state_t::registering;
  send_register(*s, now);
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
    if (!s.seq_report) {
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
            "session {}: channel {} session {}: never completed sessions {}; reporting "
            "them for catch-up",
            s.name(), s.seq_channel, s.seq, ranges);
      }
    }
    m.set_last_seq(s.seq_report->last_seq);
    for (const auto& [first, last] : s.seq_report->missing) {
      auto* r = m.add_missing_seqs();
      r->set_first(first);
      r->set_last(last);
    }
  }
  std::vector<std::uint32_t> held;
  range_encoder enc(held);
  std::size_t budget = wire::control_budget - wire::header_size - 100;
  // The sequence report goes first; the held-file runs fill what is left of the budget.
  budget -= std::min(budget, m.ByteSizeLong());
  for (std::uint32_t i = 0; i < s.file_count && budget > 40;) {
    if (s.files[i].state != file_rx::state_t::held) {
      ++i;
      continue;
    }
    std::uint32_t j = i;
    while (j < s.file_count && s.files[j].state == file_rx::state_t::held) ++j;
    budget -= std::min(budget, enc.cost(i, j - i));
    enc.add(i, j - i);
    i = j;
  }
  for (const auto v : held) m.add_held_files(v);
  for (std::uint32_t i = 0; i < s.file_count && budget > 40; ++i) {
    const auto& fr = s.files[i];
    if (fr.held_digest && fr.state == file_rx::state_t::receiving) {
      auto* hd = m.add_held_pending();
      hd->set_file(i);
      hd->set_sha256(fr.held_digest->data(), 32);
      budget -= 40;
    }
  }
  const auto bytes = encode(wire::msg_type::register_request, s.id, m);
  m_sink.send(s.sender, bytes);
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
  if (m_log) {
    m_log->info("session {}: {}; {} files to receive, {} already held", s.name(),
                s.silent ? "silent, receiving without registration" : "registered", s.files_open,
                s.files_held);
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

receiver_engine::session_rx* receiver_engine::receiving_session(session_id id,
                                                                const endpoint& from) {
  session_rx* s = find(id);
  if (!s) {
    m_stats.drops.add(m_tombstones.count(id) ? errc::stale : errc::unknown_session);
    return nullptr;
  }
  if (!same_host(from, s->sender)) {
    m_stats.drops.add(errc::wrong_source);
    return nullptr;
  }
  if (s->state == session_rx::state_t::completing || s->unicast) {
    m_stats.drops.add(errc::duplicate);
    return nullptr;
  }
  return s;
}

void receiver_engine::handle_data(std::span<const std::byte> datagram, const endpoint& from,
                                  time_point now) {
  wire::data_header h;
  std::span<const std::byte> payload;
  if (auto ec = wire::parse_data(datagram, h, payload)) {
    m_stats.drops.add(static_cast<errc>(ec.value()));
    return;
  }
  session_rx* s = receiving_session(h.session, from);
  if (!s) return;
  // Every datagram of the session counts for the loss event rate, wanted or not (a repair
  // for another receiver is not a loss here).
  note_seq(*s, h.seq, now);
  if (h.file.value >= s->file_count) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  if (h.file.value >= s->files.size()) {
    m_stats.drops.add(errc::stale);  // its entry has not arrived yet
    return;
  }
  auto& fr = s->files[h.file.value];
  if (fr.state != file_rx::state_t::receiving) {
    m_stats.drops.add(fr.terminal() || fr.state == file_rx::state_t::finalizing ||
                              fr.state == file_rx::state_t::awaiting_digest
                          ? errc::duplicate
                          : errc::stale);
    return;
  }
  if (h.block.value >= fr.blocks ||
      payload.size() != block_length(fr.entry.size, s->block_size, h.block.value)) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  s->last_heard = now;
  if (seq_after(h.seq, s->seen_seq)) s->seen_seq = h.seq;
  if (!ensure_block_map(*s, h.file.value, now)) {
    m_stats.drops.add(errc::over_budget);
    return;
  }
  if (fr.received.test(h.block.value)) {
    m_stats.drops.add(errc::duplicate);
    return;
  }
  if (!fr.begun) {
    m_store.begin_file({s->id, h.file}, s->channel, fr.entry, fr.resume);
    fr.begun = true;
  }
  if (!m_store.write({s->id, h.file}, std::uint64_t{h.block.value} * s->block_size, payload)) {
    m_stats.drops.add(errc::storage_full);
    return;
  }
  fr.received.set(h.block.value);
  s->bytes_received += payload.size();
  s->dirty = true;
  ++m_stats.data_blocks;
  m_stats.data_bytes += payload.size();
  if (s->fec) fec_source_added(*s, h.file.value, h.block.value, now);
  // Before the held check, a complete file waits (on_held finalizes it unless it is held).
  if (fr.received.all() && s->state != session_rx::state_t::manifest &&
      s->state != session_rx::state_t::checking_held) {
    file_data_complete(*s, h.file.value);
    file_done(*s, now);
  }
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

void receiver_engine::handle_marker(session_rx& s, const wire::marker& m, time_point now) {
  s.echo_us = m.sender_time_us();
  s.echo_at = now;
  s.grtt = std::min(from_us(m.grtt_us()), m_cfg.max_grtt);
  s.feedback.on_marker(from_us(std::min<std::uint32_t>(m.nak_backoff_us(), 10'000'000)),
                       m.group_size());
  s.digests_through = std::min(m.digests_through(), s.file_count);
  if (s.state == session_rx::state_t::completing) {
    // Answered until acknowledged, but not again before the last COMPLETE's acknowledgement
    // had time to come back (a status request sent before the sender got it).
    if (m.status_request() && now - s.complete_sent >= s.grtt) send_complete(s, now);
    return;
  }
  if (s.state != session_rx::state_t::receiving && s.state != session_rx::state_t::registering) {
    return;
  }
  if (!s.silent) on_rate_marker(s, m, now);
  if (m.file() > s.file_count || (m.file() == s.file_count && m.block() != 0)) {
    m_stats.drops.add(errc::invalid_field);
    return;
  }
  const bool newer =
      seq_after(m.pass(), s.marker_pass) ||
      (m.pass() == s.marker_pass &&
       (m.file() > s.marker_file || (m.file() == s.marker_file && m.block() >= s.marker_block)));
  if (!newer) return;
  if (m.pass() != s.marker_pass) {
    // A new pass: NAK from its start again; rounds and hints of the old pass are void.
    s.marker_pass_end = false;
    s.feedback.clear();
    s.rounds.clear();
    s.nak_file = 0;
    s.nak_block = 0;
  }
  s.marker_pass = m.pass();
  s.marker_file = m.file();
  s.marker_block = m.block();
  if (seq_after(m.seq(), s.marker_seq) || s.marker_seq == 0) s.marker_seq = m.seq();
  s.marker_pass_end = s.marker_pass_end || m.pass_end();
  // A silent site keeps the sender's progress (FEC blocks whose sources are all sent) and
  // schedules no NAK round.
  if (s.silent) return;
  nak_round r;
  // The sender is idle and asking again at the end of a pass we already answered: our NAKs
  // were lost, or its repairs were (or a repair it advertised). NAK everything still missing.
  const bool rescan = m.pass_end() && s.pass_end_answered == m.pass();
  if (rescan) s.feedback.clear();
  if (!rescan && !s.unicast) {
    r.from_file = s.nak_file;
    r.from_block = s.nak_block;
  } else if (s.unicast) {
    // Data comes over unicast; NAK only for digests and, when asked, as a sign of life.
    r.from_file = s.marker_file;
    r.from_block = s.marker_block;
  }
  r.to_file = s.marker_file;
  r.to_block = s.marker_block;
  r.pass_end = s.marker_pass_end;
  r.status = m.status_request();
  r.status_slices = m.status_slices();
  r.status_slice = m.status_slice();
  const bool covers =
      r.from_file < r.to_file || (r.from_file == r.to_file && r.from_block < r.to_block);
  s.nak_file = s.marker_file;
  s.nak_block = s.marker_block;
  if (!covers && !r.status && !rescan) return;
  r.due = now + s.feedback.draw_delay(random());
  if (s.rounds.size() >= max_nak_rounds) {
    // Bounded: the newest pending round takes this one's blocks too.
    auto& last = s.rounds.back();
    last.to_file = r.to_file;
    last.to_block = r.to_block;
    last.pass_end = last.pass_end || r.pass_end;
    last.status = last.status || r.status;
  } else {
    s.rounds.push_back(r);
  }
  if (!s.nak_due || r.due < *s.nak_due) s.nak_due = r.due;
}

void receiver_engine::handle_advert(session_rx& s, const wire::repair_advert& m, time_point) {
  if (s.state != session_rx::state_t::receiving || s.unicast) return;
  // Check everything before taking anything (a hint, but from the network).
  for (const auto& fn : m.files()) {
    if (fn.file() >= s.file_count || fn.file() >= s.files.size() ||
        for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                       s.files[fn.file()].blocks, [](std::uint32_t, std::uint32_t) {})) {
      m_stats.drops.add(errc::invalid_field);
      return;
    }
  }
  for (const auto& fn : m.files()) {
    for_each_range(std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
                   s.files[fn.file()].blocks, [&](std::uint32_t first, std::uint32_t count) {
                     s.feedback.advertise(m.pass(), s.marker_pass, fn.file(), first, count);
                   });
  }
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
    if (s->unicast && !s->unicast_active) s->next_unicast = now;
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

void receiver_engine::handle_complete_ack(session_rx& s, time_point now) {
  if (s.state == session_rx::state_t::completing) close_session(s, true, {}, now);
}

void receiver_engine::handle_end(session_rx& s, const wire::session_end& m, time_point now) {
  if (s.state == session_rx::state_t::completing) {
    close_session(s, true, {}, now);
    return;
  }
  close_session(s, false,
                m.reason() == wire::session_end::ABORTED
                    ? "the sender aborted the session"
                    : "the sender ended the session before this receiver completed",
                now);
}

void receiver_engine::close_session(session_rx& s, bool success, const std::string& why,
                                    time_point now) {
  if (success) {
    ++m_stats.sessions_completed;
  } else {
    ++m_stats.sessions_failed;
    if (s.silent) record_incomplete(s, why);
    if (m_log && !why.empty()) {
      std::uint32_t missing = 0;
      for (const auto& fr : s.files) {
        if (!fr.terminal()) ++missing;
      }
      m_log->warn("session {}: given up: {}; {} of {} files not delivered", s.name(), why, missing,
                  s.file_count);
    }
  }
  if (s.unicast_active) m_sink.stop_unicast(s.id);
  // Files already handed to the finalizer are renamed into place whatever happens to the
  // session now; their outcomes still arrive (on_file_stored) and are reported then.
  for (std::size_t i = 0; i < s.files.size(); ++i) {
    const auto& fr = s.files[i];
    if (fr.state != file_rx::state_t::finalizing) continue;
    m_late_files[{s.id.value, static_cast<std::uint32_t>(i)}] =
        late_file{s.channel, fr.entry.path, fr.entry.size, fr.entry.mtime_ns, fr.entry.digest};
  }
  m_store.close_session(s.id, true);
  m_sink.session_closed(s.id, true);
  const session_id id = s.id;
  add_tombstone(id, now + session_timeout(s));
  m_sessions.erase(id);
  m_budget.release_session(id);
}

void receiver_engine::on_timer(time_point now) {
  for (auto it = m_tombstones.begin(); it != m_tombstones.end();) {
    it = it->second <= now ? m_tombstones.erase(it) : std::next(it);
  }
  while (!m_tombstone_order.empty() && m_tombstone_order.front().second <= now) {
    m_tombstone_order.pop_front();
  }
  std::vector<session_rx*> list;
  for (auto& [id, s] : m_sessions) list.push_back(s.get());
  for (session_rx* s : list) {
    const duration timeout = session_timeout(*s);
    if (now - s->last_heard >= timeout) {
      close_session(*s, false,
                    "nothing heard from the sender for " +
                        std::to_string(static_cast<int>(to_seconds(timeout))) + " s",
                    now);
      continue;
    }
    switch (s->state) {
      case session_rx::state_t::manifest:
      case session_rx::state_t::checking_held: break;
      case session_rx::state_t::registering:
        if (now >= s->next_register) send_register(*s, now);
        if (s->nak_due && now >= *s->nak_due) {
          s->nak_due.reset();
          s->rounds.clear();
        }
        break;
      case session_rx::state_t::receiving:
        if (s->unicast && !s->unicast_active && now >= s->next_unicast) {
          start_unicast_attempt(*s, now);
        }
        if (s->nak_due && now >= *s->nak_due) send_naks(*s, now);
        if (s->rate.due() && now >= *s->rate.due()) send_rate_report(*s, now);
        if (s->dirty && now >= s->next_checkpoint) do_checkpoint(*s, now);
        break;
      case session_rx::state_t::completing:
        if (now >= s->next_complete) {
          if (s->complete_sends >= m_cfg.max_complete_repeats) {
            close_session(*s, true, {}, now);
          } else {
            send_complete(*s, now);
          }
        }
        break;
    }
  }
}

std::optional<time_point> receiver_engine::next_deadline() const {
  std::optional<time_point> t;
  auto consider = [&t](time_point c) {
    if (!t || c < *t) t = c;
  };
  for (const auto& [id, s] : m_sessions) {
    consider(s->last_heard + session_timeout(*s));
    switch (s->state) {
      case session_rx::state_t::registering: consider(s->next_register); break;
      case session_rx::state_t::receiving:
        if (s->unicast && !s->unicast_active) consider(s->next_unicast);
        if (s->nak_due) consider(*s->nak_due);
        if (s->rate.due()) consider(*s->rate.due());
        if (s->dirty) consider(s->next_checkpoint);
        break;
      case session_rx::state_t::completing: consider(s->next_complete); break;
      default: break;
    }
  }
  return t;
}

}  // namespace mcdist::receiver
