// Block digests of silent signed sessions (auth.hpp file comment, common/block_digests.hpp,
// docs/security.md "Block digests"): the sender signs each window of block digest chunks with
// one tree; a site checks a chunk by its path to a root it verified, or by that root's
// signature, keeps the digests, and checks every version-3 data and parity block against the
// digest of its sequence number. Apart from auth.cpp, which seals and opens the version-2
// types, and auth_announce.cpp, which does announce trees.
#include "common/auth.hpp"

#include "common/auth_tree.hpp"
#include "common/byte_order.hpp"

#include <algorithm>
#include <cstring>

namespace mcdist::auth {

namespace {

/// The context of a block digest tree's signature: not an announce tree's, so neither
/// signature can stand for the other.
constexpr std::string_view digest_tree_context = "mcdist v3 block digests";

}  // namespace

std::size_t digest_trailer_bytes(std::span<const std::byte> d) noexcept {
  if (d.size() < block_digests::trailer_fixed_bytes) return 0;
  const std::size_t index = load_be16(d.data() + d.size() - 4);
  const std::size_t count = load_be16(d.data() + d.size() - 2);
  if (count > block_digests::max_chunks) return 0;
  const auto len = announce_tree::path_length(index, count);
  if (!len) return 0;
  const std::size_t trailer = block_digests::trailer_fixed_bytes + *len * announce_tree::hash_bytes;
  return d.size() < trailer ? 0 : trailer;
}

void sender_keys::seal_block_digests(std::span<announce_slot> window) {
  if (!m_id) {  // a relay's keys sign nothing
    for (announce_slot& a : window) a.len = 0;
    return;
  }
  std::vector<announce_slot*> slots;
  std::vector<announce_tree::hash> leaves;
  slots.reserve(window.size());
  leaves.reserve(window.size());
  for (announce_slot& a : window) {
    block_digests::chunk c;
    if (window.size() > block_digests::max_chunks || a.len < block_digests::chunk_header_bytes ||
        a.buf.size() < a.len + max_trailer_bytes ||
        block_digests::parse_chunk(a.buf.first(a.len), c) || c.leaf() != slots.size() ||
        block_digests::chunks_in(c.count) != window.size()) {
      // Not this window's chunk in its place: the caller's bug; nothing of the window is sent.
      for (announce_slot& b : window) b.len = 0;
      return;
    }
    leaves.push_back(announce_tree::leaf_hash(a.buf.first(a.len)));
    slots.push_back(&a);
  }
  if (slots.empty()) return;
  tree_detail::seal_tree(*m_id, digest_tree_context, slots, leaves);
  ++m_stats.signatures;
  m_stats.digest_chunks += slots.size();
}

std::error_code receiver_keys::open_digested(std::span<const std::byte> d, const wire::header& h,
                                             time_point now, std::span<const std::byte>& out) {
  auto refuse = [](std::uint64_t& counter) {
    ++counter;
    return std::error_code(errc::unauthenticated);
  };
  session_keys* s = find(h.session);
  if (h.type == wire::msg_type::data || h.type == wire::msg_type::parity) {
    if (d.size() < wire::data_header_size) return refuse(m_stats.unauthenticated);
    // O(1): one SHA-256 of the datagram, then a look-up by its sequence number in at most
    // block_digests::windows_held windows.
    // A session this site holds no keys of (not announced, or over and forgotten) is no_key,
    // as a version-2 block of it would be; one that sends no digests, or none yet, no_digest.
    if (!s) return refuse(m_stats.no_key);
    if (!s->block_digests || !s->digests) return refuse(m_stats.no_digest);
    switch (s->digests->check(load_be32(d.data() + 8), block_digests::digest_of(d))) {
      case block_digests::verdict::match:
        ++m_stats.blocks_checked;
        out = d;  // no trailer: the digest was carried ahead of it
        return {};
      case block_digests::verdict::absent: return refuse(m_stats.no_digest);
      case block_digests::verdict::mismatch: return refuse(m_stats.bad_digest);
    }
    return refuse(m_stats.no_digest);
  }
  if (h.type != wire::msg_type::block_digests) return refuse(m_stats.unauthenticated);
  // Checks in order: trailer bounds, the chunk's fields, its place in the tree, the session,
  // then the path and the signature; nothing is kept of a chunk before it verified.
  const std::size_t trailer = digest_trailer_bytes(d);
  block_digests::chunk c;
  if (trailer == 0 || block_digests::parse_chunk(d.first(d.size() - trailer), c)) {
    return refuse(m_stats.unauthenticated);
  }
  const std::size_t index = load_be16(d.data() + d.size() - 4);
  const std::size_t count = load_be16(d.data() + d.size() - 2);
  if (index != c.leaf() || count != block_digests::chunks_in(c.count)) {
    return refuse(m_stats.unauthenticated);
  }
  if (!s || !s->block_digests) return refuse(m_stats.no_key);
  const std::byte* t = d.data() + d.size() - trailer;
  const std::size_t path_bytes = trailer - block_digests::trailer_fixed_bytes;
  const auto leaf = announce_tree::leaf_hash(d.first(d.size() - trailer));
  const auto root = announce_tree::root_from_path(leaf, index, count, std::span(t, path_bytes));
  if (!root) return refuse(m_stats.unauthenticated);  // trailer bounds checked: not reached
  const auto sig_bytes = d.subspan(d.size() - 4 - crypto::signature_bytes, crypto::signature_bytes);
  const std::span<const std::uint8_t, crypto::signature_bytes> sig(
      reinterpret_cast<const std::uint8_t*>(sig_bytes.data()), crypto::signature_bytes);
  bool by_path = false;
  if (required()) {
    for (std::size_t i = 0; i < s->digest_roots_used; ++i) {
      const auto& r = s->digest_roots[i];
      if (!std::equal(sig.begin(), sig.end(), r.sig.begin())) continue;
      // The signature of a root verified before: the chunk must lead to that root.
      if (r.root != *root || r.count != count) return refuse(m_stats.bad_path);
      by_path = true;
      break;
    }
  }
  if (!by_path) {
    // Only the key that signed the session's announce signs its digests.
    if (!verify_signed(tree_detail::signed_message(digest_tree_context, count, *root), sig, now,
                       nullptr, s->signer ? &*s->signer : nullptr)) {
      return errc::unauthenticated;  // counted by verify_signed
    }
    if (required()) {
      auto& r = s->digest_roots[s->next_digest_root];
      std::copy(sig.begin(), sig.end(), r.sig.begin());
      r.root = *root;
      r.count = static_cast<std::uint16_t>(count);
      s->next_digest_root = (s->next_digest_root + 1) % max_verified_roots;
      s->digest_roots_used = std::min(s->digest_roots_used + 1, max_verified_roots);
    }
  }
  if (!s->digests) s->digests.emplace();
  s->digests->add(c);
  ++m_stats.digest_chunks;
  s->last_used = now;
  out = {};  // taken here: nothing for the core
  return {};
}

}  // namespace mcdist::auth
