#include "receiver/io/relay_downstream.hpp"

#include "common/sys/digest_xattr.hpp"
#include "common/sys/path_walk.hpp"
#include "common/sys/unique_fd.hpp"
#include "mcdist.pb.h"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace mcdist::receiver {

namespace {

/// The downstream session's settings: the upstream session's shape, served to an open group
/// (whoever registers with the relay) or to the sites `p` names, no unicast fallback of the
/// relay's own.
sender::sender_config downstream_config(session_id s, const wire::session_params& p,
                                        std::uint32_t run, std::vector<std::string> relays) {
  sender::sender_config c;
  c.relays = std::move(relays);
  c.session = s;
  c.block_size = p.block_size();
  c.rate_bps = p.rate_bps();
  // A relay's pass ends each time it runs out of what it holds: many more passes than the hub's
  // for the same losses, each one short.
  c.max_passes = relay_downstream::passes_per_run;
  if (run > 0) {
    c.wire_pass_offset = run * relay_downstream::passes_per_run;
    c.first_seq = run * relay_downstream::seqs_per_run;
    c.admit_on_feedback = true;
    c.register_window = relay_downstream::resume_window;
  }
  c.sender_name = p.sender_name();
  c.channel = p.channel();
  c.channel_seq = p.channel_seq();
  for (const auto& r : p.catch_up_seqs()) c.catch_up_seqs.emplace_back(r.first(), r.last());
  // Named by the relay: the sites whose gap reports a catch-up covers (relay_forwarder).
  c.only_receivers.assign(p.only_receivers().begin(), p.only_receivers().end());
  c.created_unix_ms = p.created_unix_ms();
  c.fec_k = p.fec_k();
  c.fec_max_parity = p.fec_max_parity();
  if (p.fec_depth() > 0) c.fec_depth = p.fec_depth();
  c.fallback = sender::fallback_mode::off;
  return c;
}

}  // namespace

bool signed_copies::keep(const wire::header& h, std::span<const std::byte> raw,
                         std::span<const std::byte> plain) {
  std::vector<std::byte>* slot = nullptr;
  std::size_t old = 0;
  switch (h.type) {
    case wire::msg_type::announce: {
      wire::announce a;
      if (wire::parse_control(plain, a) || a.params().manifest_chunks() == 0 ||
          a.chunk() >= a.params().manifest_chunks()) {
        return true;  // the engine refused it too
      }
      chunks = a.params().manifest_chunks();
      slot = &announces[a.chunk()];
      old = slot->size();
      break;
    }
    case wire::msg_type::digest_list:
      for (const auto& d : digest_lists) {
        if (std::equal(d.begin(), d.end(), raw.begin(), raw.end())) return true;  // a repeat
      }
      if (bytes + raw.size() > max_bytes) return false;
      digest_lists.emplace_back(raw.begin(), raw.end());
      bytes += raw.size();
      changed = true;
      return true;
    case wire::msg_type::session_end:
      slot = &end;
      old = end.size();
      break;
    default: return true;
  }
  if (bytes - old + raw.size() > max_bytes) return false;
  if (h.type == wire::msg_type::announce &&
      !std::equal(slot->begin(), slot->end(), raw.begin(), raw.end())) {
    changed = true;
  }
  slot->assign(raw.begin(), raw.end());
  bytes = bytes - old + raw.size();
  return true;
}

std::string signed_copies::serialize() const {
  std::string out = "MCSC";
  const auto add = [&out](const std::vector<std::byte>& d) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((d.size() >> (8 * i)) & 0xff));
    out.append(reinterpret_cast<const char*>(d.data()), d.size());
  };
  for (const auto& [chunk, d] : announces) add(d);
  for (const auto& d : digest_lists) add(d);
  return out;
}

bool signed_copies::restore(std::string_view blob) {
  if (blob.substr(0, 4) != "MCSC") return false;
  blob.remove_prefix(4);
  while (!blob.empty()) {
    if (blob.size() < 4) return false;
    std::size_t n = 0;
    for (int i = 0; i < 4; ++i) {
      n |= std::size_t{static_cast<unsigned char>(blob[static_cast<std::size_t>(i)])} << (8 * i);
    }
    blob.remove_prefix(4);
    if (n > blob.size()) return false;
    const auto d = std::as_bytes(std::span(blob.data(), n));
    blob.remove_prefix(n);
    wire::header h;
    if (wire::parse_header(d, h) || h.version != wire::authenticated_version) return false;
    const std::size_t trailer = h.type == wire::msg_type::announce ? auth::announce_trailer_bytes(d)
                                                                   : auth::trailer_size(h.type);
    if ((h.type != wire::msg_type::announce && h.type != wire::msg_type::digest_list) ||
        trailer == 0 || trailer + wire::header_size > d.size() ||
        !keep(h, d, d.first(d.size() - trailer))) {
      return false;
    }
  }
  changed = false;
  return true;
}

relay_downstream::relay_downstream(session_id s, const wire::session_params& p,
                                   std::vector<manifest_entry> files, std::filesystem::path dest,
                                   std::uint64_t seed, std::uint32_t run, std::size_t& shared,
                                   std::vector<std::string> relays,
                                   std::shared_ptr<spdlog::logger> log, time_point now,
                                   std::optional<signed_session> sig)
    : m_session(s), m_channel(p.channel()), m_channel_seq(p.channel_seq()), m_files(files),
      m_dest(std::move(dest)), m_log(std::move(log)), m_block_size(p.block_size()),
      m_gate([this](std::uint32_t f, std::uint32_t b) { return held(f, b); }),
      m_shared_used(shared) {
  m_place.assign(m_files.size(), place::unknown);
  if (m_channel_seq > 0) m_completes.emplace_back(m_channel_seq, m_channel_seq);
  for (const auto& r : p.catch_up_seqs()) m_completes.emplace_back(r.first(), r.last());
  auto c = downstream_config(s, p, run, std::move(relays));
  if (sig) {
    // The sites check blocks only once they hold the relay's session key: pass 1 waits for
    // their keys as a hub's does. Their echoes of the hub's announce times are no round trip
    // of the relay's.
    m_keys = std::make_unique<auth::sender_keys>(s, sig->delegation.key);
    m_signed = std::move(sig->copies);
    m_hello.resize(wire::control_budget);
    m_hello.resize(auth::encode_relay_hello(m_hello, s, sig->delegation));
    if (m_hello.empty()) throw std::invalid_argument("the relay_hello does not fit a datagram");
    c.start_on_registration = true;
    c.data_trailer_bytes = auth::data_trailer_bytes;
    c.own_echoes_only = true;
  }
  c.block_gate = [this](std::uint32_t f, std::uint32_t b) { return m_gate.answer(f, b); };
  if (c.fec_k > 0) {
    c.parity_gate = [this](std::uint32_t fb) {
      return m_gate.parity_ready(*m_down->fec_layout(), fb);
    };
  }
  m_down = std::make_unique<sender::sender_session>(std::move(c), std::move(files), seed, m_log);
  if (const auto* l = m_down->fec_layout()) {
    m_codec.emplace(l->k(),
                    p.fec_max_parity() > 0 ? p.fec_max_parity() : fec::default_max_parity(l->k()));
  }
  m_down->start(now);
}

relay_downstream::~relay_downstream() {
  m_shared_used -= m_cache_used;
  if (m_open_fd >= 0) ::close(m_open_fd);
}

void relay_downstream::keep(std::uint32_t file, std::uint32_t block,
                            std::span<const std::byte> payload) {
  if (m_cache.count(key(file, block))) return;
  // Room first, from this session's oldest blocks: over its own share, or over the relay's
  // when the other sessions hold the rest (then, with nothing of its own, it keeps nothing).
  while (!m_cache_order.empty() && (m_cache_used + payload.size() > cache_bytes ||
                                    m_shared_used + payload.size() > shared_cache_bytes)) {
    const auto old = m_cache.find(m_cache_order.front());
    m_cache_order.pop_front();
    if (old == m_cache.end()) continue;
    m_cache_used -= old->second.size();
    m_shared_used -= old->second.size();
    m_cache.erase(old);
  }
  if (m_shared_used + payload.size() > shared_cache_bytes) return;
  auto& kept = m_cache[key(file, block)];
  kept.assign(payload.begin(), payload.end());
  m_cache_order.push_back(key(file, block));
  m_cache_used += payload.size();
  m_shared_used += payload.size();
}

void relay_downstream::on_upstream(const wire::header& h, std::span<const std::byte> raw,
                                   std::span<const std::byte> plain, time_point) {
  // Past max_bytes a copy is not kept; the sites have the hub's earlier ones, and miss a newer
  // one only if the hub changed it.
  if (m_signed) (void)m_signed->keep(h, raw, plain);
  switch (h.type) {
    case wire::msg_type::data: {
      wire::data_header dh;
      std::span<const std::byte> payload;
      if (wire::parse_data(plain, dh, payload)) return;
      const std::uint32_t f = dh.file.value;
      const std::uint32_t b = dh.block.value;
      if (f >= m_files.size() || b >= block_count(m_files[f].size, m_block_size) ||
          payload.size() != block_length(m_files[f].size, m_block_size, b)) {
        return;  // the engine counted it; nothing to keep
      }
      keep(f, b, payload);
      m_gate.on_upstream_block(f, b);
      m_available = true;
      return;
    }
    case wire::msg_type::marker: {
      wire::marker m;
      if (wire::parse_control(plain, m)) return;
      m_gate.on_upstream_marker(m.pass(), m.file(), m.block(), m.pass_end());
      if (m_gate.upstream_pass_over_seen()) m_available = true;
      return;
    }
    case wire::msg_type::digest_list: {
      wire::digest_list m;
      if (wire::parse_control(plain, m)) return;
      for (const auto& e : m.digests()) {
        sha256_digest d{};
        if (e.file() >= m_files.size() || e.sha256().size() != d.size()) continue;
        std::memcpy(d.data(), e.sha256().data(), d.size());
        if (!m_files[e.file()].digest) m_files[e.file()].digest = d;
        m_down->on_digest(file_index{e.file()}, d, time_point{});
      }
      return;
    }
    case wire::msg_type::session_end:
      m_gate.upstream_pass_over();
      m_available = true;
      return;
    default: return;
  }
}

void relay_downstream::on_file_stored(std::uint32_t file, bool ok) {
  if (file >= m_place.size()) return;
  m_place[file] = ok ? place::in_place : place::absent;
  // Verified and in place, its blocks are read back from there; failed (a block was wrong:
  // forged, in an unsigned session), the relay's engine fetches it again and the new blocks
  // are kept as they come. The cache keeps neither.
  evict(file);
  if (ok) m_available = true;
}

void relay_downstream::evict(std::uint32_t file) {
  const std::uint32_t blocks = block_count(m_files[file].size, m_block_size);
  for (std::uint32_t b = 0; b < blocks && m_cache_used > 0; ++b) {
    const auto it = m_cache.find(key(file, b));
    if (it == m_cache.end()) continue;
    m_cache_used -= it->second.size();
    m_shared_used -= it->second.size();
    m_cache.erase(it);
  }
  // Keys of blocks no longer cached stay in the order until their turn; past twice the cache
  // they are dropped at once, so the order stays bounded by the cache.
  if (m_cache_order.size() > 2 * m_cache.size() + 1024) {
    std::erase_if(m_cache_order, [this](std::uint64_t k) { return !m_cache.count(k); });
  }
}

void relay_downstream::reply(const endpoint& to, std::span<const std::byte> d) {
  if (m_replies.size() >= max_replies) return;
  m_replies.emplace_back(to, std::vector<std::byte>(d.begin(), d.end()));
}

void relay_downstream::hello_to(const endpoint& to, time_point now) {
  if (!m_keys) return;
  if (now - m_unicast_second >= std::chrono::seconds(1)) {
    m_unicast_second = now;
    m_unicast_hellos = 0;
  }
  if (m_unicast_hellos < unicast_hellos_per_second) {
    ++m_unicast_hellos;
    ++m_stats.hellos;
    reply(to, m_hello);
  }
}

void relay_downstream::on_site(const wire::header& h, std::span<const std::byte> d,
                               const endpoint& from, time_point now) {
  if (!m_keys) {
    m_down->on_datagram(h, d, from, now);
    return;
  }
  std::span<const std::byte> out;
  if (m_keys->open(h, d, out)) {
    ++m_stats.site_refused;
    // A site that asks under the hub's key has not seen the hello yet: it gets one.
    if (h.type == wire::msg_type::register_request) hello_to(from, now);
    return;
  }
  if (out.empty()) {
    // A key request: the relay's session key, sealed for the site.
    const std::string site = m_keys->key_reply_to();
    m_seal.resize(wire::control_budget + auth::max_trailer_bytes);
    const std::size_t n = m_keys->take_key_reply(m_seal);
    if (n > 0) {
      reply(from, std::span(m_seal).first(n));
      m_down->on_site_keyed(site, now);
    }
    return;
  }
  m_down->on_datagram(h, out, from, now);
}

void relay_downstream::send_control(const sender::control_send& c, const send_fn& send,
                                    time_point now) {
  ++m_stats.control;
  if (!m_keys) {
    send(c.to, c.bytes);
    return;
  }
  switch (c.type) {
    case wire::msg_type::announce: {
      // In place of the downstream's own chunk i of n, the hub's chunks that share its place in
      // the manifest's order: a whole cycle of the downstream's sends the hub's whole manifest.
      wire::announce a;
      if (wire::parse_control(c.bytes, a) || m_signed->chunks == 0) return;
      const std::uint64_t n = std::max<std::uint32_t>(1, a.params().manifest_chunks());
      const std::uint64_t hub = m_signed->chunks;
      if (!m_next_hello || now >= *m_next_hello) {
        // Before the announces, so a site that hears them binds the relay's key at once.
        ++m_stats.hellos;
        send(std::nullopt, m_hello);
        m_next_hello = now + hello_interval;
      }
      for (std::uint64_t j = 0; j < hub; ++j) {
        if (j * n / hub != a.chunk()) continue;
        if (const auto it = m_signed->announces.find(static_cast<std::uint32_t>(j));
            it != m_signed->announces.end()) {
          send(c.to, it->second);
        }
      }
      return;
    }
    case wire::msg_type::digest_list:
      // The hub's, each of them, at most once per hello interval: the downstream sends one
      // list per digest it learned, the hub's lists carry them all.
      if (m_digests_sent && now - *m_digests_sent < hello_interval) return;
      m_digests_sent = now;
      for (const auto& d : m_signed->digest_lists) send(c.to, d);
      return;
    case wire::msg_type::session_end:
      if (m_signed->end.empty()) {
        ++m_stats.ends_withheld;
        return;
      }
      send(c.to, m_signed->end);
      return;
    default: break;
  }
  m_seal.assign(c.bytes.begin(), c.bytes.end());
  m_seal.resize(c.bytes.size() + auth::max_trailer_bytes);
  const std::size_t n = m_keys->seal_control(m_seal, c.bytes.size());
  if (n > 0) send(c.to, std::span(m_seal).first(n));
}

void relay_downstream::upstream_gone(time_point now) {
  if (!m_upstream_gone) m_upstream_gone = now;
  m_gate.upstream_pass_over();
  m_available = true;
}

bool relay_downstream::in_place(std::uint32_t file) {
  if (m_place[file] != place::unknown) return m_place[file] == place::in_place;
  // Held before this session (the hub skips it for the relay): the destination copy counts when
  // it is the announced file, as the engine's held check judged it.
  m_place[file] = place::absent;
  const auto& e = m_files[file];
  if (!e.digest) return false;
  unique_fd root(::open(m_dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return false;
  int raw = -1;
  if (open_below(root.get(), e.path, raw) != 0) return false;
  unique_fd fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::uint64_t>(st.st_size) != e.size || mtime_ns_of(st) != e.mtime_ns) {
    return false;
  }
  const auto d = read_digest_xattr(fd.get(), e.size, e.mtime_ns);
  if (!d || *d != *e.digest) return false;
  m_place[file] = place::in_place;
  return true;
}

bool relay_downstream::held(std::uint32_t file, std::uint32_t block) {
  if (file >= m_files.size()) return false;
  return m_cache.count(key(file, block)) > 0 || in_place(file);
}

bool relay_downstream::read_back(std::uint32_t file, std::uint64_t offset,
                                 std::span<std::byte> out) {
  const auto& e = m_files[file];
  if (m_open_fd < 0 || m_open_file != file) {
    if (m_open_fd >= 0) ::close(m_open_fd);
    m_open_fd = -1;
    unique_fd root(::open(m_dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    int raw = -1;
    if (!root || open_below(root.get(), e.path, raw) != 0) return false;
    m_open_fd = raw;
    m_open_file = file;
  }
  // Still the delivered file: a newer product may have replaced it since.
  struct stat st {};
  if (::fstat(m_open_fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::uint64_t>(st.st_size) != e.size || mtime_ns_of(st) != e.mtime_ns) {
    m_place[file] = place::absent;
    return false;
  }
  const ssize_t n = ::pread(m_open_fd, out.data(), out.size(), static_cast<off_t>(offset));
  return n == static_cast<ssize_t>(out.size());
}

bool relay_downstream::source(std::uint32_t file, std::uint32_t block, std::span<std::byte> out) {
  const std::uint32_t len = block_length(m_files[file].size, m_block_size, block);
  std::fill(out.begin() + len, out.end(), std::byte{0});
  if (const auto it = m_cache.find(key(file, block)); it != m_cache.end()) {
    std::copy(it->second.begin(), it->second.end(), out.begin());
    ++m_stats.from_cache;
    return true;
  }
  if (!in_place(file) || !read_back(file, std::uint64_t{block} * m_block_size, out.first(len))) {
    return false;
  }
  ++m_stats.from_dest;
  return true;
}

void relay_downstream::send_data(const sender::data_send& d, const send_fn& send) {
  const std::size_t len = wire::data_header_size + (d.parity ? m_block_size : d.length);
  m_datagram.assign(len + (m_keys ? auth::data_trailer_bytes : 0), std::byte{0});
  const auto body =
      std::span(m_datagram).subspan(wire::data_header_size, len - wire::data_header_size);
  if (d.parity) {
    const auto& l = *m_down->fec_layout();
    const std::uint32_t n = l.sources(d.fec_block);
    m_sources.resize(n);
    std::vector<const std::byte*> in(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      m_sources[i].resize(m_block_size);
      const auto src = l.source(d.fec_block, i);
      if (!source(src.file, src.block, m_sources[i])) {
        ++m_stats.unreadable;
        return;
      }
      in[i] = m_sources[i].data();
    }
    std::byte* out = body.data();
    m_codec->encode(in, std::span(&d.parity_index, 1), std::span(&out, 1), m_block_size);
    wire::write_parity_header(m_datagram, {m_session, d.seq, d.fec_block, d.parity_index});
    ++m_stats.parity;
  } else {
    if (!source(d.file.value, d.block.value, body)) {
      ++m_stats.unreadable;
      return;
    }
    wire::write_data_header(m_datagram, {m_session, d.seq, d.file, d.block});
    ++m_stats.data;
  }
  if (m_keys) (void)m_keys->seal_data(m_datagram, len);
  send(std::nullopt, m_datagram);
}

std::optional<time_point> relay_downstream::service(time_point now, const send_fn& send) {
  if (m_available) {
    m_available = false;
    m_down->on_available(now);
  }
  // Upstream gone and still short of blocks: they will never come.
  if (m_upstream_gone && now - *m_upstream_gone >= orphan_timeout &&
      (m_down->gate_blocked() || m_down->gate_waiting()) &&
      m_down->current_phase() != sender::sender_session::phase::ending && !m_down->done()) {
    m_down->abort(now, "the upstream session ended without every block this relay needs");
  }
  m_down->on_timer(now);
  for (const auto& [to, bytes] : m_replies) send(to, bytes);
  m_replies.clear();
  if (m_keys && !m_down->done() && (!m_next_hello || now >= *m_next_hello)) {
    ++m_stats.hellos;
    send(std::nullopt, m_hello);
    m_next_hello = now + hello_interval;
  }
  std::array<sender::data_send, 64> batch;
  sender::control_send c;
  for (;;) {
    while (m_down->pop_control(c)) send_control(c, send, now);
    const std::size_t n = m_down->next_data(now, batch);
    for (std::size_t i = 0; i < n; ++i) send_data(batch[i], send);
    if (n < batch.size()) break;
  }
  while (m_down->pop_control(c)) send_control(c, send, now);
  auto next = m_down->next_deadline(now);
  if (next && m_next_hello) next = std::min(*next, *m_next_hello);
  return next;
}

}  // namespace mcdist::receiver
