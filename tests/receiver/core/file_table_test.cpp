#include "receiver/core/file_table.hpp"

#include "common/error.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

using state = file_rx::state_t;

/// Blocks of the tests' sessions, bytes (the smallest a session may have).
constexpr std::uint32_t block = 256;

/// An entry of `size` bytes (ten blocks unless said).
taken_entry entry(std::uint32_t index, std::string path, std::uint64_t size = 10 * block,
                  errc refused = errc::ok) {
  taken_entry t;
  t.index = index;
  t.entry.path = std::move(path);
  t.entry.size = size;
  t.blocks = refused == errc::ok ? static_cast<std::uint32_t>((size + block - 1) / block) : 0;
  t.refused = refused;
  return t;
}

/// A table of the given paths, taken and closed.
file_table table_of(const std::vector<std::string>& paths) {
  file_table t;
  t.grow(paths.size(), paths.size());
  for (std::uint32_t i = 0; i < paths.size(); ++i) REQUIRE_FALSE(t.take(entry(i, paths[i])));
  return t;
}

}  // namespace

TEST_CASE("entries are taken receiving or refused; the manifest's close refuses path conflicts",
          "[unit][receiver][file_table]") {
  file_table t;
  t.grow(8, 6);
  CHECK_FALSE(t.take(entry(0, "a/x")));
  CHECK(t.take(entry(1, "../etc", 10, errc::path_dot_dot)));
  CHECK_FALSE(t.take(entry(2, "a/x")));    // the same path again
  CHECK_FALSE(t.take(entry(3, "a")));      // a file where a/x needs a directory
  CHECK_FALSE(t.take(entry(4, "a/x/y")));  // a directory where a file is
  CHECK_FALSE(t.take(entry(5, "b/y")));
  CHECK(t[0].state == state::receiving);
  CHECK(t[0].blocks == 10);
  CHECK(t[1].state == state::refused);
  CHECK(t[1].failure == std::string(to_string(errc::path_dot_dot)));
  t[2].begun = true;  // blocks arrived before the manifest was complete
  CHECK_FALSE(t.counting());
  const auto refused = t.close_manifest();
  CHECK(t.counting());
  REQUIRE(refused.size() == 3);
  CHECK(refused[0] == std::pair<std::uint32_t, bool>{2, true});
  CHECK(refused[1] == std::pair<std::uint32_t, bool>{3, false});
  CHECK(refused[2] == std::pair<std::uint32_t, bool>{4, false});
  CHECK(t[2].state == state::refused);
  CHECK(t[2].failure == "path_conflict");
  CHECK_FALSE(t[2].begun);
  CHECK(t.open() == 2);
  CHECK(t.refused() == 4);
}

TEST_CASE("transitions keep the counts in step", "[unit][receiver][file_table]") {
  auto t = table_of({"a", "b", "c", "d", "e"});
  t.close_manifest();
  REQUIRE(t.open() == 5);

  t[0].begun = true;
  CHECK(t.hold(0));  // its temp file is to be discarded
  CHECK(t[0].state == state::held);
  CHECK(t.held() == 1);

  t.await_digest(1);
  CHECK(t[1].state == state::awaiting_digest);
  t.finalize(1);
  CHECK(t.finalizing() == 1);
  t.on_stored(1);
  CHECK(t[1].state == state::stored);
  CHECK(t.finalizing() == 0);
  CHECK(t.stored() == 1);
  CHECK(t.bytes_stored() == 10 * block);

  t.finalize(2);
  t[2].received = block_map(10);
  t[2].received.set(3);
  t.refetch(2);  // failed verification: again
  CHECK(t[2].state == state::receiving);
  CHECK(t[2].digest_retries == 1);
  CHECK(t[2].received.count() == 0);
  CHECK(t.finalizing() == 0);
  t.finalize(2);
  t.on_store_failed(2, "digest_mismatch");
  CHECK(t[2].state == state::failed);
  CHECK(t[2].failure == "digest_mismatch");

  t[3].begun = true;
  t[3].resume = true;
  CHECK(t.fail(3, "no space"));
  CHECK_FALSE(t[3].resume);
  CHECK_FALSE(t.fail(3, "again"));  // terminal already
  CHECK(t[3].failure == "no space");
  CHECK(t.failed() == 2);
  CHECK(t.open() == 1);
}

TEST_CASE("a file failing before the manifest is complete is not counted open",
          "[unit][receiver][file_table]") {
  auto t = table_of({"a", "b"});
  CHECK_FALSE(t.fail(0, "over budget"));
  t.close_manifest();
  CHECK(t.open() == 1);
  CHECK(t.failed() == 1);
}

TEST_CASE("the files survive a checkpoint with their states and block maps",
          "[unit][receiver][file_table]") {
  auto t = table_of({"held", "stored", "failed", "receiving", "finalizing", "refused"});
  t.close_manifest();
  t.hold(0);
  t.finalize(1);
  t.on_stored(1);
  t.fail(2, "bad");
  t[3].received = block_map(10);
  t[3].received.set(4);
  t[3].begun = true;
  t[4].received = block_map(10);
  for (std::uint32_t b = 0; b < 10; ++b) t[4].received.set(b);
  t.finalize(4);
  t[5].state = state::refused;

  saved_session head;
  head.id = session_id{42};
  head.sender = *parse_endpoint("192.0.2.1:4711");
  head.block_size = block;
  head.file_count = 6;
  head.chunks = 1;
  head.total_bytes = 60 * block;
  checkpoint_writer w(head);
  t.save(w);
  const std::string blob = w.finish();
  saved_session back;
  REQUIRE_FALSE(read_checkpoint(blob, 0, back));

  memory_budget budget(1 << 20, 1 << 20);
  file_table r;
  REQUIRE(r.restore(back.files, budget, session_id{42}));
  CHECK(r.counting());
  CHECK(r[0].state == state::held);
  CHECK(r[1].state == state::stored);
  CHECK(r[2].state == state::failed);
  CHECK(r[2].failure == "bad");
  CHECK(r[3].state == state::receiving);
  CHECK(r[3].resume);
  CHECK(r[3].received.test(4));
  CHECK(r[3].received.count() == 1);
  CHECK(r[4].state == state::receiving);  // finalized again on resume
  CHECK(r[4].all_received());
  CHECK(r[5].state == state::refused);
  CHECK(r.open() == 2);
  CHECK(r.held() == 1);
  CHECK(r.stored() == 1);
  CHECK(r.bytes_stored() == 10 * block);
  CHECK(r.failed() == 1);
  CHECK(budget.used() == 2 * bitmap_bytes(10));

  // A block map that does not fit the budget refuses the restore.
  saved_session again;
  REQUIRE_FALSE(read_checkpoint(blob, 0, again));
  memory_budget small(8, 8);
  file_table none;
  CHECK_FALSE(none.restore(again.files, small, session_id{42}));
}

TEST_CASE("a REGISTER carries the held files as runs and the held digests of files pending one",
          "[unit][receiver][file_table]") {
  auto t = table_of({"a", "b", "c", "d", "e", "f"});
  t.close_manifest();
  t.hold(1);
  t.hold(2);
  t.hold(4);
  t[5].held_digest = sha256_digest{};
  (*t[5].held_digest)[0] = 7;
  wire::register_request m;
  t.add_held(m);
  // (gap, count) runs: files 1-2, then file 4.
  CHECK(std::vector<std::uint32_t>(m.held_files().begin(), m.held_files().end()) ==
        std::vector<std::uint32_t>{1, 2, 1, 1});
  REQUIRE(m.held_pending_size() == 1);
  CHECK(m.held_pending(0).file() == 5);
  CHECK(m.held_pending(0).sha256().size() == 32);
  CHECK(m.held_pending(0).sha256()[0] == 7);
}

TEST_CASE("the held files a REGISTER carries stop at the control datagram budget",
          "[unit][receiver][file_table]") {
  // Every other file of 2,000 held: 1,000 runs, more than one datagram holds.
  std::vector<std::string> paths;
  for (int i = 0; i < 2000; ++i) paths.push_back("f" + std::to_string(i));
  auto t = table_of(paths);
  t.close_manifest();
  for (std::uint32_t i = 0; i < 2000; i += 2) t.hold(i);
  wire::register_request m;
  m.set_receiver_id("site");
  t.add_held(m);
  CHECK(m.held_files_size() > 0);
  CHECK(m.held_files_size() < 2000);
  CHECK(m.ByteSizeLong() + wire::header_size <= wire::control_budget);
}
