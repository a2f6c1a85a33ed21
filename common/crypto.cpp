#include "common/crypto.hpp"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <sodium.h>

#include <cstring>

namespace mcdist::crypto {

namespace {

constexpr std::string_view public_prefix = "mcdist-ed25519:";
constexpr std::string_view secret_prefix = "mcdist-ed25519-secret:";

std::string to_base64(std::span<const std::uint8_t> bin) {
  std::string out(sodium_base64_encoded_len(bin.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), bin.data(), bin.size(), sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::strlen(out.c_str()));
  return out;
}

/// Decodes exactly 32 bytes of base64; false on anything else.
bool from_base64(std::string_view text, key32& out) {
  std::size_t len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(out.data(), out.size(), text.data(), text.size(), nullptr, &len, &end,
                        sodium_base64_VARIANT_ORIGINAL) != 0) {
    return false;
  }
  return len == out.size() && end == text.data() + text.size();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

const unsigned char* bytes(std::span<const std::byte> s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

void init() {
  if (sodium_init() < 0) throw key_error("libsodium cannot be initialised");
}

void random_bytes(std::span<std::uint8_t> out) noexcept { randombytes_buf(out.data(), out.size()); }

identity generate_identity() {
  init();
  identity id;
  crypto_sign_keypair(id.public_key.data(), id.secret_key.data());
  return id;
}

std::string format_public_key(const key32& pk) {
  return std::string(public_prefix) + to_base64(pk);
}

key32 parse_public_key(std::string_view text) {
  text = trim(text);
  if (text.substr(0, public_prefix.size()) != public_prefix) {
    throw key_error("not an mcdist public key (expected \"mcdist-ed25519:BASE64\"): \"" +
                    std::string(text.substr(0, 40)) + "\"");
  }
  key32 pk{};
  if (!from_base64(text.substr(public_prefix.size()), pk)) {
    throw key_error(
        "bad mcdist public key: the base64 after \"mcdist-ed25519:\" must decode to 32 bytes");
  }
  if (!x25519_public_of(pk)) throw key_error("bad mcdist public key: not a valid Ed25519 point");
  return pk;
}

std::string format_secret_key(const identity& id) {
  std::array<std::uint8_t, 32> seed{};
  crypto_sign_ed25519_sk_to_seed(seed.data(), id.secret_key.data());
  std::string text =
      std::string(secret_prefix) + to_base64(seed) + "\n" + format_public_key(id.public_key) + "\n";
  sodium_memzero(seed.data(), seed.size());
  return text;
}

std::optional<identity> parse_secret_key(std::string_view text) {
  init();
  std::string_view first = trim(text.substr(0, text.find('\n')));
  key32 seed{};
  if (first.substr(0, secret_prefix.size()) != secret_prefix ||
      !from_base64(first.substr(secret_prefix.size()), seed)) {
    sodium_memzero(seed.data(), seed.size());
    return std::nullopt;
  }
  identity id;
  crypto_sign_seed_keypair(id.public_key.data(), id.secret_key.data(), seed.data());
  sodium_memzero(seed.data(), seed.size());
  return id;
}

std::optional<key32> find_public_key(std::string_view text) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto line = trim(text.substr(0, nl));
    if (line.substr(0, public_prefix.size()) == public_prefix) return parse_public_key(line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return std::nullopt;
}

bool is_public_key_text(std::string_view text) noexcept {
  return trim(text).substr(0, public_prefix.size()) == public_prefix;
}

void wipe(std::span<char> secret) noexcept { sodium_memzero(secret.data(), secret.size()); }

signature sign(const identity& id, std::span<const std::byte> message) noexcept {
  signature sig{};
  crypto_sign_detached(sig.data(), nullptr, bytes(message), message.size(), id.secret_key.data());
  return sig;
}

bool verify(const key32& pk, std::span<const std::byte> message,
            std::span<const std::uint8_t, signature_bytes> sig) noexcept {
  return crypto_sign_verify_detached(sig.data(), bytes(message), message.size(), pk.data()) == 0;
}

x25519_pair generate_x25519() {
  init();
  x25519_pair p;
  crypto_box_keypair(p.public_key.data(), p.secret_key.data());
  return p;
}

x25519_pair x25519_of(const identity& id) noexcept {
  x25519_pair p;
  // An identity made by generate_identity or read from a key file is a valid point; should
  // the map fail anyway, the all-zero key makes every later X25519 fail closed.
  if (crypto_sign_ed25519_pk_to_curve25519(p.public_key.data(), id.public_key.data()) != 0 ||
      crypto_sign_ed25519_sk_to_curve25519(p.secret_key.data(), id.secret_key.data()) != 0) {
    return {};
  }
  return p;
}

std::optional<key32> x25519_public_of(const key32& ed25519_pk) noexcept {
  key32 out{};
  if (crypto_sign_ed25519_pk_to_curve25519(out.data(), ed25519_pk.data()) != 0) return std::nullopt;
  return out;
}

std::optional<key32> x25519(const key32& our_secret, const key32& their_public) noexcept {
  key32 out{};
  // crypto_scalarmult fails on an all-zero result (RFC 7748 section 6.1).
  if (crypto_scalarmult(out.data(), our_secret.data(), their_public.data()) != 0)
    return std::nullopt;
  return out;
}

void hkdf_sha256(std::span<const std::uint8_t> ikm, std::span<const std::uint8_t> salt,
                 std::string_view info, std::span<std::uint8_t> out) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = kdf ? EVP_KDF_CTX_new(kdf) : nullptr;
  EVP_KDF_free(kdf);
  if (!ctx) throw key_error("OpenSSL has no HKDF");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<std::uint8_t*>(ikm.data()),
                                        ikm.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<std::uint8_t*>(salt.data()),
                                        salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()),
                                        info.size()),
      OSSL_PARAM_construct_end()};
  const int rc = EVP_KDF_derive(ctx, out.data(), out.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (rc != 1) throw key_error("HKDF-SHA-256 failed");
}

hmac_tag hmac(const key32& key, std::span<const std::byte> message) noexcept {
  hmac_tag t{};
  crypto_auth(t.data(), bytes(message), message.size(), key.data());
  return t;
}

bool hmac_verify(const key32& key, std::span<const std::byte> message,
                 std::span<const std::uint8_t, hmac_bytes> tag) noexcept {
  return crypto_auth_verify(tag.data(), bytes(message), message.size(), key.data()) == 0;
}

void aead_seal(const key32& key, std::span<const std::uint8_t, xchacha_nonce_bytes> nonce,
               std::span<const std::byte> ad, std::span<const std::uint8_t> plain,
               std::span<std::uint8_t> out) noexcept {
  unsigned long long len = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(out.data(), &len, plain.data(), plain.size(),
                                             bytes(ad), ad.size(), nullptr, nonce.data(),
                                             key.data());
}

bool aead_open(const key32& key, std::span<const std::uint8_t, xchacha_nonce_bytes> nonce,
               std::span<const std::byte> ad, std::span<const std::uint8_t> sealed,
               std::span<std::uint8_t> out) noexcept {
  if (sealed.size() < aead_tag_bytes || out.size() < sealed.size() - aead_tag_bytes) return false;
  unsigned long long len = 0;
  return crypto_aead_xchacha20poly1305_ietf_decrypt(out.data(), &len, nullptr, sealed.data(),
                                                    sealed.size(), bytes(ad), ad.size(),
                                                    nonce.data(), key.data()) == 0;
}

cipher_ctx::cipher_ctx() : m_ctx(EVP_CIPHER_CTX_new()) {
  if (!m_ctx) throw key_error("OpenSSL cannot allocate a cipher context");
}

// Delegating: the destructor frees the new context if the copy throws.
cipher_ctx::cipher_ctx(const cipher_ctx& other) : cipher_ctx() {
  if (EVP_CIPHER_CTX_copy(m_ctx, other.m_ctx) != 1) {
    throw key_error("OpenSSL cannot copy a cipher context");
  }
}

cipher_ctx& cipher_ctx::operator=(const cipher_ctx& other) {
  if (this != &other && EVP_CIPHER_CTX_copy(m_ctx, other.m_ctx) != 1) {
    throw key_error("OpenSSL cannot copy a cipher context");
  }
  return *this;
}

cipher_ctx::~cipher_ctx() { EVP_CIPHER_CTX_free(m_ctx); }

static_assert(sizeof(crypto_aead_aes256gcm_state) == 512 &&
              alignof(crypto_aead_aes256gcm_state) <= 16);

bool gcm_hardware() noexcept {
  // sodium_init() probes the CPU; crypto_aead_aes256gcm_is_available() reads what it found.
  static const bool hardware = sodium_init() >= 0 && crypto_aead_aes256gcm_is_available() == 1;
  return hardware;
}

gcm_key::gcm_key(const key32& key, bool encrypt, gcm_backend backend) {
  if (backend == gcm_backend::automatic && gcm_hardware()) {
    crypto_aead_aes256gcm_beforenm(reinterpret_cast<crypto_aead_aes256gcm_state*>(m_state.data()),
                                   key.data());
    return;
  }
  m_evp.emplace();
  const int enc = encrypt ? 1 : 0;
  if (EVP_CipherInit_ex(*m_evp, EVP_aes_256_gcm(), nullptr, nullptr, nullptr, enc) != 1 ||
      EVP_CIPHER_CTX_ctrl(*m_evp, EVP_CTRL_GCM_SET_IVLEN, gcm_nonce_bytes, nullptr) != 1 ||
      EVP_CipherInit_ex(*m_evp, nullptr, nullptr, key.data(), nullptr, enc) != 1) {
    throw key_error("OpenSSL cannot set up AES-256-GCM");
  }
}

namespace {

const crypto_aead_aes256gcm_state* sodium_state(const gcm_key& k) noexcept {
  return static_cast<const crypto_aead_aes256gcm_state*>(k.sodium());
}

/// AES-256-GCM encryption of `data` in place with associated data `ad`: the tag. With `data`
/// empty it is GMAC over `ad` (SP 800-38D section 3), on either backend.
gcm_tag encrypt_in_place(const gcm_key& key, std::span<const std::uint8_t, gcm_nonce_bytes> nonce,
                         std::span<const std::byte> ad, std::span<std::byte> data) noexcept {
  gcm_tag t{};
  // libsodium declares the ciphertext pointer nonnull even for 0 bytes (an empty span's is null).
  unsigned char none[16]{};
  auto* p = data.empty() ? none : reinterpret_cast<unsigned char*>(data.data());
  if (const auto* st = sodium_state(key)) {
    // In place: libsodium reads each 16-byte block before it writes it.
    unsigned long long tag_len = 0;
    crypto_aead_aes256gcm_encrypt_detached_afternm(p, t.data(), &tag_len, p, data.size(), bytes(ad),
                                                   ad.size(), nullptr, nonce.data(), st);
    return t;
  }
  evp_cipher_ctx_st* ctx = key.evp();
  int len = 0;
  // Re-using the context with only a new IV keeps the expanded key (EVP_EncryptInit_ex(3)).
  EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data());
  EVP_EncryptUpdate(ctx, nullptr, &len, bytes(ad), static_cast<int>(ad.size()));
  if (!data.empty()) EVP_EncryptUpdate(ctx, p, &len, p, static_cast<int>(data.size()));
  EVP_EncryptFinal_ex(ctx, none, &len);  // GCM is a stream mode: nothing is left over
  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, gcm_tag_bytes, t.data());
  return t;
}

}  // namespace

gmac::gmac(const key32& key, gcm_backend backend) : m_key(key, true, backend) {}

gcm_tag gmac::tag(std::span<const std::uint8_t, gcm_nonce_bytes> nonce,
                  std::span<const std::byte> data) noexcept {
  return encrypt_in_place(m_key, nonce, data, {});
}

bool gmac::verify(std::span<const std::uint8_t, gcm_nonce_bytes> nonce,
                  std::span<const std::byte> data,
                  std::span<const std::uint8_t, gcm_tag_bytes> expected) noexcept {
  const gcm_tag t = tag(nonce, data);
  return sodium_memcmp(t.data(), expected.data(), gcm_tag_bytes) == 0;
}

gcm::gcm(const key32& key, direction d, gcm_backend backend)
    : m_key(key, d == direction::encrypt, backend) {}

gcm_tag gcm::seal(std::span<const std::uint8_t, gcm_nonce_bytes> nonce,
                  std::span<const std::byte> ad, std::span<std::byte> data) noexcept {
  return encrypt_in_place(m_key, nonce, ad, data);
}

bool gcm::open(std::span<const std::uint8_t, gcm_nonce_bytes> nonce, std::span<const std::byte> ad,
               std::span<const std::byte> cipher, std::span<const std::uint8_t, gcm_tag_bytes> tag,
               std::span<std::byte> out) noexcept {
  if (out.size() < cipher.size()) return false;
  // libsodium declares the ciphertext pointer nonnull even for 0 bytes (an empty span's is null).
  unsigned char none[16]{};
  auto* o = cipher.empty() ? none : reinterpret_cast<unsigned char*>(out.data());
  if (const auto* st = sodium_state(m_key)) {
    // Checks the tag in constant time; on failure libsodium zeroes `out`.
    return crypto_aead_aes256gcm_decrypt_detached_afternm(
               o, nullptr, cipher.empty() ? none : bytes(cipher), cipher.size(), tag.data(),
               bytes(ad), ad.size(), nonce.data(), st) == 0;
  }
  evp_cipher_ctx_st* ctx = m_key.evp();
  int len = 0;
  EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data());
  EVP_DecryptUpdate(ctx, nullptr, &len, bytes(ad), static_cast<int>(ad.size()));
  EVP_DecryptUpdate(ctx, o, &len, bytes(cipher), static_cast<int>(cipher.size()));
  std::array<std::uint8_t, gcm_tag_bytes> expected{};
  std::memcpy(expected.data(), tag.data(), gcm_tag_bytes);
  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, gcm_tag_bytes, expected.data());
  // EVP_DecryptFinal_ex checks the tag (constant time inside OpenSSL).
  return EVP_DecryptFinal_ex(ctx, none, &len) == 1;
}

}  // namespace mcdist::crypto
