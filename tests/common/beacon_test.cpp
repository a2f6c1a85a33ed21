#include "common/beacon.hpp"

#include "common/wire.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace mcdist;

namespace {

wire::heartbeat sample_heartbeat() {
  wire::heartbeat m;
  m.set_channel("obs");
  m.set_newest_seq(42);
  m.set_sent_unix_ms(1'796'169'600'000);
  m.set_sender_name("mcdist-feed obs");
  auto* r = m.add_running();
  r->set_first(41);
  r->set_last(42);
  return m;
}

}  // namespace

TEST_CASE("a signed heartbeat opens with the hub's key only", "[unit][beacon]") {
  crypto::init();
  const auto hub = crypto::generate_identity();
  const auto other = crypto::generate_identity();
  std::vector<std::byte> buf(wire::control_budget);
  const auto n = beacon::encode_heartbeat(buf, sample_heartbeat(), &hub);
  REQUIRE(n > beacon::heartbeat_trailer_bytes);
  const auto d = std::span<const std::byte>(buf).first(n);
  wire::heartbeat got;
  std::optional<crypto::key32> signer;
  const std::vector<crypto::key32> trusted{other.public_key, hub.public_key};
  REQUIRE_FALSE(beacon::open_heartbeat(d, trusted, got, signer));
  REQUIRE(signer == hub.public_key);
  REQUIRE(got.newest_seq() == 42);
  REQUIRE(got.running_size() == 1);
  // Another hub's key, every flipped byte, a cut trailer, and an unsigned channel: refused.
  const std::vector<crypto::key32> others{other.public_key};
  REQUIRE(beacon::open_heartbeat(d, others, got, signer) == errc::unauthenticated);
  for (std::size_t i = 0; i < n; ++i) {
    auto bad = std::vector<std::byte>(d.begin(), d.end());
    bad[i] ^= std::byte{0x01};
    REQUIRE(beacon::open_heartbeat(bad, trusted, got, signer));
  }
  REQUIRE(beacon::open_heartbeat(d.first(n - 1), trusted, got, signer));
  REQUIRE(beacon::open_heartbeat(d, {}, got, signer) == errc::unauthenticated);
}

TEST_CASE("an unsigned heartbeat opens on an unsigned channel only, and is checked",
          "[unit][beacon]") {
  std::vector<std::byte> buf(wire::control_budget);
  const auto n = beacon::encode_heartbeat(buf, sample_heartbeat(), nullptr);
  const auto d = std::span<const std::byte>(buf).first(n);
  wire::heartbeat got;
  std::optional<crypto::key32> signer;
  REQUIRE_FALSE(beacon::open_heartbeat(d, {}, got, signer));
  REQUIRE_FALSE(signer);
  const std::vector<crypto::key32> some{crypto::key32{}};
  REQUIRE(beacon::open_heartbeat(d, some, got, signer) == errc::unauthenticated);
  // Running ranges beyond the newest number, a bad channel name: invalid.
  auto m = sample_heartbeat();
  m.mutable_running(0)->set_last(43);
  auto k = beacon::encode_heartbeat(buf, m, nullptr);
  REQUIRE(beacon::open_heartbeat(std::span<const std::byte>(buf).first(k), {}, got, signer) ==
          errc::invalid_field);
  m = sample_heartbeat();
  m.set_channel("bad channel");
  k = beacon::encode_heartbeat(buf, m, nullptr);
  REQUIRE(beacon::open_heartbeat(std::span<const std::byte>(buf).first(k), {}, got, signer) ==
          errc::invalid_field);
  for (std::size_t cut = 0; cut < n; ++cut) {
    (void)beacon::open_heartbeat(d.first(cut), {}, got, signer);  // never crashes
  }
}

TEST_CASE("a gap report carries and proves its site's key", "[unit][beacon]") {
  crypto::init();
  const auto site = crypto::generate_identity();
  wire::gap_report r;
  r.set_receiver_id("site-a");
  r.set_channel("obs");
  r.set_last_seq(11);
  auto* g = r.add_missing();
  g->set_first(12);
  g->set_last(19);
  std::vector<std::byte> buf(wire::control_budget + beacon::gap_report_trailer_bytes);
  const auto n = beacon::encode_gap_report(buf, r, &site);
  const auto d = std::span<const std::byte>(buf).first(n);
  wire::gap_report got;
  std::optional<crypto::key32> key;
  REQUIRE_FALSE(beacon::open_gap_report(d, true, got, key));
  REQUIRE(key == site.public_key);
  REQUIRE(got.missing(0).last() == 19);
  for (std::size_t i = 0; i < n; ++i) {
    auto bad = std::vector<std::byte>(d.begin(), d.end());
    bad[i] ^= std::byte{0x80};
    REQUIRE(beacon::open_gap_report(bad, true, got, key));
  }
  // Unsigned: only where signatures are not required.
  const auto u = beacon::encode_gap_report(buf, r, nullptr);
  const auto du = std::span<const std::byte>(buf).first(u);
  REQUIRE(beacon::open_gap_report(du, true, got, key) == errc::unauthenticated);
  REQUIRE_FALSE(beacon::open_gap_report(du, false, got, key));
  REQUIRE_FALSE(key);
}

TEST_CASE("a relay parses its sites' gap reports of either version without a signature check",
          "[unit][beacon]") {
  crypto::init();
  const auto site = crypto::generate_identity();
  wire::gap_report r;
  r.set_receiver_id("site-a");
  r.set_channel("obs");
  auto* g = r.add_missing();
  g->set_first(3);
  g->set_last(5);
  std::vector<std::byte> buf(wire::control_budget + beacon::gap_report_trailer_bytes);
  auto d = std::vector<std::byte>(
      buf.begin(),
      buf.begin() + static_cast<std::ptrdiff_t>(beacon::encode_gap_report(buf, r, &site)));
  wire::gap_report got;
  REQUIRE_FALSE(beacon::parse_gap_report(d, got));
  REQUIRE(got.missing(0).first() == 3);
  // A wrong signature changes nothing here (the relay pins no key): a hint either way.
  d[d.size() - 1] ^= std::byte{1};
  REQUIRE_FALSE(beacon::parse_gap_report(d, got));
  // Unsigned too; and the fields are checked as open_gap_report checks them.
  const auto u = beacon::encode_gap_report(buf, r, nullptr);
  REQUIRE_FALSE(beacon::parse_gap_report(std::span<const std::byte>(buf).first(u), got));
  g->set_first(9);  // a range backwards
  const auto b = beacon::encode_gap_report(buf, r, nullptr);
  REQUIRE(beacon::parse_gap_report(std::span<const std::byte>(buf).first(b), got) ==
          errc::invalid_field);
  REQUIRE(beacon::parse_gap_report(std::span<const std::byte>(buf).first(6), got) ==
          errc::truncated);
}
