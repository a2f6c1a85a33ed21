#include "receiver/io/retention_sweeper.hpp"

#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>
#include <spdlog/logger.h>
#include <sys/stat.h>

#include <fstream>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

channel_config channel(std::string name, const std::filesystem::path& dest,
                       std::optional<std::chrono::nanoseconds> max_age) {
  channel_config ch;
  ch.name = std::move(name);
  ch.dest = dest;
  ch.retention_max_age = max_age;
  return ch;
}

/// Writes `bytes` bytes at dest/relpath and journals it as delivered at `at`; `size` other than
/// the file's makes it a product changed since.
void deliver(delivery_journal& j, const channel_config& ch, const std::string& relpath,
             std::size_t bytes, std::chrono::system_clock::time_point at, bool create = true,
             std::optional<std::uint64_t> size = std::nullopt) {
  const auto path = ch.dest / relpath;
  std::int64_t mtime_ns = 0;
  if (create) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << std::string(bytes, 'x');
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  delivery_row d;
  d.channel = ch.name;
  d.dest = ch.dest.string();
  d.relpath = relpath;
  d.path = path.string();
  d.size = size.value_or(bytes);
  d.mtime_ns = mtime_ns;
  d.sha256 = std::string(64, 'a');
  d.session = "1";
  d.delivered_at = at;
  std::vector<std::int64_t> runs;
  j.deliver(d, {}, runs);
}

}  // namespace

TEST_CASE("retention deletes expired products that are as delivered, and leaves the others",
          "[unit][receiver][retention]") {
  const mcdist::test::scratch_dir dir("mcdist-retention");
  delivery_journal journal(dir.path() / "journal.db");
  daemon_config cfg;
  cfg.channels = {channel("obs", dir.path() / "obs", 1h),
                  channel("retired", dir.path() / "old", 1h),
                  channel("kept", dir.path() / "kept", std::nullopt)};
  const auto& obs = cfg.channels[0];
  const auto now = std::chrono::system_clock::now();
  deliver(journal, obs, "a/b/old.bufr", 10, now - 2h);
  deliver(journal, obs, "changed.bufr", 10, now - 2h, true, 11);
  deliver(journal, obs, "gone.bufr", 10, now - 2h, false);
  deliver(journal, obs, "new.bufr", 10, now - 10min);
  deliver(journal, cfg.channels[1], "old.bufr", 10, now - 2h);
  deliver(journal, cfg.channels[2], "old.bufr", 10, now - 48h);

  boost::asio::io_context io;
  retention_sweeper sweeper(
      io, cfg, journal, [](std::size_t c) { return c != 1; },
      std::make_shared<spdlog::logger>("test"));
  sweeper.run();
  CHECK(sweeper.deleted() == 1);
  CHECK(sweeper.skipped() == 2);                         // changed since, and gone already
  CHECK_FALSE(std::filesystem::exists(obs.dest / "a"));  // emptied up to the root
  CHECK(std::filesystem::exists(obs.dest));
  CHECK(std::filesystem::exists(obs.dest / "changed.bufr"));
  CHECK(std::filesystem::exists(obs.dest / "new.bufr"));
  // A retired channel's products wait for its successor; a channel without max_age keeps its.
  CHECK(std::filesystem::exists(dir.path() / "old" / "old.bufr"));
  CHECK(std::filesystem::exists(dir.path() / "kept" / "old.bufr"));
  // Every expired row of the channel was marked: the next pass has nothing to do.
  CHECK(journal.expired("obs", now - 1h, 100).empty());
  sweeper.run();
  CHECK(sweeper.deleted() == 1);
  CHECK(sweeper.skipped() == 2);
  sweeper.stop();
  sweeper.run();  // stopped: no pass
  CHECK(journal.expired("retired", now - 1h, 100).size() == 1);
}
