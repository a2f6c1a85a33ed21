#pragma once
/// @file
/// Proof of the site key on a unicast fallback connection of a signed session
/// (docs/security.md "Unicast fallback"). A token alone is a bearer secret: whoever sniffs the
/// FALLBACK order or a hello could present it. So in a signed session the server opens every
/// connection (and the association) with a fresh random challenge, and the client's hello
/// carries
///
///     proof = HMAC-SHA-512/256(fallback key, "mcdist v2 fallback hello" || challenge ||
///                              token || session || client nonce || connection index ||
///                              connection count || id length || receiver id)
///
/// where the fallback key is HKDF-SHA-256 of the site's pairwise key (the X25519 agreement of
/// the register_reply, common/auth.hpp), info "mcdist v2 fallback". This is the two-pass
/// unilateral authentication mechanism with a MAC of ISO/IEC 9798-4 (section 5.1.2: the
/// verifier's random number, the claimant's MAC over it and its identity), the shape of
/// CHAP (RFC 1994): the challenge is fresh per connection, so a recorded hello is useless on
/// another connection, and only the site (and the sender) hold the key. Pure: no I/O.

#include "common/crypto.hpp"
#include "common/unicast/frame.hpp"

namespace mcdist::unicast {

/// The proof of `h` (its proof field ignored) answering `c` under `key`.
crypto::hmac_tag hello_proof(const crypto::key32& key, const challenge& c, const hello& h);

/// Constant-time check of `h.proof` against hello_proof(key, c, h).
/// @return false when the hello carries no proof or a wrong one
bool verify_hello_proof(const crypto::key32& key, const challenge& c, const hello& h) noexcept;

/// A challenge of 128 bits from the kernel's CSPRNG (getrandom, libsodium randombytes_buf).
challenge make_challenge() noexcept;

}  // namespace mcdist::unicast
