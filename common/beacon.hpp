#pragma once
/// @file
/// The datagrams a hub's channel and its sites exchange outside any session
/// (docs/design-notes.md "Heartbeats"): the channel's heartbeat (multicast, type heartbeat)
/// and a site's gap report (unicast to the hub, type gap_report), both with session id 0.
/// Framing and authentication only; pure (no sockets, no clocks).
///
/// Unsigned deployments send them as wire version 1, as their sessions. Signed ones as version
/// 2 with a trailer, like a session's signed messages (common/auth.hpp: signatures cover every
/// byte before them, the header's type byte included, so a signature cannot pass for another
/// message's):
///
/// | type | trailer | content |
/// |---|---|---|
/// | heartbeat | 64 | Ed25519 signature by the hub's key |
/// | gap_report | 96 | the site's Ed25519 public key (32), its signature (64) |

#include "common/crypto.hpp"
#include "common/error.hpp"
#include "mcdist.pb.h"

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace mcdist::beacon {

/// Trailer of a signed heartbeat, bytes.
inline constexpr std::size_t heartbeat_trailer_bytes = crypto::signature_bytes;
/// Trailer of a signed gap report, bytes.
inline constexpr std::size_t gap_report_trailer_bytes = crypto::key_bytes + crypto::signature_bytes;

/// Encodes a heartbeat into `out`: version 1, or version 2 signed by `hub` when given.
/// @return bytes written, 0 when `out` is too small (it needs wire::control_budget)
std::size_t encode_heartbeat(std::span<std::byte> out, const wire::heartbeat& m,
                             const crypto::identity* hub);

/// Checks and parses a heartbeat. With `trusted` non-empty the heartbeat must be version 2 and
/// signed by one of those keys, which is returned in `signer`; with `trusted` empty (a channel
/// that takes unsigned sessions) a version-1 heartbeat is taken and `signer` left empty, and
/// a version-2 one is checked against nothing and refused (a signed channel's traffic on an
/// unsigned channel is no business of it).
/// @return empty, or errc::truncated / bad_version / unknown_type / bad_protobuf /
///         invalid_field (channel name, ranges) / unauthenticated (signature, version)
std::error_code open_heartbeat(std::span<const std::byte> d, std::span<const crypto::key32> trusted,
                               wire::heartbeat& out, std::optional<crypto::key32>& signer);

/// Encodes a gap report: version 1, or version 2 signed by `site` when given.
/// @return bytes written, 0 when `out` is too small
std::size_t encode_gap_report(std::span<std::byte> out, const wire::gap_report& m,
                              const crypto::identity* site);

/// Checks and parses a gap report. `require_signed`: only version 2 with a valid signature by
/// the key it carries (returned in `site_key`; the caller checks it is the pinned key of the
/// receiver id, when it pins keys). Version 1 is taken only when `require_signed` is false.
/// @return empty, or an error as open_heartbeat's
std::error_code open_gap_report(std::span<const std::byte> d, bool require_signed,
                                wire::gap_report& out, std::optional<crypto::key32>& site_key);

/// Parses a gap report of either version without checking a signature, with the same checks
/// of its fields: for a relay gathering its sites' reports, which it does not pin (a signature
/// by a key the datagram itself carries proves nothing about the id), so a report is a hint
/// whatever its version, and a flood of signed ones costs no Ed25519 work.
/// @return empty, or an error as open_heartbeat's (never unauthenticated)
std::error_code parse_gap_report(std::span<const std::byte> d, wire::gap_report& out);

}  // namespace mcdist::beacon
