#include "receiver/io/session_keys.hpp"

#include "common/sys/key_file.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace mcdist::receiver {

session_keys::session_keys(const daemon_config& cfg, std::shared_ptr<spdlog::logger> log)
    : m_log(std::move(log)), m_receiver_id(cfg.id), m_dir(cfg.temp / "keys") {
  crypto::init();
  auto key_file = cfg.key_file;
  if (key_file.empty()) {
    key_file = cfg.temp / "site.key";
    if (!std::filesystem::exists(key_file)) {
      try {
        crypto::write_secret_key_file(key_file, crypto::generate_identity());
      } catch (const crypto::key_error& e) {
        throw config_error(e.what());
      }
      m_log->info("made this site's key {} (set key_file to keep it elsewhere)", key_file.string());
    }
  }
  try {
    m_site = crypto::read_secret_key_file(key_file);
  } catch (const crypto::key_error& e) {
    throw config_error(e.what());
  }
  m_log->info("site key {} ({}): pin it at senders with mcdist-send --site-keys",
              crypto::format_public_key(m_site.public_key), key_file.string());
  for (const auto& ch : cfg.channels) {
    add_channel(ch);
    log_trust(ch);
    if (ch.silent) {
      m_log->info(
          "channel {}: silent (a one-way link): this site never transmits for its sessions and "
          "records the files it cannot complete",
          ch.name);
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(m_dir, ec);
  ::chmod(m_dir.c_str(), 0700);
}

std::unique_ptr<auth::receiver_keys> session_keys::keyring(const channel_config& ch) const {
  auth::receiver_auth_options o;
  o.trusted_senders = ch.trusted_senders;
  o.site = m_site;
  o.receiver_id = m_receiver_id;
  // A channel that relays two-way sessions asks the hub to delegate its signed ones.
  o.relay = ch.relay_group.has_value() && !ch.silent;
  return std::make_unique<auth::receiver_keys>(std::move(o));
}

void session_keys::add_channel(const channel_config& ch) {
  m_keys.push_back(keyring(ch));
  m_silent.push_back(ch.silent);
}

void session_keys::log_trust(const channel_config& ch) const {
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

auth::receiver_keys* session_keys::of(session_id s) {
  for (auto& k : m_keys) {
    if (k->knows(s)) return k.get();
  }
  return nullptr;
}

std::string session_keys::signer(session_id s) const {
  for (const auto& k : m_keys) {
    if (!k->knows(s)) continue;
    if (const auto signer = k->signer(s)) return crypto::format_public_key(*signer);
  }
  return {};
}

std::error_code session_keys::open(std::size_t index, const wire::header& h,
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
  if (h.type == wire::msg_type::register_reply) save(h.session, channel);
  return {};
}

bool session_keys::announce_repeat(std::size_t index, const wire::header& h, time_point now,
                                   const receiver_engine& engine) {
  if (index >= m_keys.size() || h.version != wire::authenticated_version ||
      h.type != wire::msg_type::announce) {
    return false;
  }
  if (!engine.manifest_complete(h.session) ||
      !m_keys[index]->repeat_verified_recently(h.session, now)) {
    return false;
  }
  ++m_repeats_unchecked;
  return true;
}

bool session_keys::poll_first(std::size_t index, const wire::header& h) {
  // An announce is checked with Ed25519 next (about 100 us, a poll is one recvmmsg): it polls
  // whenever its session's key is awaited; blocks and markers (cheap to check, and a flood of
  // them for a key that never comes must cost little) at most max_key_polls_per_wake times.
  const bool announce = h.type == wire::msg_type::announce;
  if (!announce && m_key_polls >= max_key_polls_per_wake) return false;
  if (index >= m_keys.size() || !m_keys[index]->awaiting_any()) return false;
  // Announces too: an encrypted session's announces behind the first are held and each checked
  // with Ed25519 until the key is read, and a channel batch holds both initial cycles (two
  // checks per chunk instead of one, the second cycle no repeat while the manifest is sealed).
  if (h.type != wire::msg_type::data && h.type != wire::msg_type::marker && !announce) {
    return false;
  }
  if (!m_keys[index]->awaiting_key(h.session)) return false;
  if (!announce) ++m_key_polls;
  return true;
}

void session_keys::note_silent(std::size_t index, const channel_config& ch, session_id s,
                               std::span<const std::byte> plain, const receiver_engine& engine) {
  if (index >= m_keys.size()) return;
  bool silent = ch.silent || engine.silent(s);
  if (!silent && !engine.channel_of(s)) {
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
      s, ch.name, ch.group.to_string());
}

void session_keys::after_open(receiver_engine& engine,
                              const std::function<void(std::span<const std::byte>)>& send) {
  for (std::size_t c = 0; c < m_keys.size(); ++c) {
    if (m_buffer.size() < wire::control_budget + auth::max_trailer_bytes) {
      m_buffer.resize(wire::control_budget + auth::max_trailer_bytes);
    }
    const std::size_t n = m_keys[c]->take_key_request(m_buffer);
    if (n == 0) continue;
    // Never for a silent channel or session (set_silent drops them already; this is the gate).
    wire::header h;
    if (m_silent[c] || wire::parse_header({m_buffer.data(), n}, h) || engine.silent(h.session)) {
      continue;
    }
    send({m_buffer.data(), n});
  }
  for (std::size_t c = 0; c < m_keys.size(); ++c) {
    // An encrypted session's sealed announces that came before its key (just arrived): opened
    // now and handed to the engine with their arrival time (the engine's REGISTER then reports
    // the right hold time, so the sender's RTT sample leaves out the wait for the key).
    for (const auto& h : m_keys[c]->take_held()) {
      std::span<const std::byte> plain;
      if (!m_keys[c]->open(h.datagram, h.at, plain, h.from) && !plain.empty()) {
        engine.on_datagram(plain, h.from, static_cast<std::uint32_t>(c), h.at);
      }
    }
  }
}

std::optional<std::span<const std::byte>> session_keys::seal(session_id s,
                                                             std::span<const std::byte> datagram) {
  auto* keys = of(s);
  if (!keys) return datagram;
  m_buffer.resize(datagram.size() + auth::max_trailer_bytes);
  std::memcpy(m_buffer.data(), datagram.data(), datagram.size());
  const std::size_t n = keys->seal(m_buffer, datagram.size());
  if (n == 0) return std::nullopt;
  return std::span<const std::byte>(m_buffer.data(), n);
}

std::optional<unicast::client_credentials> session_keys::unicast_credentials(
    session_id s, const unicast_order& order) {
  unicast::client_credentials c;
  c.token = order.token;
  // A signed session's connections prove this site's key over the server's challenge.
  if (auto* keys = of(s)) {
    c.proof_key = keys->fallback_key(s);
    // An encrypted session's fallback is sealed both ways (common/unicast/record_seal.hpp).
    // Decided from what this site knows of the session, never from the FALLBACK order.
    c.seal_records = keys->encrypted(s);
    if (c.seal_records && !c.proof_key) {
      m_log->warn(
          "session {}: encrypted, but no fallback key yet; not connecting in the "
          "clear",
          s);
      return std::nullopt;
    }
  }
  return c;
}

std::filesystem::path session_keys::saved_file(session_id s) const {
  return m_dir / fmt::format("{}", s);
}

void session_keys::save(session_id s, std::size_t channel) {
  const auto blob = m_keys[channel]->export_session(s);
  if (!blob) return;
  if (const auto it = m_saved.find(s); it != m_saved.end() && it->second == *blob) return;
  const auto file = saved_file(s);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  std::string content(1, static_cast<char>(channel));
  content += *blob;
  if (fd < 0 ||
      ::write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    m_log->warn("session {}: cannot save its keys in {} ({}): a restart will not resume it", s,
                file.string(), std::strerror(errno));
  } else {
    m_saved.insert_or_assign(s, *blob);
  }
  if (fd >= 0) ::close(fd);
}

void session_keys::restore(
    session_id s, const std::function<std::optional<std::uint32_t>(std::uint32_t)>& channel_now) {
  std::ifstream in(saved_file(s), std::ios::binary);
  if (!in) return;
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::optional<std::uint32_t> channel;
  if (!content.empty()) channel = channel_now(static_cast<unsigned char>(content[0]));
  if (!channel || *channel >= m_keys.size() ||
      !m_keys[*channel]->import_session(s, std::string_view(content).substr(1))) {
    m_log->warn("session {}: its saved keys are unusable; it resumes only if announced again", s);
    return;
  }
  m_saved.insert_or_assign(s, std::string(std::string_view(content).substr(1)));
}

void session_keys::forget(session_id s, bool remove_saved) {
  if (!remove_saved) return;
  for (auto& k : m_keys) k->forget(s);
  if (m_saved.erase(s)) {
    std::error_code ec;
    std::filesystem::remove(saved_file(s), ec);
  }
}

auth::auth_stats session_keys::stats() const {
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
    sum.delegations += st.delegations;
  }
  sum.no_key += m_unknown_unicast;
  return sum;
}

}  // namespace mcdist::receiver
