#include "common/unicast/grant_table.hpp"

#include "common/error.hpp"
#include "common/wire.hpp"

#include <openssl/crypto.h>

#include <algorithm>

namespace mcdist::unicast {

std::error_code grant_table::add(client_grant g) {
  if (g.token == fallback_token{} || !wire::valid_receiver_id(g.receiver_id))
    return errc::invalid_field;
  if (g.seal_records && !g.proof_key) return errc::invalid_field;
  for (const auto& existing : m_grants)
    if (existing.token == g.token) return errc::invalid_field;
  std::sort(g.files.begin(), g.files.end());
  g.files.erase(std::unique(g.files.begin(), g.files.end()), g.files.end());
  m_grants.push_back(std::move(g));
  return {};
}

bool grant_table::remove(const fallback_token& token) {
  const auto it = std::find_if(m_grants.begin(), m_grants.end(),
                               [&](const client_grant& g) { return g.token == token; });
  if (it == m_grants.end()) return false;
  m_grants.erase(it);
  return true;
}

const client_grant* grant_table::find(const fallback_token& token, session_id session,
                                      std::string_view receiver_id) const {
  const client_grant* found = nullptr;
  for (const auto& g : m_grants) {
    // Every entry is compared in full; only the (non-secret) index of a match is data-dependent.
    if (CRYPTO_memcmp(g.token.data(), token.data(), token.size()) == 0) found = &g;
  }
  if (found == nullptr || token == fallback_token{}) return nullptr;
  if (found->session != session || found->receiver_id != receiver_id) return nullptr;
  return found;
}

bool grant_table::allows(const client_grant& g, file_index file) noexcept {
  return g.all_files || std::binary_search(g.files.begin(), g.files.end(), file);
}

std::vector<fallback_token> grant_table::tokens_of(session_id session) const {
  std::vector<fallback_token> out;
  for (const auto& g : m_grants) {
    if (g.session == session) out.push_back(g.token);
  }
  return out;
}

}  // namespace mcdist::unicast
