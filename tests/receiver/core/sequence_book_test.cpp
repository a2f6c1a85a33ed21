#include "receiver/core/sequence_book.hpp"

#include <catch2/catch.hpp>

#include <limits>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

using ranges = std::vector<wire::seq_span>;
const std::string obs = "obs";
const std::string hub = "key:mcdist-ed25519:AAAA";
constexpr std::uint64_t max_seq = std::numeric_limits<std::uint64_t>::max();

/// One sequenced session: announced, then completed or not.
sequence_report session(sequence_book& b, std::uint64_t seq, bool complete) {
  auto rep = b.on_session(obs, hub, seq);
  if (complete) b.on_completed(obs, hub, seq);
  return rep;
}

}  // namespace

TEST_CASE("a new stream starts at the session it sees and reports nothing missing",
          "[unit][receiver][sequence]") {
  sequence_book b;
  const auto rep = b.on_session(obs, hub, 500);
  REQUIRE(rep.created);
  REQUIRE(rep.last_seq == 0);
  REQUIRE(rep.missing.empty());
  REQUIRE(b.status().at(0).missing == 0);
}

TEST_CASE("sessions never completed are reported as ranges below the new one",
          "[unit][receiver][sequence]") {
  sequence_book b;
  session(b, 1, true);
  session(b, 2, true);
  session(b, 3, false);  // announced, failed
  // 4 never seen (site down)
  const auto rep = session(b, 5, true);
  REQUIRE(rep.last_seq == 2);
  REQUIRE(rep.missing == ranges{{3, 4}});
  REQUIRE(b.status().at(0).missing == 2);
  // 6 completed too; 8 done while 7 was missed: two gaps.
  session(b, 6, true);
  session(b, 8, true);
  const auto rep9 = session(b, 9, false);
  REQUIRE(rep9.last_seq == 8);
  REQUIRE(rep9.missing == ranges{{3, 4}, {7, 7}});
}

TEST_CASE("a catch-up session clears the numbers it carried", "[unit][receiver][sequence]") {
  sequence_book b;
  session(b, 1, true);
  session(b, 5, true);
  REQUIRE(b.status().at(0).missing == 3);
  b.on_caught_up(obs, hub, ranges{{2, 3}});
  REQUIRE(session(b, 6, false).missing == ranges{{4, 4}});
  b.on_caught_up(obs, hub, ranges{{1, max_seq}});  // clamped to what was seen (6)
  REQUIRE(session(b, 7, false).missing.empty());
  REQUIRE(b.status().at(0).last_completed == 6);
  b.on_caught_up("other", hub, ranges{{1, 3}});  // unknown stream: not created
  REQUIRE(b.size() == 1);
}

TEST_CASE("streams of other channels and other senders are apart", "[unit][receiver][sequence]") {
  sequence_book b;
  session(b, 1, true);
  b.on_session("warnings", hub, 40);
  b.on_session(obs, "name:other-hub", 900);
  REQUIRE(session(b, 3, false).missing == ranges{{2, 2}});
  REQUIRE(b.on_session("warnings", hub, 41).missing == ranges{{40, 40}});
  REQUIRE(b.on_session(obs, "name:other-hub", 901).missing == ranges{{900, 900}});
  REQUIRE(b.size() == 3);
}

TEST_CASE("a number that goes backwards starts the stream over", "[unit][receiver][sequence]") {
  sequence_book b;
  for (std::uint64_t s = 1; s <= 10; ++s) session(b, s, true);
  // A repeat of the newest number is not a reset.
  REQUIRE_FALSE(b.on_session(obs, hub, 10).reset);
  const auto rep = b.on_session(obs, hub, 1);
  REQUIRE(rep.reset);
  REQUIRE(rep.previous_seen == 10);
  REQUIRE(rep.missing.empty());
  b.on_completed(obs, hub, 1);
  REQUIRE(session(b, 3, false).missing == ranges{{2, 2}});
}

TEST_CASE("a hostile number of 2^64-1 costs a bounded window and is undone by the next real one",
          "[unit][receiver][sequence]") {
  sequence_book b;
  session(b, 1, true);
  session(b, 2, true);
  const auto rep = session(b, max_seq, true);
  REQUIRE(rep.last_seq == 2);
  REQUIRE(rep.missing.size() == 1);
  REQUIRE(rep.missing[0] == wire::seq_span{max_seq - sequence_book::window, max_seq - 1});
  REQUIRE(b.status().at(0).missing == sequence_book::window);
  b.on_caught_up(obs, hub, ranges{{1, max_seq}});  // bounded by the window, not 2^64 steps
  REQUIRE(b.status().at(0).missing == 0);
  // The hub's real next number is far below: the stream starts over.
  REQUIRE(b.on_session(obs, hub, 3).reset);
  REQUIRE(session(b, 4, false).missing == ranges{{3, 3}});
  // The text stays parseable at the extremes.
  session(b, max_seq, false);
  sequence_book copy;
  REQUIRE_FALSE(copy.parse(b.serialize()));
  REQUIRE(copy.serialize() == b.serialize());
}

TEST_CASE("gaps older than the window are given up and the report holds at most 32 ranges",
          "[unit][receiver][sequence]") {
  sequence_book b;
  session(b, 1, true);
  // Every other session completed: 100 single gaps.
  for (std::uint64_t s = 2; s <= 200; s += 2) session(b, s + 1, true);
  const auto rep = b.on_session(obs, hub, 300);
  REQUIRE(rep.missing.size() == wire::max_seq_ranges);
  REQUIRE(rep.missing.front() == wire::seq_span{2, 2});  // the oldest first
  // 5000 sessions later only the window is remembered.
  const auto far = b.on_session(obs, hub, 5300);
  REQUIRE(far.missing.size() == 1);
  REQUIRE(far.missing[0] == wire::seq_span{5300 - sequence_book::window, 5299});
}

TEST_CASE("the number of streams is bounded; the least recently used goes",
          "[unit][receiver][sequence]") {
  sequence_book b;
  session(b, 1, true);
  for (std::size_t i = 0; i < sequence_book::max_streams + 10; ++i) {
    b.on_session(obs, "name:forged-" + std::to_string(i), 1);
    if (i == 5) session(b, 2, true);  // ours stays in use
  }
  REQUIRE(b.size() == sequence_book::max_streams);
  REQUIRE_FALSE(b.on_session(obs, "name:forged-0", 2).created == false);  // forgotten: created
}

TEST_CASE("the text form round-trips and anything malformed is refused whole",
          "[unit][receiver][sequence]") {
  sequence_book b;
  session(b, 1, true);
  session(b, 2, true);
  session(b, 4, true);
  session(b, 7, false);
  b.on_session("warnings", sequence_book::source_of("", "hub one%"), 12);
  const std::string text = b.serialize();
  REQUIRE(text ==
          "mcdist-sequences 1\n"
          "obs key:mcdist-ed25519:AAAA 2 7 4 4\n"
          "warnings name:hub%20one%25 11 12 0 -\n");
  sequence_book c;
  REQUIRE_FALSE(c.parse(text));
  REQUIRE(c.serialize() == text);
  REQUIRE(c.on_session(obs, hub, 8).missing == ranges{{3, 3}, {5, 7}});

  // Every truncation and a set of corruptions are refused, and leave the book empty.
  for (std::size_t n = 0; n < text.size(); ++n) {
    if (n > 0 && text[n - 1] == '\n') continue;  // whole lines: a valid shorter file
    sequence_book t;
    CAPTURE(n);
    REQUIRE(t.parse(text.substr(0, n)));
    REQUIRE(t.size() == 0);
  }
  for (const std::string bad : {
           "mcdist-sequences 2\n",
           "mcdist-sequences 1\nobs key:x 2 7 4\n",       // a field short
           "mcdist-sequences 1\nobs key:x 2 7 4 4 9\n",   // a field long
           "mcdist-sequences 1\nobs  key:x 2 7 4 4\n",    // double space
           "mcdist-sequences 1\nobs key:x 02 7 4 4\n",    // leading zero
           "mcdist-sequences 1\nobs key:x +2 7 4 4\n",    // sign
           "mcdist-sequences 1\nobs key:x 8 7 4 -\n",     // floor above last seen
           "mcdist-sequences 1\nobs key:x 2 7 9 -\n",     // completed above last seen
           "mcdist-sequences 1\nobs key:x 1 5000 4 -\n",  // wider than the window
           "mcdist-sequences 1\nobs key:x 2 7 4 5,4\n",   // not ascending
           "mcdist-sequences 1\nobs key:x 2 7 4 3\n",     // floor's successor
           "mcdist-sequences 1\nobs key:x 2 7 4 8\n",     // above last seen
           "mcdist-sequences 1\nobs key:x 2 7 4 4,\n",    // empty number
           "mcdist-sequences 1\nobs other:x 2 7 4 -\n",   // unknown source kind
           "mcdist-sequences 1\no bs key:x 2 7 4 -\n",    // space in a channel
           "mcdist-sequences 1\nobs key:x 2 7 4 -\nobs key:x 2 7 4 -\n",  // twice
           "mcdist-sequences 1\nobs key:x 2 7 4 99999999999999999999\n",  // overflow
       }) {
    sequence_book t;
    CAPTURE(bad);
    REQUIRE(t.parse(bad));
    REQUIRE(t.size() == 0);
  }
}

TEST_CASE("a heartbeat reports the numbers missed below the hub's newest, but not running ones",
          "[unit][receiver][sequence]") {
  sequence_book b;
  // A site new to the channel hears a heartbeat first: nothing before it is asked for.
  auto rep = b.on_heartbeat(obs, hub, 10, {});
  REQUIRE(rep.created);
  REQUIRE(rep.missing.empty());
  session(b, 11, true);
  session(b, 12, false);  // announced, never completed
  // Down for 13..20; the hub's newest is 21, still running with 20.
  const std::vector<wire::seq_span> running{{20, 21}};
  rep = b.on_heartbeat(obs, hub, 21, running);
  REQUIRE(rep.last_seq == 11);
  REQUIRE(rep.missing == ranges{{12, 19}});
  // The heartbeat counted what was missed even with nothing completed since (silent sites).
  REQUIRE(b.status().at(0).last_seen == 21);
  // A stale heartbeat below the floor changes nothing.
  REQUIRE(b.on_heartbeat(obs, hub, 5, {}).missing.empty());
}

TEST_CASE("an older concurrent session heard after a newer one is no reset",
          "[unit][receiver][sequence]") {
  sequence_book b;
  session(b, 8, false);                        // the site starts at 8 ...
  const auto rep = b.on_session(obs, hub, 7);  // ... while 7 (a long field) still runs
  REQUIRE_FALSE(rep.reset);
  REQUIRE(rep.missing.empty());
  b.on_completed(obs, hub, 8);
  REQUIRE(b.status().at(0).last_completed == 8);
  REQUIRE(b.status().at(0).missing == 0);
  // Once something completed, a number below the floor is the hub numbering afresh.
  REQUIRE(b.on_session(obs, hub, 7).reset);
}
