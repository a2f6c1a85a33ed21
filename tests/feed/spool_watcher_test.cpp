#include "feed/spool_watcher.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <fstream>
#include <map>

using mcdist::feed::channel_config;
using mcdist::feed::ignored_name;
using mcdist::feed::spool_watcher;
using mcdist::feed::spooled_file;

TEST_CASE("dot-files, dot-directories and ignore globs are not products", "[unit][feed]") {
  const std::vector<std::string> globs{"*.tmp", "partial/*"};
  CHECK_FALSE(ignored_name("a.grib", globs));
  CHECK_FALSE(ignored_name("obs/2026/a.bufr", globs));
  CHECK(ignored_name(".a.grib.part", globs));
  CHECK(ignored_name("obs/.incoming/a.bufr", globs));
  CHECK(ignored_name("obs/x.tmp", globs));       // glob on the file name
  CHECK(ignored_name("partial/x.grib", globs));  // glob on the whole name
  CHECK_FALSE(ignored_name("other/partial/x.grib", globs));
}

namespace {

void write(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

}  // namespace

TEST_CASE(
    "the watcher reports files present at start and files closed or renamed later, "
    "in new subdirectories too",
    "[unit][feed]") {
  char tmpl[] = "/tmp/mcdist-spool-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  const std::filesystem::path root(tmpl);
  write(root / "spool" / "early.bin", "early");
  write(root / "spool" / ".hidden", "never");
  std::vector<channel_config> channels(1);
  channels[0].name = "c";
  channels[0].spools = {root / "spool"};
  channels[0].ignore = {"*.tmp"};

  boost::asio::io_context io;
  std::map<std::string, spooled_file> seen;
  auto log = std::make_shared<spdlog::logger>("t", std::make_shared<spdlog::sinks::null_sink_mt>());
  spool_watcher w(
      io, channels, [&](spooled_file f) { seen[f.name] = f; }, log);
  w.start();
  REQUIRE(seen.size() == 1);
  REQUIRE(seen.count("early.bin"));
  REQUIRE(seen["early.bin"].size == 5);

  // Written after the start: closed in place, renamed in, and in a directory made later.
  write(root / "spool" / "closed.bin", "closed!");
  write(root / "elsewhere" / "moved.bin", "moved");
  std::filesystem::rename(root / "elsewhere" / "moved.bin", root / "spool" / "moved.bin");
  write(root / "spool" / "sub" / "deep" / "x.bufr", "deep");
  write(root / "spool" / "skip.tmp", "ignored");
  // Run until every expected report came (or give up after 5 s of loop time).
  boost::asio::steady_timer limit(io, std::chrono::seconds(5));
  limit.async_wait([&](const boost::system::error_code&) { io.stop(); });
  std::function<void()> poll;
  boost::asio::steady_timer tick(io);
  poll = [&] {
    if (seen.count("closed.bin") && seen.count("moved.bin") && seen.count("sub/deep/x.bufr")) {
      io.stop();
      return;
    }
    tick.expires_after(std::chrono::milliseconds(10));
    tick.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) poll();
    });
  };
  poll();
  io.run();
  CHECK(seen.count("closed.bin"));
  CHECK(seen.count("moved.bin"));
  CHECK(seen.count("sub/deep/x.bufr"));
  CHECK(seen["sub/deep/x.bufr"].path == root / "spool" / "sub" / "deep" / "x.bufr");
  CHECK_FALSE(seen.count("skip.tmp"));
  CHECK_FALSE(seen.count(".hidden"));
  std::filesystem::remove_all(root);
}
