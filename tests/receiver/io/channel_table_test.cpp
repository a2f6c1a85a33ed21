#include "receiver/io/channel_table.hpp"

#include "checkpoint.pb.h"
#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>
#include <spdlog/logger.h>

#include <fstream>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

channel_config channel(std::string name, std::string dest) {
  channel_config ch;
  ch.name = std::move(name);
  ch.dest = std::move(dest);
  return ch;
}

std::string checkpoint_on(std::uint32_t channel) {
  checkpoint::session_state st;
  st.set_channel(channel);
  return st.SerializeAsString();
}

std::uint32_t channel_of(const std::string& blob) {
  checkpoint::session_state st;
  REQUIRE(st.ParseFromString(blob));
  return st.channel();
}

}  // namespace

TEST_CASE("a restart maps the channel indexes of the last run by name and dest",
          "[unit][receiver][channel_table]") {
  const mcdist::test::scratch_dir d("mcdist-channel-table");
  const auto file = d.path() / channel_table::file_name;
  spdlog::logger log("test");
  // The last run: a reload retired "model" (index 1) and added "radar" as index 2.
  channel_table::save(file,
                      {channel("obs", "/data/obs"), channel("model", "/data/model"),
                       channel("radar", "/data/radar")},
                      log);
  REQUIRE_FALSE(std::filesystem::exists(file.string() + ".tmp"));
  // This run's configuration: radar first, obs second, model gone, obs moved to another dest
  // is another channel.
  const auto t =
      channel_table::load(file, {channel("radar", "/data/radar"), channel("obs", "/data/obs"),
                                 channel("model", "/srv/model")});
  CHECK(t.index_now(0) == std::optional<std::uint32_t>(1));
  CHECK(t.index_now(1) == std::nullopt);
  CHECK(t.index_now(2) == std::optional<std::uint32_t>(0));
  CHECK(t.index_now(7) == std::optional<std::uint32_t>(7));  // not in the table: as saved

  CHECK(channel_of(*t.remap_checkpoint(checkpoint_on(0))) == 1);
  CHECK(channel_of(*t.remap_checkpoint(checkpoint_on(2))) == 0);
  CHECK(channel_of(*t.remap_checkpoint(checkpoint_on(7))) == 7);
  CHECK_FALSE(t.remap_checkpoint(checkpoint_on(1)));
  // A blob that does not parse is left for restore() to report.
  const std::string junk("\xff\xff\xff", 3);
  CHECK(t.remap_checkpoint(junk) == junk);
}

TEST_CASE("no table, or lines that do not parse, leave indexes as they are",
          "[unit][receiver][channel_table]") {
  const mcdist::test::scratch_dir d("mcdist-channel-table");
  const auto file = d.path() / channel_table::file_name;
  const std::vector<channel_config> now{channel("obs", "/data/obs")};
  const auto none = channel_table::load(file, now);
  CHECK(none.index_now(3) == std::optional<std::uint32_t>(3));
  const auto blob = checkpoint_on(3);
  CHECK(none.remap_checkpoint(blob) == blob);
  {
    std::ofstream out(file);
    out << "x\tobs\t/data/obs\n"
        << "1 obs /data/obs\n"
        << "2\tobs\n"
        << "4\tobs\t/data/obs\n";
  }
  const auto t = channel_table::load(file, now);
  CHECK(t.index_now(1) == std::optional<std::uint32_t>(1));
  CHECK(t.index_now(2) == std::optional<std::uint32_t>(2));
  CHECK(t.index_now(4) == std::optional<std::uint32_t>(0));
}
