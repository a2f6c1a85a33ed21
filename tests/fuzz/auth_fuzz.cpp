/// @file
/// libFuzzer target: the authentication layer of signed sessions (common/auth.hpp) and the
/// unicast fallback's proof of the site key (common/unicast/hello_proof.hpp), on both sides.
///
/// Each input starts from a real handshake run in-process (so every key is held and the
/// mutated datagrams reach the checks of a live session, not just "no key"): the sender seals an
/// announce, the site opens it, seals a register_request, the sender opens that and seals the
/// register_reply, the site opens it. The handshakes run once per process; each input works on
/// a copy of both sides (so inputs are independent and reproducible, and an input costs its own
/// records rather than the handshakes' key agreements and signatures). Then the input is a script
/// (tests/fuzz/fuzz_script.hpp) whose records, by op % 6, are:
///
///   0  a datagram to the site:           receiver_keys::open
///   1  a datagram to the sender:         sender_keys::open (a key request, which signed
///      sessions have too, is answered with take_key_reply, which the site must open)
///   2  a datagram the site's core made:  receiver_keys::seal, then the sender opens the result
///      (and answers it, if it was a key request)
///   3  a datagram the sender's core made: sender_keys::seal_control, then the site opens it;
///      an announce goes as a burst of three copies (sender_keys::seal_announces, one tree)
///   4  a data datagram of the sender:    sender_keys::seal_data (payloads of at least the data
///      header), then the site opens it
///   5  a fallback hello: 16 bytes of challenge, then a hello body; decoded and its proof
///      checked under the site's fallback key
///
/// and, against a second pair that ran the handshake of an encrypted session (mcdist-send
/// --encrypt: sealed announce, key request, key_only reply), by op % 11:
///
///   6  a datagram to the encrypted site:    receiver_keys::open (then the sealed announces it
///      held before the key, if the key just arrived, open again)
///   7  a datagram to the encrypted sender:  sender_keys::open (a key request is answered with
///      take_key_reply, which the site must open)
///   8  a datagram the encrypted site's core made: sealed, then the sender opens it
///   9  a datagram the encrypted sender's core made: sealed (announce and digest_list bodies
///      encrypted), then the site opens it: an opened body must be the core's body, byte for byte
///  10  a data datagram of the encrypted sender: encrypted, then opened by the site: the same
///      payload
///
/// and, against a third pair whose signed announce said block_digests (a silent signed session,
/// docs/security.md "Block digests"), by op % 13:
///
///  11  a datagram to the block digest site: receiver_keys::open
///  12  a data or parity block of the sender: made version 3 from the payload (at least the data
///      header), its digest sealed by the sender in a one-chunk window under the block's
///      sequence number (sender_keys::seal_block_digests), the chunk opened by a fresh copy of
///      the site (whose table is empty, so the window is kept), then the block: it opens to
///      itself, and with one payload byte changed it is refused; the chunk and the block then
///      go to the running site too (op 11's), unchecked
///
/// Invariants (abort on violation; encrypted session: opened views are not prefixes): the handshake
/// succeeds and both sides derive the same fallback key; an opened datagram is a prefix of the
/// input, shorter by exactly the type's trailer (an announce's: what its leaf index and count
/// say), except a version-3 block, which opens to itself, and a block digest chunk, which is
/// taken (empty view); a sealed datagram is the input plus the type's trailer; a hello's proof
/// made with the site's key verifies, one made with another key does not.

#include "common/auth.hpp"
#include "common/unicast/hello_proof.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "tests/fuzz/fuzz_script.hpp"
#include "tests/fuzz/quiet_protobuf.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace mcdist;

namespace {

constexpr session_id fuzz_session{0x1234};

struct identities {
  crypto::identity hub = crypto::generate_identity();
  crypto::identity site = crypto::generate_identity();
};

const identities& ids() {
  static const identities i = [] {
    crypto::init();
    return identities{};
  }();
  return i;
}

template <class Msg>
std::vector<std::byte> control(wire::msg_type t, const Msg& m) {
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong() + auth::max_trailer_bytes);
  const std::size_t n = wire::encode_control(out, t, fuzz_session, m);
  out.resize(n);
  return out;
}

/// `d` with room for the largest trailer after it; the content's length is d.size().
std::vector<std::byte> roomy(std::span<const std::byte> d) {
  std::vector<std::byte> b(d.begin(), d.end());
  b.resize(d.size() + auth::max_trailer_bytes);
  return b;
}

void require(bool ok) {
  if (!ok) std::abort();
}

/// The trailer of a version-2 datagram: its type's, or for an announce the length its leaf
/// index and count give (auth::announce_trailer_bytes).
std::size_t trailer_of(std::span<const std::byte> d) {
  const auto t = static_cast<wire::msg_type>(std::to_integer<std::uint8_t>(d[3]));
  return t == wire::msg_type::announce ? auth::announce_trailer_bytes(d) : auth::trailer_size(t);
}

/// The opened view must be the datagram without its trailer; a version-3 block has none, and a
/// block digest chunk is taken by the layer.
void check_opened(std::span<const std::byte> in, std::span<const std::byte> out) {
  if (std::to_integer<std::uint8_t>(in[2]) == wire::digest_version) {
    const auto t = static_cast<wire::msg_type>(std::to_integer<std::uint8_t>(in[3]));
    if (t == wire::msg_type::block_digests) {
      require(out.empty());
    } else {
      require(out.data() == in.data() && out.size() == in.size());
    }
    return;
  }
  require(out.data() == in.data() && out.size() < in.size());
  require(in.size() - out.size() == trailer_of(in));
}

/// A key request the sender's layer consumed (encrypted and signed sessions alike): its answer
/// must exist, and the site consumes it when it opens it (or refuses it, if the fuzzed input made
/// it forget the session).
void answer_key_request(auth::sender_keys& hub, auth::receiver_keys& site, time_point now) {
  require(!hub.key_reply_to().empty());
  std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);
  const std::size_t n = hub.take_key_reply(reply);
  require(n > 0);
  std::span<const std::byte> opened;
  if (!site.open(std::span(reply).first(n), now, opened)) require(opened.empty());
}

}  // namespace

/// The encrypted pair after its handshake.
struct encrypted_pair {
  auth::receiver_keys site;
  auth::sender_keys hub;
  encrypted_pair(const identities& id, time_point now)
      : site([&] {
          auth::receiver_auth_options o;
          o.trusted_senders = {id.hub.public_key};
          o.site = id.site;
          o.max_sessions = 4;
          o.receiver_id = "site";
          return o;
        }()),
        hub(id.hub, fuzz_session, {{"site", id.site.public_key}}, true) {
    wire::announce a;
    a.mutable_params()->set_block_size(1000);
    a.mutable_params()->set_file_count(1);
    a.add_files()->set_path("x");
    auto b = control(wire::msg_type::announce, a);
    const std::size_t len = b.size();
    b = roomy(b);
    const std::size_t n = hub.seal_control(b, len);
    require(n > len + auth::trailer_size(wire::msg_type::announce));
    std::span<const std::byte> opened;
    require(!site.open(std::span(b).first(n), now, opened) && opened.empty());
    std::vector<std::byte> buf(wire::control_budget + auth::max_trailer_bytes);
    const std::size_t rq = site.take_key_request(buf);
    require(rq > 0);
    require(!hub.open(std::span(buf).first(rq), opened) && opened.empty());
    std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);
    const std::size_t rp = hub.take_key_reply(reply);
    require(rp > 0);
    require(!site.open(std::span(reply).first(rp), now, opened) && opened.empty());
    require(site.has_session_key(fuzz_session) && site.encrypted(fuzz_session));
  }
};

/// An opened datagram of the encrypted session: no longer than the input without its trailer.
void check_opened_encrypted(std::span<const std::byte> in, std::span<const std::byte> out) {
  const auto t = static_cast<wire::msg_type>(std::to_integer<std::uint8_t>(in[3]));
  require(out.empty() || out.size() <= in.size() - trailer_of(in));
  if (t == wire::msg_type::data && !out.empty())
    require(out.size() == in.size() - auth::data_trailer_bytes);
}

void encrypted_op(encrypted_pair& e, unsigned op, std::span<const std::byte> p, time_point now) {
  std::span<const std::byte> opened;
  switch (op) {
    case 6:
      if (!e.site.open(p, now, opened)) check_opened_encrypted(p, opened);
      // Held announces whose key just arrived open again without a second signature check.
      for (const auto& h : e.site.take_held()) {
        if (!e.site.open(h.datagram, h.at, opened, h.from))
          check_opened_encrypted(h.datagram, opened);
      }
      break;
    case 7:
      if (!e.hub.open(p, opened)) {
        if (!opened.empty()) {
          check_opened(p, opened);
          break;
        }
        // The site may have forgotten the session (op 9 can make it learn others): then it
        // refuses the reply; if it opens it, the reply is consumed.
        answer_key_request(e.hub, e.site, now);
      }
      break;
    case 8: {
      auto b = roomy(p);
      const std::size_t n = e.site.seal(b, p.size());
      if (n == 0 || n == p.size()) break;
      if (!e.hub.open(std::span(b).first(n), opened) && !opened.empty()) {
        check_opened(std::span(b).first(n), opened);
      }
      (void)e.hub.take_key_reply(b);  // a key request made by hand: its answer is dropped
      break;
    }
    case 9: {
      if (p.size() < wire::header_size) break;
      auto b = roomy(p);
      const std::size_t n = e.hub.seal_control(b, p.size());
      if (n == 0) break;
      const auto t = static_cast<wire::msg_type>(std::to_integer<std::uint8_t>(p[3]));
      if (!e.site.open(std::span(b).first(n), now, opened) && !opened.empty() &&
          (t == wire::msg_type::announce || t == wire::msg_type::digest_list)) {
        // The round trip gives the core's body back.
        require(opened.size() == p.size());
        require(std::equal(opened.begin() + wire::header_size, opened.end(),
                           p.begin() + wire::header_size));
      }
      break;
    }
    case 10: {
      if (p.size() < wire::data_header_size) break;
      auto b = roomy(p);
      const std::size_t n = e.hub.seal_data(b, p.size());
      require(n == p.size() + auth::data_trailer_bytes);
      wire::header h;
      const bool ours = !wire::parse_header(std::span(b).first(n), h) &&
                        h.type == wire::msg_type::data && h.session == fuzz_session &&
                        e.site.has_session_key(fuzz_session);
      if (e.site.open(std::span(b).first(n), now, opened)) {
        require(!ours);  // a block of the live session always opens
        break;
      }
      require(opened.size() == p.size());
      require(std::equal(opened.begin() + wire::data_header_size, opened.end(),
                         p.begin() + wire::data_header_size));
      break;
    }
    default: break;
  }
}

/// The plain signed pair after its handshake.
struct plain_pair {
  auth::receiver_keys site;
  auth::sender_keys hub;
  plain_pair(const identities& id, time_point now)
      : site([&] {
          auth::receiver_auth_options o;
          o.trusted_senders = {id.hub.public_key};
          o.site = id.site;
          o.max_sessions = 4;
          return o;
        }()),
        hub(id.hub, fuzz_session, {{"site", id.site.public_key}}) {
    std::span<const std::byte> opened;
    {
      wire::announce a;
      a.mutable_params()->set_block_size(1000);
      a.mutable_params()->set_file_count(1);
      a.mutable_params()->set_manifest_chunks(1);
      auto* f = a.add_files();
      f->set_path("x");
      f->set_size(1);
      auto b = control(wire::msg_type::announce, a);
      const std::size_t len = b.size();
      b = roomy(b);
      const std::size_t n = hub.seal_control(b, len);
      require(n == len + auth::trailer_size(wire::msg_type::announce));
      require(!site.open(std::span(b).first(n), now, opened));
    }
    {
      wire::register_request r;
      r.set_receiver_id("site");
      auto b = control(wire::msg_type::register_request, r);
      const std::size_t len = b.size();
      b = roomy(b);
      const std::size_t n = site.seal(b, len);
      require(n == len + auth::trailer_size(wire::msg_type::register_request));
      require(!hub.open(std::span(b).first(n), opened));
    }
    {
      wire::register_reply r;
      r.set_receiver_id("site");
      r.set_accepted(true);
      auto b = control(wire::msg_type::register_reply, r);
      const std::size_t len = b.size();
      b = roomy(b);
      const std::size_t n = hub.seal_control(b, len);
      require(n > len);
      require(!site.open(std::span(b).first(n), now, opened));
      require(site.has_session_key(fuzz_session));
    }
    const auto key = site.fallback_key(fuzz_session);
    require(key && key == hub.fallback_key("site"));
  }
};

/// A site and a sender of a silent signed session with block digests, after the sender's
/// announce (block_digests set) verified at the site.
struct digest_pair {
  auth::receiver_keys site;
  auth::sender_keys hub;
  digest_pair(const identities& id, time_point now)
      : site([&] {
          auth::receiver_auth_options o;
          o.trusted_senders = {id.hub.public_key};
          o.site = id.site;
          o.max_sessions = 4;
          return o;
        }()),
        hub(id.hub, fuzz_session, {}) {
    wire::announce a;
    a.mutable_params()->set_block_size(1000);
    a.mutable_params()->set_file_count(1);
    a.mutable_params()->set_manifest_chunks(1);
    a.mutable_params()->set_silent_passes(2);
    a.mutable_params()->set_block_digests(1);
    auto* f = a.add_files();
    f->set_path("x");
    f->set_size(100000);
    auto b = control(wire::msg_type::announce, a);
    const std::size_t len = b.size();
    b = roomy(b);
    const std::size_t n = hub.seal_control(b, len);
    std::span<const std::byte> opened;
    require(!site.open(std::span(b).first(n), now, opened));
    require(site.block_digests(fuzz_session));
  }
};

void digest_op(digest_pair& running, const digest_pair& pristine_pair, unsigned op,
               std::span<const std::byte> p, time_point now) {
  std::span<const std::byte> opened;
  if (op == 11) {
    if (!running.site.open(p, now, opened)) check_opened(p, opened);
    return;
  }
  digest_pair d = pristine_pair;
  if (p.size() < wire::data_header_size) return;
  std::vector<std::byte> blk(p.begin(), p.end());
  wire::header h;
  if (wire::parse_header(blk, h) ||
      (h.type != wire::msg_type::data && h.type != wire::msg_type::parity)) {
    return;
  }
  blk[2] = std::byte{wire::digest_version};
  const std::uint32_t seq = static_cast<std::uint32_t>(fuzz::read_be(blk, 8, 4));
  const auto digest = block_digests::digest_of(blk);
  std::vector<std::byte> chunk(block_digests::chunk_body_bytes(1, 0) + auth::max_trailer_bytes);
  const std::size_t n = block_digests::write_chunk(chunk, h.session, seq, 1, 0, {&digest, 1});
  require(n == block_digests::chunk_body_bytes(1, 0));
  auth::sender_keys::announce_slot slot{std::span<std::byte>(chunk), n};
  d.hub.seal_block_digests({&slot, 1});
  require(slot.len == block_digests::chunk_wire_bytes(1, 0));
  const bool ours = h.session == fuzz_session && d.site.block_digests(fuzz_session);
  if (d.site.open(std::span(chunk).first(slot.len), now, opened)) {
    require(!ours);  // a chunk of the live session, signed by its sender, always opens
    return;
  }
  require(opened.empty());
  require(!d.site.open(blk, now, opened) && opened.size() == blk.size());
  (void)running.site.open(std::span(chunk).first(slot.len), now, opened);
  (void)running.site.open(blk, now, opened);
  if (blk.size() > wire::data_header_size) {
    blk.back() ^= std::byte{1};
    require(d.site.open(blk, now, opened) == errc::unauthenticated);
  }
}

/// Both pairs after their handshakes, made once per process: every input starts from a copy
/// (sender_keys and receiver_keys copy as values), so an input costs its own records, not four
/// key agreements and two signatures, and inputs stay independent of each other.
struct handshakes {
  plain_pair plain;
  encrypted_pair enc;
  digest_pair digests;
  explicit handshakes(time_point now) : plain(ids(), now), enc(ids(), now), digests(ids(), now) {}
};

constexpr time_point handshake_time{std::chrono::seconds(1000)};

const handshakes& pristine() {
  static const handshakes h(handshake_time);
  return h;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  plain_pair pair = pristine().plain;
  encrypted_pair enc = pristine().enc;
  digest_pair dig = pristine().digests;
  auth::receiver_keys& site = pair.site;
  auth::sender_keys& hub = pair.hub;
  time_point now = handshake_time;
  const auto key = site.fallback_key(fuzz_session);
  std::span<const std::byte> opened;

  fuzz::script_reader script(std::as_bytes(std::span(data, size)));
  fuzz::record rec;
  while (script.next(rec)) {
    now += std::chrono::milliseconds(1);
    const auto p = rec.payload;
    if (rec.op % 13 >= 11) {
      digest_op(dig, pristine().digests, rec.op % 13, p, now);
      continue;
    }
    if (rec.op % 13 >= 6) {
      encrypted_op(enc, rec.op % 13, p, now);
      continue;
    }
    switch (rec.op % 13) {
      case 0:
        if (!site.open(p, now, opened)) check_opened(p, opened);
        break;
      case 1:
        if (!hub.open(p, opened)) {
          if (opened.empty()) {
            answer_key_request(hub, site, now);
            break;
          }
          check_opened(p, opened);
        }
        break;
      case 2: {
        auto b = roomy(p);
        const std::size_t n = site.seal(b, p.size());
        if (n == 0 || n == p.size()) break;  // unknown session, or left as version 1
        require(n == p.size() + auth::trailer_size(static_cast<wire::msg_type>(
                                    std::to_integer<std::uint8_t>(p[3]))));
        if (!hub.open(std::span(b).first(n), opened)) {
          if (opened.empty()) {
            answer_key_request(hub, site, now);
            break;
          }
          check_opened(std::span(b).first(n), opened);
        }
        break;
      }
      case 3: {
        if (p.size() < wire::header_size) break;  // the core's datagrams have their header
        const auto t = static_cast<wire::msg_type>(std::to_integer<std::uint8_t>(p[3]));
        if (t == wire::msg_type::announce) {
          // A burst of three copies under one tree: each seals to the input plus its trailer,
          // and each opens (the first by the root's signature, the others by their paths) or
          // is refused as the single announce would be.
          std::vector<std::vector<std::byte>> bufs(3, roomy(p));
          std::vector<auth::sender_keys::announce_slot> burst;
          for (auto& buf : bufs) burst.push_back({std::span<std::byte>(buf), p.size()});
          hub.seal_announces(burst);
          for (std::size_t i = 0; i < burst.size(); ++i) {
            const std::size_t n = burst[i].len;
            require(n > p.size() && n <= p.size() + auth::largest_trailer_bytes);
            const auto sealed = std::span<const std::byte>(bufs[i]).first(n);
            require(n == p.size() + auth::announce_trailer_bytes(sealed));
            if (site.open(sealed, now, opened)) continue;
            const session_id sid{static_cast<std::uint32_t>(fuzz::read_be(p, 4, 4))};
            if (opened.empty()) {
              require(site.encrypted(sid));
              continue;
            }
            check_opened(sealed, opened);
          }
          break;
        }
        auto b = roomy(p);
        const std::size_t n = hub.seal_control(b, p.size());
        if (n == 0) break;
        require(n == p.size() + auth::trailer_size(t));
        if (site.open(std::span(b).first(n), now, opened)) break;
        if (opened.empty()) {
          // Consumed: an announce whose signed body carries a sealed manifest makes the site
          // treat its session as encrypted and ask for the key (found by this target: the
          // sender's signature covers the body, so the site trusts what it says).
          // Consumed too: a register_reply with key_only, the answer to a key request (the
          // signed session's site asks for the key before it registers).
          const session_id sid{static_cast<std::uint32_t>(fuzz::read_be(p, 4, 4))};
          require((t == wire::msg_type::announce && site.encrypted(sid)) ||
                  t == wire::msg_type::register_reply);
          break;
        }
        check_opened(std::span(b).first(n), opened);
        break;
      }
      case 4: {
        if (p.size() < wire::data_header_size) break;
        auto b = roomy(p);
        const std::size_t n = hub.seal_data(b, p.size());
        require(n == p.size() + auth::data_trailer_bytes);
        if (!site.open(std::span(b).first(n), now, opened))
          check_opened(std::span(b).first(n), opened);
        break;
      }
      case 5: {
        if (p.size() < unicast::challenge_size) break;
        unicast::challenge c;
        std::memcpy(c.nonce.data(), p.data(), c.nonce.size());
        unicast::hello h;
        if (unicast::decode(p.subspan(unicast::challenge_size), h)) break;
        (void)unicast::verify_hello_proof(*key, c, h);
        h.proof = unicast::hello_proof(*key, c, h);
        require(unicast::verify_hello_proof(*key, c, h));
        auto other = *key;
        other[0] ^= 1;
        require(!unicast::verify_hello_proof(other, c, h));
        break;
      }
    }
  }
  return 0;
}
