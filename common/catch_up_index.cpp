#include "common/catch_up_index.hpp"

#include "common/path_check.hpp"

#include <algorithm>
#include <cstring>
#include <set>

namespace mcdist::catch_up {

namespace {

std::vector<std::byte> signed_bytes(std::string_view body) {
  std::vector<std::byte> m(catch_up_index_domain.size() + body.size());
  std::memcpy(m.data(), catch_up_index_domain.data(), catch_up_index_domain.size());
  if (!body.empty()) {
    std::memcpy(m.data() + catch_up_index_domain.size(), body.data(), body.size());
  }
  return m;
}

bool is_hex_digit(char c) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/// RFC 3986 section 3.3 pchar without '%' (checked apart), plus the '/' between segments.
bool is_path_char(char c) noexcept {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::strchr("-._~!$&'()*+,;=:@/", c) != nullptr && c != '\0';
}

}  // namespace

std::string_view to_string(refusal r) noexcept {
  switch (r) {
    case refusal::none: return "none";
    case refusal::oversized: return "oversized";
    case refusal::bad_protobuf: return "bad_protobuf";
    case refusal::unsigned_index: return "unsigned";
    case refusal::untrusted_key: return "untrusted_key";
    case refusal::bad_signature: return "bad_signature";
    case refusal::wrong_channel: return "wrong_channel";
    case refusal::wrong_seq: return "wrong_seq";
    case refusal::wrong_nonce: return "wrong_nonce";
    case refusal::invalid_product: return "invalid_product";
    case refusal::duplicate_name: return "duplicate_name";
    case refusal::too_many: return "too_many";
  }
  return "unknown";
}

std::string hex(std::span<const std::uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (const auto b : bytes) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::optional<std::vector<std::uint8_t>> parse_hex(std::string_view text) {
  if (text.size() % 2 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::uint8_t> out(text.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = value(text[2 * i]);
    const int lo = value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return out;
}

bool valid_download_path(std::string_view path) noexcept {
  constexpr std::string_view prefix = "products/";
  if (path.size() <= prefix.size() || path.size() > max_path_bytes) return false;
  if (path.substr(0, prefix.size()) != prefix) return false;
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '%') {
      if (i + 2 >= path.size() || !is_hex_digit(path[i + 1]) || !is_hex_digit(path[i + 2])) {
        return false;
      }
      i += 2;
      continue;
    }
    if (!is_path_char(c)) return false;
  }
  // Segments: none empty, none "." or ".." written plainly or as %2E (RFC 3986 section 2.3:
  // percent-encoded unreserved characters are equivalent to the characters).
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto slash = path.find('/', start);
    const auto end = slash == std::string_view::npos ? path.size() : slash;
    // The segment with every "%2E"/"%2e" read as '.'.
    std::string seg;
    for (std::size_t k = start; k < end; ++k) {
      if (path[k] == '%' && k + 2 < end && path[k + 1] == '2' &&
          (path[k + 2] == 'E' || path[k + 2] == 'e')) {
        seg += '.';
        k += 2;
      } else {
        seg += path[k];
      }
    }
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return true;
}

std::string encode_index(const index& ix, const crypto::identity* hub) {
  wire::catch_up_index m;
  m.set_channel(ix.channel);
  m.set_seq(ix.seq);
  m.set_nonce(ix.nonce.data(), ix.nonce.size());
  m.set_hub_unix_ms(ix.hub_unix_ms);
  for (const auto& p : ix.products) {
    auto* e = m.add_products();
    e->set_name(p.name);
    e->set_size(p.size);
    e->set_mtime_ns(p.mtime_ns);
    e->set_mode(p.mode);
    e->set_sha256(p.sha256.data(), p.sha256.size());
    e->set_path(p.path);
  }
  wire::signed_catch_up_index env;
  env.set_body(m.SerializeAsString());
  if (hub) {
    const auto sig = crypto::sign(*hub, signed_bytes(env.body()));
    env.set_signer(hub->public_key.data(), hub->public_key.size());
    env.set_signature(sig.data(), sig.size());
  }
  return env.SerializeAsString();
}

refusal open_index(std::span<const std::byte> bytes, const expectation& want, index& out,
                   std::optional<crypto::key32>& signer) {
  signer.reset();
  if (bytes.size() > max_index_bytes) return refusal::oversized;
  wire::signed_catch_up_index env;
  if (!env.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return refusal::bad_protobuf;
  }
  const bool is_signed = !env.signer().empty() || !env.signature().empty();
  if (!is_signed) {
    if (!want.trusted.empty()) return refusal::unsigned_index;
  } else {
    if (want.trusted.empty()) return refusal::untrusted_key;  // a signed channel's, not ours
    if (env.signer().size() != crypto::key_bytes) return refusal::untrusted_key;
    crypto::key32 key{};
    std::memcpy(key.data(), env.signer().data(), key.size());
    if (std::find(want.trusted.begin(), want.trusted.end(), key) == want.trusted.end()) {
      return refusal::untrusted_key;
    }
    if (want.signer && *want.signer != key) return refusal::untrusted_key;
    if (env.signature().size() != crypto::signature_bytes) return refusal::bad_signature;
    std::array<std::uint8_t, crypto::signature_bytes> sig{};
    std::memcpy(sig.data(), env.signature().data(), sig.size());
    if (!crypto::verify(key, signed_bytes(env.body()), sig)) return refusal::bad_signature;
    signer = key;
  }
  wire::catch_up_index m;
  if (!m.ParseFromString(env.body())) {
    signer.reset();
    return refusal::bad_protobuf;
  }
  auto refuse = [&](refusal r) {
    signer.reset();
    return r;
  };
  if (m.channel().size() > max_channel_bytes || m.channel() != want.channel) {
    return refuse(refusal::wrong_channel);
  }
  if (m.seq() != want.seq) return refuse(refusal::wrong_seq);
  if (m.nonce().size() != want.nonce.size() || want.nonce.empty() ||
      std::memcmp(m.nonce().data(), want.nonce.data(), want.nonce.size()) != 0) {
    return refuse(refusal::wrong_nonce);
  }
  if (static_cast<std::size_t>(m.products_size()) > max_products) return refuse(refusal::too_many);
  index ix;
  ix.channel = m.channel();
  ix.seq = m.seq();
  ix.nonce.assign(want.nonce.begin(), want.nonce.end());
  ix.hub_unix_ms = m.hub_unix_ms();
  ix.products.reserve(static_cast<std::size_t>(m.products_size()));
  std::set<std::string_view> names;
  for (const auto& e : m.products()) {
    if (check_relative_path(e.name()) || e.size() > max_product_bytes || e.mode() > 07777 ||
        e.sha256().size() != std::tuple_size_v<sha256_digest> || !valid_download_path(e.path())) {
      return refuse(refusal::invalid_product);
    }
    if (!names.insert(e.name()).second) return refuse(refusal::duplicate_name);
    product p;
    p.name = e.name();
    p.size = e.size();
    p.mtime_ns = e.mtime_ns();
    p.mode = e.mode();
    std::memcpy(p.sha256.data(), e.sha256().data(), p.sha256.size());
    p.path = e.path();
    ix.products.push_back(std::move(p));
  }
  out = std::move(ix);
  return refusal::none;
}

}  // namespace mcdist::catch_up
