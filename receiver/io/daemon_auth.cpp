#include "receiver/io/daemon.hpp"

#include "common/byte_order.hpp"
#include "common/sys/key_file.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

/// @file
/// The daemon's authentication (docs/security.md): one keyring per channel, the check of every
/// datagram before the engine sees it, key requests and the announces held before a key, the
/// session keys saved for a restart, and the refusal counters.

namespace mcdist::receiver {

std::string daemon::sender_key(session_id s) {
  for (const auto& k : m_keys) {
    if (!k->knows(s)) continue;
    if (const auto signer = k->signer(s)) return crypto::format_public_key(*signer);
  }
  return {};
}

errc daemon::admit_signed_session(session_id s, std::string_view key,
                                  std::uint64_t created_unix_ms) {
  const auto now_ms = unix_ms_now();
  std::string detail;
  const auto verdict = m_replay->admit({created_unix_ms, s, std::string(key)}, now_ms, detail);
  if (verdict == errc::ok) return verdict;
  if (verdict == errc::replay_cache_unwritable) {
    m_log->error(
        "session {}: refused: {} (a signed session is taken only once its entry in the "
        "replay cache is durable)",
        s, detail);
    return verdict;
  }
  if (!m_stale_sessions_logged.tick()) return verdict;
  const double offset_s =
      (static_cast<double>(created_unix_ms) - static_cast<double>(now_ms)) / 1000.0;
  switch (verdict) {
    case errc::replayed:
      m_log->warn("session {} signed by {}: refused: this site took it already (a replay)", s, key);
      break;
    case errc::unstamped:
      m_log->warn(
          "session {} signed by {}: refused: its announce carries no timestamp (a sender older "
          "than this site: upgrade it; docs/security.md \"Freshness\")",
          s, key);
      break;
    case errc::clock_skew:
      m_log->warn(
          "session {} signed by {}: refused: stamped {:.1f} s ahead of this host's clock (at most "
          "{} s allowed, max_clock_skew): check NTP on both hosts",
          s, key, offset_s,
          std::chrono::duration_cast<std::chrono::seconds>(m_cfg.max_clock_skew).count());
      break;
    default:
      m_log->warn(
          "session {} signed by {}: refused: stamped {:.1f} s ago, before what this site takes "
          "(max_session_age {} s{}): a replay, or clocks apart (check NTP on both hosts)",
          s, key, -offset_s,
          std::chrono::duration_cast<std::chrono::seconds>(m_cfg.max_session_age).count(),
          m_replay->guard().floor_ms() >= created_unix_ms
              ? ", or before this site's replay cache began"
              : "");
      break;
  }
  return verdict;
}

void daemon::log_trust(const channel_config& ch) const {
  if (ch.trusted_senders.empty()) {
    m_log->warn(
        "channel {}: allow_unsigned and no trusted_senders: any host that can reach {} can "
        "write products into {} (every session is logged UNSIGNED)",
        ch.name, ch.group.to_string(), ch.dest.string());
  } else {
    m_log->info("channel {}: accepts sessions signed by {} trusted sender key{}", ch.name,
                ch.trusted_senders.size(), ch.trusted_senders.size() == 1 ? "" : "s");
  }
}

void daemon::setup_keys() {
  crypto::init();
  auto key_file = m_cfg.key_file;
  if (key_file.empty()) {
    key_file = m_cfg.temp / "site.key";
    if (!std::filesystem::exists(key_file)) {
      try {
        crypto::write_secret_key_file(key_file, crypto::generate_identity());
      } catch (const crypto::key_error& e) {
        throw config_error(e.what());
      }
      m_log->info("made this site's key {} (set key_file to keep it elsewhere)", key_file.string());
    }
  }
  crypto::identity site;
  try {
    site = crypto::read_secret_key_file(key_file);
  } catch (const crypto::key_error& e) {
    throw config_error(e.what());
  }
  m_log->info("site key {} ({}): pin it at senders with mcdist-send --site-keys",
              crypto::format_public_key(site.public_key), key_file.string());
  m_site = site;
  for (const auto& ch : m_cfg.channels) {
    m_keys.push_back(channel_keys(ch));
    log_trust(ch);
    if (ch.silent) {
      m_log->info(
          "channel {}: silent (a one-way link): this site never transmits for its sessions and "
          "records the files it cannot complete",
          ch.name);
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(m_cfg.temp / "keys", ec);
  ::chmod((m_cfg.temp / "keys").c_str(), 0700);
}

auth::receiver_keys* daemon::keys_of(session_id s) {
  for (auto& k : m_keys) {
    if (k->knows(s)) return k.get();
  }
  return nullptr;
}

std::error_code daemon::authenticate(std::size_t index, const wire::header& h,
                                     std::span<const std::byte> d, time_point now,
                                     std::span<const std::byte>& out, const endpoint& from) {
  auth::receiver_keys* keys = nullptr;
  std::size_t channel = index;
  if (index < m_keys.size()) {
    keys = m_keys[index].get();
  } else {
    // The control socket: the register reply, fallback and complete ack of a session one of
    // the channels announced.
    for (channel = 0; channel < m_keys.size(); ++channel) {
      if (m_keys[channel]->knows(h.session)) {
        keys = m_keys[channel].get();
        break;
      }
    }
  }
  if (!keys) {
    const bool any_required =
        std::any_of(m_keys.begin(), m_keys.end(), [](const auto& k) { return k->required(); });
    if (any_required || h.version != wire::version) {
      ++m_unknown_unicast;
      return errc::unauthenticated;
    }
    out = d;  // a version-1 session where no channel asks for authentication
    return {};
  }
  if (auto ec = keys->open(h, d, now, out, from)) return ec;
  if (h.type == wire::msg_type::register_reply) save_keys(h.session, channel);
  return {};
}

std::unique_ptr<auth::receiver_keys> daemon::channel_keys(const channel_config& ch) const {
  auth::receiver_auth_options o;
  o.trusted_senders = ch.trusted_senders;
  o.site = m_site;
  o.receiver_id = m_cfg.id;
  return std::make_unique<auth::receiver_keys>(std::move(o));
}

void daemon::note_silent(std::size_t index, session_id s, std::span<const std::byte> plain) {
  if (index >= m_keys.size()) return;
  bool silent = m_cfg.channels[index].silent || m_engine->silent(s);
  if (!silent && !m_engine->channel_of(s)) {
    // The engine did not take the session (limits, budget): the announce says it all the same.
    wire::announce m;
    silent = !wire::parse_control(plain, m) && m.params().silent_passes() > 0;
  }
  if (!silent || !m_keys[index]->set_silent(s) || !m_keys[index]->required()) return;
  // Silent here, signed, without block digests (an older mcdist-send, or a sender that expects
  // registrations on a channel configured silent): no key to check its blocks with.
  m_log->warn(
      "session {} (channel {}): silent and signed, but its sender sends no block digests: its "
      "blocks pass unchecked until each file's signed SHA-256 is verified, so any host that can "
      "send to {} can spoil its files (never deliver a forged one); upgrade mcdist-send "
      "(docs/security.md \"Block digests\")",
      s, m_cfg.channels[index].name, m_cfg.channels[index].group.to_string());
}

void daemon::send_key_request(const endpoint& to) {
  for (std::size_t c = 0; c < m_keys.size(); ++c) {
    auto& k = m_keys[c];
    if (m_send_buffer.size() < wire::control_budget + auth::max_trailer_bytes) {
      m_send_buffer.resize(wire::control_budget + auth::max_trailer_bytes);
    }
    const std::size_t n = k->take_key_request(m_send_buffer);
    if (n == 0) continue;
    // Never for a silent channel or session (set_silent drops them already; this is the gate).
    wire::header h;
    if (m_cfg.channels[c].silent || wire::parse_header({m_send_buffer.data(), n}, h) ||
        m_engine->silent(h.session))
      continue;
    std::error_code ec;
    ++m_datagrams_sent;
    if (!net::send_one(m_control_socket->native_handle(), to, {m_send_buffer.data(), n}, ec)) {
      m_log->debug("cannot send a key request to {}: {}", to.to_string(), ec.message());
    }
  }
}

void daemon::after_open(const endpoint& from) {
  send_key_request(from);
  for (std::size_t c = 0; c < m_keys.size(); ++c) {
    // An encrypted session's sealed announces that came before its key (just arrived): opened
    // now and handed to the engine with their arrival time (the engine's REGISTER then reports
    // the right hold time, so the sender's RTT sample leaves out the wait for the key).
    for (const auto& h : m_keys[c]->take_held()) {
      std::span<const std::byte> plain;
      if (!m_keys[c]->open(h.datagram, h.at, plain, h.from) && !plain.empty()) {
        m_engine->on_datagram(plain, h.from, static_cast<std::uint32_t>(c), h.at);
      }
    }
  }
}

bool daemon::announce_repeat(std::size_t index, const wire::header& h, time_point now) const {
  if (index >= m_keys.size() || h.version != wire::authenticated_version ||
      h.type != wire::msg_type::announce) {
    return false;
  }
  return m_engine->manifest_complete(h.session) &&
         m_keys[index]->repeat_verified_recently(h.session, now);
}

bool daemon::key_awaited(std::size_t index, const wire::header& h) const {
  if (index >= m_keys.size() || !m_keys[index]->awaiting_any()) return false;
  const auto type = h.type;
  // Announces too: an encrypted session's announces behind the first are held and each checked
  // with Ed25519 until the key is read, and a channel batch holds both initial cycles (two
  // checks per chunk instead of one, the second cycle no repeat while the manifest is sealed).
  if (type != wire::msg_type::data && type != wire::msg_type::marker &&
      type != wire::msg_type::announce) {
    return false;
  }
  return m_keys[index]->awaiting_key(h.session);
}

void daemon::poll_control(time_point now) {
  std::error_code ec;
  m_key_poll_receiver.drain(
      m_control_socket->native_handle(), max_control_per_key_poll,
      [&](std::span<const std::byte> d, const endpoint& from) {
        handle_datagram(control_index, d, from, now);
      },
      ec);
}

void daemon::save_keys(session_id s, std::size_t channel) {
  if (m_keys_saved.count(s)) return;
  const auto blob = m_keys[channel]->export_session(s);
  if (!blob) return;
  const auto file = m_cfg.temp / "keys" / fmt::format("{}", s);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  std::string content(1, static_cast<char>(channel));
  content += *blob;
  if (fd < 0 ||
      ::write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    m_log->warn("session {}: cannot save its keys in {} ({}): a restart will not resume it", s,
                file.string(), std::strerror(errno));
  } else {
    m_keys_saved.insert(s);
  }
  if (fd >= 0) ::close(fd);
}

void daemon::restore_keys(session_id s) {
  std::ifstream in(m_cfg.temp / "keys" / fmt::format("{}", s), std::ios::binary);
  if (!in) return;
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::optional<std::uint32_t> channel;
  if (!content.empty()) channel = static_cast<unsigned char>(content[0]);
  if (channel) {
    if (const auto it = m_channel_remap.find(*channel); it != m_channel_remap.end()) {
      channel = it->second;
    }
  }
  if (!channel || *channel >= m_keys.size() ||
      !m_keys[*channel]->import_session(s, std::string_view(content).substr(1))) {
    m_log->warn("session {}: its saved keys are unusable; it resumes only if announced again", s);
    return;
  }
  m_keys_saved.insert(s);
}

auth::auth_stats daemon::auth_refused() const {
  auth::auth_stats sum;
  for (const auto& k : m_keys) {
    const auto& st = k->stats();
    sum.unauthenticated += st.unauthenticated;
    sum.bad_signature += st.bad_signature;
    sum.bad_tag += st.bad_tag;
    sum.no_key += st.no_key;
    sum.untrusted_site += st.untrusted_site;
    sum.verify_budget += st.verify_budget;
    sum.bad_path += st.bad_path;
    sum.bad_digest += st.bad_digest;
    sum.no_digest += st.no_digest;
    sum.digest_chunks += st.digest_chunks;
    sum.blocks_checked += st.blocks_checked;
    sum.signatures += st.signatures;
    sum.by_path += st.by_path;
  }
  sum.no_key += m_unknown_unicast;
  return sum;
}

}  // namespace mcdist::receiver
