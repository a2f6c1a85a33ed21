#pragma once
/// @file
/// The clients the server expects: who may open a unicast session, with which token, for which
/// files (pure; no I/O). The sender registers a grant when it moves a receiver to fallback and
/// tells that receiver the token over the multicast control channel.

#include "common/crypto.hpp"
#include "common/ids.hpp"
#include "common/unicast/types.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mcdist::unicast {

/// Permission for one receiver to fetch files over unicast.
struct client_grant {
  /// Secret, chosen at random by the sender (128 bits from getrandom: neither guessed nor
  /// predicted). All zero is not a valid token.
  fallback_token token{};
  /// The receiver's configured id (wire::valid_receiver_id).
  std::string receiver_id;
  /// The multicast session whose remainder this is.
  session_id session{};
  /// Files the receiver may request (any order, duplicates ignored), unless all_files.
  std::vector<file_index> files;
  /// Every file of the byte source may be requested.
  bool all_files = false;
  /// Signed sessions: the site's fallback key (common/unicast/hello_proof.hpp). When set, a
  /// hello must carry a proof under it over this connection's challenge, so a sniffed token
  /// alone opens nothing. Unset (unsigned sessions): the token is the credential.
  std::optional<crypto::key32> proof_key;
  /// Encrypted sessions: every frame after the hello travels sealed under keys derived from
  /// proof_key and the connection's challenge (common/unicast/record_seal.hpp). Needs
  /// proof_key. False: frames travel plain, as in every session before encryption.
  bool seal_records = false;
  /// The files this grant's session reads, on a server shared by several sessions; null: the
  /// server's own. Must outlive the grant (end_session withdraws it).
  byte_source* source = nullptr;
};

class grant_table {
 public:
  /// Adds a grant. @return errc::invalid_field for an all-zero token, an invalid receiver id, a
  ///         token already registered (the old grant stays) or seal_records without proof_key.
  std::error_code add(client_grant g);

  /// Removes the grant with `token`. @return false when there was none.
  bool remove(const fallback_token& token);

  /// The grant matching all three credentials, or nullptr. The token is compared with every
  /// registered grant in constant time (OpenSSL CRYPTO_memcmp, no early exit), so response
  /// timing does not tell how much of a guessed token was right.
  const client_grant* find(const fallback_token& token, session_id session,
                           std::string_view receiver_id) const;

  /// The tokens of `session`'s grants.
  std::vector<fallback_token> tokens_of(session_id session) const;

  /// True when `g` allows `file`.
  static bool allows(const client_grant& g, file_index file) noexcept;

  std::size_t size() const noexcept { return m_grants.size(); }

 private:
  std::vector<client_grant> m_grants;  ///< files sorted and unique in each
};

}  // namespace mcdist::unicast
