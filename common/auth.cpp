#include "common/auth.hpp"

#include "common/byte_order.hpp"
#include "common/sha256.hpp"
#include "mcdist.pb.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

namespace mcdist::auth {

namespace {

using wire::msg_type;

constexpr std::size_t register_trailer = crypto::key_bytes + crypto::hmac_bytes;
constexpr std::size_t reply_trailer =
    crypto::xchacha_nonce_bytes + crypto::key_bytes + crypto::aead_tag_bytes;
constexpr std::size_t marker_trailer = 8 + crypto::gcm_tag_bytes;

const std::uint8_t* u8(const std::byte* p) { return reinterpret_cast<const std::uint8_t*>(p); }
std::uint8_t* u8(std::byte* p) { return reinterpret_cast<std::uint8_t*>(p); }

std::array<std::uint8_t, 4> salt_of(session_id s) {
  std::array<std::uint8_t, 4> salt{};
  store_be32(reinterpret_cast<std::byte*>(salt.data()), s.value);
  return salt;
}

crypto::key32 derive(std::span<const std::uint8_t> ikm, session_id s, std::string_view info) {
  crypto::key32 out{};
  const auto salt = salt_of(s);
  crypto::hkdf_sha256(ikm, salt, info, out);
  return out;
}

/// HKDF info of a site's fallback key (auth.hpp, common/unicast/hello_proof.hpp).
constexpr std::string_view fallback_info = "mcdist v2 fallback";

/// The pairwise key of a sender session key and a site (see the file comment of auth.hpp).
std::optional<crypto::key32> pairwise_key(const crypto::key32& our_secret,
                                          const crypto::key32& their_public,
                                          const crypto::key32& sender_public,
                                          const crypto::key32& site_public, session_id s) {
  const auto shared = crypto::x25519(our_secret, their_public);
  if (!shared) return std::nullopt;
  std::string info = "mcdist v2 pairwise";
  info.append(reinterpret_cast<const char*>(sender_public.data()), sender_public.size());
  info.append(reinterpret_cast<const char*>(site_public.data()), site_public.size());
  return derive(*shared, s, info);
}

session_id session_of(std::span<const std::byte> d) { return session_id{load_be32(d.data() + 4)}; }

template <std::size_t N>
std::span<const std::uint8_t, N> fixed(std::span<const std::byte> s) {
  return std::span<const std::uint8_t, N>(u8(s.data()), N);
}

/// The 12-byte GCM nonce of a marker: 4 zero bytes and the 64-bit counter.
std::array<std::uint8_t, crypto::gcm_nonce_bytes> marker_nonce(const std::byte* counter) {
  std::array<std::uint8_t, crypto::gcm_nonce_bytes> n{};
  std::memcpy(n.data() + 4, counter, 8);
  return n;
}

/// HKDF infos of an encrypted session's keys (auth.hpp file comment).
constexpr std::string_view manifest_info = "mcdist v2 manifest";
constexpr std::string_view sealed_data_info = "mcdist v2 data sealed";

/// The 12-byte GCM nonce of a data datagram: its sequence number, file and block (bytes 8..19).
std::span<const std::uint8_t, crypto::gcm_nonce_bytes> data_nonce(std::span<const std::byte> d) {
  return std::span<const std::uint8_t, crypto::gcm_nonce_bytes>(u8(d.data() + 8),
                                                                crypto::gcm_nonce_bytes);
}

/// Seals the body of the control datagram in buf[0, len) (announce or digest_list) in place:
/// the body becomes a message of the same type with field `sealed` alone (nonce, then
/// XChaCha20-Poly1305 of the old body, the 8-byte header as associated data).
/// @return the new length, or 0 if `buf` has no room
std::size_t seal_body(const crypto::key32& key, msg_type type, std::span<std::byte> buf,
                      std::size_t len, std::vector<std::byte>& scratch) {
  const std::size_t body = len - wire::header_size;
  scratch.resize(crypto::xchacha_nonce_bytes + body + crypto::aead_tag_bytes);
  auto* nonce = u8(scratch.data());
  crypto::random_bytes({nonce, crypto::xchacha_nonce_bytes});
  crypto::aead_seal(
      key,
      std::span<const std::uint8_t, crypto::xchacha_nonce_bytes>(nonce,
                                                                 crypto::xchacha_nonce_bytes),
      buf.first(wire::header_size),
      std::span<const std::uint8_t>(u8(buf.data() + wire::header_size), body),
      std::span<std::uint8_t>(nonce + crypto::xchacha_nonce_bytes, body + crypto::aead_tag_bytes));
  const std::string sealed(reinterpret_cast<const char*>(scratch.data()), scratch.size());
  std::size_t out = 0;
  if (type == msg_type::announce) {
    wire::announce m;
    m.set_sealed(sealed);
    if (m.ByteSizeLong() > buf.size() - wire::header_size) return 0;
    m.SerializeWithCachedSizesToArray(u8(buf.data() + wire::header_size));
    out = wire::header_size + m.GetCachedSize();
  } else {
    wire::digest_list m;
    m.set_sealed(sealed);
    if (m.ByteSizeLong() > buf.size() - wire::header_size) return 0;
    m.SerializeWithCachedSizesToArray(u8(buf.data() + wire::header_size));
    out = wire::header_size + m.GetCachedSize();
  }
  return out;
}

/// The `sealed` field of an announce or digest_list body; empty when the body has none (or
/// does not parse).
std::string sealed_field(msg_type type, std::span<const std::byte> body) {
  if (type == msg_type::announce) {
    wire::announce m;
    if (!m.ParseFromArray(body.data(), static_cast<int>(body.size()))) return {};
    return m.sealed();
  }
  wire::digest_list m;
  if (!m.ParseFromArray(body.data(), static_cast<int>(body.size()))) return {};
  return m.sealed();
}

/// What the authentication layer reads of a verified announce body besides `sealed`.
struct announce_flags {
  bool sealed = false;
  bool block_digests = false;  ///< session_params.block_digests of a silent session
};

announce_flags flags_of(std::span<const std::byte> body) {
  wire::announce m;
  if (!m.ParseFromArray(body.data(), static_cast<int>(body.size()))) return {};
  return {!m.sealed().empty(), m.params().block_digests() != 0 && m.params().silent_passes() > 0};
}

}  // namespace

std::size_t trailer_size(msg_type t) noexcept {
  switch (t) {
    case msg_type::data:
    case msg_type::parity: return data_trailer_bytes;  // both go through seal_data
    case msg_type::announce: return announce_trailer_fixed_bytes;
    case msg_type::register_request: return register_trailer;
    case msg_type::register_reply: return reply_trailer;
    case msg_type::marker:
    case msg_type::repair_advert: return marker_trailer;
    case msg_type::nak:
    case msg_type::complete:
    case msg_type::complete_ack:
    case msg_type::fallback: return crypto::hmac_bytes;
    case msg_type::digest_list:
    case msg_type::session_end: return crypto::signature_bytes;
    case msg_type::block_digests: return block_digests::trailer_fixed_bytes;  // version 3 only
    case msg_type::heartbeat: return crypto::signature_bytes;                 // common/beacon.hpp
    case msg_type::gap_report: return crypto::key_bytes + crypto::signature_bytes;
    case msg_type::relay_hello: return crypto::signature_bytes;
  }
  return 0;
}

std::string_view leading_receiver_id(std::span<const std::byte> body) noexcept {
  // Field 1, wire type 2 (length-delimited): tag byte 0x0a, then a one-byte varint length
  // (receiver ids are at most 64 bytes, so a longer length is no receiver id).
  if (body.size() < 2 || body[0] != std::byte{0x0a}) return {};
  const auto len = std::to_integer<std::size_t>(body[1]);
  if (len > wire::max_receiver_id_bytes || len + 2 > body.size()) return {};
  return {reinterpret_cast<const char*>(body.data() + 2), len};
}

// --- sender --------------------------------------------------------------------------------

sender_keys::sender_keys(const crypto::identity& id, session_id session,
                         std::map<std::string, crypto::key32, std::less<>> pinned, bool encrypted)
    : m_id(&id), m_session(session), m_pinned(std::move(pinned)),
      m_ephemeral(crypto::generate_x25519()), m_session_key([] {
        crypto::key32 k{};
        crypto::random_bytes(k);
        return k;
      }()),
      m_data(derive(m_session_key, session, "mcdist v2 data")),
      m_marker(derive(m_session_key, session, "mcdist v2 marker")), m_encrypted(encrypted) {
  if (m_encrypted) {
    m_manifest_key = derive(m_session_key, session, manifest_info);
    m_sealed_data.emplace(derive(m_session_key, session, sealed_data_info),
                          crypto::gcm::direction::encrypt);
  }
}

sender_keys::sender_keys(session_id session, const crypto::x25519_pair& ephemeral)
    : m_session(session), m_ephemeral(ephemeral), m_session_key([] {
        crypto::key32 k{};
        crypto::random_bytes(k);
        return k;
      }()),
      m_data(derive(m_session_key, session, "mcdist v2 data")),
      m_marker(derive(m_session_key, session, "mcdist v2 marker")) {}

sender_keys::~sender_keys() = default;

void sender_keys::set_relays(std::vector<std::string> relays) { m_relays = std::move(relays); }

std::size_t sender_keys::seal_control(std::span<std::byte> buf, std::size_t len) {
  if (len < wire::header_size || buf.size() < len + max_trailer_bytes) return 0;
  const auto type = static_cast<msg_type>(std::to_integer<std::uint8_t>(buf[3]));
  if (type == msg_type::announce) {
    announce_slot one{buf, len};
    seal_announces({&one, 1});
    return one.len;
  }
  const bool signs = type == msg_type::digest_list || type == msg_type::session_end;
  if (signs && !m_id) return 0;  // a relay sends the hub's, never its own
  wire::set_version(buf, wire::authenticated_version);
  if (m_encrypted && type == msg_type::digest_list) {
    // The signature below covers the sealed form; room for the trailer stays (the caller
    // leaves max_trailer_bytes, which counts the sealed body's overhead).
    len = seal_body(buf.first(buf.size() - largest_trailer_bytes), len);
    if (len == 0) return 0;
  }
  std::byte* end = buf.data() + len;
  switch (type) {
    case msg_type::digest_list:
    case msg_type::session_end: {
      ++m_stats.signatures;
      const auto sig = crypto::sign(*m_id, buf.first(len));
      std::memcpy(end, sig.data(), sig.size());
      return len + crypto::signature_bytes;
    }
    case msg_type::marker:
    case msg_type::repair_advert: {
      const std::uint64_t c = ++m_marker_counter;
      store_be64(end, c);
      const auto tag = m_marker.tag(marker_nonce(end), buf.first(len + 8));
      std::memcpy(end + 8, tag.data(), tag.size());
      return len + marker_trailer;
    }
    case msg_type::register_reply:
    case msg_type::complete_ack:
    case msg_type::fallback: {
      const auto id = leading_receiver_id(buf.subspan(wire::header_size, len - wire::header_size));
      const auto it = m_sites.find(std::string(id));
      if (it == m_sites.end()) return 0;
      if (type == msg_type::register_reply) {
        std::array<std::uint8_t, crypto::xchacha_nonce_bytes> nonce{};
        crypto::random_bytes(nonce);
        std::memcpy(end, nonce.data(), nonce.size());
        crypto::aead_seal(it->second.pairwise, nonce, buf.first(len + nonce.size()), m_session_key,
                          std::span<std::uint8_t>(u8(end + nonce.size()),
                                                  crypto::key_bytes + crypto::aead_tag_bytes));
        return len + reply_trailer;
      }
      const auto tag = crypto::hmac(it->second.pairwise, buf.first(len));
      std::memcpy(end, tag.data(), tag.size());
      return len + crypto::hmac_bytes;
    }
    default: return 0;  // data goes through seal_data; the rest is never sent by a sender
  }
}

std::size_t sender_keys::seal_data(std::span<std::byte> buf, std::size_t len) noexcept {
  wire::set_version(buf, wire::authenticated_version);
  if (m_sealed_data) {
    // Encrypted session: the payload is encrypted in place, the headers are associated data.
    const auto tag =
        m_sealed_data->seal(data_nonce(buf), buf.first(wire::data_header_size),
                            buf.subspan(wire::data_header_size, len - wire::data_header_size));
    std::memcpy(buf.data() + len, tag.data(), tag.size());
    return len + data_trailer_bytes;
  }
  const auto tag = m_data.tag(fixed<crypto::gcm_nonce_bytes>(buf.subspan(8, 12)), buf.first(len));
  std::memcpy(buf.data() + len, tag.data(), tag.size());
  return len + data_trailer_bytes;
}

std::error_code sender_keys::open(std::span<const std::byte> d, std::span<const std::byte>& out) {
  wire::header h;
  if (auto ec = wire::parse_header(d, h)) return ec;
  return open(h, d, out);
}

std::error_code sender_keys::open(const wire::header& h, std::span<const std::byte> d,
                                  std::span<const std::byte>& out) {
  if (h.version != wire::authenticated_version) {
    ++m_stats.unauthenticated;
    return errc::unauthenticated;
  }
  if (h.type != msg_type::register_request && h.type != msg_type::nak &&
      h.type != msg_type::complete) {
    ++m_stats.unauthenticated;
    return errc::unauthenticated;
  }
  const std::size_t trailer = trailer_size(h.type);
  const auto id = d.size() < wire::header_size + trailer
                      ? std::string_view()
                      : leading_receiver_id(
                            d.subspan(wire::header_size, d.size() - wire::header_size - trailer));
  if (id.empty()) {
    // Too short for its trailer, or no receiver id to find a key by.
    ++m_stats.unauthenticated;
    return errc::unauthenticated;
  }
  const std::byte* t = d.data() + d.size() - trailer;
  if (h.type == msg_type::register_request) {
    crypto::key32 site_key{};
    std::memcpy(site_key.data(), t, crypto::key_bytes);
    if (!m_pinned.empty()) {
      const auto pin = m_pinned.find(id);
      if (pin == m_pinned.end() || pin->second != site_key) {
        ++m_stats.untrusted_site;
        return errc::unauthenticated;
      }
    }
    const auto site_x = crypto::x25519_public_of(site_key);
    if (!site_x) {
      ++m_stats.untrusted_site;
      return errc::unauthenticated;
    }
    const auto pw =
        pairwise_key(m_ephemeral.secret_key, *site_x, m_ephemeral.public_key, *site_x, m_session);
    if (!pw || !crypto::hmac_verify(*pw, d.first(d.size() - crypto::hmac_bytes),
                                    fixed<crypto::hmac_bytes>(d.last(crypto::hmac_bytes)))) {
      ++m_stats.bad_tag;
      return errc::unauthenticated;
    }
    if (m_sites.size() >= max_sites && !m_sites.count(std::string(id))) {
      // An open group's ids are whatever registrants claim: their keys stay bounded.
      ++m_stats.untrusted_site;
      return errc::unauthenticated;
    }
    auto [it, fresh] = m_sites.try_emplace(std::string(id));
    if (!fresh && it->second.site_key != site_key) {
      // The first key to register an id keeps it for the session: a second key for the same
      // id is someone else (without pinned keys, that is all a sender can know).
      ++m_stats.untrusted_site;
      return errc::unauthenticated;
    }
    it->second.site_key = site_key;
    it->second.pairwise = *pw;
    wire::register_request req;
    const auto body = d.subspan(wire::header_size, d.size() - wire::header_size - trailer);
    if (req.ParseFromArray(body.data(), static_cast<int>(body.size())) && req.key_request()) {
      // Answered here (take_key_reply), checked exactly as a REGISTER (pinned key, HMAC under
      // the pairwise key): the key goes to no one a register_reply would not give it to. The
      // session core never sees a key request.
      ++m_stats.key_requests;
      m_key_reply_to = std::string(id);
      m_key_reply_relay.reset();
      if (req.relay_public().size() == crypto::key_bytes) {
        crypto::key32 rp{};
        std::memcpy(rp.data(), req.relay_public().data(), rp.size());
        m_key_reply_relay = rp;
      }
      out = {};
      return {};
    }
  } else {
    const auto it = m_sites.find(std::string(id));
    if (it == m_sites.end()) {
      ++m_stats.no_key;
      return errc::unauthenticated;
    }
    if (!crypto::hmac_verify(it->second.pairwise, d.first(d.size() - crypto::hmac_bytes),
                             fixed<crypto::hmac_bytes>(d.last(crypto::hmac_bytes)))) {
      ++m_stats.bad_tag;
      return errc::unauthenticated;
    }
  }
  out = d.first(d.size() - trailer);
  return {};
}

std::size_t sender_keys::seal_body(std::span<std::byte> buf, std::size_t len) {
  const auto type = static_cast<msg_type>(std::to_integer<std::uint8_t>(buf[3]));
  return auth::seal_body(m_manifest_key, type, buf, len, m_scratch);
}

std::size_t sender_keys::take_key_reply(std::span<std::byte> buf) {
  if (m_key_reply_to.empty()) return 0;
  wire::register_reply r;
  r.set_receiver_id(m_key_reply_to);
  r.set_accepted(true);
  r.set_key_only(true);
  // A relay's request: delegated only to a listed relay whose key the hub pins (open() checked
  // the request against the pin).
  if (m_key_reply_relay && m_id && m_pinned.count(m_key_reply_to) &&
      std::find(m_relays.begin(), m_relays.end(), m_key_reply_to) != m_relays.end()) {
    const auto sig = sign_delegation(*m_id, m_session, m_key_reply_to, *m_key_reply_relay);
    r.set_relay_delegation(sig.data(), sig.size());
    ++m_stats.delegations;
    ++m_stats.signatures;
  }
  m_key_reply_relay.reset();
  m_key_reply_to.clear();
  if (buf.size() < max_trailer_bytes) return 0;
  const std::size_t n = wire::encode_control(buf.first(buf.size() - max_trailer_bytes),
                                             msg_type::register_reply, m_session, r);
  if (n == 0) return 0;
  return seal_control(buf, n);
}

std::optional<crypto::key32> sender_keys::site_key(std::string_view receiver_id) const {
  const auto it = m_sites.find(std::string(receiver_id));
  if (it == m_sites.end()) return std::nullopt;
  return it->second.site_key;
}

std::optional<crypto::key32> sender_keys::fallback_key(std::string_view receiver_id) const {
  const auto it = m_sites.find(std::string(receiver_id));
  if (it == m_sites.end()) return std::nullopt;
  return derive(it->second.pairwise, m_session, fallback_info);
}

// --- receiver ------------------------------------------------------------------------------

void receiver_keys::session_keys::set_session_key(const crypto::key32& k, session_id s) {
  session_key = k;
  data.emplace(derive(k, s, "mcdist v2 data"));
  marker.emplace(derive(k, s, "mcdist v2 marker"));
  manifest_key = derive(k, s, manifest_info);
  sealed_data.emplace(derive(k, s, sealed_data_info), crypto::gcm::direction::decrypt);
}

receiver_keys::receiver_keys(receiver_auth_options o)
    : m_opts(std::move(o)), m_site_x(crypto::x25519_of(m_opts.site)),
      m_scratch(wire::max_datagram_size) {}

receiver_keys::~receiver_keys() = default;

receiver_keys::session_keys* receiver_keys::find(session_id s) {
  const auto it = m_sessions.find(s.value);
  return it == m_sessions.end() ? nullptr : &it->second;
}

receiver_keys::session_keys& receiver_keys::learn(session_id s, const crypto::key32& sender_public,
                                                  time_point now) {
  auto [at, fresh] = m_sessions.try_emplace(s.value);
  session_keys& slot = at->second;
  if (fresh || slot.sender_public != sender_public) {
    // A new session, or a sender that restarted it with a new session key: start over.
    release(slot);
    slot = session_keys{};
    slot.sender_public = sender_public;
    if (m_opts.relay) slot.relay_key = crypto::generate_x25519();
    if (auto pw = pairwise_key(m_site_x.secret_key, sender_public, sender_public,
                               m_site_x.public_key, s)) {
      slot.pairwise = *pw;
      slot.has_pairwise = true;
    }
  }
  slot.last_used = now;
  if (m_sessions.size() > m_opts.max_sessions) {
    auto oldest = m_sessions.end();
    for (auto it = m_sessions.begin(); it != m_sessions.end(); ++it) {
      if (it->first == s.value) continue;
      if (oldest == m_sessions.end() || it->second.last_used < oldest->second.last_used)
        oldest = it;
    }
    if (oldest != m_sessions.end()) {
      release(oldest->second);
      m_sessions.erase(oldest);
    }
  }
  return slot;  // erasing another element keeps references to this one
}

bool receiver_keys::take_verification(time_point now) {
  if (now - m_budget_at >= std::chrono::seconds(1)) {
    m_budget_at = now;
    m_budget = m_opts.verifications_per_second;
  }
  if (m_budget == 0) {
    ++m_stats.verify_budget;
    return false;
  }
  --m_budget;
  return true;
}

bool receiver_keys::verify_signed(std::span<const std::byte> signed_part,
                                  std::span<const std::uint8_t, crypto::signature_bytes> sig,
                                  time_point now, const crypto::key32** signer,
                                  const crypto::key32* only) {
  if (m_opts.trusted_senders.empty()) return true;
  if (!take_verification(now)) return false;
  ++m_stats.signatures;
  if (only) {
    if (crypto::verify(*only, signed_part, sig)) return true;
    ++m_stats.bad_signature;
    return false;
  }
  for (const auto& k : m_opts.trusted_senders) {
    if (crypto::verify(k, signed_part, sig)) {
      if (signer) *signer = &k;
      return true;
    }
  }
  ++m_stats.bad_signature;
  return false;
}

std::error_code receiver_keys::open(std::span<const std::byte> d, time_point now,
                                    std::span<const std::byte>& out) {
  return open(d, now, out, endpoint{});
}

std::error_code receiver_keys::open(std::span<const std::byte> d, time_point now,
                                    std::span<const std::byte>& out, const endpoint& from) {
  wire::header h;
  if (auto ec = wire::parse_header(d, h)) return ec;
  return open(h, d, now, out, from);
}

std::error_code receiver_keys::open(const wire::header& h, std::span<const std::byte> d,
                                    time_point now, std::span<const std::byte>& out,
                                    const endpoint& from) {
  if (h.version == wire::digest_version) return open_digested(d, h, now, out);
  if (h.version != wire::authenticated_version) {
    if (required()) {
      ++m_stats.unauthenticated;
      return errc::unauthenticated;
    }
    out = d;  // no keys configured: version 1 is taken as it is (warned at start)
    return {};
  }
  const std::size_t trailer =
      h.type == msg_type::announce ? announce_trailer_bytes(d) : trailer_size(h.type);
  const std::size_t min_body = h.type == msg_type::data || h.type == msg_type::parity
                                   ? wire::data_header_size
                                   : wire::header_size;
  if (trailer == 0 || d.size() < min_body + trailer) {
    // Too short for its trailer: refused here, never handed on (it would parse as version 1).
    ++m_stats.unauthenticated;
    return errc::unauthenticated;
  }
  const auto signed_part = d.first(d.size() - trailer);
  const std::byte* t = d.data() + d.size() - trailer;
  session_keys* s = find(h.session);
  auto refuse = [](std::uint64_t& counter) {
    ++counter;
    return std::error_code(errc::unauthenticated);
  };
  bool fresh = false;  // an announce whose signature was checked now, not a remembered repeat
  switch (h.type) {
    case msg_type::announce:
      if (auto ec = open_announce(d, trailer, s, now, fresh)) return ec;
      break;
    case msg_type::digest_list:
    case msg_type::session_end:
      if (!s) return refuse(m_stats.no_key);
      if (!verify_signed(signed_part,
                         fixed<crypto::signature_bytes>(d.last(crypto::signature_bytes)), now)) {
        return errc::unauthenticated;
      }
      if (h.type == msg_type::digest_list && s->encrypted) {
        return open_sealed_body(*s, signed_part, h.type, now, out);
      }
      break;
    case msg_type::data:
    case msg_type::parity:  // the same 20-byte header shape and sequence: the same tag or seal
      if (const auto done = open_block(s, d, signed_part, out)) return *done;
      break;
    case msg_type::marker:
    case msg_type::repair_advert:
      if (s && !s->marker && s->silent) break;  // set_silent: progress only, never trusted
      if (!s || !s->marker) return refuse(m_stats.no_key);
      if (!s->marker->verify(marker_nonce(t), d.first(d.size() - crypto::gcm_tag_bytes),
                             fixed<crypto::gcm_tag_bytes>(d.last(crypto::gcm_tag_bytes)))) {
        return refuse(m_stats.bad_tag);
      }
      break;
    case msg_type::register_reply:
      if (const auto done = open_register_reply(s, h.session, d, trailer, out)) return *done;
      break;
    case msg_type::relay_hello: return open_relay_hello(s, h.session, d, now, from, out);
    case msg_type::complete_ack:
    case msg_type::fallback:
      if (!s || !s->has_pairwise) return refuse(m_stats.no_key);
      if (!crypto::hmac_verify(s->pairwise, signed_part,
                               fixed<crypto::hmac_bytes>(d.last(crypto::hmac_bytes)))) {
        return refuse(m_stats.bad_tag);
      }
      break;
    default:
      // register_request, nak and complete come from sites, not senders.
      return refuse(m_stats.unauthenticated);
  }
  if (h.type == msg_type::announce) {
    return opened_announce(h.session, d, signed_part, now, fresh, from, out);
  }
  // A relay that holds the key but no delegation (restarted: its saved keys hold none, and a
  // two-way session announces only while it registers): its blocks and markers ask for one.
  if (s && s->relay_key && s->session_key && !s->delegation && !s->delegation_refused &&
      s->delegation_asks < max_delegation_asks && s->signer && !s->silent &&
      (h.type == msg_type::data || h.type == msg_type::marker)) {
    want_key(*s, h.session, now);
  }
  out = signed_part;
  return {};
}

std::optional<std::error_code> receiver_keys::open_block(session_keys* s,
                                                         std::span<const std::byte> d,
                                                         std::span<const std::byte> signed_part,
                                                         std::span<const std::byte>& out) {
  auto refuse = [](std::uint64_t& counter) {
    ++counter;
    return std::error_code(errc::unauthenticated);
  };
  if (s && s->encrypted) {
    // Encrypted session: decrypt the payload behind the 20-byte headers into m_scratch.
    if (!s->sealed_data) return refuse(m_stats.no_key);
    const auto cipher = signed_part.subspan(wire::data_header_size);
    std::memcpy(m_scratch.data(), d.data(), wire::data_header_size);
    if (!s->sealed_data->open(
            data_nonce(d), d.first(wire::data_header_size), cipher,
            fixed<crypto::gcm_tag_bytes>(d.last(crypto::gcm_tag_bytes)),
            std::span(m_scratch).subspan(wire::data_header_size, cipher.size()))) {
      return refuse(m_stats.bad_tag);
    }
    out = std::span<const std::byte>(m_scratch.data(), signed_part.size());
    return std::error_code{};
  }
  // A block-digest session sends its blocks as version 3 only (open_digested).
  if (s && s->block_digests) return refuse(m_stats.no_digest);
  if (s && !s->data && s->silent) return std::nullopt;  // set_silent: the file digest decides
  if (!s || !s->data) return refuse(m_stats.no_key);
  if (!s->data->verify(fixed<crypto::gcm_nonce_bytes>(d.subspan(8, 12)), signed_part,
                       fixed<crypto::gcm_tag_bytes>(d.last(crypto::gcm_tag_bytes)))) {
    return refuse(m_stats.bad_tag);
  }
  return std::nullopt;
}

std::optional<std::error_code> receiver_keys::open_register_reply(session_keys* s,
                                                                  session_id session,
                                                                  std::span<const std::byte> d,
                                                                  std::size_t trailer,
                                                                  std::span<const std::byte>& out) {
  if (!s || !s->has_pairwise) {
    ++m_stats.no_key;
    return errc::unauthenticated;
  }
  const std::byte* t = d.data() + d.size() - trailer;
  const auto nonce = fixed<crypto::xchacha_nonce_bytes>(std::span(t, crypto::xchacha_nonce_bytes));
  const auto aad = d.first(d.size() - trailer + nonce.size());
  const auto sealed = std::span<const std::uint8_t>(u8(t) + nonce.size(),
                                                    crypto::key_bytes + crypto::aead_tag_bytes);
  crypto::key32 k{};
  // A relay behind a relay: the hub's answer to its for_origin request, passed on by the relay
  // it hears, opens under the hub's pairwise key instead.
  bool origin = false;
  if (!crypto::aead_open(s->pairwise, nonce, aad, sealed, k)) {
    if (!s->origin_pairwise || !crypto::aead_open(*s->origin_pairwise, nonce, aad, sealed, k)) {
      ++m_stats.bad_tag;
      return errc::unauthenticated;
    }
    origin = true;
  }
  wire::register_reply r;
  const auto body = d.first(d.size() - trailer).subspan(wire::header_size);
  const bool parsed = r.ParseFromArray(body.data(), static_cast<int>(body.size()));
  if (origin) {
    // Only its delegation is taken: the session key this relay uses is its relay's (the
    // blocks it hears are tagged under that one).
    k.fill(0);
    if (!parsed || !r.key_only()) {
      ++m_stats.unauthenticated;
      return errc::unauthenticated;
    }
  } else {
    if (!s->session_key || *s->session_key != k) s->set_session_key(k, session);
    keyed(*s);
    if (!s->held.empty()) m_replay = session;  // take_held() opens them now
  }
  if (parsed && s->relay_key && !s->delegation && s->signer &&
      r.relay_delegation().size() == crypto::signature_bytes) {
    // The hub's delegation of this session to this relay: kept only when it is the hub's (the
    // key that signed the announce) for this relay's id and key.
    const auto sig = fixed<crypto::signature_bytes>(std::as_bytes(std::span(r.relay_delegation())));
    if (verify_delegation(*s->signer, session, m_opts.receiver_id, s->relay_key->public_key, sig)) {
      crypto::signature kept{};
      std::copy(sig.begin(), sig.end(), kept.begin());
      s->delegation = kept;
      ++m_stats.delegations;
    } else {
      ++m_stats.bad_signature;
    }
  }
  // The hub's answer to this relay's key request (it carried relay_public) without a
  // delegation. The answer of a relay in between never carries one: it says nothing of the
  // hub's (the for_origin request asks the hub itself).
  if (parsed && r.key_only() && s->relay_key && !s->delegation && (origin || !s->relay_public)) {
    s->delegation_refused = true;
  }
  // The answer to this layer's key request (encrypted and signed sessions alike): consumed
  // here, the core did not ask (it would take it for the answer to its REGISTER).
  if (parsed && r.key_only()) {
    out = {};
    return std::error_code{};
  }
  return std::nullopt;
}

std::error_code receiver_keys::open_relay_hello(session_keys* s, session_id session,
                                                std::span<const std::byte> d, time_point now,
                                                const endpoint& from,
                                                std::span<const std::byte>& out) {
  auto refuse = [](std::uint64_t& counter) {
    ++counter;
    return std::error_code(errc::unauthenticated);
  };
  // Only for a signed session this site heard: the delegation is checked against the key that
  // signed its announce, and nothing else may bind a key.
  if (!s || !s->signer) return refuse(m_stats.no_key);
  // Encrypted and silent sessions are not relayed this way; and only the host whose announce
  // opened the session (the relay itself) may give it a key.
  if (s->encrypted || s->silent || (s->source && !same_host(*s->source, from))) {
    return refuse(m_stats.unauthenticated);
  }
  const auto signed_part = d.first(d.size() - crypto::signature_bytes);
  wire::relay_hello m;
  const auto body = signed_part.subspan(wire::header_size);
  if (!m.ParseFromArray(body.data(), static_cast<int>(body.size())) ||
      m.relay_public().size() != crypto::key_bytes || m.flags() != 0 ||
      !wire::valid_receiver_id(m.relay_id())) {
    return refuse(m_stats.unauthenticated);
  }
  crypto::key32 relay{};
  std::memcpy(relay.data(), m.relay_public().data(), relay.size());
  out = {};
  if (s->relay_public == relay) return {};  // a repeat of the hello that bound it
  if (s->bound_at && now - *s->bound_at < relay_rebind_interval) {
    return refuse(m_stats.verify_budget);
  }
  if (!take_verification(now)) return errc::unauthenticated;
  ++m_stats.signatures;
  if (!verify_delegation(*s->signer, session, m.relay_id(), relay,
                         fixed<crypto::signature_bytes>(d.last(crypto::signature_bytes)))) {
    return refuse(m_stats.bad_signature);
  }
  const auto pw = pairwise_key(m_site_x.secret_key, relay, relay, m_site_x.public_key, session);
  if (!pw) return refuse(m_stats.bad_signature);
  // From now on the relay is this site's sender for the session: requests, NAKs and COMPLETEs
  // under the pairwise key with its key, blocks and markers under the session key it gives. A
  // relay keeps the hub's pairwise key to ask the hub for its own delegation through it.
  if (m_opts.relay && !s->relay_public) s->origin_pairwise = s->pairwise;
  s->pairwise = *pw;
  s->has_pairwise = true;
  s->relay_public = relay;
  s->bound_at = now;
  s->session_key.reset();
  s->data.reset();
  s->marker.reset();
  s->sealed_data.reset();
  ++m_stats.delegations;
  s->last_key_request.reset();
  want_key(*s, session, now);
  return {};
}

std::error_code receiver_keys::opened_announce(session_id session, std::span<const std::byte> d,
                                               std::span<const std::byte> signed_part,
                                               time_point now, bool fresh, const endpoint& from,
                                               std::span<const std::byte>& out) {
  session_keys* keys = find(session);
  if (keys && !keys->source && from != endpoint{}) keys->source = from;
  const auto flags = keys && !keys->encrypted ? flags_of(signed_part.subspan(wire::header_size))
                                              : announce_flags{};
  if (keys && (keys->encrypted || flags.sealed)) {
    keys->encrypted = true;
    return open_sealed_body(*keys, signed_part, msg_type::announce, now, out, d, fresh, &from);
  }
  if (keys && flags.block_digests && !keys->block_digests) {
    // A silent signed session with block digests (docs/security.md "Block digests"): its
    // blocks are checked against signed digests from now on, never passed unchecked, and the
    // site never asks for its key.
    keys->block_digests = true;
    keys->silent = true;
    keyed(*keys);
    if (m_key_request == session) m_key_request.reset();
  }
  // A signed session: ask for the key at once, so that blocks can be checked before this
  // site has assembled the manifest and registered (the register_reply repeats the key).
  if (keys && !keys->session_key && !keys->silent) want_key(*keys, session, now);
  // A relay that holds the key but no delegation yet (it registered before it asked, or its
  // key request's answer was lost): asks again, a few times.
  if (keys && keys->session_key && !keys->silent && keys->relay_key && !keys->delegation &&
      !keys->delegation_refused && keys->delegation_asks < max_delegation_asks && keys->signer) {
    want_key(*keys, session, now);
  }
  out = signed_part;
  return {};
}

std::error_code receiver_keys::open_sealed_body(session_keys& s,
                                                std::span<const std::byte> signed_part,
                                                wire::msg_type t, time_point now,
                                                std::span<const std::byte>& out,
                                                std::span<const std::byte> datagram, bool fresh,
                                                const endpoint* from) {
  const std::string sealed = sealed_field(t, signed_part.subspan(wire::header_size));
  if (sealed.size() < crypto::xchacha_nonce_bytes + crypto::aead_tag_bytes ||
      wire::header_size + sealed.size() > m_scratch.size()) {
    // A signed body of an encrypted session that is not sealed: refused, never taken in clear.
    ++m_stats.unauthenticated;
    return errc::unauthenticated;
  }
  if (!s.session_key) {
    if (t != msg_type::announce) {
      ++m_stats.no_key;
      return errc::unauthenticated;
    }
    // Consumed: ask for the key (take_key_request), and hold the announce (verified just now,
    // so a repeat is not held twice) to open it when the key arrives.
    want_key(s, session_of(signed_part), now);
    if (fresh && !datagram.empty() && m_held_bytes + datagram.size() <= max_held_announce_bytes) {
      s.held.push_back({std::vector<std::byte>(datagram.begin(), datagram.end()),
                        from ? *from : endpoint{}, now});
      m_held_bytes += datagram.size();
    }
    out = {};
    return {};
  }
  const std::size_t plain = sealed.size() - crypto::xchacha_nonce_bytes - crypto::aead_tag_bytes;
  std::memcpy(m_scratch.data(), signed_part.data(), wire::header_size);
  const auto* p = reinterpret_cast<const std::uint8_t*>(sealed.data());
  if (!crypto::aead_open(
          s.manifest_key,
          std::span<const std::uint8_t, crypto::xchacha_nonce_bytes>(p,
                                                                     crypto::xchacha_nonce_bytes),
          signed_part.first(wire::header_size),
          std::span<const std::uint8_t>(p + crypto::xchacha_nonce_bytes,
                                        sealed.size() - crypto::xchacha_nonce_bytes),
          std::span<std::uint8_t>(u8(m_scratch.data() + wire::header_size), plain))) {
    ++m_stats.bad_tag;
    return errc::unauthenticated;
  }
  out = std::span<const std::byte>(m_scratch.data(), wire::header_size + plain);
  return {};
}

void receiver_keys::want_key(session_keys& s, session_id id, time_point now) {
  if (!s.last_key_request || now - *s.last_key_request >= key_request_interval) {
    s.last_key_request = now;
    m_key_request = id;
  }
  if (!s.awaiting && !s.session_key) {
    s.awaiting = true;
    ++m_awaiting;
  }
}

void receiver_keys::release(session_keys& s) noexcept {
  for (const auto& h : s.held) m_held_bytes -= h.datagram.size();
  s.held.clear();
  keyed(s);
}

void receiver_keys::keyed(session_keys& s) noexcept {
  if (!s.awaiting) return;
  s.awaiting = false;
  --m_awaiting;
}

std::vector<held_announce> receiver_keys::take_held() {
  std::vector<held_announce> out;
  if (!m_replay) return out;
  session_keys* s = find(*m_replay);
  m_replay.reset();
  if (!s || !s->session_key) return out;
  for (const auto& h : s->held) m_held_bytes -= h.datagram.size();
  out.swap(s->held);
  return out;
}

bool receiver_keys::repeat_verified_recently(session_id s, time_point now) const {
  const auto it = m_sessions.find(s.value);
  return it != m_sessions.end() && it->second.last_announce &&
         now - *it->second.last_announce < announce_repeat_interval;
}

bool receiver_keys::awaiting_key(session_id s) const {
  const auto it = m_sessions.find(s.value);
  return it != m_sessions.end() && it->second.awaiting;
}

std::size_t receiver_keys::take_key_request(std::span<std::byte> buf) {
  if (!m_key_request) return 0;
  const session_id sid = *m_key_request;
  m_key_request.reset();
  session_keys* s = find(sid);
  const bool for_delegation = s && s->session_key && s->relay_key && !s->delegation &&
                              !s->delegation_refused && s->delegation_asks < max_delegation_asks;
  if (!s || (s->session_key && !for_delegation) || !s->has_pairwise || m_opts.receiver_id.empty()) {
    return 0;
  }
  if (buf.size() < max_trailer_bytes) return 0;
  wire::register_request r;
  r.set_receiver_id(m_opts.receiver_id);
  r.set_key_request(true);
  if (s->relay_key) {
    r.set_relay_public(s->relay_key->public_key.data(), s->relay_key->public_key.size());
  }
  // A relay behind a relay: the relay it hears cannot delegate, so the ask goes to the hub,
  // through that relay, under the hub's pairwise key. A relay's first requests, before any
  // relay_hello bound the session, are the hub's to answer too: a relay in front passes them
  // up, so that the delegation comes in one round trip to the hub (a session this relay holds
  // whole completes here sooner), and the hub ignores the mark.
  const bool origin = for_delegation && s->relay_public && s->origin_pairwise;
  if (origin || (s->relay_key && !s->relay_public)) r.set_for_origin(true);
  if (for_delegation) ++s->delegation_asks;
  const std::size_t n = wire::encode_control(buf.first(buf.size() - max_trailer_bytes),
                                             msg_type::register_request, sid, r);
  if (n == 0) return 0;
  const std::size_t sealed = seal_under(origin ? *s->origin_pairwise : s->pairwise, buf, n);
  if (sealed > 0) ++m_stats.key_requests;
  return sealed;
}

bool receiver_keys::encrypted(session_id s) const {
  const auto it = m_sessions.find(s.value);
  return it != m_sessions.end() && it->second.encrypted;
}

bool receiver_keys::block_digests(session_id s) const {
  const auto it = m_sessions.find(s.value);
  return it != m_sessions.end() && it->second.block_digests;
}

std::size_t receiver_keys::digest_bytes_held(session_id s) const {
  const auto it = m_sessions.find(s.value);
  return it == m_sessions.end() || !it->second.digests ? 0 : it->second.digests->memory_bytes();
}

std::size_t receiver_keys::seal(std::span<std::byte> buf, std::size_t len) {
  if (len < wire::header_size || buf.size() < len + max_trailer_bytes) return 0;
  session_keys* s = find(session_of(buf));
  if (!s) return required() ? 0 : len;  // a version-1 session: sent as it is
  if (!s->has_pairwise) return 0;
  return seal_under(s->pairwise, buf, len);
}

std::size_t receiver_keys::seal_under(const crypto::key32& pairwise, std::span<std::byte> buf,
                                      std::size_t len) {
  wire::set_version(buf, wire::authenticated_version);
  std::byte* end = buf.data() + len;
  const auto type = static_cast<msg_type>(std::to_integer<std::uint8_t>(buf[3]));
  std::size_t out = len;
  if (type == msg_type::register_request) {
    std::memcpy(end, m_opts.site.public_key.data(), crypto::key_bytes);
    out += crypto::key_bytes;
  } else if (type != msg_type::nak && type != msg_type::complete) {
    return 0;
  }
  const auto tag = crypto::hmac(pairwise, buf.first(out));
  std::memcpy(buf.data() + out, tag.data(), tag.size());
  return out + crypto::hmac_bytes;
}

bool receiver_keys::has_session_key(session_id s) const {
  const auto it = m_sessions.find(s.value);
  return it != m_sessions.end() && it->second.session_key.has_value();
}

std::optional<crypto::key32> receiver_keys::signer(session_id s) const {
  const auto it = m_sessions.find(s.value);
  return it == m_sessions.end() ? std::nullopt : it->second.signer;
}

std::optional<std::string> receiver_keys::export_session(session_id s) const {
  const auto it = m_sessions.find(s.value);
  if (it == m_sessions.end() || !it->second.session_key) return std::nullopt;
  std::string blob(reinterpret_cast<const char*>(it->second.sender_public.data()),
                   crypto::key_bytes);
  blob.append(reinterpret_cast<const char*>(it->second.session_key->data()), crypto::key_bytes);
  // Then tagged fields: 'E' an encrypted session; 'R' and the key of the relay that serves it
  // (the pairwise key is derived with it); 'S' and the key that signed its announce (a relay's
  // hello and delegation are checked against it, the sequence book and journal name it).
  if (it->second.encrypted) blob.push_back('E');
  if (it->second.relay_public) {
    blob.push_back('R');
    blob.append(reinterpret_cast<const char*>(it->second.relay_public->data()), crypto::key_bytes);
  }
  if (it->second.signer) {
    blob.push_back('S');
    blob.append(reinterpret_cast<const char*>(it->second.signer->data()), crypto::key_bytes);
  }
  return blob;
}

bool receiver_keys::import_session(session_id s, std::string_view blob) {
  if (blob.size() < 2 * crypto::key_bytes) return false;
  bool encrypted = false;
  std::optional<crypto::key32> relay;
  std::optional<crypto::key32> signer;
  for (auto rest = blob.substr(2 * crypto::key_bytes); !rest.empty();) {
    const char tag = rest.front();
    rest.remove_prefix(1);
    if (tag == 'E') {
      encrypted = true;
      continue;
    }
    if ((tag != 'R' && tag != 'S') || rest.size() < crypto::key_bytes) return false;
    auto& k = (tag == 'R' ? relay : signer).emplace();
    std::memcpy(k.data(), rest.data(), crypto::key_bytes);
    rest.remove_prefix(crypto::key_bytes);
  }
  // The signer must still be trusted here (the configuration may have changed).
  if (signer && required() &&
      std::find(m_opts.trusted_senders.begin(), m_opts.trusted_senders.end(), *signer) ==
          m_opts.trusted_senders.end()) {
    return false;
  }
  blob.remove_suffix(blob.size() - 2 * crypto::key_bytes);
  crypto::key32 sender_public{};
  crypto::key32 k{};
  std::memcpy(sender_public.data(), blob.data(), crypto::key_bytes);
  std::memcpy(k.data(), blob.data() + crypto::key_bytes, crypto::key_bytes);
  auto& keys = learn(s, sender_public, time_point{});
  if (!keys.has_pairwise) return false;
  if (relay) {
    const auto pw = pairwise_key(m_site_x.secret_key, *relay, *relay, m_site_x.public_key, s);
    if (!pw) return false;
    if (m_opts.relay) keys.origin_pairwise = keys.pairwise;
    keys.pairwise = *pw;
    keys.relay_public = relay;
  }
  keys.set_session_key(k, s);
  keyed(keys);
  keys.encrypted = encrypted;
  keys.signer = signer;
  return true;
}

std::optional<crypto::key32> receiver_keys::fallback_key(session_id s) const {
  const auto it = m_sessions.find(s.value);
  if (it == m_sessions.end() || !it->second.has_pairwise) return std::nullopt;
  return derive(it->second.pairwise, s, fallback_info);
}

bool receiver_keys::set_silent(session_id s) {
  session_keys* k = find(s);
  if (!k || k->silent) return false;
  k->silent = true;
  keyed(*k);  // awaits no key
  if (m_key_request == s) m_key_request.reset();
  return true;
}

void receiver_keys::forget(session_id s) {
  if (session_keys* k = find(s)) release(*k);
  m_sessions.erase(s.value);
}

}  // namespace mcdist::auth
