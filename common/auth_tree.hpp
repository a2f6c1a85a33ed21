#pragma once
/// @file
/// What announce trees (auth_announce.cpp) and block digest trees (auth_digests.cpp) share: the
/// message a tree's Ed25519 signature covers, and the sealing of a tree's leaves with their
/// authentication paths (docs/security.md "Announce trees", "Block digests"). Internal to the
/// authentication layer (common/auth.hpp).

#include "common/announce_tree.hpp"
#include "common/auth.hpp"
#include "common/crypto.hpp"

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace mcdist::auth::tree_detail {

/// What the sender signs for one tree: `context` (a string no wire datagram starts with:
/// those start with the magic "MD"), the leaf count (2 bytes big-endian) and the root.
std::vector<std::byte> signed_message(std::string_view context, std::size_t count,
                                      const announce_tree::hash& root);

/// Builds the tree over `leaves` (1..announce_tree::max_leaves, the hashes of the slots'
/// datagrams in order), signs signed_message(context, ...) once and appends to each slot its
/// authentication path, the signature, its leaf index and the leaf count (2 bytes each).
void seal_tree(const crypto::identity& id, std::string_view context,
               std::span<sender_keys::announce_slot* const> slots,
               std::span<const announce_tree::hash> leaves);

}  // namespace mcdist::auth::tree_detail
