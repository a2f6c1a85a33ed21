#include "common/auth.hpp"

#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace mcdist;
using namespace std::chrono_literals;

namespace {

const session_id sid{0x11223344};
const time_point t0{std::chrono::seconds(100)};

/// A datagram of `type` with `msg` as its body, with room for any trailer.
template <class Msg>
std::vector<std::byte> control(wire::msg_type type, const Msg& msg, session_id s = sid) {
  std::vector<std::byte> out(wire::header_size + msg.ByteSizeLong() + auth::max_trailer_bytes);
  const std::size_t n = wire::encode_control(out, type, s, msg);
  REQUIRE(n > 0);
  out.resize(n);
  return out;
}

/// Seals with `seal(buf, len)` and returns the sealed bytes (empty if it refused).
template <class F>
std::vector<std::byte> sealed(std::vector<std::byte> d, F&& seal) {
  const std::size_t len = d.size();
  d.resize(len + auth::max_trailer_bytes);
  const std::size_t n = seal(std::span<std::byte>(d), len);
  d.resize(n);
  return d;
}

std::vector<std::byte> data_datagram(std::uint32_t seq, std::uint32_t file, std::uint32_t block) {
  std::vector<std::byte> d(wire::data_header_size + 100 + auth::data_trailer_bytes);
  wire::write_data_header(d, {sid, seq, file_index{file}, block_index{block}});
  for (std::size_t i = wire::data_header_size; i < d.size(); ++i) d[i] = std::byte(i * 7);
  return d;
}

wire::announce sample_announce() {
  wire::announce a;
  a.mutable_params()->set_block_size(1400);
  a.mutable_params()->set_file_count(1);
  auto* f = a.add_files();
  f->set_path("obs/x.bufr");
  f->set_size(100);
  return a;
}

/// One sender and one site that have run the whole exchange: announce, register, reply.
struct exchange {
  crypto::identity sender_id = crypto::generate_identity();
  crypto::identity site_id = crypto::generate_identity();
  auth::sender_keys sender;
  auth::receiver_keys receiver;
  std::span<const std::byte> out;

  explicit exchange(std::map<std::string, crypto::key32, std::less<>> pinned = {})
      : sender(sender_id, sid, std::move(pinned)),
        receiver(auth::receiver_auth_options{{sender_id.public_key}, site_id, 256, 100}) {}

  std::error_code announce() {
    const auto a = sealed(control(wire::msg_type::announce, sample_announce()),
                          [&](auto b, auto n) { return sender.seal_control(b, n); });
    return receiver.open(a, t0, out);
  }
  std::vector<std::byte> register_request(const std::string& id = "site-a") {
    wire::register_request r;
    r.set_receiver_id(id);
    return sealed(control(wire::msg_type::register_request, r),
                  [&](auto b, auto n) { return receiver.seal(b, n); });
  }
  std::error_code reply(const std::string& id = "site-a") {
    wire::register_reply r;
    r.set_receiver_id(id);
    r.set_accepted(true);
    const auto d = sealed(control(wire::msg_type::register_reply, r),
                          [&](auto b, auto n) { return sender.seal_control(b, n); });
    if (d.empty()) return errc::unauthenticated;
    return receiver.open(d, t0, out);
  }
  void run() {
    REQUIRE_FALSE(announce());
    const auto reg = register_request();
    REQUIRE_FALSE(reg.empty());
    REQUIRE_FALSE(sender.open(reg, out));
    REQUIRE_FALSE(reply());
    REQUIRE(receiver.has_session_key(sid));
  }
};

}  // namespace

TEST_CASE("public keys print and parse; bad text is refused with a reason", "[unit][auth]") {
  const auto id = crypto::generate_identity();
  const auto text = crypto::format_public_key(id.public_key);
  REQUIRE(text.rfind("mcdist-ed25519:", 0) == 0);
  REQUIRE(crypto::parse_public_key("  " + text + "\n") == id.public_key);
  REQUIRE_THROWS_AS(crypto::parse_public_key("ssh-ed25519 AAAA"), crypto::key_error);
  REQUIRE_THROWS_AS(crypto::parse_public_key("mcdist-ed25519:AAAA"), crypto::key_error);
  REQUIRE_THROWS_WITH(crypto::parse_public_key(text + "x"), Catch::Contains("32 bytes"));
}

TEST_CASE("the receiver id is read off the front of a control body", "[unit][auth]") {
  wire::nak n;
  n.set_receiver_id("dwd-offenbach");
  n.set_pass(3);
  const auto d = control(wire::msg_type::nak, n);
  REQUIRE(auth::leading_receiver_id(std::span(d).subspan(wire::header_size)) == "dwd-offenbach");
  wire::marker m;
  m.set_pass(1);
  const auto d2 = control(wire::msg_type::marker, m);
  REQUIRE(auth::leading_receiver_id(std::span(d2).subspan(wire::header_size)).empty());
}

TEST_CASE("a signed announce opens; forged, altered and unsigned ones are counted and refused",
          "[unit][auth]") {
  exchange x;
  const auto a = sealed(control(wire::msg_type::announce, sample_announce()),
                        [&](auto b, auto n) { return x.sender.seal_control(b, n); });
  REQUIRE(std::to_integer<int>(a[2]) == 2);
  REQUIRE_FALSE(x.receiver.open(a, t0, x.out));
  REQUIRE(x.out.size() == a.size() - auth::announce_trailer_fixed_bytes);  // a tree of one
  wire::header h;
  REQUIRE_FALSE(wire::parse_header(x.out, h));
  wire::announce back;
  REQUIRE_FALSE(wire::parse_control(x.out, back));
  REQUIRE(back.files(0).path() == "obs/x.bufr");

  // Another sender's key: the signature is by no trusted key.
  const auto mallory = crypto::generate_identity();
  auth::sender_keys forger(mallory, session_id{0x5555}, {});
  const auto forged =
      sealed(control(wire::msg_type::announce, sample_announce(), session_id{0x5555}),
             [&](auto b, auto n) { return forger.seal_control(b, n); });
  REQUIRE(x.receiver.open(forged, t0, x.out) == errc::unauthenticated);
  REQUIRE(x.receiver.stats().bad_signature == 1);

  // One byte changed in the manifest: its signature is that of a root verified above, to
  // which its path no longer leads (auth_announce_test.cpp has the rest of announce trees).
  auto altered = a;
  altered[20] ^= std::byte{1};
  REQUIRE(x.receiver.open(altered, t0, x.out) == errc::unauthenticated);
  REQUIRE(x.receiver.stats().bad_path == 1);
  REQUIRE(x.receiver.stats().bad_signature == 1);

  // Version 1 while keys are configured.
  const auto plain = control(wire::msg_type::announce, sample_announce());
  REQUIRE(x.receiver.open(plain, t0, x.out) == errc::unauthenticated);
  REQUIRE(x.receiver.stats().unauthenticated == 1);

  // Without trusted keys version 1 is taken as it is.
  auth::receiver_keys open_site(auth::receiver_auth_options{{}, crypto::generate_identity()});
  REQUIRE_FALSE(open_site.open(plain, t0, x.out));
  REQUIRE(x.out.size() == plain.size());
}

TEST_CASE("the whole exchange gives the site the session key; data and markers verify under it",
          "[unit][auth]") {
  exchange x;
  // Before the register_reply, data cannot be checked and is refused.
  REQUIRE_FALSE(x.announce());
  auto early = data_datagram(1, 0, 0);
  early.resize(x.sender.seal_data(early, early.size() - auth::data_trailer_bytes));
  REQUIRE(x.receiver.open(early, t0, x.out) == errc::unauthenticated);
  REQUIRE(x.receiver.stats().no_key == 1);

  x.run();
  REQUIRE(x.sender.site_key("site-a") == x.site_id.public_key);
  REQUIRE_FALSE(x.receiver.open(early, t0, x.out));
  REQUIRE(x.out.size() == early.size() - 16);
  wire::data_header dh;
  std::span<const std::byte> payload;
  REQUIRE_FALSE(wire::parse_data(x.out, dh, payload));
  REQUIRE(payload.size() == 100);

  for (std::size_t at : {std::size_t{9}, std::size_t{25}, early.size() - 1}) {
    auto bad = early;
    bad[at] ^= std::byte{0x80};
    REQUIRE(x.receiver.open(bad, t0, x.out) == errc::unauthenticated);
  }
  REQUIRE(x.receiver.stats().bad_tag == 3);

  wire::marker m;
  m.set_pass(1);
  m.set_seq(5);
  const auto mk = sealed(control(wire::msg_type::marker, m),
                         [&](auto b, auto n) { return x.sender.seal_control(b, n); });
  REQUIRE_FALSE(x.receiver.open(mk, t0, x.out));
  auto mk_bad = mk;
  mk_bad[10] ^= std::byte{1};
  REQUIRE(x.receiver.open(mk_bad, t0, x.out) == errc::unauthenticated);

  // Digest lists and session ends are signed.
  wire::session_end e;
  e.set_detail("done");
  const auto end = sealed(control(wire::msg_type::session_end, e),
                          [&](auto b, auto n) { return x.sender.seal_control(b, n); });
  REQUIRE_FALSE(x.receiver.open(end, t0, x.out));
  auto end_bad = end;
  end_bad[end_bad.size() - 70] ^= std::byte{1};
  REQUIRE(x.receiver.open(end_bad, t0, x.out) == errc::unauthenticated);
}

TEST_CASE("NAK and COMPLETE speak only for the site that registered", "[unit][auth]") {
  exchange x;
  x.run();
  wire::nak n;
  n.set_receiver_id("site-a");
  n.set_pass(1);
  const auto nak = sealed(control(wire::msg_type::nak, n),
                          [&](auto b, auto l) { return x.receiver.seal(b, l); });
  REQUIRE_FALSE(x.sender.open(nak, x.out));
  REQUIRE(x.out.size() == nak.size() - 32);

  // A plain NAK in the site's name.
  REQUIRE(x.sender.open(control(wire::msg_type::nak, n), x.out) == errc::unauthenticated);
  // A NAK sealed by another host with its own key, for a site it never registered as.
  auth::receiver_keys mallory(auth::receiver_auth_options{{}, crypto::generate_identity()});
  const auto a = sealed(control(wire::msg_type::announce, sample_announce()),
                        [&](auto b, auto l) { return x.sender.seal_control(b, l); });
  REQUIRE_FALSE(mallory.open(a, t0, x.out));
  const auto forged =
      sealed(control(wire::msg_type::nak, n), [&](auto b, auto l) { return mallory.seal(b, l); });
  REQUIRE(x.sender.open(forged, x.out) == errc::unauthenticated);
  REQUIRE(x.sender.stats().bad_tag == 1);
  // ... nor can it re-register as site-a with its key: the first key keeps the id.
  wire::register_request r;
  r.set_receiver_id("site-a");
  const auto reg = sealed(control(wire::msg_type::register_request, r),
                          [&](auto b, auto l) { return mallory.seal(b, l); });
  REQUIRE(x.sender.open(reg, x.out) == errc::unauthenticated);
  REQUIRE(x.sender.stats().untrusted_site == 1);
  // ... and a NAK for an id that never registered has no key.
  n.set_receiver_id("site-b");
  const auto other = sealed(control(wire::msg_type::nak, n),
                            [&](auto b, auto l) { return x.receiver.seal(b, l); });
  REQUIRE(x.sender.open(other, x.out) == errc::unauthenticated);
  REQUIRE(x.sender.stats().no_key == 1);
}

TEST_CASE("pinned site keys: only the pinned key registers its id", "[unit][auth]") {
  const auto site_a = crypto::generate_identity();
  std::map<std::string, crypto::key32, std::less<>> pins{{"site-a", site_a.public_key}};
  exchange x(pins);  // the exchange's site key is not the pinned one
  REQUIRE_FALSE(x.announce());
  REQUIRE(x.sender.open(x.register_request(), x.out) == errc::unauthenticated);
  REQUIRE(x.sender.stats().untrusted_site == 1);
  REQUIRE(x.reply() == errc::unauthenticated);  // no pairwise key, nothing to seal

  auth::receiver_keys real(auth::receiver_auth_options{{x.sender_id.public_key}, site_a});
  const auto a = sealed(control(wire::msg_type::announce, sample_announce()),
                        [&](auto b, auto l) { return x.sender.seal_control(b, l); });
  REQUIRE_FALSE(real.open(a, t0, x.out));
  wire::register_request r;
  r.set_receiver_id("site-a");
  REQUIRE_FALSE(x.sender.open(sealed(control(wire::msg_type::register_request, r),
                                     [&](auto b, auto l) { return real.seal(b, l); }),
                              x.out));
}

TEST_CASE("a session's keys survive a restart through export and import", "[unit][auth]") {
  exchange x;
  x.run();
  const auto blob = x.receiver.export_session(sid);
  REQUIRE(blob);
  auth::receiver_keys restarted(auth::receiver_auth_options{{x.sender_id.public_key}, x.site_id});
  REQUIRE_FALSE(restarted.import_session(sid, "short"));
  REQUIRE(restarted.import_session(sid, *blob));
  auto d = data_datagram(9, 1, 2);
  d.resize(x.sender.seal_data(d, d.size() - auth::data_trailer_bytes));
  REQUIRE_FALSE(restarted.open(d, t0, x.out));
  wire::nak n;
  n.set_receiver_id("site-a");
  const auto nak =
      sealed(control(wire::msg_type::nak, n), [&](auto b, auto l) { return restarted.seal(b, l); });
  REQUIRE_FALSE(x.sender.open(nak, x.out));
}

TEST_CASE("signature checks are budgeted per second; repeats of a verified announce are free",
          "[unit][auth]") {
  exchange x;  // budget: 100 per second
  const auto a = sealed(control(wire::msg_type::announce, sample_announce()),
                        [&](auto b, auto n) { return x.sender.seal_control(b, n); });
  REQUIRE_FALSE(x.receiver.open(a, t0, x.out));
  const auto mallory = crypto::generate_identity();
  for (std::uint32_t i = 0; i < 150; ++i) {
    auth::sender_keys forger(mallory, session_id{i + 1}, {});
    const auto f = sealed(control(wire::msg_type::announce, sample_announce(), session_id{i + 1}),
                          [&](auto b, auto n) { return forger.seal_control(b, n); });
    REQUIRE(x.receiver.open(f, t0 + 1ms, x.out) == errc::unauthenticated);
  }
  REQUIRE(x.receiver.stats().bad_signature + x.receiver.stats().verify_budget == 150);
  REQUIRE(x.receiver.stats().verify_budget > 0);
  // The real sender's announce repeats: known, so no signature check is needed.
  REQUIRE_FALSE(x.receiver.open(a, t0 + 2ms, x.out));
  // A second later the budget is back.
  auth::sender_keys other(x.sender_id, session_id{0x99}, {});
  const auto b = sealed(control(wire::msg_type::announce, sample_announce(), session_id{0x99}),
                        [&](auto bb, auto n) { return other.seal_control(bb, n); });
  REQUIRE_FALSE(x.receiver.open(b, t0 + 1100ms, x.out));
}

// --- encrypted sessions (mcdist-send --encrypt) ---------------------------------------------

namespace {

/// An encrypted session between one sender and one site, driven by hand.
struct encrypted_exchange {
  crypto::identity sender_id = crypto::generate_identity();
  crypto::identity site_id = crypto::generate_identity();
  auth::sender_keys sender;
  auth::receiver_keys receiver;
  std::span<const std::byte> out;

  encrypted_exchange()
      : sender(sender_id, sid, {{"site-a", site_id.public_key}}, true),
        receiver(auth::receiver_auth_options{{sender_id.public_key}, site_id, 256, 100, "site-a"}) {
  }

  std::vector<std::byte> announce_datagram() {
    return sealed(control(wire::msg_type::announce, sample_announce()),
                  [&](auto b, auto n) { return sender.seal_control(b, n); });
  }
  /// The key request the site sends after a sealed announce, and the sender's key reply.
  void key_exchange(time_point now) {
    REQUIRE_FALSE(receiver.open(announce_datagram(), now, out));
    REQUIRE(out.empty());  // consumed: no key yet
    std::vector<std::byte> buf(wire::control_budget + auth::max_trailer_bytes);
    const std::size_t n = receiver.take_key_request(buf);
    REQUIRE(n > 0);
    REQUIRE_FALSE(sender.open(std::span<const std::byte>(buf.data(), n), out));
    REQUIRE(out.empty());  // a key request never reaches the sender's core
    std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);
    const std::size_t r = sender.take_key_reply(reply);
    REQUIRE(r > 0);
    REQUIRE_FALSE(receiver.open(std::span<const std::byte>(reply.data(), r), now, out));
    REQUIRE(out.empty());  // a key_only reply never reaches the site's core
    REQUIRE(receiver.has_session_key(sid));
  }
};

bool contains(std::span<const std::byte> hay, std::string_view needle) {
  const std::string_view h(reinterpret_cast<const char*>(hay.data()), hay.size());
  return h.find(needle) != std::string_view::npos;
}

}  // namespace

TEST_CASE("encrypted session: sealed announce, key request and reply, then the manifest opens",
          "[unit][auth][encrypt]") {
  encrypted_exchange x;
  const auto ann = x.announce_datagram();
  REQUIRE_FALSE(contains(ann, "obs/x.bufr"));  // the path is not in the datagram
  REQUIRE(ann.size() <= wire::header_size + sample_announce().ByteSizeLong() +
                            auth::sealed_body_overhead + auth::announce_trailer_fixed_bytes);
  x.key_exchange(t0);
  REQUIRE(x.receiver.encrypted(sid));
  // With the key, the sealed announce opens to the sender core's announce.
  REQUIRE_FALSE(x.receiver.open(ann, t0, x.out));
  wire::announce a;
  REQUIRE_FALSE(wire::parse_control(x.out, a));
  REQUIRE(a.files_size() == 1);
  REQUIRE(a.files(0).path() == "obs/x.bufr");
  REQUIRE(a.params().block_size() == 1400);
  // A sealed body altered anywhere fails its signature, and with a re-made signature (a site
  // can't make one, but the tag is checked too) it would fail the AEAD.
  auto bad = ann;
  bad[20] ^= std::byte{1};
  REQUIRE(x.receiver.open(bad, t0, x.out) == errc::unauthenticated);
}

TEST_CASE("encrypted session: key requests are rate-limited and refused for unpinned sites",
          "[unit][auth][encrypt]") {
  encrypted_exchange x;
  std::vector<std::byte> buf(wire::control_budget + auth::max_trailer_bytes);
  REQUIRE_FALSE(x.receiver.open(x.announce_datagram(), t0, x.out));
  REQUIRE(x.receiver.take_key_request(buf) > 0);
  REQUIRE_FALSE(x.receiver.open(x.announce_datagram(), t0 + 10ms, x.out));
  REQUIRE(x.receiver.take_key_request(buf) == 0);  // within key_request_interval
  REQUIRE_FALSE(x.receiver.open(x.announce_datagram(), t0 + auth::key_request_interval, x.out));
  REQUIRE(x.receiver.take_key_request(buf) > 0);

  // Another site, not pinned: its key request is refused, it gets no reply.
  const auto other = crypto::generate_identity();
  auth::receiver_keys intruder(
      auth::receiver_auth_options{{x.sender_id.public_key}, other, 256, 100, "site-z"});
  REQUIRE_FALSE(intruder.open(x.announce_datagram(), t0, x.out));
  const std::size_t n = intruder.take_key_request(buf);
  REQUIRE(n > 0);
  REQUIRE(x.sender.open(std::span<const std::byte>(buf.data(), n), x.out) == errc::unauthenticated);
  REQUIRE(x.sender.stats().untrusted_site == 1);
  std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);
  REQUIRE(x.sender.take_key_reply(reply) == 0);
  // Without the key the intruder opens no data.
  auto d = data_datagram(1, 0, 0);
  d.resize(x.sender.seal_data(d, d.size() - auth::data_trailer_bytes));
  REQUIRE(intruder.open(d, t0, x.out) == errc::unauthenticated);
}

TEST_CASE("encrypted session: data payloads are encrypted in place and open byte-identical",
          "[unit][auth][encrypt]") {
  encrypted_exchange x;
  x.key_exchange(t0);
  auto plain = data_datagram(7, 2, 3);
  const std::string secret = "SECRETSECRETSECRET";
  std::memcpy(plain.data() + wire::data_header_size, secret.data(), secret.size());
  auto d = plain;
  d.resize(x.sender.seal_data(d, d.size() - auth::data_trailer_bytes));
  REQUIRE(d.size() == plain.size());  // the same size as a signed block
  REQUIRE_FALSE(contains(d, secret));
  REQUIRE_FALSE(x.receiver.open(d, t0, x.out));
  REQUIRE(x.out.size() == plain.size() - auth::data_trailer_bytes);
  REQUIRE(std::equal(x.out.begin() + wire::data_header_size, x.out.end(),
                     plain.begin() + wire::data_header_size));
  // Header (associated data), payload and tag are all covered.
  for (std::size_t at : {std::size_t{12}, std::size_t{30}, d.size() - 1}) {
    auto bad = d;
    bad[at] ^= std::byte{0x40};
    REQUIRE(x.receiver.open(bad, t0, x.out) == errc::unauthenticated);
  }
}

TEST_CASE("encrypted session: digest lists are sealed; FALLBACK is authenticated per site",
          "[unit][auth][encrypt]") {
  encrypted_exchange x;
  x.key_exchange(t0);
  wire::digest_list dl;
  auto* h = dl.add_digests();
  h->set_file(0);
  h->set_sha256(std::string(32, 'Q'));
  const auto d = sealed(control(wire::msg_type::digest_list, dl),
                        [&](auto b, auto n) { return x.sender.seal_control(b, n); });
  REQUIRE_FALSE(contains(d, std::string(32, 'Q')));
  REQUIRE_FALSE(x.receiver.open(d, t0, x.out));
  wire::digest_list got;
  REQUIRE_FALSE(wire::parse_control(x.out, got));
  REQUIRE(got.digests_size() == 1);
  REQUIRE(got.digests(0).sha256() == std::string(32, 'Q'));
  // A digest list of an encrypted session that is not sealed is refused even with a good
  // signature (the same sender key, sealing nothing): never taken in clear.
  auth::sender_keys clear_sender(x.sender_id, sid, {});
  const auto clear = sealed(control(wire::msg_type::digest_list, dl),
                            [&](auto b, auto n) { return clear_sender.seal_control(b, n); });
  const auto before = x.receiver.stats().unauthenticated;
  REQUIRE(x.receiver.open(clear, t0, x.out) == errc::unauthenticated);
  REQUIRE(x.receiver.stats().unauthenticated == before + 1);

  // FALLBACK carries no content (its connections seal their frames, record_seal.hpp): it is
  // authenticated under the site's pairwise key as in a signed session, and a tampered one is
  // refused.
  wire::fallback f;
  f.set_receiver_id("site-a");
  f.set_port(1234);
  const auto fb = sealed(control(wire::msg_type::fallback, f),
                         [&](auto b, auto n) { return x.sender.seal_control(b, n); });
  REQUIRE_FALSE(fb.empty());
  REQUIRE_FALSE(x.receiver.open(fb, t0, x.out));
  wire::fallback got_fb;
  REQUIRE_FALSE(wire::parse_control(x.out, got_fb));
  REQUIRE(got_fb.port() == 1234);
  auto bad_fb = fb;
  bad_fb[bad_fb.size() - 1] ^= std::byte{0x01};
  REQUIRE(x.receiver.open(bad_fb, t0, x.out) != std::error_code{});
}

TEST_CASE("encrypted session: the saved keys keep the session encrypted after a restart",
          "[unit][auth][encrypt]") {
  encrypted_exchange x;
  x.key_exchange(t0);
  const auto blob = x.receiver.export_session(sid);
  REQUIRE(blob);
  auth::receiver_keys restarted(
      auth::receiver_auth_options{{x.sender_id.public_key}, x.site_id, 256, 100, "site-a"});
  REQUIRE(restarted.import_session(sid, *blob));
  REQUIRE(restarted.encrypted(sid));
  auto d = data_datagram(9, 0, 1);
  d.resize(x.sender.seal_data(d, d.size() - auth::data_trailer_bytes));
  REQUIRE_FALSE(restarted.open(d, t0, x.out));
}

TEST_CASE(
    "copied keys are independent snapshots: a copy opens what the original opens, and "
    "forgetting in one leaves the other",
    "[unit][auth][encrypt]") {
  encrypted_exchange x;
  x.key_exchange(t0);
  auth::receiver_keys site_copy = x.receiver;
  auth::sender_keys sender_copy = x.sender;

  // Both senders seal the same block the same way (same keys, nonce from the header).
  auto a = data_datagram(1, 0, 5);
  auto b = a;
  a.resize(x.sender.seal_data(a, a.size() - auth::data_trailer_bytes));
  b.resize(sender_copy.seal_data(b, b.size() - auth::data_trailer_bytes));
  REQUIRE(a == b);

  site_copy.forget(sid);
  REQUIRE_FALSE(site_copy.has_session_key(sid));
  REQUIRE(x.receiver.has_session_key(sid));
  REQUIRE_FALSE(x.receiver.open(a, t0, x.out));                    // the original still opens it
  REQUIRE(site_copy.open(a, t0, x.out) == errc::unauthenticated);  // the copy forgot
}

// --- the session key before registration (signed and encrypted sessions) --------------------

TEST_CASE(
    "signed session: the site asks for the key at the first announce and checks blocks "
    "before it registers; the answer never reaches its core",
    "[unit][auth]") {
  crypto::identity sender_id = crypto::generate_identity();
  crypto::identity site_id = crypto::generate_identity();
  auth::sender_keys sender(sender_id, sid, {{"site-a", site_id.public_key}});
  auth::receiver_keys site(
      auth::receiver_auth_options{{sender_id.public_key}, site_id, 256, 100, "site-a"});
  std::span<const std::byte> out;
  std::vector<std::byte> buf(wire::control_budget + auth::max_trailer_bytes);

  const auto ann = sealed(control(wire::msg_type::announce, sample_announce()),
                          [&](auto b, auto n) { return sender.seal_control(b, n); });
  REQUIRE_FALSE(site.open(ann, t0, out));
  REQUIRE_FALSE(out.empty());  // a signed announce opens in clear, for the core
  REQUIRE(site.awaiting_key(sid));
  const std::size_t rq = site.take_key_request(buf);
  REQUIRE(rq > 0);
  REQUIRE(site.take_key_request(buf) == 0);  // one per announce burst
  REQUIRE_FALSE(sender.open(std::span<const std::byte>(buf.data(), rq), out));
  REQUIRE(out.empty());  // consumed by the sender's layer, never its core
  REQUIRE(sender.key_reply_to() == "site-a");
  std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);
  const std::size_t rp = sender.take_key_reply(reply);
  REQUIRE(rp > 0);
  REQUIRE(sender.key_reply_to().empty());
  REQUIRE_FALSE(site.open(std::span<const std::byte>(reply.data(), rp), t0, out));
  REQUIRE(out.empty());  // a key_only reply is not the answer to the core's REGISTER
  REQUIRE(site.has_session_key(sid));
  REQUIRE_FALSE(site.awaiting_key(sid));

  // Blocks verify now, before any REGISTER; an altered one does not.
  auto d = data_datagram(1, 0, 0);
  d.resize(sender.seal_data(d, d.size() - auth::data_trailer_bytes));
  REQUIRE_FALSE(site.open(d, t0, out));
  d[30] ^= std::byte{1};
  REQUIRE(site.open(d, t0, out) == errc::unauthenticated);

  // The REGISTER that follows is answered as before, and that reply reaches the core.
  wire::register_request r;
  r.set_receiver_id("site-a");
  const auto reg = sealed(control(wire::msg_type::register_request, r),
                          [&](auto b, auto n) { return site.seal(b, n); });
  REQUIRE_FALSE(sender.open(reg, out));
  REQUIRE_FALSE(out.empty());
  wire::register_reply rr;
  rr.set_receiver_id("site-a");
  rr.set_accepted(true);
  const auto full = sealed(control(wire::msg_type::register_reply, rr),
                           [&](auto b, auto n) { return sender.seal_control(b, n); });
  REQUIRE_FALSE(site.open(full, t0, out));
  REQUIRE_FALSE(out.empty());
}

TEST_CASE("signed session: a key request is checked like a REGISTER (pinned key, HMAC)",
          "[unit][auth]") {
  crypto::identity sender_id = crypto::generate_identity();
  crypto::identity site_id = crypto::generate_identity();
  crypto::identity other_id = crypto::generate_identity();
  auth::sender_keys sender(sender_id, sid, {{"site-a", site_id.public_key}});
  // A site with another key than the pinned one, asking in site-a's name.
  auth::receiver_keys intruder(
      auth::receiver_auth_options{{sender_id.public_key}, other_id, 256, 100, "site-a"});
  std::span<const std::byte> out;
  std::vector<std::byte> buf(wire::control_budget + auth::max_trailer_bytes);
  const auto ann = sealed(control(wire::msg_type::announce, sample_announce()),
                          [&](auto b, auto n) { return sender.seal_control(b, n); });
  REQUIRE_FALSE(intruder.open(ann, t0, out));
  const std::size_t rq = intruder.take_key_request(buf);
  REQUIRE(rq > 0);
  REQUIRE(sender.open(std::span<const std::byte>(buf.data(), rq), out) == errc::unauthenticated);
  REQUIRE(sender.stats().untrusted_site == 1);
  std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);
  REQUIRE(sender.take_key_reply(reply) == 0);
  // The pinned site's request with a byte altered fails its HMAC.
  auth::receiver_keys site(
      auth::receiver_auth_options{{sender_id.public_key}, site_id, 256, 100, "site-a"});
  REQUIRE_FALSE(site.open(ann, t0, out));
  const std::size_t n = site.take_key_request(buf);
  REQUIRE(n > 0);
  buf[n - 40] ^= std::byte{1};
  REQUIRE(sender.open(std::span<const std::byte>(buf.data(), n), out) == errc::unauthenticated);
  REQUIRE(sender.take_key_reply(reply) == 0);
}

TEST_CASE(
    "encrypted session: sealed announces verified before the key are held and open once "
    "it arrives, with their source and arrival time",
    "[unit][auth][encrypt]") {
  encrypted_exchange x;
  endpoint hub;
  hub.addr[0] = 127;
  hub.addr[3] = 1;
  hub.port = 4711;
  std::vector<std::vector<std::byte>> cycle;
  for (int i = 0; i < 3; ++i) cycle.push_back(x.announce_datagram());
  for (int i = 0; i < 3; ++i) {
    REQUIRE_FALSE(x.receiver.open(cycle[i], t0 + std::chrono::milliseconds(i), x.out, hub));
    REQUIRE(x.out.empty());
  }
  // A repeat of a held announce (same bytes) is not held twice.
  REQUIRE_FALSE(x.receiver.open(cycle[0], t0 + 5ms, x.out, hub));
  REQUIRE(x.receiver.take_held().empty());  // no key yet: nothing to open
  REQUIRE(x.receiver.awaiting_key(sid));

  std::vector<std::byte> buf(wire::control_budget + auth::max_trailer_bytes);
  const std::size_t rq = x.receiver.take_key_request(buf);
  REQUIRE(rq > 0);
  REQUIRE_FALSE(x.sender.open(std::span<const std::byte>(buf.data(), rq), x.out));
  std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);
  const std::size_t rp = x.sender.take_key_reply(reply);
  REQUIRE_FALSE(x.receiver.open(std::span<const std::byte>(reply.data(), rp), t0 + 10ms, x.out));

  const auto held = x.receiver.take_held();
  REQUIRE(held.size() == 3);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(held[i].datagram == cycle[i]);
    REQUIRE(held[i].from == hub);
    REQUIRE(held[i].at == t0 + std::chrono::milliseconds(i));
    const auto bad_sig = x.receiver.stats().bad_signature;
    REQUIRE_FALSE(x.receiver.open(held[i].datagram, held[i].at, x.out, held[i].from));
    REQUIRE(x.receiver.stats().bad_signature == bad_sig);
    wire::announce a;
    REQUIRE_FALSE(wire::parse_control(x.out, a));
    REQUIRE(a.files(0).path() == "obs/x.bufr");
  }
  REQUIRE(x.receiver.take_held().empty());  // taken once
}

TEST_CASE("encrypted session: held announces are bounded in bytes and freed with the session",
          "[unit][auth][encrypt][budget]") {
  encrypted_exchange x;
  auth::sender_keys second(x.sender_id, session_id{0x55}, {{"site-a", x.site_id.public_key}}, true);
  std::vector<std::byte> buf(wire::control_budget + auth::max_trailer_bytes);
  std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);
  wire::announce chunk = sample_announce();  // about 1.2 kB, as a real manifest chunk
  for (int i = 0; i < 16; ++i) {
    auto* f = chunk.add_files();
    f->set_path("obs/" + std::string(60, static_cast<char>('a' + i)));
    f->set_size(1000);
  }
  auto announce = [&](auth::sender_keys& from, session_id s) {
    return sealed(control(wire::msg_type::announce, chunk, s),
                  [&](auto b, auto n) { return from.seal_control(b, n); });
  };
  auto key_exchange = [&](auth::sender_keys& from, time_point now) {
    const std::size_t rq = x.receiver.take_key_request(buf);
    REQUIRE(rq > 0);
    REQUIRE_FALSE(from.open(std::span<const std::byte>(buf.data(), rq), x.out));
    const std::size_t rp = from.take_key_reply(reply);
    REQUIRE(rp > 0);
    REQUIRE_FALSE(x.receiver.open(std::span<const std::byte>(reply.data(), rp), now, x.out));
  };
  // More than max_held_announce_bytes of verified sealed announces, before any key; the
  // fixture allows 100 signature checks per second, so they are spread over seconds.
  const std::size_t fits = auth::max_held_announce_bytes / announce(x.sender, sid).size();
  time_point now = t0;
  for (std::size_t i = 0; i < fits + 50; ++i, now += 11ms) {
    REQUIRE_FALSE(x.receiver.open(announce(x.sender, sid), now, x.out));
  }
  // A second session's announces find the bound reached: none is held.
  for (int i = 0; i < 5; ++i, now += 11ms)
    REQUIRE_FALSE(x.receiver.open(announce(second, session_id{0x55}), now, x.out));
  key_exchange(second, now);
  REQUIRE(x.receiver.take_held().empty());

  // Forgetting the first session frees its bytes: a third session holds what it gets.
  x.receiver.forget(sid);
  REQUIRE_FALSE(x.receiver.awaiting_key(sid));
  auth::sender_keys third(x.sender_id, session_id{0x66}, {{"site-a", x.site_id.public_key}}, true);
  for (int i = 0; i < 5; ++i, now += 11ms)
    REQUIRE_FALSE(x.receiver.open(announce(third, session_id{0x66}), now, x.out));
  key_exchange(third, now);
  REQUIRE(x.receiver.take_held().size() == 5);
}

TEST_CASE(
    "an announce verified within announce_repeat_interval makes the next one a repeat that "
    "needs no check; a forged one does not count",
    "[unit][auth]") {
  exchange x;
  REQUIRE_FALSE(x.receiver.repeat_verified_recently(sid, t0));  // unknown session
  REQUIRE_FALSE(x.announce());                                  // verified at t0
  REQUIRE(x.receiver.repeat_verified_recently(sid, t0 + auth::announce_repeat_interval / 2));
  REQUIRE_FALSE(x.receiver.repeat_verified_recently(sid, t0 + auth::announce_repeat_interval));
  // A forged announce of the same session (another key) fails and refreshes nothing.
  const auto mallory = crypto::generate_identity();
  auth::sender_keys forger(mallory, sid, {});
  const auto f = sealed(control(wire::msg_type::announce, sample_announce()),
                        [&](auto b, auto n) { return forger.seal_control(b, n); });
  const time_point later = t0 + 2 * auth::announce_repeat_interval;
  REQUIRE(x.receiver.open(f, later, x.out) == errc::unauthenticated);
  REQUIRE_FALSE(x.receiver.repeat_verified_recently(sid, later));
}
