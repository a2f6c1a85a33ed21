#include "sender/core/announce.hpp"

#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

using namespace mcdist;
using namespace mcdist::sender;
using namespace std::chrono_literals;

namespace {

std::vector<manifest_entry> bulletins(int n, std::size_t path_bytes = 40) {
  std::vector<manifest_entry> out;
  for (int i = 0; i < n; ++i) {
    manifest_entry e;
    e.path = "obs/" + std::to_string(i) + "/";
    e.path += std::string(path_bytes > e.path.size() ? path_bytes - e.path.size() : 0, 'b');
    e.size = 1000 + static_cast<std::uint64_t>(i);
    e.mtime_ns = 1'700'000'000'000'000'000 + i;
    e.digest = sha256_digest{};
    out.push_back(e);
  }
  return out;
}

announce_settings settings() {
  announce_settings s;
  s.block_size = 1400;
  s.rate_bps = 80'000'000;
  s.max_passes = 100;
  s.closed_group = true;
  s.sender_name = "hub";
  return s;
}

/// The announce in a datagram sent by announcer::send_next.
wire::announce decode(const std::vector<std::byte>& datagram, session_id expect_session) {
  wire::header h;
  REQUIRE_FALSE(wire::parse_header(datagram, h));
  REQUIRE(h.type == wire::msg_type::announce);
  REQUIRE(h.session == expect_session);
  wire::announce m;
  REQUIRE_FALSE(wire::parse_control(datagram, m));
  return m;
}

/// Counts its calls; returns `value` each time.
struct counting_random {
  std::uint64_t value = 0;
  int calls = 0;
  std::uint64_t operator()() {
    ++calls;
    return value;
  }
};

/// Checks that the chunks hold every entry once, in order, with first_file and chunk right.
void require_whole_manifest(const std::vector<std::unique_ptr<wire::announce>>& chunks,
                            const std::vector<manifest_entry>& files) {
  std::uint32_t next = 0;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const auto& a = *chunks[c];
    REQUIRE(a.chunk() == c);
    REQUIRE(a.params().manifest_chunks() == chunks.size());
    REQUIRE(a.params().file_count() == files.size());
    REQUIRE(a.first_file() == next);
    for (const auto& e : a.files()) {
      REQUIRE(e.path() == files[next].path);
      REQUIRE(e.size() == files[next].size);
      ++next;
    }
  }
  REQUIRE(next == files.size());
}

}  // namespace

TEST_CASE("an empty manifest is announced as one chunk without entries", "[unit][sender]") {
  const auto chunks = build_announce_chunks(settings(), {});
  REQUIRE(chunks.size() == 1);
  REQUIRE(chunks[0]->files_size() == 0);
  REQUIRE(chunks[0]->chunk() == 0);
  REQUIRE(chunks[0]->params().manifest_chunks() == 1);
  REQUIRE(chunks[0]->params().file_count() == 0);
  REQUIRE(chunks[0]->params().total_bytes() == 0);
}

TEST_CASE("the manifest is chunked at the control budget, every datagram within it",
          "[unit][sender]") {
  const auto files = bulletins(500, 60);
  announcer a(settings(), files, 250ms);
  require_whole_manifest(build_announce_chunks(settings(), files), files);
  REQUIRE(a.chunks() > 1);
  // Worst case of the fields stamped per send: the largest time and GRTT the wire carries.
  const time_point late{std::chrono::hours(24 * 365 * 200)};
  counting_random random;
  a.start(late);
  std::vector<wire::announce> sent;
  std::vector<std::size_t> sizes;
  for (std::size_t c = 0; c < a.chunks(); ++c) {
    const auto d = a.send_next(late, session_id{0xffffffffu}, 15s, random);
    REQUIRE(d.size() <= wire::control_budget);
    sent.push_back(decode(d, session_id{0xffffffffu}));
    sizes.push_back(d.size());
  }
  // Chunks are filled: the next chunk's first entry (tag, length, body) would not have fitted.
  // (The builder counts the stamped fields and each entry's length prefix at their largest;
  // with these entries of ~110 bytes that costs less than one entry per chunk.)
  for (std::size_t c = 0; c + 1 < sent.size(); ++c) {
    const std::size_t next_entry = sent[c + 1].files(0).ByteSizeLong() + 2;
    REQUIRE(sizes[c] + next_entry > wire::control_budget);
  }
}

TEST_CASE("the reserve for a sealed body leaves that much room in every chunk", "[unit][sender]") {
  const auto files = bulletins(300, 50);
  auto sealed = settings();
  sealed.reserve_bytes = 48;
  const auto plain_chunks = build_announce_chunks(settings(), files);
  const auto sealed_chunks = build_announce_chunks(sealed, files);
  require_whole_manifest(sealed_chunks, files);
  REQUIRE(sealed_chunks.size() >= plain_chunks.size());
  announcer a(sealed, files, 250ms);
  a.start(time_point{1h});
  counting_random random;
  for (std::size_t c = 0; c < a.chunks(); ++c) {
    REQUIRE(a.send_next(time_point{1h}, session_id{7}, 15s, random).size() + sealed.reserve_bytes <=
            wire::control_budget);
  }
}

TEST_CASE("an entry larger than a chunk's room goes out alone in its own chunk", "[unit][sender]") {
  auto files = bulletins(3);
  files[1].path = std::string(1500, 'x');
  const auto chunks = build_announce_chunks(settings(), files);
  REQUIRE(chunks.size() == 3);
  require_whole_manifest(chunks, files);
  REQUIRE(chunks[1]->files_size() == 1);
  REQUIRE(chunks[1]->first_file() == 1);
}

TEST_CASE("every chunk carries the session parameters", "[unit][sender]") {
  auto s = settings();
  s.sender_name = std::string(100, 'n');
  s.only_receivers = {"site-a", "site-b"};
  s.channel = "obs";
  s.catch_up_seqs = {{3, 5}, {9, 9}};
  const auto files = bulletins(200);
  const auto chunks = build_announce_chunks(s, files);
  REQUIRE(chunks.size() > 1);
  std::uint64_t total = 0;
  for (const auto& f : files) total += f.size;
  for (const auto& c : chunks) {
    const auto& p = c->params();
    REQUIRE(p.block_size() == 1400);
    REQUIRE(p.rate_bps() == 80'000'000);
    REQUIRE(p.max_passes() == 100);
    REQUIRE(p.total_bytes() == total);
    REQUIRE(p.closed_group());
    REQUIRE(p.sender_name() == std::string(64, 'n'));  // cut to 64 bytes
    REQUIRE(p.only_receivers_size() == 2);
    REQUIRE(p.channel() == "obs");
    REQUIRE(p.channel_seq() == 0);
    REQUIRE(p.catch_up_seqs_size() == 2);
    REQUIRE(p.catch_up_seqs(1).first() == 9);
    REQUIRE(p.grtt_us() == 0);  // stamped per send
  }
}

TEST_CASE("parameters that leave no room for entries are refused at start-up", "[unit][sender]") {
  auto s = settings();
  for (int i = 0; i < 40; ++i)
    s.only_receivers.push_back("receiver-with-a-long-name-" + std::to_string(i));
  REQUIRE_THROWS_AS(build_announce_chunks(s, bulletins(3)), std::invalid_argument);
  REQUIRE_THROWS_AS(announcer(s, bulletins(3), 250ms), std::invalid_argument);
}

TEST_CASE("each send stamps the chunk with the time and the GRTT", "[unit][sender]") {
  announcer a(settings(), bulletins(2), 250ms);
  const time_point t0{100s};
  a.start(t0);
  counting_random random;
  const auto m = decode(a.send_next(t0 + 1500us, session_id{42}, 123456us, random), session_id{42});
  REQUIRE(m.sender_time_us() == to_wire_us(t0 + 1500us));
  REQUIRE(m.params().grtt_us() == 123456);
  REQUIRE(m.files_size() == 2);
}

TEST_CASE("two announce cycles go back to back, then one per interval plus a jitter",
          "[unit][sender]") {
  const auto files = bulletins(300, 60);
  announcer a(settings(), files, 800ms);
  const std::size_t n = a.chunks();
  REQUIRE(n >= 3);
  const time_point t0{100s};
  REQUIRE(a.cycles() == 0);
  a.start(t0);
  counting_random random{.value = 0x123456789abcdefull};
  std::vector<std::uint32_t> order;
  while (a.due(t0)) {
    order.push_back(decode(a.send_next(t0, session_id{1}, 1ms, random), session_id{1}).chunk());
  }
  REQUIRE(order.size() == 2 * n);
  for (std::size_t i = 0; i < order.size(); ++i) REQUIRE(order[i] == i % n);
  REQUIRE(a.cycles() == 2);
  REQUIRE(a.initial_cycles_sent());
  REQUIRE(random.calls == 1);  // once, for the cycle after the initial ones
  const duration eighth = duration(800ms) / 8;
  const auto jitter = duration(static_cast<duration::rep>(
      0x123456789abcdefull % static_cast<std::uint64_t>(eighth.count())));
  REQUIRE(a.next_cycle() == t0 + 800ms + jitter);
  REQUIRE(jitter < 100ms);
  REQUIRE_FALSE(a.due(a.next_cycle() - 1ns));
  // The third cycle: due at its time, each chunk once, then the next interval.
  const time_point t1 = a.next_cycle();
  random.value = 0;
  for (std::size_t c = 0; c < n; ++c) {
    REQUIRE(a.due(t1));
    REQUIRE(a.next_chunk() == c);
    a.send_next(t1, session_id{1}, 1ms, random);
  }
  REQUIRE(a.cycles() == 3);
  REQUIRE(random.calls == 2);
  REQUIRE(a.next_cycle() == t1 + 800ms);  // a draw of 0: no jitter
}

TEST_CASE("a cycle under way stays due whatever the time", "[unit][sender]") {
  announcer a(settings(), bulletins(300, 60), 800ms);
  REQUIRE(a.chunks() >= 2);
  counting_random random;
  a.start(time_point{10s});
  REQUIRE_FALSE(a.due(time_point{10s} - 1ns));
  a.send_next(time_point{10s}, session_id{1}, 1ms, random);
  REQUIRE(a.due(time_point{0s}));  // mid-cycle: the rest follows as the pacer allows
  REQUIRE(a.next_chunk() == 1);
}

TEST_CASE("an interval of 8 clock ticks or less draws no jitter", "[unit][sender]") {
  announcer a(settings(), bulletins(1), 8ns);
  REQUIRE(a.chunks() == 1);
  counting_random random{.value = 5};
  const time_point t0{1s};
  a.start(t0);
  a.send_next(t0, session_id{1}, 1ms, random);
  a.send_next(t0, session_id{1}, 1ms, random);
  REQUIRE(a.initial_cycles_sent());
  REQUIRE(random.calls == 0);
  REQUIRE(a.next_cycle() == t0 + 8ns);
}
