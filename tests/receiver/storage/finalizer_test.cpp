#include "receiver/storage/finalizer.hpp"

#include <catch2/catch.hpp>

#include <deque>
#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

fin_file file(std::uint32_t i) {
  fin_file f;
  f.handle = i;
  f.key = {session_id{1}, file_index{i}};
  return f;
}

std::vector<std::uint64_t> handles(const std::vector<fin_file>& batch) {
  std::vector<std::uint64_t> out;
  for (const auto& f : batch) out.push_back(f.handle);
  return out;
}

}  // namespace

TEST_CASE("finalizer batching takes every waiting file up to the cap, in order") {
  std::deque<fin_job> q;
  for (std::uint32_t i = 1; i <= 5; ++i) q.emplace_back(file(i));
  std::vector<fin_file> batch;
  CHECK_FALSE(take_finalizer_work(q, 3, batch).has_value());
  CHECK(handles(batch) == std::vector<std::uint64_t>{1, 2, 3});
  batch.clear();
  CHECK_FALSE(take_finalizer_work(q, 3, batch).has_value());
  CHECK(handles(batch) == std::vector<std::uint64_t>{4, 5});
  CHECK(q.empty());
}

TEST_CASE("finalizer batching never lets files jump over a checkpoint or a close") {
  std::deque<fin_job> q;
  q.emplace_back(file(1));
  q.emplace_back(file(2));
  q.emplace_back(fin_checkpoint{session_id{1}, "state"});
  q.emplace_back(file(3));
  q.emplace_back(fin_close{session_id{1}, true});
  std::vector<fin_file> batch;

  // The files queued before the checkpoint form one batch; the checkpoint waits for it.
  CHECK_FALSE(take_finalizer_work(q, finalizer::batch_max, batch).has_value());
  CHECK(handles(batch) == std::vector<std::uint64_t>{1, 2});
  batch.clear();

  auto other = take_finalizer_work(q, finalizer::batch_max, batch);
  REQUIRE(other.has_value());
  REQUIRE(std::holds_alternative<fin_checkpoint>(*other));
  CHECK(std::get<fin_checkpoint>(*other).blob == "state");
  CHECK(batch.empty());

  CHECK_FALSE(take_finalizer_work(q, finalizer::batch_max, batch).has_value());
  CHECK(handles(batch) == std::vector<std::uint64_t>{3});
  batch.clear();

  other = take_finalizer_work(q, finalizer::batch_max, batch);
  REQUIRE(other.has_value());
  CHECK(std::holds_alternative<fin_close>(*other));
  CHECK(q.empty());
  CHECK_FALSE(take_finalizer_work(q, finalizer::batch_max, batch).has_value());
  CHECK(batch.empty());
}

TEST_CASE("finalizer batching with a cap of one (sync_mode::file) makes batches of one") {
  std::deque<fin_job> q;
  for (std::uint32_t i = 1; i <= 3; ++i) q.emplace_back(file(i));
  std::vector<fin_file> batch;
  for (std::uint64_t want = 1; want <= 3; ++want) {
    CHECK_FALSE(take_finalizer_work(q, 1, batch).has_value());
    CHECK(handles(batch) == std::vector<std::uint64_t>{want});
    batch.clear();
  }
  CHECK(q.empty());
}
