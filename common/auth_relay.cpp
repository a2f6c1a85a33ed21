// Relays of signed two-way sessions (auth.hpp "Relays of signed two-way sessions",
// docs/security.md "Relays of signed sessions"): the hub's delegation of a session to a relay's
// key, and the relay_hello that carries it to the sites behind the relay. Apart from auth.cpp,
// which seals and opens the version-2 types (a site's binding to a relay's key among them).
#include "common/auth.hpp"

#include "common/byte_order.hpp"
#include "mcdist.pb.h"

#include <cstring>

namespace mcdist::auth {

std::vector<std::byte> delegation_message(session_id s, std::string_view relay_id,
                                          const crypto::key32& relay_public) {
  std::vector<std::byte> m;
  m.reserve(delegation_context.size() + 4 + 1 + relay_id.size() + crypto::key_bytes + 1);
  for (const char c : delegation_context) m.push_back(static_cast<std::byte>(c));
  std::array<std::byte, 4> id{};
  store_be32(id.data(), s.value);
  m.insert(m.end(), id.begin(), id.end());
  // Ids longer than a byte can count are no receiver ids; the length byte keeps id and key
  // apart all the same.
  m.push_back(static_cast<std::byte>(std::min<std::size_t>(relay_id.size(), 255)));
  for (const char c : relay_id) m.push_back(static_cast<std::byte>(c));
  for (const auto b : relay_public) m.push_back(static_cast<std::byte>(b));
  m.push_back(std::byte{0});  // flags: no encrypted sessions
  return m;
}

crypto::signature sign_delegation(const crypto::identity& hub, session_id s,
                                  std::string_view relay_id, const crypto::key32& relay_public) {
  return crypto::sign(hub, delegation_message(s, relay_id, relay_public));
}

bool verify_delegation(const crypto::key32& hub, session_id s, std::string_view relay_id,
                       const crypto::key32& relay_public,
                       std::span<const std::uint8_t, crypto::signature_bytes> sig) noexcept {
  if (relay_id.empty() || relay_id.size() > wire::max_receiver_id_bytes) return false;
  try {
    return crypto::verify(hub, delegation_message(s, relay_id, relay_public), sig);
  } catch (const std::bad_alloc&) {
    return false;
  }
}

std::size_t encode_relay_hello(std::span<std::byte> out, session_id s, const relay_delegation& d) {
  wire::relay_hello m;
  m.set_relay_id(d.relay_id);
  m.set_relay_public(d.key.public_key.data(), d.key.public_key.size());
  if (out.size() < crypto::signature_bytes) return 0;
  const std::size_t n = wire::encode_control(out.first(out.size() - crypto::signature_bytes),
                                             wire::msg_type::relay_hello, s, m);
  if (n == 0) return 0;
  wire::set_version(out, wire::authenticated_version);
  std::memcpy(out.data() + n, d.signature.data(), d.signature.size());
  return n + crypto::signature_bytes;
}

std::optional<relay_delegation> receiver_keys::delegation(session_id s) const {
  const auto it = m_sessions.find(s.value);
  if (it == m_sessions.end() || !it->second.delegation || !it->second.relay_key) {
    return std::nullopt;
  }
  return relay_delegation{m_opts.receiver_id, *it->second.relay_key, *it->second.delegation};
}

bool receiver_keys::delegation_refused(session_id s) const {
  const auto it = m_sessions.find(s.value);
  return it != m_sessions.end() && it->second.delegation_refused;
}

bool receiver_keys::relay_bound(session_id s) const {
  const auto it = m_sessions.find(s.value);
  return it != m_sessions.end() && it->second.relay_public.has_value();
}

}  // namespace mcdist::auth
