#include "receiver/io/status_board.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::receiver;
using std::chrono::minutes;
using std::chrono::seconds;

namespace {
const wall_time t0{std::chrono::hours(24 * 20000)};  // a whole minute
}

TEST_CASE("file outcomes are counted per channel and the recent ring keeps the newest",
          "[status_board]") {
  status_board b(2);
  for (std::size_t i = 0; i < status_board::max_recent_products + 5; ++i) {
    const std::string path = "obs/" + std::to_string(i);
    b.file_finished({session_id{7}, 1, path, 100, true, {}}, t0 + seconds(i));
  }
  b.file_finished({session_id{7}, 0, "bad", 5, false, "digest_mismatch"}, t0);
  b.file_finished({session_id{7}, 9, "ignored", 5, true, {}}, t0);  // unknown channel
  const auto& c = b.channels();
  REQUIRE(c.size() == 2);
  CHECK(c[1].files_stored == status_board::max_recent_products + 5);
  CHECK(c[1].bytes_stored == 100 * (status_board::max_recent_products + 5));
  CHECK(c[1].recent.size() == status_board::max_recent_products);
  CHECK(c[1].recent.front().path == "obs/5");
  CHECK(c[1].recent.back().path == "obs/" + std::to_string(status_board::max_recent_products + 4));
  CHECK(*c[1].last_stored == t0 + seconds(status_board::max_recent_products + 4));
  CHECK(c[0].files_stored == 0);
  CHECK(c[0].files_failed == 1);
  CHECK_FALSE(c[0].last_stored);
  CHECK(c[0].recent.back().failure == "digest_mismatch");
}

TEST_CASE("bytes per minute come from the growth of the sampled total", "[status_board]") {
  status_board b(1);
  b.observe_bytes(1000, t0);                // first sample: a baseline, no growth
  b.observe_bytes(1500, t0 + seconds(30));  // +500 in minute 0
  b.observe_bytes(4500, t0 + minutes(2));   // +3000 in minute 2
  auto m = b.bytes_per_minute(t0 + minutes(2) + seconds(5));
  REQUIRE(m.size() == status_board::minutes_kept);
  CHECK(m[59] == 3000);
  CHECK(m[58] == 0);
  CHECK(m[57] == 500);
  // An hour later minute 0 has left the window.
  b.observe_bytes(4600, t0 + minutes(60));
  m = b.bytes_per_minute(t0 + minutes(60));
  CHECK(m[59] == 100);
  CHECK(m[1] == 3000);  // minute 2, 58 minutes back
  CHECK(m[0] == 0);
  // A total that went down (a restarted count) adds nothing.
  b.observe_bytes(10, t0 + minutes(60) + seconds(1));
  CHECK(b.bytes_per_minute(t0 + minutes(60))[59] == 100);
}
