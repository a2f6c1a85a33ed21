#include "receiver/core/session_checkpoint.hpp"

#include "checkpoint.pb.h"
#include "common/block_map.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

std::string read_fixture(const std::string& name) {
  std::ifstream in(std::string(MCDIST_TESTDATA) + "/" + name, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

manifest_entry entry(std::string path, std::uint64_t size, std::uint8_t fill = 0x11) {
  manifest_entry e;
  e.path = std::move(path);
  e.size = size;
  e.mode = 0640;
  e.mtime_ns = 1'700'000'000'000'000'000;
  sha256_digest d;
  d.fill(fill);
  e.digest = d;
  return e;
}

saved_session sample_head() {
  saved_session s;
  s.id = session_id{0xabcd0001};
  s.sender = *parse_endpoint("[2001:db8::7]:4000");
  s.channel = 2;
  s.block_size = 1000;
  s.file_count = 3;
  s.chunks = 1;
  s.total_bytes = 200'500;
  s.sender_name = "hub";
  s.seq_channel = "obs";
  s.catch_up = {{3, 5}, {9, 9}};
  s.seq_source = "name:hub";
  s.seen_seq = 4242;
  s.bytes_received = 150'000;
  return s;
}

/// The sample session with its three files: receiving (blocks 0 and 64 of 201 in), refused,
/// stored.
std::string sample_blob() {
  checkpoint_writer w(sample_head());
  block_map received(201);
  received.set(0);
  received.set(64);
  w.add_file(entry("dir/a", 200'500), saved_phase::receiving, true, 1, "", received.words());
  manifest_entry bad;
  bad.path = "../escape";
  w.add_file(bad, saved_phase::refused, false, 0, "bad_path", {});
  w.add_file(entry("c", 0, 0x22), saved_phase::stored, false, 0, "", {});
  return w.finish();
}

}  // namespace

TEST_CASE("a checkpoint reads back as it was written, in the current version",
          "[unit][receiver][checkpoint]") {
  const std::string blob = sample_blob();

  checkpoint::session_state raw;
  REQUIRE(raw.ParseFromString(blob));
  CHECK(raw.version() == checkpoint::CURRENT);
  CHECK(raw.files(0).phase() == checkpoint::file_state::RECEIVING);

  saved_session s;
  REQUIRE_FALSE(read_checkpoint(blob, 0, s));
  const auto head = sample_head();
  CHECK(s.id == head.id);
  CHECK(s.sender.to_string() == head.sender.to_string());
  CHECK(s.channel == 2);
  CHECK(s.block_size == 1000);
  CHECK(s.file_count == 3);
  CHECK(s.chunks == 1);
  CHECK(s.total_bytes == 200'500);
  CHECK(s.sender_name == "hub");
  CHECK(s.seq_channel == "obs");
  CHECK(s.catch_up == head.catch_up);
  CHECK(s.seq_source == "name:hub");
  CHECK(s.seen_seq == 4242);
  CHECK(s.bytes_received == 150'000);
  REQUIRE(s.files.size() == 3);
  CHECK(s.files[0].phase == saved_phase::receiving);
  CHECK(s.files[0].entry.path == "dir/a");
  CHECK(s.files[0].entry.size == 200'500);
  CHECK(s.files[0].entry.digest == entry("x", 0).digest);
  CHECK(s.files[0].begun);
  CHECK(s.files[0].digest_retries == 1);
  CHECK(s.files[0].blocks == 201);
  REQUIRE(s.files[0].received.size() == 4);
  block_map back(201);
  REQUIRE(back.assign_words(s.files[0].received));
  CHECK(back.test(0));
  CHECK(back.test(64));
  CHECK_FALSE(back.test(1));
  CHECK(back.count() == 2);
  CHECK(s.files[1].phase == saved_phase::refused);
  CHECK(s.files[1].entry.path == "../escape");
  CHECK(s.files[1].failure == "bad_path");
  CHECK(s.files[2].phase == saved_phase::stored);
  CHECK(s.files[2].received.empty());
}

TEST_CASE("a checkpoint written before versions (version 0) is read",
          "[unit][receiver][checkpoint]") {
  // Written by the code before the format was versioned (testdata/README.md): resume after an
  // upgrade.
  const std::string blob = read_fixture("checkpoint_v0.bin");
  checkpoint::session_state raw;
  REQUIRE(raw.ParseFromString(blob));
  REQUIRE(raw.version() == 0);
  saved_session s;
  REQUIRE_FALSE(read_checkpoint(blob, 0, s));
  CHECK(s.id == session_id{0x1234});
  CHECK(s.sender.to_string() == "10.0.0.1:5000");
  CHECK(s.block_size == 1000);
  CHECK(s.sender_name == "seed");
  CHECK(s.seen_seq == 3);
  CHECK(s.bytes_received == 2500);
  REQUIRE(s.files.size() == 3);
  CHECK(s.files[0].entry.path == "e");
  CHECK(s.files[0].phase == saved_phase::receiving);
  CHECK(s.files[0].blocks == 0);
  CHECK(s.files[1].entry.path == "dir/b");
  CHECK(s.files[1].phase == saved_phase::receiving);
  CHECK(s.files[1].begun);
  CHECK(s.files[1].blocks == 3);
  CHECK(s.files[1].received == std::vector<std::uint64_t>{0b101});
  CHECK(s.files[2].phase == saved_phase::failed);
  CHECK(s.files[2].failure == "Input/output error: seed");
}

TEST_CASE("a checkpoint of a newer format version is refused", "[unit][receiver][checkpoint]") {
  checkpoint::session_state raw;
  REQUIRE(raw.ParseFromString(sample_blob()));
  raw.set_version(checkpoint::CURRENT + 1);
  saved_session s;
  CHECK(read_checkpoint(raw.SerializeAsString(), 0, s) == errc::bad_version);
}

TEST_CASE("damaged checkpoints are refused before anything is sized by them",
          "[unit][receiver][checkpoint]") {
  checkpoint::session_state good;
  REQUIRE(good.ParseFromString(read_fixture("checkpoint_v0.bin")));
  saved_session s;
  auto refused = [&](const checkpoint::session_state& st) {
    return read_checkpoint(st.SerializeAsString(), 0, s) == errc::invalid_field;
  };
  auto st = good;
  st.mutable_files(1)->set_received(std::string(16, '\0'));  // 3 blocks need one word
  CHECK(refused(st));
  st = good;
  st.mutable_files(1)->mutable_entry()->set_size(std::uint64_t{0x7fffffff} * 1000 + 1);
  CHECK(refused(st));
  st = good;
  st.mutable_files(1)->set_phase(checkpoint::file_state::PENDING);
  CHECK(refused(st));
  st = good;
  st.mutable_files(1)->set_phase(static_cast<checkpoint::file_state::phase_t>(5));  // finalizing
  CHECK(refused(st));
  st = good;
  st.mutable_files(1)->set_phase(static_cast<checkpoint::file_state::phase_t>(9));
  CHECK(refused(st));
  st = good;
  st.mutable_files(1)->mutable_entry()->set_path("/etc/passwd");  // receiving: must be valid
  CHECK(refused(st));
  st = good;
  st.mutable_params()->set_block_size(10);
  CHECK(refused(st));
  st = good;
  st.mutable_params()->set_file_count(4);
  CHECK(refused(st));
  st = good;
  st.set_sender_addr("abc");
  CHECK(refused(st));
  st = good;
  st.mutable_params()->set_channel_seq(7);  // numbered, but no channel name
  CHECK(refused(st));
  // The channel index against the daemon's channels.
  CHECK(read_checkpoint(good.SerializeAsString(), 1, s) == std::error_code{});
  st = good;
  st.set_channel(1);
  CHECK(read_checkpoint(st.SerializeAsString(), 1, s) == errc::invalid_field);
  CHECK(read_checkpoint("not a checkpoint at all", 0, s) == errc::bad_protobuf);
}

TEST_CASE("no truncation of a checkpoint reads as a different session",
          "[unit][receiver][checkpoint]") {
  const std::string blob = sample_blob();
  for (std::size_t n = 0; n < blob.size(); ++n) {
    CAPTURE(n);
    saved_session s;
    const auto ec = read_checkpoint(std::string_view(blob).substr(0, n), 0, s);
    // A cut inside the files leaves fewer files than file_count (or a broken field): refused.
    // A cut after them only loses trailing counters (seen_seq, bytes_received, source).
    if (!ec) {
      CHECK(s.files.size() == 3);
      CHECK(s.id == sample_head().id);
    }
  }
}
