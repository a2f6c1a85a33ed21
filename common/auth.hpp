#pragma once
/// @file
/// Authenticated datagrams, wire version 2 (docs/security.md): what a sender appends to what
/// it sends and checks on what it receives, and the same for a receiving site. Pure: no
/// sockets, no clocks (time is passed in), no threads; the shells call it on every datagram
/// between the socket and the protocol core, which never sees a trailer.
///
/// A version-2 datagram is a version-1 datagram (common/wire.hpp) with the header's version
/// byte set to 2, followed by a trailer whose size depends only on the message type:
///
/// | type | trailer | content |
/// |---|---|---|
/// | data | 16 | AES-256-GCM tag (GMAC) under the session data key; nonce = bytes 8..19 (seq,
/// file, block) |
/// | announce | 100 to 292 | sender's X25519 session public key (32), authentication path
/// (32 x 0..6), Ed25519 signature of the announce tree's root (64), leaf index (2), leaf count
/// (2); the last 4 bytes give the path's length (announce_trailer_bytes) |
/// | register_request | 64 | site's Ed25519 public key (32), HMAC under the pairwise key (32) |
/// | register_reply | 72 | nonce (24), session key under the pairwise key, XChaCha20-Poly1305
/// (48) |
/// | marker, repair_advert | 24 | counter (8, one counter for both), AES-256-GCM tag under the
/// session marker key (16) |
/// | nak, complete, complete_ack, fallback | 32 | HMAC under the pairwise key |
/// | digest_list, session_end | 64 | Ed25519 signature |
/// | relay_hello | 64 | the hub's Ed25519 delegation of the session to the relay |
///
/// Silent signed sessions (docs/security.md "Block digests") send their data and parity as wire
/// version 3 datagrams instead, without a trailer (the sites hold no session key to check a
/// GMAC with), and ahead of them version-3 block_digests chunks (common/block_digests.hpp)
/// whose trailer is an announce's without the session public key: authentication path (32 x
/// 0..4), Ed25519 signature (64), leaf index (2), leaf count (2). The sender signs the root of
/// one tree per window of chunks, as "mcdist v3 block digests" || leaf count (2 bytes
/// big-endian) || root; a site checks each chunk by its path to a root it verified (or that
/// root's signature, by the key that signed the session's announce) and each block by the
/// digest its sequence number has in a verified chunk.
///
/// Signatures and tags cover every byte before them, except the announce's: the sender cuts
/// each burst of announces it sends at once into trees of up to announce_tree::max_leaves
/// (common/announce_tree.hpp, RFC 9162 section 2.1); a leaf is an announce datagram up to and
/// including its session public key, and the signature is Ed25519 of "mcdist v2 announce
/// tree" || leaf count (2 bytes big-endian) || root. Each announce verifies alone (its path
/// leads to the signed root); a site checks the signature of a root once, remembers it per
/// session (max_verified_roots), and checks the other announces of the tree by their paths.
/// Keys (RFC 5869 HKDF-SHA-256, salt = session id, 4 bytes big-endian):
/// - pairwise key of a site = HKDF(X25519(sender session secret, site X25519 public),
///   info "mcdist v2 pairwise" || sender session public || site X25519 public);
/// - session key K: 32 random bytes per session, given to each registered site in its
///   register_reply; data key = HKDF(K, "mcdist v2 data"), marker key = HKDF(K, "mcdist v2
///   marker");
/// - fallback key of a site = HKDF(pairwise key, "mcdist v2 fallback"): the key its unicast
///   fallback connections prove (common/unicast/hello_proof.hpp).
///
/// Encrypted sessions (mcdist-send --encrypt; docs/security.md "Encrypted sessions") add, under
/// keys derived from K (manifest key = HKDF(K, "mcdist v2 manifest"), sealed data key =
/// HKDF(K, "mcdist v2 data sealed")):
/// - announce and digest_list bodies sealed whole (proto field `sealed`, 15): a random 24-byte
///   nonce, then XChaCha20-Poly1305 of the version-1 body with the 8-byte header as associated
///   data; the signature covers the sealed form. A site without K answers a sealed announce
///   with a key request (register_request.key_request), which the sender's layer answers with
///   a key_only register_reply; neither reaches a core, and the cores see the opened bodies.
///   The sealed announces a site verified before K are held (bounded) and opened once K
///   arrives, so the site need not wait for the next announce cycle;
/// - data blocks: the payload AES-256-GCM-encrypted in place, nonce as above, the 20-byte
///   headers as associated data, the same 16-byte tag: the datagram does not grow;
/// - FALLBACK: HMAC under the pairwise key as in signed sessions (it carries no content); the
///   fallback connections it opens seal every frame after the hello under per-connection keys
///   derived from the site's fallback key (common/unicast/record_seal.hpp).

#include "common/announce_tree.hpp"
#include "common/block_digests.hpp"
#include "common/crypto.hpp"
#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "common/ids.hpp"
#include "common/time.hpp"
#include "common/wire.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mcdist::auth {

/// The header version byte of an authenticated datagram.
inline constexpr std::uint8_t wire_version = 2;
/// What sealing a body for an encrypted session adds to it, bytes: field tag (1), length
/// varint (at most 2 for a body below 16 KiB), nonce (24), tag (16).
inline constexpr std::size_t sealed_body_overhead =
    3 + crypto::xchacha_nonce_bytes + crypto::aead_tag_bytes;
/// An announce's trailer without its authentication path, bytes: session public key (32),
/// signature (64), leaf index (2), leaf count (2).
inline constexpr std::size_t announce_trailer_fixed_bytes =
    crypto::key_bytes + crypto::signature_bytes + 4;
/// The largest trailer of any type, bytes: an announce's with the longest path.
inline constexpr std::size_t largest_trailer_bytes =
    announce_trailer_fixed_bytes + announce_tree::max_depth * announce_tree::hash_bytes;
/// Bytes an announce chunk of a signed session leaves unused below wire::control_budget: its
/// whole trailer at the longest path (and in an encrypted session, sealed_body_overhead more),
/// so a signed or sealed announce is no longer than wire::control_budget and crosses a
/// 1500-byte Ethernet link in one frame over IPv6 too (1400 + 40 + 8 bytes): a fragmented
/// announce is lost when either fragment is. The sender's core takes it as
/// announce_reserve_bytes.
inline constexpr std::size_t announce_reserve(bool encrypted) noexcept {
  return largest_trailer_bytes + (encrypted ? sealed_body_overhead : 0);
}
/// The most bytes sealing adds to a datagram (the largest trailer, and for an encrypted
/// session's announce the sealed body's overhead): the room callers leave after a datagram.
inline constexpr std::size_t max_trailer_bytes = largest_trailer_bytes + sealed_body_overhead;
/// Trailer of a data datagram, bytes: what authentication adds to every block.
inline constexpr std::size_t data_trailer_bytes = crypto::gcm_tag_bytes;

/// Trailer size of a version-2 datagram of this type, bytes; 0 for an unknown type. For an
/// announce, the least (announce_trailer_fixed_bytes): its path makes it longer
/// (announce_trailer_bytes).
std::size_t trailer_size(wire::msg_type t) noexcept;
/// Trailer size of a version-2 announce datagram, from the leaf index and count in its last 4
/// bytes: announce_trailer_fixed_bytes + 32 x the path's length. @return 0 when the datagram
/// is shorter than that, or the index and count are out of bounds (index < count <=
/// announce_tree::max_leaves)
std::size_t announce_trailer_bytes(std::span<const std::byte> datagram) noexcept;
/// Trailer size of a version-3 block_digests datagram, from the leaf index and count in its last
/// 4 bytes: block_digests::trailer_fixed_bytes + 32 x the path's length. @return 0 when the
/// datagram is shorter than that, or the index and count are out of bounds (index < count <=
/// block_digests::max_chunks)
std::size_t digest_trailer_bytes(std::span<const std::byte> datagram) noexcept;

/// The receiver id in the first field of a control body (register_request, nak, complete,
/// register_reply, complete_ack and fallback all carry it as field 1, which protobuf
/// serialises first). Empty when the body does not start with it.
std::string_view leading_receiver_id(std::span<const std::byte> body) noexcept;

/// Counters of what authentication refused, by reason.
struct auth_stats {
  std::uint64_t unauthenticated = 0;  ///< version-1 datagram where version 2 is required
  std::uint64_t bad_signature = 0;    ///< signature by no trusted sender key
  std::uint64_t bad_tag = 0;          ///< data or marker tag, or HMAC, that does not verify
  std::uint64_t no_key = 0;           ///< no key (yet) for the session or the receiver
  std::uint64_t untrusted_site = 0;   ///< site key not the one pinned for its id
  std::uint64_t verify_budget = 0;    ///< signature checks over the per-second budget
  /// Announce whose signature is that of a root this site verified, but whose path leads to
  /// another root: a forged chunk with a copied signature, refused without a signature check.
  std::uint64_t bad_path = 0;
  /// Data or parity block of a block-digest session (silent, signed: docs/security.md "Block
  /// digests") whose truncated SHA-256 is not the signed digest of its sequence number: a
  /// forged or altered block, dropped before it reaches storage.
  std::uint64_t bad_digest = 0;
  /// Data or parity block of a block-digest session for whose sequence number this site holds
  /// no signed digest (forged, or both copies of its digest chunk were lost), or a block of such
  /// a session that is not version 3 (its sender sends none): dropped, repaired like a loss. A
  /// version-3 block of a session this site holds no keys of counts as no_key.
  std::uint64_t no_digest = 0;
  // Not refusals, so not in total(): encrypted sessions' key exchange, and what signatures
  // cost.
  std::uint64_t key_requests = 0;  ///< sender: key requests answered; site: requests sent
  std::uint64_t signatures = 0;    ///< Ed25519: sender, signatures made; site, checked
  std::uint64_t by_path = 0;       ///< site: announces verified by the path to a known root
  /// Sender: block digest chunks sealed; site: verified chunks taken (repeats included).
  std::uint64_t digest_chunks = 0;
  /// Site: data and parity blocks whose digest matched (block-digest sessions).
  std::uint64_t blocks_checked = 0;
  /// Relays of signed sessions (relay_hello): hub, delegations signed for its relays; relay,
  /// delegations received; site, relay keys bound (a verified relay_hello with a new key).
  std::uint64_t delegations = 0;
  std::uint64_t total() const noexcept {
    return unauthenticated + bad_signature + bad_tag + no_key + untrusted_site + verify_budget +
           bad_path + bad_digest + no_digest;
  }
};

/// Relays of signed two-way sessions (docs/security.md "Relays of signed sessions"). A relay
/// cannot tag blocks under the hub's session keys (it does not hold the hub's nonce space), so
/// it serves its sites under keys of its own: a fresh X25519 key pair per session, which the
/// hub signs for it (the delegation), and a session key of its own that it hands its sites.
/// Its key request upstream carries the public half (register_request.relay_public); a hub
/// that lists the relay's id among its relays and pins its site key answers with the
/// delegation (register_reply.relay_delegation): Ed25519 of delegation_message. The relay
/// multicasts it to its sites in a relay_hello (type 18, version 2, trailer = the delegation);
/// a site checks it against the key that signed the session's announce and from then on
/// derives its pairwise key with the relay's key instead of the hub's announce key. Sites
/// still check every announce, digest list, END and file digest against the hub's key.
///
/// Relays nest: a relay behind a relay binds its relay's key as a site does, and asks the hub
/// for its own delegation through it. That key request (register_request.for_origin) is
/// authenticated under the pairwise key with the hub's announce key, which the relay in between
/// does not hold: it passes the request upstream unopened and the hub's key_only answer back.
/// The answer's delegation is all the asking relay takes of it (its session key stays the one
/// of the relay it hears).
inline constexpr std::string_view delegation_context = "mcdist v2 relay delegation";

/// The bytes a hub signs to delegate session `s` to relay `relay_id` (at most
/// wire::max_receiver_id_bytes) holding X25519 key `relay_public`: delegation_context ||
/// session id (4 bytes big-endian) || length of relay_id (1) || relay_id || relay_public (32)
/// || flags (1; 0: the relay may not serve encrypted sessions).
std::vector<std::byte> delegation_message(session_id s, std::string_view relay_id,
                                          const crypto::key32& relay_public);
/// Ed25519 by `hub` of delegation_message.
crypto::signature sign_delegation(const crypto::identity& hub, session_id s,
                                  std::string_view relay_id, const crypto::key32& relay_public);
/// True when `sig` is `hub`'s delegation of session `s` to `relay_id` holding `relay_public`.
bool verify_delegation(const crypto::key32& hub, session_id s, std::string_view relay_id,
                       const crypto::key32& relay_public,
                       std::span<const std::uint8_t, crypto::signature_bytes> sig) noexcept;

/// What a relay holds to serve a signed session to its sites: its key pair for the session and
/// the hub's delegation of it (receiver_keys::delegation).
struct relay_delegation {
  std::string relay_id;
  crypto::x25519_pair key;
  crypto::signature signature{};
};

/// Writes the relay_hello datagram of session `s` (version 2, body relay_hello, trailer the
/// delegation) into `out` (at least wire::control_budget bytes). @return its length, 0 when
/// `out` is too small
std::size_t encode_relay_hello(std::span<std::byte> out, session_id s, const relay_delegation& d);

/// The sender's side of one session. Not thread-safe (the sender's io thread owns it).
class sender_keys {
 public:
  /// Sites whose keys one session holds at most (sender_config::max_receivers' default): a
  /// registration or key request of a new id beyond it is refused (untrusted_site).
  static constexpr std::size_t max_sites = 10'000;
  /// @param id          the sender's Ed25519 identity (its key file); must outlive this
  /// @param session     the session these keys belong to
  /// @param pinned      site id -> site public key; when non-empty, only these sites may
  ///                    register, each with its own key
  /// @param encrypted   an encrypted session (--encrypt): announce and digest list bodies and
  ///                    data payloads are encrypted (FALLBACK as in signed sessions)
  sender_keys(const crypto::identity& id, session_id session,
              std::map<std::string, crypto::key32, std::less<>> pinned, bool encrypted = false);
  /// A relay's keys for the session it serves to its sites (relay_delegation): `ephemeral` is
  /// the X25519 pair the hub delegated, the session key is fresh (so no nonce of the hub's is
  /// ever used again under it). It signs nothing: announces, digest lists and ENDs are the
  /// hub's, sent on as they came; seal_control refuses them (returns 0). Sites may register
  /// with any key (a relay's sites are not pinned).
  sender_keys(session_id session, const crypto::x25519_pair& ephemeral);
  ~sender_keys();
  /// A copy is an independent snapshot of the session's keys and state (the fuzz target copies
  /// one handshake for every input); `id` is shared. Not assignable.
  sender_keys(const sender_keys&) = default;
  sender_keys& operator=(const sender_keys&) = delete;

  /// Seals a control datagram the session core produced: `buf` holds `len` bytes and has room
  /// for max_trailer_bytes more. Sets the version byte, appends the trailer. An announce gets a
  /// tree of its own (one signature); a burst of them goes through seal_announces.
  /// @return the new length, or 0 when it cannot be sealed (a per-site message for a site
  ///         without a pairwise key; the core repeats or gives up on such messages)
  std::size_t seal_control(std::span<std::byte> buf, std::size_t len);
  /// One announce datagram of a burst for seal_announces.
  struct announce_slot {
    std::span<std::byte> buf;  ///< holds `len` bytes, with room for max_trailer_bytes more
    std::size_t len = 0;       ///< in: the core's datagram; out: sealed, 0 when it could not be
  };
  /// Seals a burst of announce datagrams the session core produced, in their order: cut into
  /// trees of announce_tree::max_leaves, one Ed25519 signature per tree (docs/security.md
  /// "Announce trees"). Encrypted sessions: each body is sealed first, the tree covers the
  /// sealed forms.
  void seal_announces(std::span<announce_slot> burst);
  /// Seals the block digest chunks of one window (block_digests::write_chunk's output, leaves
  /// 0..n-1 in order, n <= block_digests::max_chunks; each slot with room for max_trailer_bytes
  /// more): one tree, one Ed25519 signature (docs/security.md "Block digests"). A slot that
  /// cannot be sealed gets len 0.
  void seal_block_digests(std::span<announce_slot> window);
  /// Seals one data datagram in place: `buf` holds `len` bytes (headers and payload) and has
  /// room for data_trailer_bytes more. @return len + data_trailer_bytes
  std::size_t seal_data(std::span<std::byte> buf, std::size_t len) noexcept;

  /// Checks a datagram from a site (register_request, nak, complete) and returns its
  /// version-1 view (trailer cut off) in `out`. A register_request that verifies gives the
  /// site its pairwise key; nak and complete must verify under it.
  /// A key request that verifies (encrypted sessions; signed ones too, see
  /// receiver_keys::take_key_request) is consumed here: `out` is empty, key_reply_to() names
  /// the site and take_key_reply() gives the answer to send back to the datagram's source.
  /// @return empty, or errc::unauthenticated, with stats() counting the reason
  std::error_code open(std::span<const std::byte> datagram, std::span<const std::byte>& out);
  /// The same, for a datagram whose common header the caller parsed already (`h`).
  std::error_code open(const wire::header& h, std::span<const std::byte> datagram,
                       std::span<const std::byte>& out);
  /// The key_only register_reply (sealed) answering the key request open() just consumed,
  /// written to `buf` (at least control_budget + max_trailer_bytes bytes).
  /// @return its length; 0 when no key request is pending
  std::size_t take_key_reply(std::span<std::byte> buf);
  /// The receiver id of the key request open() just consumed (until take_key_reply); empty
  /// when none is pending.
  const std::string& key_reply_to() const noexcept { return m_key_reply_to; }
  /// True for an encrypted session.
  bool encrypted() const noexcept { return m_encrypted; }
  /// The relays of the hub (sender_config::relays): a key request of one of them that carries
  /// relay_public, from a site whose key is pinned, is answered with a delegation
  /// (take_key_reply). Unpinned relays get none: a delegation lets its holder serve the session
  /// to sites, so it goes only to a key the hub knows.
  void set_relays(std::vector<std::string> relays);

  /// The site key a site proved when it registered; std::nullopt if it did not.
  std::optional<crypto::key32> site_key(std::string_view receiver_id) const;
  /// The key a site's unicast fallback connections must prove (HKDF of its pairwise key,
  /// "mcdist v2 fallback"); std::nullopt for a site that did not register with a proof.
  std::optional<crypto::key32> fallback_key(std::string_view receiver_id) const;
  const auth_stats& stats() const noexcept { return m_stats; }

 private:
  const crypto::identity* m_id = nullptr;  ///< null: a relay's keys, which sign nothing
  session_id m_session;
  std::map<std::string, crypto::key32, std::less<>> m_pinned;
  crypto::x25519_pair m_ephemeral;
  crypto::key32 m_session_key{};
  crypto::gmac m_data;
  crypto::gmac m_marker;
  std::uint64_t m_marker_counter = 0;
  bool m_encrypted = false;
  crypto::key32 m_manifest_key{};
  std::optional<crypto::gcm> m_sealed_data;
  std::string m_key_reply_to;  ///< receiver id of a key request open() consumed
  /// relay_public of that key request, when it carried one (a relay asking for a delegation).
  std::optional<crypto::key32> m_key_reply_relay;
  std::vector<std::string> m_relays;
  std::vector<std::byte> m_scratch;
  /// Seals the body of the announce or digest_list in buf[0, len) in place (encrypted
  /// sessions). @return the new length, 0 when `buf` has no room
  std::size_t seal_body(std::span<std::byte> buf, std::size_t len);
  struct site {
    crypto::key32 site_key{};
    crypto::key32 pairwise{};
  };
  std::unordered_map<std::string, site> m_sites;  ///< receiver id -> keys
  auth_stats m_stats;
};

/// Least time between two key requests of a site for one session: the sealed announces of a
/// cycle all ask for the key, one request per round trip is enough.
inline constexpr duration key_request_interval = std::chrono::milliseconds(200);
/// Once a site's core holds a session's whole manifest, its announces are repeats that only
/// refresh the sender's timestamp echo, GRTT and liveness: one verified per this interval is
/// enough (10 signature checks per second and session, instead of one per announce chunk: 72
/// per cycle for 1000 files, every 250 ms, and twice at the start).
inline constexpr duration announce_repeat_interval = std::chrono::milliseconds(100);
/// Bytes of sealed announces a site holds, over all sessions of one receiver_keys, while their
/// session key is on its way: a 10,000-file manifest (about 700 chunks of 1.4 kB) fits. Only
/// announces whose signature verified are held (by a trusted sender when trusted keys are
/// configured); beyond the bound they are dropped as before, and the site opens the next cycle.
inline constexpr std::size_t max_held_announce_bytes = 1 << 20;
/// Announce tree roots a site remembers per session once their signature verified, the oldest
/// forgotten first: a burst of the sender is at most a few trees (two cycles of 1000 files
/// are about 170 chunks, three trees), and the root of a cycle's trees is of no use once the
/// cycle is over (the next one is stamped anew). ~100 bytes each.
inline constexpr std::size_t max_verified_roots = 8;
/// Key requests a relay sends for a delegation after it holds a session's key (a hub that does
/// not delegate to it answers each without one): then it stops asking for that session.
inline constexpr std::uint8_t max_delegation_asks = 3;
/// Least time between two bindings of a session to a new relay key at a site: a relay that
/// restarted re-keys, and a copied hello replayed from elsewhere cannot make a site flap faster.
inline constexpr duration relay_rebind_interval = std::chrono::seconds(1);

/// A verified sealed announce that arrived before its session key (receiver_keys::take_held).
struct held_announce {
  std::vector<std::byte> datagram;  ///< as received (version 2, sealed, with its trailer)
  endpoint from;                    ///< its source
  time_point at;                    ///< when it arrived
};

/// What a receiving site trusts and proves.
struct receiver_auth_options {
  /// Ed25519 keys of the senders this site accepts products from. Empty: version-2 signatures
  /// are not checked and version-1 datagrams are accepted (any host can write products).
  std::vector<crypto::key32> trusted_senders;
  /// This site's identity: proves registrations and derives the pairwise keys.
  crypto::identity site;
  /// Sessions whose keys are held at once; the least recently used one is forgotten beyond.
  std::size_t max_sessions = 256;
  /// Signature checks per second spent on datagrams not already verified (announces of new
  /// sessions, digest lists, session ends); beyond it they are dropped (verify_budget).
  std::uint32_t verifications_per_second = 2000;
  /// This site's receiver id: the key requests of encrypted sessions carry it.
  std::string receiver_id;
  /// This site relays two-way sessions (mcdistd relay_group): its key requests of signed
  /// sessions carry a fresh X25519 key per session for the hub to delegate (delegation()).
  bool relay = false;
};

/// The receiving site's side, for every session it hears. Not thread-safe.
class receiver_keys {
 public:
  explicit receiver_keys(receiver_auth_options o);
  ~receiver_keys();
  /// A copy is an independent snapshot of every session's keys and state (the fuzz target
  /// copies one handshake for every input). Not assignable.
  receiver_keys(const receiver_keys&) = default;
  receiver_keys& operator=(const receiver_keys&) = delete;

  /// Checks a datagram from a sender and returns its version-1 view in `out` (the trailer
  /// cut off; the version byte still says 2, which wire::parse_header accepts).
  /// Before a session's first verified announce, only its announce is accepted; before the
  /// register_reply, no data or marker is. O(1) memory per refused datagram.
  /// Encrypted sessions: `out` is the opened (decrypted) datagram, in a buffer of this object
  /// valid until the next call; a sealed announce before the session key, and a key_only
  /// register_reply, are consumed here (empty result, `out` empty): after a sealed announce,
  /// take_key_request() may have a key request to send to its source.
  /// @return empty; a wire::parse_header error for a datagram that is not mcdist at all (not
  ///         counted here: the caller's framing counters take it); or errc::unauthenticated
  ///         with stats() counting the reason
  std::error_code open(std::span<const std::byte> datagram, time_point now,
                       std::span<const std::byte>& out);
  /// The same, with the datagram's source: a sealed announce held before its session key
  /// (take_held) keeps it.
  std::error_code open(std::span<const std::byte> datagram, time_point now,
                       std::span<const std::byte>& out, const endpoint& from);
  /// The same, for a datagram whose common header the caller parsed already (`h`, from
  /// wire::parse_header on `datagram`): the daemons' receive path parses each header once.
  std::error_code open(const wire::header& h, std::span<const std::byte> datagram, time_point now,
                       std::span<const std::byte>& out, const endpoint& from);
  /// Seals a register_request, nak or complete the core produced for a version-2 session:
  /// `buf` holds `len` bytes with room for max_trailer_bytes more. A datagram of a version-1
  /// session is returned unchanged. @return the new length, or 0 when the session's keys are
  /// unknown (the core repeats the message)
  std::size_t seal(std::span<std::byte> buf, std::size_t len);

  /// A key request (register_request with key_request, sealed) for a session whose verified
  /// announce open() just took without the session key, at most one per session every
  /// key_request_interval; written to `buf` (room for control_budget + max_trailer_bytes).
  /// Encrypted sessions need the key to read the manifest; signed ones ask too, so that the
  /// site can check blocks before it has registered and the sender can start pass 1 once its
  /// sites hold the key (a sender that does not answer leaves the key to the register_reply).
  /// @return its length, 0 when none is due
  std::size_t take_key_request(std::span<std::byte> buf);
  /// The sealed announces of an encrypted session held before its key, once the
  /// register_reply open() just took gave the key; oldest first. Each opens through open()
  /// again (a repeat of a verified announce: one SHA-256, no signature check) and goes to the
  /// core with its arrival time. Empty when none are held.
  std::vector<held_announce> take_held();
  /// True while a session's verified announce was seen and its key asked for but not yet
  /// received: its data blocks cannot be checked yet.
  bool awaiting_key(session_id s) const;
  /// True when an announce of session `s` verified less than announce_repeat_interval before
  /// `now`: a caller whose core holds the session's whole manifest may then drop the next
  /// announce of it unchecked (a repeat) instead of spending a signature check on it.
  bool repeat_verified_recently(session_id s, time_point now) const;
  /// True when some session is awaiting_key (one load: callers ask it for every block).
  bool awaiting_any() const noexcept { return m_awaiting > 0; }
  /// True for a session whose verified announce was sealed (mcdist-send --encrypt).
  bool encrypted(session_id s) const;
  /// True for a session whose verified announce says block_digests (a silent signed session
  /// whose blocks this site checks against signed block digests; docs/security.md "Block
  /// digests").
  bool block_digests(session_id s) const;
  /// Bytes of block digests held for session `s` (block_digests::table::memory_bytes).
  std::size_t digest_bytes_held(session_id s) const;
  /// True when a verified announce of the session was seen (its keys are held).
  bool knows(session_id s) const { return m_sessions.count(s.value) != 0; }
  /// True once the session's register_reply gave this site the session key.
  bool has_session_key(session_id s) const;
  /// The key this site's unicast fallback connections of session `s` prove (the sender's
  /// sender_keys::fallback_key); std::nullopt before a verified announce of the session.
  std::optional<crypto::key32> fallback_key(session_id s) const;
  /// The trusted sender key whose signature the session's announce carried; std::nullopt when
  /// the session is unknown or no trusted keys are configured (signatures are not checked).
  /// Receivers keep a channel's session numbers per sender key (receiver/core/sequence_book).
  std::optional<crypto::key32> signer(session_id s) const;
  /// A relay (receiver_auth_options::relay): the hub's delegation of signed session `s` to this
  /// site, with the key pair it delegates; std::nullopt until a key_only register_reply
  /// carried one that verified under the key that signed the session's announce.
  std::optional<relay_delegation> delegation(session_id s) const;
  /// A relay: true when the hub answered this relay's key request for session `s` without a
  /// delegation (it does not list or pin the relay, or predates relays): the session cannot be
  /// relayed signed.
  bool delegation_refused(session_id s) const;
  /// A site behind a relay: true when session `s` is bound to a relay's key (a verified
  /// relay_hello).
  bool relay_bound(session_id s) const;
  /// The session's keys as an opaque blob (sender session public key, session key, the relay
  /// key a relay_hello bound, the announce's signer), for the daemon to save beside the
  /// session's checkpoint; std::nullopt before the session key.
  std::optional<std::string> export_session(session_id s) const;
  /// Restores export_session's blob after a restart. @return false for a malformed blob, or
  /// one whose signer is no longer trusted
  bool import_session(session_id s, std::string_view blob);
  /// Drops a session's keys.
  void forget(session_id s);
  /// Session `s` (whose announce verified) is silent at this site (docs/security.md "Silent
  /// sessions"): its key is never asked for (a pending key request is dropped), and its data
  /// and markers, whose tags only the session key checks, pass with the trailer cut off
  /// unchecked while the site has no key. What makes a file of it trustworthy is then the
  /// SHA-256 of the signed announce or digest list, checked before the file is renamed into
  /// place. No effect for an unknown session. A session whose announce says block_digests is
  /// silent already, and its blocks are checked (docs/security.md "Block digests").
  /// @return true when the session was not silent before
  bool set_silent(session_id s);
  /// True when trusted sender keys are configured (version 2 required).
  bool required() const noexcept { return !m_opts.trusted_senders.empty(); }
  const auth_stats& stats() const noexcept { return m_stats; }

 private:
  /// What the site holds for one session.
  struct session_keys {
    crypto::key32 sender_public{};  ///< the sender's X25519 session key (announce)
    crypto::key32 pairwise{};
    bool has_pairwise = false;
    std::optional<crypto::key32> session_key;  ///< from the register_reply
    std::optional<crypto::gmac> data;
    std::optional<crypto::gmac> marker;
    std::unordered_set<std::uint64_t> verified_announces;
    time_point last_used{};
    std::optional<crypto::key32> signer;  ///< the trusted key that signed its announce
    bool encrypted = false;               ///< its verified announce was sealed
    crypto::key32 manifest_key{};
    std::optional<crypto::gcm> sealed_data;
    std::optional<time_point> last_key_request;
    std::vector<held_announce> held;  ///< sealed announces before the key (encrypted)
    bool awaiting = false;            ///< key asked for, not received (counted in m_awaiting)
    std::optional<time_point> last_announce;  ///< when an announce of it last verified
    /// Announce tree roots whose signature verified, a ring of max_verified_roots.
    struct verified_root {
      crypto::signature sig{};
      announce_tree::hash root{};
      std::uint16_t count = 0;
    };
    std::array<verified_root, max_verified_roots> roots{};
    std::size_t roots_used = 0;
    std::size_t next_root = 0;
    bool silent = false;  ///< set_silent: no key, tags not checked
    /// Its verified announce says block_digests: version-3 blocks checked against `digests`,
    /// every other block refused (no_digest).
    bool block_digests = false;
    /// Signed block digests of the last windows (created with the first verified chunk).
    std::optional<block_digests::table> digests;
    /// Roots of block digest trees whose signature verified, a ring like `roots`.
    std::array<verified_root, max_verified_roots> digest_roots{};
    std::size_t digest_roots_used = 0;
    std::size_t next_digest_root = 0;

    /// The source of its first verified announce: a relay_hello counts only from that host (a
    /// restarted relay sends from another port).
    std::optional<endpoint> source;
    /// A relay: its key pair for the session, the hub's delegation once it came, and how many
    /// key requests asked for it after the session key was held (max_delegation_asks).
    std::optional<crypto::x25519_pair> relay_key;
    std::optional<crypto::signature> delegation;
    std::uint8_t delegation_asks = 0;
    bool delegation_refused = false;  ///< a key_only reply came without one
    /// A site behind a relay: the relay key a verified relay_hello bound (the pairwise key is
    /// derived with it), and when it was bound (rebinding at most once per relay_rebind_interval).
    std::optional<crypto::key32> relay_public;
    std::optional<time_point> bound_at;
    /// A relay behind a relay: the pairwise key with the hub's announce key, kept when a
    /// relay_hello rebinds `pairwise`, for the key requests that ask the hub for a delegation
    /// through the relay (for_origin) and their answers.
    std::optional<crypto::key32> origin_pairwise;

    /// Takes the session key of a register_reply and derives the data, marker, manifest and
    /// sealed-data keys from it (HKDF, RFC 5869).
    void set_session_key(const crypto::key32& k, session_id s);
  };
  session_keys* find(session_id s);
  /// Checks an announce (version 2, trailer of `trailer` bytes): by its path to a root
  /// verified before, or by the signature of the root its path leads to.
  /// @param fresh  set when the announce verified (not a remembered repeat)
  std::error_code open_announce(std::span<const std::byte> d, std::size_t trailer, session_keys* s,
                                time_point now, bool& fresh);
  /// Checks a version-3 datagram (auth_digests.cpp): a block against the signed digest of its
  /// sequence number, or a block digest chunk by its path and signature (taken: `out` empty).
  std::error_code open_digested(std::span<const std::byte> d, const wire::header& h, time_point now,
                                std::span<const std::byte>& out);
  /// seal()'s tag of a register_request, nak or complete under `pairwise`.
  std::size_t seal_under(const crypto::key32& pairwise, std::span<std::byte> buf, std::size_t len);
  /// open()'s relay_hello case: checks the hub's delegation and binds the relay's key.
  std::error_code open_relay_hello(session_keys* s, session_id session,
                                   std::span<const std::byte> d, time_point now,
                                   const endpoint& from, std::span<const std::byte>& out);
  /// Asks for the session key (take_key_request), at most once per key_request_interval.
  void want_key(session_keys& s, session_id id, time_point now);
  /// Before a session's keys are dropped or start over: its held announces' bytes and its
  /// place in m_awaiting are given back.
  void release(session_keys& s) noexcept;
  /// The session's key arrived: it awaits it no more.
  void keyed(session_keys& s) noexcept;
  session_keys& learn(session_id s, const crypto::key32& sender_public, time_point now);
  /// @param signer  set to the trusted key that verified, when one did
  /// @param only    when set, the one key that may have signed (the session's announce signer)
  bool verify_signed(std::span<const std::byte> signed_part,
                     std::span<const std::uint8_t, crypto::signature_bytes> sig, time_point now,
                     const crypto::key32** signer = nullptr, const crypto::key32* only = nullptr);
  bool take_verification(time_point now);

  receiver_auth_options m_opts;
  crypto::x25519_pair m_site_x;
  /// Opens an encrypted session's sealed announce or digest list into m_scratch.
  /// @param fresh  the announce's signature was checked just now (not a repeat): before the
  ///                key, it is held
  /// open()'s data and parity case: decrypts (encrypted session, into m_scratch) or checks the
  /// tag. @return the verdict when open() is done with the datagram (`out` set on success);
  ///         nullopt to go on (verified, `out` is the signed part)
  std::optional<std::error_code> open_block(session_keys* s, std::span<const std::byte> d,
                                            std::span<const std::byte> signed_part,
                                            std::span<const std::byte>& out);
  /// open()'s register_reply case: takes the session key sealed for this site. @return as
  /// open_block's (a key_only reply is consumed: empty error, `out` empty)
  std::optional<std::error_code> open_register_reply(session_keys* s, session_id session,
                                                     std::span<const std::byte> d,
                                                     std::size_t trailer,
                                                     std::span<const std::byte>& out);
  /// After an announce's signature: opens a sealed body, notes a block-digest session, asks
  /// for a signed session's key; `out` is the announce to hand on.
  std::error_code opened_announce(session_id session, std::span<const std::byte> d,
                                  std::span<const std::byte> signed_part, time_point now,
                                  bool fresh, const endpoint& from,
                                  std::span<const std::byte>& out);
  std::error_code open_sealed_body(session_keys& s, std::span<const std::byte> signed_part,
                                   wire::msg_type t, time_point now,
                                   std::span<const std::byte>& out,
                                   std::span<const std::byte> datagram = {}, bool fresh = false,
                                   const endpoint* from = nullptr);
  std::unordered_map<std::uint32_t, session_keys> m_sessions;
  std::optional<session_id> m_key_request;  ///< set by open(), taken by take_key_request()
  std::optional<session_id> m_replay;       ///< its key just arrived: take_held() opens its held
  std::size_t m_held_bytes = 0;             ///< bytes of held_announce datagrams, all sessions
  std::size_t m_awaiting = 0;               ///< sessions whose `awaiting` is set
  std::vector<std::byte> m_scratch;
  time_point m_budget_at{};
  std::uint32_t m_budget = 0;
  auth_stats m_stats;
};

}  // namespace mcdist::auth
