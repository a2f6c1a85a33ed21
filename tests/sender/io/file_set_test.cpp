// collect_files: the operator's PATH arguments into a file set (sender/io/file_set.hpp).

#include "sender/io/file_set.hpp"
#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace mcdist::sender;
namespace fs = std::filesystem;

namespace {

/// A scratch directory, removed at the end.
struct scratch {
  mcdist::test::scratch_dir root{"mcdist-fileset"};
  fs::path dir = root.path();
  void file(const std::string& rel, std::size_t size, fs::perms mode = fs::perms(0640)) const {
    fs::create_directories((dir / rel).parent_path());
    std::ofstream(dir / rel, std::ios::binary) << std::string(size, 'x');
    fs::permissions(dir / rel, mode);
  }
};

std::vector<std::string> names(const std::vector<source_file>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.entry.path);
  return out;
}

}  // namespace

TEST_CASE("a directory is walked in name order, each file with its stat and a relative name",
          "[unit][sender][file_set]") {
  scratch s;
  s.file("obs/b/2.bufr", 20);
  s.file("obs/a.bufr", 10, fs::perms(0600));
  s.file("obs/b/10.bufr", 30);
  s.file("obs/c/deep/x.grib2", 0);
  std::vector<std::string> warnings;
  const auto files = collect_files({(s.dir / "obs").string()},
                                   [&](const std::string& w) { warnings.push_back(w); });
  CHECK(warnings.empty());
  // Byte order within each directory: "10.bufr" before "2.bufr".
  CHECK(names(files) == std::vector<std::string>{"obs/a.bufr", "obs/b/10.bufr", "obs/b/2.bufr",
                                                 "obs/c/deep/x.grib2"});
  REQUIRE(files.size() == 4);
  CHECK(files[0].local == s.dir / "obs" / "a.bufr");
  CHECK(files[0].entry.size == 10);
  CHECK(files[0].entry.mode == 0600);
  CHECK(files[1].entry.size == 30);
  CHECK(files[3].entry.size == 0);
  struct stat st {};
  REQUIRE(::stat((s.dir / "obs/b/2.bufr").c_str(), &st) == 0);
  CHECK(files[2].entry.mtime_ns ==
        std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec);
  CHECK(files[2].entry.mode == 0640);
}

TEST_CASE(
    "links to files are followed; links to directories, dangling links and FIFOs are "
    "skipped with a warning",
    "[unit][sender][file_set]") {
  scratch s;
  s.file("set/real.bin", 5);
  s.file("elsewhere/target.bin", 7);
  s.file("elsewhere/sub/inner.bin", 3);
  fs::create_symlink(s.dir / "elsewhere/target.bin", s.dir / "set/link.bin");
  fs::create_directory_symlink(s.dir / "elsewhere/sub", s.dir / "set/linkdir");
  fs::create_symlink(s.dir / "nowhere", s.dir / "set/dangling");
  REQUIRE(::mkfifo((s.dir / "set/fifo").c_str(), 0600) == 0);
  std::vector<std::string> warnings;
  const auto files = collect_files({(s.dir / "set").string()},
                                   [&](const std::string& w) { warnings.push_back(w); });
  CHECK(names(files) == std::vector<std::string>{"set/link.bin", "set/real.bin"});
  REQUIRE(files.size() == 2);
  CHECK(files[0].entry.size == 7);  // the target's size
  REQUIRE(warnings.size() == 3);
  auto warned = [&](const std::string& name, const std::string& why) {
    for (const auto& w : warnings)
      if (w.find(name) != std::string::npos && w.find(why) != std::string::npos) return true;
    return false;
  };
  CHECK(warned("dangling", "No such file"));
  CHECK(warned("fifo", "not a regular file"));
  CHECK(warned("linkdir", "symbolic link to a directory"));
}

TEST_CASE("file arguments, missing paths and clashing names", "[unit][sender][file_set]") {
  scratch s;
  s.file("a/x.bin", 4);
  s.file("b/x.bin", 6);
  s.file("a/y.bin", 1);
  auto none = [](const std::string&) {};
  // A file argument contributes its base name, in argument order.
  CHECK(names(collect_files({(s.dir / "a/y.bin").string(), (s.dir / "b/x.bin").string()}, none)) ==
        std::vector<std::string>{"y.bin", "x.bin"});
  // "dir/" names the directory "dir", and its files' local paths have no doubled slash.
  const auto slashed = collect_files({(s.dir / "a").string() + "/"}, none);
  CHECK(names(slashed) == std::vector<std::string>{"a/x.bin", "a/y.bin"});
  REQUIRE(slashed.size() == 2);
  CHECK(slashed[1].local == (s.dir / "a/y.bin").string());
  // Two directories of the same name clash on their first common file, named in the error.
  s.file("one/obs/p.bin", 2);
  s.file("one/obs/q.bin", 2);
  s.file("two/obs/q.bin", 3);
  s.file("two/obs/r.bin", 3);
  CHECK_THROWS_WITH(
      collect_files({(s.dir / "one/obs").string(), (s.dir / "two/obs").string()}, none),
      Catch::Contains("two files would both be sent as 'obs/q.bin'"));
  // The same directory given twice clashes too.
  CHECK_THROWS_WITH(collect_files({(s.dir / "a").string(), (s.dir / "a").string() + "/"}, none),
                    Catch::Contains("two files would both be sent as 'a/x.bin'"));
  // Different names in several arguments do not.
  CHECK(names(collect_files({(s.dir / "one/obs").string(), (s.dir / "a").string()}, none)) ==
        std::vector<std::string>{"obs/p.bin", "obs/q.bin", "a/x.bin", "a/y.bin"});
  CHECK_THROWS_WITH(collect_files({(s.dir / "nope").string()}, none),
                    Catch::Contains("no such file or directory"));
  CHECK_THROWS_WITH(
      collect_files({(s.dir / "a/x.bin").string(), (s.dir / "b/x.bin").string()}, none),
      Catch::Contains("two files would both be sent as 'x.bin'"));
}
