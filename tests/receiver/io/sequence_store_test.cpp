#include "receiver/io/sequence_store.hpp"
#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <fstream>

using namespace mcdist;
using namespace mcdist::receiver;

TEST_CASE("the completed numbers survive a reopen of the sequences file",
          "[unit][receiver][sequence]") {
  const mcdist::test::scratch_dir d("mcdist-seqstore");
  const auto file = d.path() / sequences_file_name;
  std::string detail;
  {
    sequence_book b;
    REQUIRE_FALSE(load_sequences(file, b, detail));  // no file yet: a new site
    REQUIRE(b.size() == 0);
    b.on_session("obs", "name:hub", 1);
    b.on_completed("obs", "name:hub", 1);
    b.on_session("obs", "name:hub", 2);
    b.on_completed("obs", "name:hub", 2);
    b.on_session("obs", "name:hub", 3);  // never completed
    REQUIRE_FALSE(save_sequences(file, b, detail));
  }
  REQUIRE_FALSE(std::filesystem::exists(file.string() + ".tmp"));
  sequence_book reopened;
  REQUIRE_FALSE(load_sequences(file, reopened, detail));
  const auto rep = reopened.on_session("obs", "name:hub", 5);
  REQUIRE(rep.last_seq == 2);
  REQUIRE(rep.missing == std::vector<wire::seq_span>{{3, 4}});
}

TEST_CASE("a damaged sequences file is refused whole with a reason", "[unit][receiver][sequence]") {
  const mcdist::test::scratch_dir d("mcdist-seqstore");
  const auto file = d.path() / sequences_file_name;
  std::ofstream(file) << "mcdist-sequences 1\nobs name:hub 1 2 2 -\ngarbage\n";
  sequence_book b;
  std::string detail;
  REQUIRE(load_sequences(file, b, detail));
  REQUIRE(b.size() == 0);
  REQUIRE(detail.find(file.string()) != std::string::npos);
}

TEST_CASE("saving into a directory that is gone fails with the path",
          "[unit][receiver][sequence]") {
  sequence_book b;
  std::string detail;
  REQUIRE(save_sequences("/nonexistent-mcdist-dir/sequences", b, detail));
  REQUIRE(detail.find("/nonexistent-mcdist-dir/sequences.tmp") != std::string::npos);
}
