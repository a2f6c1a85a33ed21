#include "receiver/io/heartbeat_intake.hpp"

#include "common/beacon.hpp"
#include "receiver/core/sequence_book.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

using ranges = std::vector<wire::seq_span>;
const std::chrono::steady_clock::time_point t0{std::chrono::hours(1)};
constexpr std::uint64_t wall0 = 1'796'169'600'000;  // the site's clock, unix ms

/// A heartbeat of channel "obs" sent at `sent_ms`, naming `newest`; signed by `hub` if given.
std::vector<std::byte> heartbeat(std::uint64_t newest, std::uint64_t sent_ms,
                                 const crypto::identity* hub = nullptr,
                                 const ranges& running = {}) {
  wire::heartbeat m;
  m.set_channel("obs");
  m.set_newest_seq(newest);
  m.set_sent_unix_ms(sent_ms);
  m.set_sender_name("mcdist-feed obs");
  for (const auto& [first, last] : running) {
    auto* r = m.add_running();
    r->set_first(first);
    r->set_last(last);
  }
  std::vector<std::byte> buf(wire::control_budget);
  buf.resize(beacon::encode_heartbeat(buf, m, hub));
  REQUIRE(!buf.empty());
  return buf;
}

channel_config channel(bool silent, std::string catch_up_url = {}) {
  channel_config ch;
  ch.name = "obs-site";
  ch.silent = silent;
  ch.catch_up_url = std::move(catch_up_url);
  return ch;
}

heartbeat_intake make_intake() { return heartbeat_intake("site-1", 1h, 5min); }

}  // namespace

TEST_CASE("a channel checks at most max_per_second heartbeats a second, each channel its own",
          "[unit][receiver][heartbeat]") {
  auto in = make_intake();
  sequence_book book;
  const auto ch = channel(false);
  for (std::uint32_t i = 0; i < heartbeat_intake::max_per_second; ++i) {
    REQUIRE(in.on_heartbeat(0, ch, heartbeat(10, wall0 + i), book, t0 + 100ms, wall0));
  }
  // The budget is spent before the datagram is looked at: even a newer one is refused.
  CHECK_FALSE(in.on_heartbeat(0, ch, heartbeat(10, wall0 + 100), book, t0 + 900ms, wall0));
  CHECK(in.stats().refused == 1);
  CHECK(in.stats().taken == heartbeat_intake::max_per_second);
  // Another channel has a budget of its own; the first one's comes back a second later.
  CHECK(in.on_heartbeat(1, ch, heartbeat(10, wall0 + 200), book, t0 + 900ms, wall0));
  CHECK(in.on_heartbeat(0, ch, heartbeat(10, wall0 + 300), book, t0 + 1100ms, wall0));
  CHECK(in.stats().taken == heartbeat_intake::max_per_second + 2);
  CHECK(in.stats().refused == 1);
}

TEST_CASE("stale, early, replayed and unopenable heartbeats change nothing",
          "[unit][receiver][heartbeat]") {
  auto in = make_intake();
  sequence_book book;
  const auto ch = channel(false);
  // Sent before max_age or beyond max_skew ahead of this clock: refused, counted.
  CHECK_FALSE(in.on_heartbeat(0, ch, heartbeat(10, wall0 - 3'600'001), book, t0, wall0));
  CHECK_FALSE(in.on_heartbeat(0, ch, heartbeat(10, wall0 + 300'001), book, t0, wall0));
  // Garbage and a signed heartbeat on an unsigned channel: refused.
  const std::vector<std::byte> junk(12, std::byte{0x5a});
  CHECK_FALSE(in.on_heartbeat(0, ch, junk, book, t0, wall0));
  crypto::init();
  const auto hub = crypto::generate_identity();
  CHECK_FALSE(in.on_heartbeat(0, ch, heartbeat(10, wall0, &hub), book, t0, wall0));
  CHECK(in.stats().refused == 4);
  CHECK(book.size() == 0);
  // The edges are taken.
  REQUIRE(in.on_heartbeat(0, ch, heartbeat(10, wall0 - 3'600'000), book, t0, wall0));
  REQUIRE(in.on_heartbeat(0, ch, heartbeat(10, wall0 + 300'000), book, t0, wall0));
  // Not newer than the last of its stream: a replay, not counted either way.
  CHECK_FALSE(in.on_heartbeat(0, ch, heartbeat(30, wall0 + 300'000), book, t0, wall0));
  CHECK_FALSE(in.on_heartbeat(0, ch, heartbeat(30, wall0), book, t0, wall0));
  CHECK(in.stats().taken == 2);
  CHECK(in.stats().refused == 4);
  CHECK(book.status().at(0).last_seen == 10);
  CHECK(in.streams() == 1);
}

TEST_CASE("a channel that may transmit answers what it misses with a gap report",
          "[unit][receiver][heartbeat]") {
  auto in = make_intake();
  sequence_book book;
  const auto ch = channel(false);
  // The first heartbeat of a channel asks for nothing before it.
  auto p = in.on_heartbeat(0, ch, heartbeat(10, wall0), book, t0, wall0);
  REQUIRE(p);
  CHECK(p->missing.empty());
  // The answer names nothing missing (the daemon sends none unless a relay's sites add some).
  REQUIRE(p->gap_report);
  CHECK(p->gap_report->missing_size() == 0);
  CHECK_FALSE(p->catch_up);
  CHECK(p->source == sequence_book::source_of("", "mcdist-feed obs"));
  // 11..15 missed, 16 still running.
  p = in.on_heartbeat(0, ch, heartbeat(16, wall0 + 1000, nullptr, {{16, 16}}), book, t0 + 2s,
                      wall0);
  REQUIRE(p);
  CHECK(p->newest_seq == 16);
  CHECK(p->missing == ranges{{11, 15}});
  CHECK(p->missed == 5);
  CHECK_FALSE(p->catch_up);
  REQUIRE(p->gap_report);
  CHECK(p->gap_report->receiver_id() == "site-1");
  CHECK(p->gap_report->channel() == "obs");
  CHECK(p->gap_report->last_seq() == 0);  // nothing completed yet
  CHECK(p->gap_report->heartbeat_unix_ms() == wall0 + 1000);
  REQUIRE(p->gap_report->missing_size() == 1);
  CHECK(p->gap_report->missing(0).first() == 11);
  CHECK(p->gap_report->missing(0).last() == 15);
  in.gap_report_sent();
  CHECK(in.stats().gap_reports_sent == 1);
}

TEST_CASE("a silent channel never answers; with a catch_up_url its numbers go to catch-up",
          "[unit][receiver][heartbeat]") {
  crypto::init();
  const auto hub = crypto::generate_identity();
  auto silent = channel(true);
  silent.trusted_senders = {hub.public_key};
  auto fetching = channel(true, "https://hub:9613/");
  fetching.trusted_senders = {hub.public_key};
  for (const auto* ch : {&silent, &fetching}) {
    auto in = make_intake();
    sequence_book book;
    // An unsigned heartbeat on a signed channel is refused.
    CHECK_FALSE(in.on_heartbeat(0, *ch, heartbeat(10, wall0), book, t0, wall0));
    auto p = in.on_heartbeat(0, *ch, heartbeat(10, wall0 + 1, &hub), book, t0, wall0);
    REQUIRE(p);
    CHECK(p->signer == hub.public_key);
    CHECK(p->source ==
          sequence_book::source_of(crypto::format_public_key(hub.public_key), "mcdist-feed obs"));
    // Also with nothing missing: catch-up forgets numbers caught up another way.
    CHECK(p->catch_up == !ch->catch_up_url.empty());
    p = in.on_heartbeat(0, *ch, heartbeat(13, wall0 + 2, &hub), book, t0, wall0);
    REQUIRE(p);
    CHECK(p->missing == ranges{{11, 13}});
    CHECK(p->catch_up == !ch->catch_up_url.empty());
    CHECK_FALSE(p->gap_report);
    // The silent site counted what it missed below the newest.
    CHECK(book.status().at(0).missing == 2);
  }
}
