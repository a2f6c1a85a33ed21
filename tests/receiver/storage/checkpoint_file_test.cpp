#include "receiver/storage/checkpoint_file.hpp"

#include "checkpoint.pb.h"
#include "tests/receiver/storage/file_store_test_util.hpp"

#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <iterator>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace mcdist::receiver::test;
namespace fs = std::filesystem;

namespace {

std::string read_fixture(const std::string& name) {
  std::ifstream in(std::string(MCDIST_TESTDATA) + "/" + name, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put_state(const fs::path& temp, const std::string& dir, const std::string& blob) {
  fs::create_directories(temp / dir);
  write_plain_file(temp / dir / "state", std::as_bytes(std::span(blob)));
}

}  // namespace

TEST_CASE("start-up hands over the states this build can read, and sweeps the others",
          "[checkpoint_file]") {
  scratch_dir d;
  const fs::path temp = d.path() / "temp";
  // Written before format versions (session 0x1234): an upgraded receiver resumes it.
  const std::string v0 = read_fixture("checkpoint_v0.bin");
  put_state(temp, "00001234", v0);
  // The current version.
  checkpoint::session_state st;
  REQUIRE(st.ParseFromString(v0));
  st.set_version(checkpoint::CURRENT);
  st.set_session(0x5678);
  put_state(temp, "00005678", st.SerializeAsString());
  // Written by a newer mcdist after a downgrade: refused, not misread.
  st.set_version(checkpoint::CURRENT + 1);
  st.set_session(0x9abc);
  put_state(temp, "00009abc", st.SerializeAsString());
  // Another session's state copied into this directory.
  st.set_version(checkpoint::CURRENT);
  st.set_session(0x1111);
  put_state(temp, "00002222", st.SerializeAsString());
  // Not a checkpoint.
  put_state(temp, "00003333", "\xff\xff\xff garbage");

  auto loaded = load_checkpoints(temp);
  std::sort(loaded.begin(), loaded.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  REQUIRE(loaded.size() == 2);
  CHECK(loaded[0].first == session_id{0x1234});
  CHECK(loaded[0].second == v0);
  CHECK(loaded[1].first == session_id{0x5678});
  // The refused ones go with the sweep: their sessions start over when announced again.
  std::vector<session_id> keep{loaded[0].first, loaded[1].first};
  CHECK(sweep_temp(temp, keep, *spdlog::default_logger()) == 3);
  CHECK(fs::exists(temp / "00001234" / "state"));
  CHECK(fs::exists(temp / "00005678" / "state"));
  CHECK_FALSE(fs::exists(temp / "00009abc"));
  CHECK_FALSE(fs::exists(temp / "00002222"));
  CHECK_FALSE(fs::exists(temp / "00003333"));
}
