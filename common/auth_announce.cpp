// Announce trees (auth.hpp file comment, docs/security.md "Announce trees"): the sender signs
// the root of a tree over a burst of announces once; a site checks each announce by its path
// to a root it verified, or by the signature of that root. Apart from auth.cpp, which seals
// and opens every other type.
#include "common/auth.hpp"

#include "common/auth_tree.hpp"
#include "common/byte_order.hpp"
#include "common/sha256.hpp"

#include <algorithm>
#include <cstring>

namespace mcdist::auth {

namespace {

/// Verified announce datagrams remembered per session (their digests), so the repeats of an
/// announce cost a SHA-256 instead of a path or a signature check.
constexpr std::size_t max_remembered_announces = 4096;

/// The context of an announce tree's signature (auth.hpp file comment).
constexpr std::string_view tree_context = "mcdist v2 announce tree";

}  // namespace

namespace tree_detail {

std::vector<std::byte> signed_message(std::string_view context, std::size_t count,
                                      const announce_tree::hash& root) {
  std::vector<std::byte> m(context.size() + 2 + root.size());
  std::memcpy(m.data(), context.data(), context.size());
  store_be16(m.data() + context.size(), static_cast<std::uint16_t>(count));
  std::memcpy(m.data() + context.size() + 2, root.data(), root.size());
  return m;
}

void seal_tree(const crypto::identity& id, std::string_view context,
               std::span<sender_keys::announce_slot* const> slots,
               std::span<const announce_tree::hash> leaves) {
  if (leaves.empty()) return;
  const announce_tree::tree t(leaves);
  const auto sig = crypto::sign(id, signed_message(context, t.size(), t.root()));
  for (std::size_t i = 0; i < t.size(); ++i) {
    sender_keys::announce_slot& a = *slots[i];
    std::byte* end = a.buf.data() + a.len;
    for (const auto& h : t.path(i)) {
      std::memcpy(end, h.data(), h.size());
      end += h.size();
    }
    std::memcpy(end, sig.data(), sig.size());
    store_be16(end + sig.size(), static_cast<std::uint16_t>(i));
    store_be16(end + sig.size() + 2, static_cast<std::uint16_t>(t.size()));
    a.len = static_cast<std::size_t>(end + sig.size() + 4 - a.buf.data());
  }
}

}  // namespace tree_detail

std::size_t announce_trailer_bytes(std::span<const std::byte> d) noexcept {
  if (d.size() < announce_trailer_fixed_bytes) return 0;
  const std::size_t index = load_be16(d.data() + d.size() - 4);
  const std::size_t count = load_be16(d.data() + d.size() - 2);
  const auto len = announce_tree::path_length(index, count);
  if (!len) return 0;
  const std::size_t trailer = announce_trailer_fixed_bytes + *len * announce_tree::hash_bytes;
  return d.size() < trailer ? 0 : trailer;
}

void sender_keys::seal_announces(std::span<announce_slot> burst) {
  if (!m_id) {  // a relay's keys: the hub's announces go on as they came
    for (announce_slot& a : burst) a.len = 0;
    return;
  }
  std::vector<announce_slot*> tree_slots;
  std::vector<announce_tree::hash> leaves;
  tree_slots.reserve(announce_tree::max_leaves);
  leaves.reserve(announce_tree::max_leaves);
  auto sign_tree = [&] {
    if (leaves.empty()) return;
    tree_detail::seal_tree(*m_id, tree_context, tree_slots, leaves);
    ++m_stats.signatures;
    tree_slots.clear();
    leaves.clear();
  };
  for (announce_slot& a : burst) {
    if (a.len < wire::header_size || a.buf.size() < a.len + max_trailer_bytes) {
      a.len = 0;
      continue;
    }
    wire::set_version(a.buf, wire::authenticated_version);
    if (m_encrypted) {
      // The tree covers the sealed form; room for the trailer stays (the caller leaves
      // max_trailer_bytes, which counts the sealed body's overhead).
      a.len = seal_body(a.buf.first(a.buf.size() - largest_trailer_bytes), a.len);
      if (a.len == 0) continue;
    }
    std::memcpy(a.buf.data() + a.len, m_ephemeral.public_key.data(), crypto::key_bytes);
    a.len += crypto::key_bytes;
    leaves.push_back(announce_tree::leaf_hash(a.buf.first(a.len)));
    tree_slots.push_back(&a);
    if (leaves.size() == announce_tree::max_leaves) sign_tree();
  }
  sign_tree();
}

std::error_code receiver_keys::open_announce(std::span<const std::byte> d, std::size_t trailer,
                                             session_keys* s, time_point now, bool& fresh) {
  const session_id session{load_be32(d.data() + 4)};
  const std::byte* t = d.data() + d.size() - trailer;
  crypto::key32 sender_public{};
  std::memcpy(sender_public.data(), t, crypto::key_bytes);
  const bool known = s && s->sender_public == sender_public;
  std::uint64_t fingerprint = 0;
  if (known) {
    // An exact repeat of an announce verified before costs one SHA-256.
    const auto digest = sha256(d);
    std::memcpy(&fingerprint, digest.data(), sizeof fingerprint);
    if (s->verified_announces.count(fingerprint)) {
      s->last_used = now;
      s->last_announce = now;
      return {};
    }
  }
  const std::size_t index = load_be16(d.data() + d.size() - 4);
  const std::size_t count = load_be16(d.data() + d.size() - 2);
  const std::size_t path_bytes = trailer - announce_trailer_fixed_bytes;
  const auto leaf = announce_tree::leaf_hash(d.first(d.size() - trailer + crypto::key_bytes));
  const auto root = announce_tree::root_from_path(leaf, index, count,
                                                  std::span(t + crypto::key_bytes, path_bytes));
  if (!root) {
    ++m_stats.unauthenticated;  // announce_trailer_bytes checked index and count: not reached
    return errc::unauthenticated;
  }
  const auto sig_bytes = d.subspan(d.size() - 4 - crypto::signature_bytes, crypto::signature_bytes);
  const std::span<const std::uint8_t, crypto::signature_bytes> sig(
      reinterpret_cast<const std::uint8_t*>(sig_bytes.data()), crypto::signature_bytes);
  bool by_path = false;
  if (known && required()) {
    for (std::size_t i = 0; i < s->roots_used; ++i) {
      const auto& r = s->roots[i];
      if (!std::equal(sig.begin(), sig.end(), r.sig.begin())) continue;
      // The signature of a root verified before: this announce must lead to that root.
      if (r.root != *root || r.count != count) {
        ++m_stats.bad_path;
        return errc::unauthenticated;
      }
      by_path = true;
      break;
    }
  }
  const crypto::key32* signed_by = nullptr;
  if (!by_path && !verify_signed(tree_detail::signed_message(tree_context, count, *root), sig, now,
                                 &signed_by)) {
    return errc::unauthenticated;
  }
  fresh = true;
  auto& keys = learn(session, sender_public, now);
  keys.last_announce = now;
  if (signed_by) keys.signer = *signed_by;
  if (by_path) {
    ++m_stats.by_path;
  } else if (required()) {
    auto& r = keys.roots[keys.next_root];
    std::copy(sig.begin(), sig.end(), r.sig.begin());
    r.root = *root;
    r.count = static_cast<std::uint16_t>(count);
    keys.next_root = (keys.next_root + 1) % max_verified_roots;
    keys.roots_used = std::min(keys.roots_used + 1, max_verified_roots);
  }
  if (fingerprint == 0) {
    const auto digest = sha256(d);
    std::memcpy(&fingerprint, digest.data(), sizeof fingerprint);
  }
  if (keys.verified_announces.size() < max_remembered_announces) {
    keys.verified_announces.insert(fingerprint);
  }
  return {};
}

}  // namespace mcdist::auth
