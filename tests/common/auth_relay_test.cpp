// Relays of signed two-way sessions (common/auth.hpp "Relays of signed two-way sessions"): the
// hub delegates a session to a pinned relay's key, a site behind the relay binds that key by the
// relay_hello and then talks to the relay under it, while announces, digest lists and ENDs stay
// the hub's.
#include "common/auth.hpp"

#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <vector>

using namespace mcdist;
using namespace std::chrono_literals;

namespace {

const session_id sid{0x0badcafe};
const time_point t0{std::chrono::seconds(100)};
const endpoint relay_addr = *parse_endpoint("10.0.0.2:4000");
const endpoint hub_addr = *parse_endpoint("10.0.0.1:4000");

template <class Msg>
std::vector<std::byte> control(wire::msg_type type, const Msg& msg) {
  std::vector<std::byte> out(wire::header_size + msg.ByteSizeLong() + auth::max_trailer_bytes);
  const std::size_t n = wire::encode_control(out, type, sid, msg);
  REQUIRE(n > 0);
  out.resize(n);
  return out;
}

template <class F>
std::vector<std::byte> sealed(std::vector<std::byte> d, F&& seal) {
  const std::size_t len = d.size();
  d.resize(len + auth::max_trailer_bytes);
  d.resize(seal(std::span<std::byte>(d), len));
  return d;
}

std::vector<std::byte> block(auth::sender_keys& k, std::uint32_t seq) {
  std::vector<std::byte> d(wire::data_header_size + 64 + auth::data_trailer_bytes);
  wire::write_data_header(d, {sid, seq, file_index{0}, block_index{seq}});
  d.resize(k.seal_data(d, d.size() - auth::data_trailer_bytes));
  return d;
}

wire::announce sample_announce() {
  wire::announce a;
  a.mutable_params()->set_block_size(1400);
  a.mutable_params()->set_file_count(1);
  a.mutable_params()->set_manifest_chunks(1);
  auto* f = a.add_files();
  f->set_path("nwp/x.grib2");
  f->set_size(100);
  return a;
}

/// A hub that pins and lists relay "ra", the relay's keyring upstream, and one site behind it.
struct relay_chain {
  crypto::identity hub_id = crypto::generate_identity();
  crypto::identity relay_id = crypto::generate_identity();
  crypto::identity site_id = crypto::generate_identity();
  crypto::identity relay2_id = crypto::generate_identity();  ///< "rb", a relay behind ra
  auth::sender_keys hub;
  auth::receiver_keys relay{
      auth::receiver_auth_options{{hub_id.public_key}, relay_id, 256, 100, "ra", true}};
  auth::receiver_keys site{
      auth::receiver_auth_options{{hub_id.public_key}, site_id, 256, 100, "s1"}};
  std::vector<std::byte> announce;
  std::span<const std::byte> out;
  std::vector<std::byte> buf =
      std::vector<std::byte>(wire::control_budget + auth::max_trailer_bytes);

  /// @param pin  the hub pins the relay's key (else it pins no site)
  explicit relay_chain(bool pin = true)
      : hub(hub_id, sid,
            pin ? std::map<std::string, crypto::key32, std::less<>>{{"ra", relay_id.public_key},
                                                                    {"rb", relay2_id.public_key}}
                : std::map<std::string, crypto::key32, std::less<>>{}) {}

  /// The relay hears the announce and asks the hub for the key; the hub answers.
  std::error_code relay_keyed() {
    announce = sealed(control(wire::msg_type::announce, sample_announce()),
                      [&](auto b, auto n) { return hub.seal_control(b, n); });
    REQUIRE_FALSE(relay.open(announce, t0, out, hub_addr));
    const std::size_t rq = relay.take_key_request(buf);
    REQUIRE(rq > 0);
    wire::register_request req;
    REQUIRE_FALSE(wire::parse_control(std::span<const std::byte>(buf.data(), rq - 64), req));
    REQUIRE(req.relay_public().size() == crypto::key_bytes);
    REQUIRE_FALSE(hub.open(std::span<const std::byte>(buf.data(), rq), out));
    std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);
    const std::size_t n = hub.take_key_reply(reply);
    REQUIRE(n > 0);
    return relay.open(std::span<const std::byte>(reply.data(), n), t0, out);
  }
};

/// The relay of `c` delegated by its hub: the delegation, the relay's keys for its sites, its
/// relay_hello.
struct delegated {
  auth::relay_delegation delegation;
  auth::sender_keys keys;
  std::vector<std::byte> hello = std::vector<std::byte>(wire::control_budget);

  explicit delegated(relay_chain& c) : delegation(make(c)), keys(sid, delegation.key) {
    hello.resize(auth::encode_relay_hello(hello, sid, delegation));
    REQUIRE_FALSE(hello.empty());
  }
  static auth::relay_delegation make(relay_chain& c) {
    c.hub.set_relays({"ra"});
    REQUIRE_FALSE(c.relay_keyed());
    REQUIRE(c.relay.delegation(sid));
    return *c.relay.delegation(sid);
  }
};

}  // namespace

TEST_CASE("the hub delegates a session only to a listed relay whose key it pins", "[unit][auth]") {
  SECTION("listed and pinned: the relay holds a delegation that verifies under the hub's key") {
    relay_chain c;
    c.hub.set_relays({"ra"});
    REQUIRE_FALSE(c.relay_keyed());
    REQUIRE(c.relay.has_session_key(sid));
    const auto d = c.relay.delegation(sid);
    REQUIRE(d);
    REQUIRE(d->relay_id == "ra");
    REQUIRE(
        auth::verify_delegation(c.hub_id.public_key, sid, "ra", d->key.public_key, d->signature));
    REQUIRE(c.hub.stats().delegations == 1);
    REQUIRE(c.relay.stats().delegations == 1);
    // Bound to the session, the id and the key: none of them can be swapped.
    REQUIRE_FALSE(auth::verify_delegation(c.hub_id.public_key, session_id{sid.value + 1}, "ra",
                                          d->key.public_key, d->signature));
    REQUIRE_FALSE(
        auth::verify_delegation(c.hub_id.public_key, sid, "rb", d->key.public_key, d->signature));
    auto other = d->key.public_key;
    other[0] ^= 1;
    REQUIRE_FALSE(auth::verify_delegation(c.hub_id.public_key, sid, "ra", other, d->signature));
    REQUIRE_FALSE(
        auth::verify_delegation(c.relay_id.public_key, sid, "ra", d->key.public_key, d->signature));
  }
  SECTION("not listed: the key, no delegation, and the relay asks no more") {
    relay_chain c;
    REQUIRE_FALSE(c.relay_keyed());
    REQUIRE(c.relay.has_session_key(sid));
    REQUIRE_FALSE(c.relay.delegation(sid));
    REQUIRE(c.relay.delegation_refused(sid));
    for (int i = 1; i <= 10; ++i) {
      REQUIRE_FALSE(c.relay.open(c.announce, t0 + i * auth::key_request_interval, c.out, hub_addr));
      REQUIRE(c.relay.take_key_request(c.buf) == 0);
    }
  }
  SECTION("keyed by its REGISTER's reply first: the relay asks a few times, then stops") {
    relay_chain c;
    c.hub.set_relays({"ra"});
    c.announce = sealed(control(wire::msg_type::announce, sample_announce()),
                        [&](auto b, auto n) { return c.hub.seal_control(b, n); });
    REQUIRE_FALSE(c.relay.open(c.announce, t0, c.out, hub_addr));
    REQUIRE(c.relay.take_key_request(c.buf) > 0);  // lost on the way
    wire::register_request reg;
    reg.set_receiver_id("ra");
    const auto r = sealed(control(wire::msg_type::register_request, reg),
                          [&](auto b, auto n) { return c.relay.seal(b, n); });
    REQUIRE_FALSE(c.hub.open(r, c.out));
    wire::register_reply rr;
    rr.set_receiver_id("ra");
    rr.set_accepted(true);
    const auto reply = sealed(control(wire::msg_type::register_reply, rr),
                              [&](auto b, auto n) { return c.hub.seal_control(b, n); });
    REQUIRE_FALSE(c.relay.open(reply, t0, c.out, hub_addr));
    REQUIRE(c.relay.has_session_key(sid));
    REQUIRE_FALSE(c.relay.delegation(sid));
    REQUIRE_FALSE(c.relay.delegation_refused(sid));
    std::size_t asked = 0;
    std::vector<std::byte> last;
    for (int i = 1; i <= 10; ++i) {
      // The hub's announces repeat; each may carry a request after key_request_interval.
      REQUIRE_FALSE(c.relay.open(c.announce, t0 + i * auth::key_request_interval, c.out, hub_addr));
      if (const std::size_t n = c.relay.take_key_request(c.buf); n > 0) {
        ++asked;
        last.assign(c.buf.begin(), c.buf.begin() + static_cast<std::ptrdiff_t>(n));
      }
    }
    REQUIRE(asked == auth::max_delegation_asks);
    // The last of them answered: the delegation comes.
    REQUIRE_FALSE(c.hub.open(last, c.out));
    std::vector<std::byte> answer(wire::control_budget + auth::max_trailer_bytes);
    answer.resize(c.hub.take_key_reply(answer));
    REQUIRE_FALSE(answer.empty());
    REQUIRE_FALSE(c.relay.open(answer, t0 + 3s, c.out, hub_addr));
    REQUIRE(c.relay.delegation(sid));
  }
  SECTION("listed but the hub pins no site keys: no delegation") {
    relay_chain c(false);
    c.hub.set_relays({"ra"});
    REQUIRE_FALSE(c.relay_keyed());
    REQUIRE(c.relay.has_session_key(sid));
    REQUIRE_FALSE(c.relay.delegation(sid));
    REQUIRE(c.hub.stats().delegations == 0);
  }
}

TEST_CASE("a site behind a relay binds the relay's key by its hello and talks to the relay",
          "[unit][auth]") {
  relay_chain c;
  const delegated r(c);
  const auto& d = r.delegation;
  auth::sender_keys down = r.keys;
  const auto& hello = r.hello;

  // The site hears the hub's announce from the relay and asks it for the key under the hub's
  // announce key: the relay cannot check that.
  REQUIRE_FALSE(c.site.open(c.announce, t0, c.out, relay_addr));
  std::size_t rq = c.site.take_key_request(c.buf);
  REQUIRE(rq > 0);
  REQUIRE(down.open(std::span<const std::byte>(c.buf.data(), rq), c.out) == errc::unauthenticated);
  REQUIRE_FALSE(c.site.relay_bound(sid));

  SECTION("hellos that are not the hub's delegation from the relay are refused") {
    // From another host than the one whose announce opened the session.
    REQUIRE(c.site.open(hello, t0, c.out, hub_addr) == errc::unauthenticated);
    // Signed by another key (the relay's own identity, say).
    auth::relay_delegation forged = d;
    forged.signature = auth::sign_delegation(c.relay_id, sid, "ra", d.key.public_key);
    std::vector<std::byte> f(wire::control_budget);
    f.resize(auth::encode_relay_hello(f, sid, forged));
    REQUIRE(c.site.open(f, t0, c.out, relay_addr) == errc::unauthenticated);
    // The hub's delegation with another key in the hello.
    forged = d;
    forged.key.public_key[3] ^= 1;
    f.assign(wire::control_budget, std::byte{0});
    f.resize(auth::encode_relay_hello(f, sid, forged));
    REQUIRE(c.site.open(f, t0, c.out, relay_addr) == errc::unauthenticated);
    REQUIRE(c.site.stats().bad_signature == 2);
    REQUIRE_FALSE(c.site.relay_bound(sid));
  }

  SECTION("bound, the site gets the relay's key and checks the relay's blocks and markers") {
    REQUIRE_FALSE(c.site.open(hello, t0, c.out, relay_addr));
    REQUIRE(c.out.empty());  // taken by the keyring, nothing for the engine
    REQUIRE(c.site.relay_bound(sid));
    REQUIRE(c.site.stats().delegations == 1);
    // A repeat costs no signature check.
    const auto checks = c.site.stats().signatures;
    REQUIRE_FALSE(c.site.open(hello, t0 + 10ms, c.out, relay_addr));
    REQUIRE(c.site.stats().signatures == checks);

    // It asks again at once, now under the relay's key, and the relay answers.
    rq = c.site.take_key_request(c.buf);
    REQUIRE(rq > 0);
    REQUIRE_FALSE(down.open(std::span<const std::byte>(c.buf.data(), rq), c.out));
    REQUIRE(c.out.empty());
    REQUIRE(down.key_reply_to() == "s1");
    std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);
    const std::size_t n = down.take_key_reply(reply);
    REQUIRE(n > 0);
    REQUIRE_FALSE(c.site.open(std::span<const std::byte>(reply.data(), n), t0, c.out, relay_addr));
    REQUIRE(c.site.has_session_key(sid));

    // The relay's blocks and markers verify; the hub's blocks (another session key) do not.
    const auto b = block(down, 7);
    REQUIRE_FALSE(c.site.open(b, t0, c.out, relay_addr));
    REQUIRE(c.site.open(block(c.hub, 7), t0, c.out, relay_addr) == errc::unauthenticated);
    wire::marker m;
    m.set_pass(1);
    const auto mk = sealed(control(wire::msg_type::marker, m),
                           [&](auto p, auto len) { return down.seal_control(p, len); });
    REQUIRE_FALSE(mk.empty());
    REQUIRE_FALSE(c.site.open(mk, t0, c.out, relay_addr));

    // The site's NAK verifies at the relay.
    wire::nak k;
    k.set_receiver_id("s1");
    const auto nak = sealed(control(wire::msg_type::nak, k),
                            [&](auto p, auto len) { return c.site.seal(p, len); });
    REQUIRE_FALSE(down.open(nak, c.out));

    // What the relay cannot sign, it does not: the hub's END still opens at the site.
    wire::session_end e;
    auto end = control(wire::msg_type::session_end, e);
    const std::size_t len = end.size();
    end.resize(len + auth::max_trailer_bytes);
    REQUIRE(down.seal_control(end, len) == 0);
    const auto hub_end = sealed(control(wire::msg_type::session_end, e),
                                [&](auto p, auto l) { return c.hub.seal_control(p, l); });
    REQUIRE_FALSE(c.site.open(hub_end, t0, c.out, relay_addr));

    // The hub's repeated announce does not undo the binding.
    REQUIRE_FALSE(c.site.open(c.announce, t0 + 1s, c.out, relay_addr));
    REQUIRE(c.site.relay_bound(sid));
    REQUIRE_FALSE(c.site.open(b, t0 + 1s, c.out, relay_addr));

    // A restart keeps the binding: the saved keys carry the relay's key.
    const auto blob = c.site.export_session(sid);
    REQUIRE(blob);
    auth::receiver_keys again(
        auth::receiver_auth_options{{c.hub_id.public_key}, c.site_id, 256, 100, "s1"});
    REQUIRE(again.import_session(sid, *blob));
    REQUIRE(again.relay_bound(sid));
    REQUIRE(again.signer(sid) == c.hub_id.public_key);
    // A signer no longer trusted after the restart: the saved keys are refused.
    auth::receiver_keys distrusting(auth::receiver_auth_options{
        {crypto::generate_identity().public_key}, c.site_id, 256, 100, "s1"});
    REQUIRE_FALSE(distrusting.import_session(sid, *blob));
    REQUIRE_FALSE(again.open(b, t0, c.out, relay_addr));
    const auto nak2 =
        sealed(control(wire::msg_type::nak, k), [&](auto p, auto l) { return again.seal(p, l); });
    REQUIRE_FALSE(down.open(nak2, c.out));
  }

  SECTION("a relay that re-keys is bound again, at most once per relay_rebind_interval") {
    REQUIRE_FALSE(c.site.open(hello, t0, c.out, relay_addr));
    auth::relay_delegation next = d;
    next.key = crypto::generate_x25519();
    next.signature = auth::sign_delegation(c.hub_id, sid, "ra", next.key.public_key);
    std::vector<std::byte> h2(wire::control_budget);
    h2.resize(auth::encode_relay_hello(h2, sid, next));
    REQUIRE(c.site.open(h2, t0 + 100ms, c.out, relay_addr) == errc::unauthenticated);
    REQUIRE_FALSE(c.site.open(h2, t0 + auth::relay_rebind_interval, c.out, relay_addr));
    REQUIRE(c.site.stats().delegations == 2);
    REQUIRE_FALSE(c.site.has_session_key(sid));  // the old relay key's session key is dropped
  }
}

TEST_CASE("a relay's keys hold at most max_sites sites; a known one still registers",
          "[unit][auth]") {
  relay_chain c;
  const delegated relay(c);
  auth::sender_keys down = relay.keys;
  REQUIRE_FALSE(c.site.open(c.announce, t0, c.out, relay_addr));
  REQUIRE_FALSE(c.site.open(relay.hello, t0, c.out, relay_addr));
  // One host claiming ever new ids (an open group's ids are whatever registrants say).
  const auto request = [&](const std::string& id) {
    wire::register_request r;
    r.set_receiver_id(id);
    return sealed(control(wire::msg_type::register_request, r),
                  [&](auto b, auto n) { return c.site.seal(b, n); });
  };
  for (std::size_t i = 0; i < auth::sender_keys::max_sites; ++i) {
    REQUIRE_FALSE(down.open(request("s" + std::to_string(i)), c.out));
  }
  REQUIRE(down.open(request("one-more"), c.out) == errc::unauthenticated);
  REQUIRE(down.stats().untrusted_site == 1);
  REQUIRE_FALSE(down.open(request("s7"), c.out));
}

TEST_CASE("a relay behind a relay gets the hub's delegation through the relay in front of it",
          "[unit][auth]") {
  relay_chain c;
  const delegated ra(c);
  auth::sender_keys down = ra.keys;
  const endpoint rb_addr = *parse_endpoint("10.0.0.3:4000");
  auth::receiver_keys rb(
      auth::receiver_auth_options{{c.hub_id.public_key}, c.relay2_id, 256, 100, "rb", true});
  std::vector<std::byte> reply(wire::control_budget + auth::max_trailer_bytes);

  // rb hears the hub's announce from ra, binds ra's key by its hello and gets ra's session key.
  REQUIRE_FALSE(rb.open(c.announce, t0, c.out, relay_addr));
  REQUIRE(rb.take_key_request(c.buf) > 0);
  REQUIRE_FALSE(rb.open(ra.hello, t0, c.out, relay_addr));
  REQUIRE(rb.relay_bound(sid));
  std::size_t rq = rb.take_key_request(c.buf);
  REQUIRE(rq > 0);
  REQUIRE_FALSE(down.open(std::span<const std::byte>(c.buf.data(), rq), c.out));
  reply.resize(down.take_key_reply(reply));
  REQUIRE_FALSE(reply.empty());
  REQUIRE_FALSE(rb.open(reply, t0, c.out, relay_addr));
  REQUIRE(rb.has_session_key(sid));
  // ra's answer carries no delegation, and says nothing of the hub's.
  REQUIRE_FALSE(rb.delegation(sid));
  REQUIRE_FALSE(rb.delegation_refused(sid));

  // ra's next block asks for the delegation: a for_origin request under the hub's key, which
  // ra cannot open (it passes it upstream as it is).
  const auto b = block(down, 7);
  REQUIRE_FALSE(rb.open(b, t0 + 1s, c.out, relay_addr));
  rq = rb.take_key_request(c.buf);
  REQUIRE(rq > 0);
  const std::vector<std::byte> ask(c.buf.begin(), c.buf.begin() + static_cast<std::ptrdiff_t>(rq));
  wire::register_request req;
  REQUIRE_FALSE(wire::parse_control(std::span(ask).first(rq - 64), req));
  REQUIRE(req.for_origin());
  REQUIRE(req.key_request());
  REQUIRE(req.receiver_id() == "rb");
  REQUIRE(down.open(ask, c.out) == errc::unauthenticated);

  SECTION("the hub lists rb: rb holds a delegation of its own, under ra's session key still") {
    c.hub.set_relays({"ra", "rb"});
    REQUIRE_FALSE(c.hub.open(ask, c.out));
    REQUIRE(c.out.empty());
    REQUIRE(c.hub.key_reply_to() == "rb");
    std::vector<std::byte> answer(wire::control_budget + auth::max_trailer_bytes);
    answer.resize(c.hub.take_key_reply(answer));
    REQUIRE_FALSE(answer.empty());
    // Tampered on the way (ra passes it on unopened): refused.
    auto bad = answer;
    bad[bad.size() - 1] ^= std::byte{1};
    REQUIRE(rb.open(bad, t0 + 1s, c.out, relay_addr) == errc::unauthenticated);
    REQUIRE_FALSE(rb.delegation(sid));
    REQUIRE_FALSE(rb.open(answer, t0 + 1s, c.out, relay_addr));
    REQUIRE(c.out.empty());
    const auto d = rb.delegation(sid);
    REQUIRE(d);
    REQUIRE(d->relay_id == "rb");
    REQUIRE(
        auth::verify_delegation(c.hub_id.public_key, sid, "rb", d->key.public_key, d->signature));
    REQUIRE(d->key.public_key != ra.delegation.key.public_key);
    // The hub's session key was not taken: ra's blocks still verify, the hub's do not.
    REQUIRE_FALSE(rb.open(block(down, 8), t0 + 1s, c.out, relay_addr));
    REQUIRE(rb.open(block(c.hub, 8), t0 + 1s, c.out, relay_addr) == errc::unauthenticated);
    // No more asks once delegated.
    REQUIRE_FALSE(rb.open(block(down, 9), t0 + 2s, c.out, relay_addr));
    REQUIRE(rb.take_key_request(c.buf) == 0);

    // A site behind rb binds rb's key by rb's hello, from rb's host, against the hub's key.
    auth::receiver_keys s3(auth::receiver_auth_options{
        {c.hub_id.public_key}, crypto::generate_identity(), 256, 100, "s3"});
    std::vector<std::byte> hello(wire::control_budget);
    hello.resize(auth::encode_relay_hello(hello, sid, *d));
    REQUIRE_FALSE(s3.open(c.announce, t0, c.out, rb_addr));
    REQUIRE(s3.open(hello, t0, c.out, relay_addr) == errc::unauthenticated);  // ra's host
    REQUIRE_FALSE(s3.relay_bound(sid));
    REQUIRE_FALSE(s3.open(hello, t0, c.out, rb_addr));
    REQUIRE(s3.relay_bound(sid));
    // ra's delegation in rb's name does not bind.
    auth::relay_delegation swapped = ra.delegation;
    swapped.relay_id = "rb";
    std::vector<std::byte> f(wire::control_budget);
    f.resize(auth::encode_relay_hello(f, sid, swapped));
    auth::receiver_keys s4(auth::receiver_auth_options{
        {c.hub_id.public_key}, crypto::generate_identity(), 256, 100, "s4"});
    REQUIRE_FALSE(s4.open(c.announce, t0, c.out, rb_addr));
    REQUIRE(s4.open(f, t0, c.out, rb_addr) == errc::unauthenticated);
    REQUIRE_FALSE(s4.relay_bound(sid));
  }

  SECTION("the hub does not list rb: rb is refused and asks no more") {
    REQUIRE_FALSE(c.hub.open(ask, c.out));
    std::vector<std::byte> answer(wire::control_budget + auth::max_trailer_bytes);
    answer.resize(c.hub.take_key_reply(answer));
    REQUIRE_FALSE(answer.empty());
    REQUIRE_FALSE(rb.open(answer, t0 + 1s, c.out, relay_addr));
    REQUIRE_FALSE(rb.delegation(sid));
    REQUIRE(rb.delegation_refused(sid));
    REQUIRE(rb.has_session_key(sid));  // ra's, kept
    REQUIRE_FALSE(rb.open(block(down, 8), t0 + 2s, c.out, relay_addr));
    REQUIRE(rb.take_key_request(c.buf) == 0);
  }

  SECTION("restarted, rb asks the hub again through ra with a new key") {
    const auto blob = rb.export_session(sid);
    REQUIRE(blob);
    auth::receiver_keys again(
        auth::receiver_auth_options{{c.hub_id.public_key}, c.relay2_id, 256, 100, "rb", true});
    REQUIRE(again.import_session(sid, *blob));
    REQUIRE(again.relay_bound(sid));
    REQUIRE_FALSE(again.open(block(down, 8), t0 + 2s, c.out, relay_addr));
    rq = again.take_key_request(c.buf);
    REQUIRE(rq > 0);
    wire::register_request r2;
    REQUIRE_FALSE(wire::parse_control(std::span(c.buf).first(rq - 64), r2));
    REQUIRE(r2.for_origin());
    REQUIRE(r2.relay_public() != req.relay_public());
    c.hub.set_relays({"ra", "rb"});
    REQUIRE_FALSE(c.hub.open(std::span<const std::byte>(c.buf.data(), rq), c.out));
    std::vector<std::byte> answer(wire::control_budget + auth::max_trailer_bytes);
    answer.resize(c.hub.take_key_reply(answer));
    REQUIRE_FALSE(again.open(answer, t0 + 2s, c.out, relay_addr));
    REQUIRE(again.delegation(sid));
  }
}
