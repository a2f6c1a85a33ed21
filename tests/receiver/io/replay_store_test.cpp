#include "receiver/io/replay_store.hpp"
#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

const std::string hub = "mcdist-ed25519:jZOmaoskCVjTgMTuBcl72lX8tUfj2WTS6rsIvEXUzAY=";
constexpr std::uint64_t t0 = 1'796'169'600'000;

std::string read(const std::filesystem::path& f) {
  std::ifstream in(f);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("a session taken is refused after a restart, from the file alone",
          "[unit][receiver][replay]") {
  const mcdist::test::scratch_dir d("mcdist-replaystore");
  const auto file = d.path() / replay_file_name;
  std::string notice;
  std::string detail;
  {
    replay_store s(file, {}, t0, notice);
    // First start: nothing stamped before it is taken.
    REQUIRE(notice.find("no replay cache yet") != std::string::npos);
    REQUIRE(s.admit({t0 - 1, session_id{1}, hub}, t0 + 10, detail) == errc::expired);
    REQUIRE(s.admit({t0 + 5, session_id{2}, hub}, t0 + 10, detail) == errc::ok);
    REQUIRE(s.admit({t0 + 6, session_id{3}, hub}, t0 + 10, detail) == errc::ok);
  }
  notice.clear();
  replay_store again(file, {}, t0 + 60'000, notice);
  REQUIRE(notice.empty());
  REQUIRE(again.guard().size() == 2);
  REQUIRE(again.admit({t0 + 5, session_id{2}, hub}, t0 + 60'000, detail) == errc::replayed);
  REQUIRE(again.admit({t0 + 6, session_id{3}, hub}, t0 + 60'000, detail) == errc::replayed);
  REQUIRE(again.admit({t0 + 7, session_id{4}, hub}, t0 + 60'000, detail) == errc::ok);
}

TEST_CASE("a damaged or lost cache starts afresh with its floor at the start",
          "[unit][receiver][replay]") {
  const mcdist::test::scratch_dir d("mcdist-replaystore");
  const auto file = d.path() / replay_file_name;
  std::string notice;
  std::string detail;
  {
    replay_store s(file, {}, t0, notice);
    REQUIRE(s.admit({t0 + 5, session_id{2}, hub}, t0 + 10, detail) == errc::ok);
  }
  { std::ofstream(file, std::ios::app) << "garbage line\n"; }
  notice.clear();
  replay_store damaged(file, {}, t0 + 1000, notice);
  REQUIRE(notice.find("damaged") != std::string::npos);
  REQUIRE(damaged.guard().floor_ms() == t0 + 1000);
  // Its entry is gone with the file, and its stamp is below the new floor: still refused.
  REQUIRE(damaged.admit({t0 + 5, session_id{2}, hub}, t0 + 1000, detail) == errc::expired);
  // The file was rewritten whole (version line, floor).
  REQUIRE(read(file).rfind("mcdist-replay 1\nfloor " + std::to_string(t0 + 1000) + "\n", 0) == 0);
  std::filesystem::remove(file);
  notice.clear();
  replay_store lost(file, {}, t0 + 2000, notice);
  REQUIRE(lost.guard().floor_ms() == t0 + 2000);
  REQUIRE(lost.admit({t0 + 1500, session_id{9}, hub}, t0 + 2000, detail) == errc::expired);
}

TEST_CASE("appended lines are compacted into a rewrite", "[unit][receiver][replay]") {
  const mcdist::test::scratch_dir d("mcdist-replaystore");
  const auto file = d.path() / replay_file_name;
  std::string notice;
  std::string detail;
  replay_guard::limits l;
  l.max_age = std::chrono::seconds(10);
  replay_store s(file, l, t0, notice);
  // 3000 sessions over 30 s: most expire, and the file stays near the live entries.
  for (std::uint32_t i = 0; i < 3000; ++i) {
    const auto now = t0 + 1 + i * 10;
    REQUIRE(s.admit({now, session_id{i}, hub}, now, detail) == errc::ok);
  }
  std::size_t lines = 0;
  for (const char c : read(file)) lines += c == '\n';
  REQUIRE(lines < 2 * 1024 + 1000 + 3);
  REQUIRE(s.guard().size() <= 1001);
}
