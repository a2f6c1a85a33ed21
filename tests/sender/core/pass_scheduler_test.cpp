#include "sender/core/pass_scheduler.hpp"

#include <catch2/catch.hpp>

#include <utility>
#include <vector>

using mcdist::sender::block_pick;
using mcdist::sender::pass_scheduler;

namespace {

/// Takes every block of the current pass: (file, block, seq, prompt) in send order.
struct sent {
  std::uint32_t file, block, seq;
  bool prompt;
};
std::vector<sent> sweep(pass_scheduler& s) {
  std::vector<sent> out;
  while (const auto p = s.peek()) {
    const auto again = s.peek();  // peeking twice gives the same block
    REQUIRE((again && again->file == p->file && again->block == p->block));
    out.push_back({p->file, p->block, s.take(*p), p->prompt});
  }
  return out;
}

}  // namespace

TEST_CASE("pass 1 sweeps every block in order, later passes only the NAKed ones",
          "[unit][sender]") {
  pass_scheduler s({3, 0, 2});
  REQUIRE(s.pass() == 0);
  REQUIRE_FALSE(s.peek());  // nothing wanted before the transfer
  s.want_all();
  s.start_pass();
  REQUIRE(s.wanted() == 5);
  const auto p1 = sweep(s);
  REQUIRE(p1.size() == 5);
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> order{
      {0, 0}, {0, 1}, {0, 2}, {2, 0}, {2, 1}};
  for (std::size_t i = 0; i < p1.size(); ++i) {
    REQUIRE(std::pair(p1[i].file, p1[i].block) == order[i]);
    REQUIRE(p1[i].seq == i + 1);
    REQUIRE_FALSE(p1[i].prompt);
  }
  REQUIRE(s.wanted() == 0);
  REQUIRE(s.repairs() == 0);
  REQUIRE(s.cursor_file() == 3);

  // A receiver that saw everything up to seq 5 misses (0,1) and (2,0): both go out in pass 2.
  REQUIRE(s.nak(0, 1, 1, 5, false) == 1);
  REQUIRE(s.nak(2, 0, 1, 5, false) == 1);
  REQUIRE(s.nak(2, 0, 1, 5, false) == 0);  // a second receiver's NAK: already wanted
  REQUIRE(s.wanted() == 2);
  s.start_pass();
  const auto p2 = sweep(s);
  REQUIRE(p2.size() == 2);
  REQUIRE((p2[0].file == 0 && p2[0].block == 1 && p2[0].seq == 6));
  REQUIRE((p2[1].file == 2 && p2[1].block == 0 && p2[1].seq == 7));
  REQUIRE(s.repairs() == 2);
  REQUIRE(s.pass() == 2);
}

TEST_CASE("a NAK for a block sent after the receiver's view is ignored", "[unit][sender]") {
  pass_scheduler s({4});
  s.want_all();
  s.start_pass();
  sweep(s);  // blocks 0..3 went out with seq 1..4
  // The receiver had seen up to seq 2: blocks 2 and 3 are still on their way.
  REQUIRE(s.nak(0, 0, 4, 2, false) == 2);
  s.start_pass();
  const auto p2 = sweep(s);
  REQUIRE(p2.size() == 2);
  REQUIRE((p2[0].block == 0 && p2[1].block == 1));
  // Repaired with seq 5 and 6: a NAK from before them is stale, one after them is fresh.
  REQUIRE(s.nak(0, 0, 2, 4, false) == 0);
  REQUIRE(s.nak(0, 0, 2, 6, false) == 2);
}

TEST_CASE("blocks NAKed behind the cursor are repaired ahead of new data", "[unit][sender]") {
  pass_scheduler s({6});
  s.want_all();
  s.start_pass();
  for (int i = 0; i < 3; ++i) s.take(*s.peek());  // blocks 0..2, seq 1..3
  // Block 1 lost (seen up to 3), block 4 ahead of the cursor NAKed too (not yet sent: wanted).
  REQUIRE(s.nak(0, 1, 1, 3, true) == 1);
  REQUIRE(s.nak(0, 4, 1, 3, true) == 0);
  const auto rest = sweep(s);
  REQUIRE(rest.size() == 4);
  REQUIRE((rest[0].block == 1 && rest[0].prompt));
  REQUIRE((rest[1].block == 3 && !rest[1].prompt));
  REQUIRE((rest[3].block == 5 && rest[3].seq == 7));
  REQUIRE(s.repairs() == 1);
  // Without `prompt` (the pass is not running) a block behind the cursor waits for the pass.
  pass_scheduler t({4});
  t.want_all();
  t.start_pass();
  t.take(*t.peek());
  t.take(*t.peek());
  REQUIRE(t.nak(0, 0, 1, 2, false) == 1);
  const auto p = t.peek();
  REQUIRE((p && p->block == 2 && !p->prompt));
}

TEST_CASE("pass 1 skips a file every registered receiver holds, once the group is known",
          "[unit][sender]") {
  pass_scheduler s({2, 3, 1});
  s.mark_held(1);
  s.mark_held(1);
  s.mark_held(2);
  REQUIRE(s.held_by(1) == 2);
  s.want_all();
  s.start_pass();
  s.group_known(2);  // registration closed with two receivers: file 1 is held by both
  const auto p1 = sweep(s);
  REQUIRE(p1.size() == 3);  // file 0 (2 blocks) and file 2 (held by one receiver only)
  REQUIRE((p1[2].file == 2 && p1[2].block == 0));
  REQUIRE(s.wanted() == 0);
  // Held files are sent again if someone NAKs them: no skipping after pass 1.
  REQUIRE(s.nak(1, 0, 3, s.seq(), false) == 3);
  s.start_pass();
  REQUIRE(sweep(s).size() == 3);
}

TEST_CASE("sequence numbers run on across passes, one per block sent", "[unit][sender]") {
  pass_scheduler s({1});
  s.want_all();
  s.start_pass();
  std::uint32_t last = s.take(*s.peek());
  REQUIRE(last == 1);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(s.nak(0, 0, 1, last, true) == 1);
    s.start_pass();
    const auto seq = s.take(*s.peek());
    REQUIRE(seq == last + 1);
    last = seq;
  }
}

TEST_CASE(
    "a NAK is handled per range: what was wanted already is skipped, the runs it adds are "
    "reported, and prompt repairs queue as runs",
    "[unit][sender]") {
  pass_scheduler s({10000, 100});
  s.want_all();
  s.start_pass();
  // Pass 1 sends file 0 entirely (seq 1..10000), then stops inside file 1.
  for (int i = 0; i < 10000 + 10; ++i) {
    const auto p = s.peek();
    REQUIRE(p);
    s.take(*p);
  }
  REQUIRE(s.cursor_file() == 1);
  REQUIRE(s.cursor_block() == 10);
  // A fade: blocks 1000-8999 of file 0, NAKed by a receiver that saw everything.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> added;
  REQUIRE(s.nak(0, 1000, 8000, 10010, true, &added) == 8000);
  REQUIRE(added == std::vector<std::pair<std::uint32_t, std::uint32_t>>{{1000, 9000}});
  // Every other receiver names the same range: nothing new, nothing reported.
  added.clear();
  REQUIRE(s.nak(0, 0, 10000, 10010, true, &added) == 10000 - 8000);  // 0-999 and 9000-9999
  REQUIRE(added == std::vector<std::pair<std::uint32_t, std::uint32_t>>{{0, 1000}, {9000, 10000}});
  added.clear();
  REQUIRE(s.nak(0, 500, 9000, 10010, true, &added) == 0);
  REQUIRE(added.empty());
  // A receiver whose view ended at seq 5000 cannot have missed file 1 (sent from seq 10001 on):
  // that copy is on its way.
  REQUIRE(s.nak(1, 0, 100, 5000, true, &added) == 0);
  // File 1's blocks behind the cursor, NAKed by a receiver with a current view: prompt.
  REQUIRE(s.nak(1, 0, 20, 10010, true, &added) == 10);  // 10-19 not sent yet: still wanted
  // Prompt repairs go first, in runs: file 0's 10,000 blocks, then file 1's 10.
  std::uint32_t prompt = 0;
  while (const auto p = s.peek()) {
    if (!p->prompt) break;
    ++prompt;
    s.take(*p);
  }
  REQUIRE(prompt == 10000 + 10);
  REQUIRE(s.repairs() == 10010);
}

TEST_CASE("a block passed over stays wanted and the in-flight estimate stays an underestimate",
          "[unit][sender]") {
  pass_scheduler s({2, 4});
  s.want_all();
  s.start_pass();
  REQUIRE(s.take(*s.peek()) == 1);  // file 0
  REQUIRE(s.take(*s.peek()) == 2);
  auto p = s.peek();
  REQUIRE((p && p->file == 1 && p->block == 0));
  REQUIRE(s.take(*p) == 3);
  p = s.peek();
  REQUIRE((p && p->block == 1));
  s.skip(*p);  // not held yet: it stays wanted, the sweep goes on
  p = s.peek();
  REQUIRE((p && p->block == 2));
  REQUIRE(s.take(*p) == 4);  // one less than block 0's sequence number + 2
  REQUIRE(s.take(*s.peek()) == 5);
  REQUIRE_FALSE(s.peek());
  REQUIRE(s.wanted() == 1);
  REQUIRE(s.wanted_blocks(1).test(1));
  // A receiver that saw up to seq 4 names blocks 2 and 3: block 2 went out within its view (seq
  // 4) and is wanted again, block 3 (seq 5) is still on its way. Read as block 0's sequence
  // number + 2 = 5, block 2's NAK would be dropped as in flight.
  REQUIRE(s.nak(1, 2, 2, 4, false) == 1);
  REQUIRE(s.wanted_blocks(1).test(2));
  REQUIRE_FALSE(s.wanted_blocks(1).test(3));
  s.start_pass();
  const auto p2 = sweep(s);
  REQUIRE(p2.size() == 2);
  REQUIRE((p2[0].block == 1 && p2[1].block == 2));
}

TEST_CASE("a prompt repair passed over stays wanted for the next pass", "[unit][sender]") {
  pass_scheduler s({4});
  s.want_all();
  s.start_pass();
  for (int i = 0; i < 3; ++i) s.take(*s.peek());
  REQUIRE(s.nak(0, 0, 1, 3, true) == 1);  // behind the cursor: a prompt repair
  auto p = s.peek();
  REQUIRE((p && p->prompt && p->block == 0));
  s.skip(*p);
  p = s.peek();
  REQUIRE((p && !p->prompt && p->block == 3));
  s.take(*p);
  REQUIRE_FALSE(s.peek());
  REQUIRE(s.wanted() == 1);
  s.start_pass();
  const auto p2 = sweep(s);
  REQUIRE(p2.size() == 1);
  REQUIRE(p2[0].block == 0);
}
