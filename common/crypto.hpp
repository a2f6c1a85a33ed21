#pragma once
/// @file
/// The cryptographic primitives mcdist uses, as thin wrappers over libsodium and OpenSSL 3
/// (no cryptography of our own; docs/security.md names every construction and its use):
///
/// - Ed25519 signatures (RFC 8032), libsodium crypto_sign_*: sender and site identities.
/// - X25519 (RFC 7748), libsodium crypto_scalarmult / crypto_sign_ed25519_*_to_curve25519:
///   key agreement between a sender's per-session key and a site key.
/// - HKDF-SHA-256 (RFC 5869), OpenSSL EVP_KDF "HKDF": every symmetric key is derived.
/// - HMAC-SHA-512/256 (RFC 2104, FIPS 180-4 SHA-512/256 truncation as in libsodium crypto_auth):
///   unicast control messages between a site and the sender.
/// - XChaCha20-Poly1305 (RFC 8439 with the XChaCha extension, draft-irtf-cfrg-xchacha),
///   libsodium crypto_aead_xchacha20poly1305_ietf_*: wrapping the session key for one site.
/// - AES-256-GCM (NIST SP 800-38D) as GMAC (empty plaintext, everything as associated data),
///   libsodium crypto_aead_aes256gcm_*_afternm where the CPU has AES-NI and PCLMULQDQ, OpenSSL
///   EVP elsewhere (same output): the per-datagram tag on data blocks and markers; and as
///   authenticated encryption of the payload (class gcm): data blocks of encrypted sessions.
///
/// Computation only (part of mcdist_common_core): key files are read and written by
/// common/sys/key_file.hpp. random_bytes reads the kernel's CSPRNG: the one source of randomness
/// the pure layer may use, because keys, nonces and challenges must never come from a seeded
/// generator (cores otherwise get their randomness injected).

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

struct evp_cipher_ctx_st;

namespace mcdist::crypto {

/// Bytes of an Ed25519 public key, an X25519 key, a symmetric key and an HMAC tag.
inline constexpr std::size_t key_bytes = 32;
/// Bytes of an Ed25519 signature.
inline constexpr std::size_t signature_bytes = 64;
/// Bytes of an HMAC-SHA-512/256 tag (crypto_auth_BYTES).
inline constexpr std::size_t hmac_bytes = 32;
/// Bytes of an AES-256-GCM tag (NIST SP 800-38D, the full 128-bit tag).
inline constexpr std::size_t gcm_tag_bytes = 16;
/// Bytes of an AES-256-GCM nonce (the recommended 96 bits, SP 800-38D section 8.2.1).
inline constexpr std::size_t gcm_nonce_bytes = 12;
/// Bytes of an XChaCha20-Poly1305 nonce and tag.
inline constexpr std::size_t xchacha_nonce_bytes = 24;
inline constexpr std::size_t aead_tag_bytes = 16;

using key32 = std::array<std::uint8_t, key_bytes>;
using signature = std::array<std::uint8_t, signature_bytes>;
using hmac_tag = std::array<std::uint8_t, hmac_bytes>;
using gcm_tag = std::array<std::uint8_t, gcm_tag_bytes>;

/// A key, a key file or a signature that cannot be used; the message says why and where.
class key_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Initialises libsodium (idempotent, thread-safe). @throws key_error if it cannot.
void init();

/// Fills `out` from the kernel's CSPRNG (libsodium randombytes_buf, getrandom(2) on Linux).
void random_bytes(std::span<std::uint8_t> out) noexcept;

/// An Ed25519 identity: public key and libsodium's 64-byte secret key (seed || public key).
struct identity {
  key32 public_key{};
  std::array<std::uint8_t, 64> secret_key{};
};

/// A fresh Ed25519 identity from the CSPRNG.
identity generate_identity();

/// "mcdist-ed25519:" followed by the base64 (RFC 4648, with padding) of the 32-byte key.
std::string format_public_key(const key32& pk);
/// Parses format_public_key's text (surrounding whitespace allowed).
/// @throws key_error naming what is wrong
key32 parse_public_key(std::string_view text);

/// The text of a secret key file: one line "mcdist-ed25519-secret:" followed by the base64 of
/// the 32-byte seed, then the format_public_key line. The caller wipes it after use
/// (common/sys/key_file.hpp writes it to a file).
std::string format_secret_key(const identity& id);
/// The identity of format_secret_key's text (its first line); std::nullopt when the first line
/// is not "mcdist-ed25519-secret:" and 32 bytes of base64. Leaves no copy of the seed behind.
std::optional<identity> parse_secret_key(std::string_view text);
/// The key of the first line of `text` that starts with "mcdist-ed25519:" (surrounding white
/// space allowed); std::nullopt when there is none. @throws key_error if that line is bad
std::optional<key32> find_public_key(std::string_view text);
/// True when `text` (trimmed) starts like format_public_key's text.
bool is_public_key_text(std::string_view text) noexcept;
/// Overwrites secret bytes in a way the compiler cannot drop (libsodium sodium_memzero).
void wipe(std::span<char> secret) noexcept;

/// Ed25519 signature of `message` (RFC 8032 section 5.1.6).
signature sign(const identity& id, std::span<const std::byte> message) noexcept;
/// Verifies an Ed25519 signature (libsodium's strict verification: small-order and
/// non-canonical encodings refused).
bool verify(const key32& pk, std::span<const std::byte> message,
            std::span<const std::uint8_t, signature_bytes> sig) noexcept;

/// An X25519 key pair (RFC 7748).
struct x25519_pair {
  key32 public_key{};
  key32 secret_key{};
};
/// A fresh X25519 key pair (a sender's per-session key).
x25519_pair generate_x25519();
/// The X25519 key pair that belongs to an Ed25519 identity (libsodium's birational map,
/// crypto_sign_ed25519_{pk,sk}_to_curve25519), so a site needs one key file for both uses.
x25519_pair x25519_of(const identity& id) noexcept;
/// The X25519 public key of an Ed25519 public key; std::nullopt for an invalid point.
std::optional<key32> x25519_public_of(const key32& ed25519_pk) noexcept;
/// X25519(our secret, their public); std::nullopt when the result is all zero (a small-order
/// point: RFC 7748 section 6.1 says to check).
std::optional<key32> x25519(const key32& our_secret, const key32& their_public) noexcept;

/// HKDF-SHA-256 (RFC 5869) extract-and-expand to `out`.
/// @throws key_error only if OpenSSL fails (out of memory)
void hkdf_sha256(std::span<const std::uint8_t> ikm, std::span<const std::uint8_t> salt,
                 std::string_view info, std::span<std::uint8_t> out);

/// HMAC-SHA-512/256 of `message` under `key` (libsodium crypto_auth).
hmac_tag hmac(const key32& key, std::span<const std::byte> message) noexcept;
/// Constant-time check of an HMAC-SHA-512/256 tag.
bool hmac_verify(const key32& key, std::span<const std::byte> message,
                 std::span<const std::uint8_t, hmac_bytes> tag) noexcept;

/// XChaCha20-Poly1305 encryption of `plain` into `out` (plain.size() + aead_tag_bytes bytes)
/// with associated data `ad`. The nonce is random (192 bits make collisions negligible).
void aead_seal(const key32& key, std::span<const std::uint8_t, xchacha_nonce_bytes> nonce,
               std::span<const std::byte> ad, std::span<const std::uint8_t> plain,
               std::span<std::uint8_t> out) noexcept;
/// Decrypts and verifies; false when the tag does not verify (out is then unspecified).
bool aead_open(const key32& key, std::span<const std::uint8_t, xchacha_nonce_bytes> nonce,
               std::span<const std::byte> ad, std::span<const std::uint8_t> sealed,
               std::span<std::uint8_t> out) noexcept;

/// An OpenSSL cipher context held by value: a copy is a new context with the same cipher, key
/// schedule and settings (EVP_CIPHER_CTX_copy(3)), so gmac and gcm copy like values (the fuzz
/// targets start every input from one copied handshake). Converts to the raw pointer for EVP
/// calls; never null.
class cipher_ctx {
 public:
  /// @throws key_error if OpenSSL cannot allocate a context
  cipher_ctx();
  /// @throws key_error if OpenSSL cannot allocate or copy the context
  cipher_ctx(const cipher_ctx& other);
  cipher_ctx& operator=(const cipher_ctx& other);
  ~cipher_ctx();
  operator evp_cipher_ctx_st*() const noexcept {
    return m_ctx;
  }  // NOLINT(google-explicit-constructor)

 private:
  evp_cipher_ctx_st* m_ctx = nullptr;
};

/// Which implementation of AES-256-GCM a gmac or gcm object runs.
enum class gcm_backend {
  /// libsodium's AES-NI/PCLMULQDQ code (crypto_aead_aes256gcm_*_afternm) where the CPU has both
  /// instructions (crypto_aead_aes256gcm_is_available()), else OpenSSL EVP.
  automatic,
  /// OpenSSL EVP (EVP_aes_256_gcm), on any CPU. Same output bit for bit; slower per call.
  openssl,
};

/// True when the automatic backend is libsodium's (this CPU has AES-NI and PCLMULQDQ).
bool gcm_hardware() noexcept;

/// An AES-256-GCM key with its schedule expanded once, for one direction: libsodium's AES-NI
/// state where the CPU has the instructions (about 1.4x faster per 1.3 kB block than OpenSSL 3
/// EVP, whose per-call parameter handling dominates at that size: docs/benchmarks.md "GMAC per
/// block"), else an OpenSSL context. Copies like a value. Not thread-safe.
class gcm_key {
 public:
  /// @throws key_error if OpenSSL cannot set the cipher up (OpenSSL backend)
  gcm_key(const key32& key, bool encrypt, gcm_backend backend);

  /// libsodium's state, or null on the OpenSSL backend.
  const void* sodium() const noexcept { return m_evp ? nullptr : m_state.data(); }
  /// The OpenSSL context, or null on the libsodium backend.
  evp_cipher_ctx_st* evp() const noexcept {
    return m_evp ? static_cast<evp_cipher_ctx_st*>(*m_evp) : nullptr;
  }

 private:
  /// crypto_aead_aes256gcm_state (512 bytes, 16-aligned; checked in crypto.cpp).
  alignas(16) std::array<unsigned char, 512> m_state{};
  std::optional<cipher_ctx> m_evp;
};

/// AES-256-GCM used as GMAC: a 16-byte tag over `data` (all associated data, no plaintext)
/// with a caller-supplied 96-bit nonce that must never repeat under one key (SP 800-38D
/// section 8). The key schedule is expanded once (gcm_key). Not thread-safe; a copy is
/// independent (same key, its own state).
class gmac {
 public:
  /// @throws key_error if OpenSSL cannot set the cipher up (OpenSSL backend)
  explicit gmac(const key32& key, gcm_backend backend = gcm_backend::automatic);

  /// Tag of `data` under `nonce`.
  gcm_tag tag(std::span<const std::uint8_t, gcm_nonce_bytes> nonce,
              std::span<const std::byte> data) noexcept;
  /// Constant-time comparison of tag(nonce, data) with `expected`.
  bool verify(std::span<const std::uint8_t, gcm_nonce_bytes> nonce, std::span<const std::byte> data,
              std::span<const std::uint8_t, gcm_tag_bytes> expected) noexcept;

 private:
  gcm_key m_key;
};

/// AES-256-GCM authenticated encryption (NIST SP 800-38D) in one direction, with the key
/// schedule expanded once (gcm_key: libsodium AES-NI, else OpenSSL EVP). The 96-bit nonce is
/// the caller's and must never repeat under one key with a different plaintext (SP 800-38D
/// section 8). Not thread-safe.
class gcm {
 public:
  enum class direction { encrypt, decrypt };
  /// @throws key_error if OpenSSL cannot set the cipher up (OpenSSL backend)
  gcm(const key32& key, direction d, gcm_backend backend = gcm_backend::automatic);

  /// Encrypts `data` in place (ciphertext has the plaintext's length) with associated data
  /// `ad`; returns the 16-byte tag. Only on an encrypt object.
  gcm_tag seal(std::span<const std::uint8_t, gcm_nonce_bytes> nonce, std::span<const std::byte> ad,
               std::span<std::byte> data) noexcept;
  /// Decrypts `cipher` into `out` (same length; may be the same memory) and checks `tag` over
  /// `ad` and the ciphertext. Only on a decrypt object.
  /// @return false when the tag does not verify; `out` then holds unspecified bytes the
  ///         caller must not use
  bool open(std::span<const std::uint8_t, gcm_nonce_bytes> nonce, std::span<const std::byte> ad,
            std::span<const std::byte> cipher, std::span<const std::uint8_t, gcm_tag_bytes> tag,
            std::span<std::byte> out) noexcept;

 private:
  gcm_key m_key;
};

}  // namespace mcdist::crypto
