// The sender's digests before the announce (sender/io/file_hasher.hpp): the cached records
// read on several threads land on the right files, and prehash fills in the rest.

#include "sender/io/file_hasher.hpp"
#include "common/sys/digest_xattr.hpp"
#include "sender/io/file_set.hpp"
#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace mcdist;
using namespace mcdist::sender;
namespace fs = std::filesystem;

namespace {

/// A scratch directory of `count` files of distinct contents, removed at the end.
struct file_tree {
  mcdist::test::scratch_dir root{"mcdist-hasher"};
  fs::path dir = root.path();
  explicit file_tree(std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "d%zu/f%05zu", i % 7, i);
      fs::create_directories((dir / "set" / name).parent_path());
      std::ofstream(dir / "set" / name, std::ios::binary) << "bulletin " << i;
    }
  }
  std::vector<source_file> collect() const {
    return collect_files({(dir / "set").string()}, [](const std::string&) {});
  }
};

sha256_digest digest_of(const source_file& f) {
  sha256_digest d{};
  std::string why;
  REQUIRE_FALSE(hash_file(f.local, f.entry.size, d, why));
  return d;
}

/// Records a digest that is not the file's: a read that returned it for another file, or a
/// file hashed instead of read, would show.
sha256_digest marked(std::size_t i) {
  sha256_digest d{};
  for (std::size_t k = 0; k < d.size(); ++k) d[k] = static_cast<std::uint8_t>(i * 31 + k);
  d[0] = static_cast<std::uint8_t>(i);
  d[1] = static_cast<std::uint8_t>(i >> 8);
  return d;
}

}  // namespace

TEST_CASE("cached digests read on several threads each land on their own file",
          "[unit][sender][file_hasher]") {
  // Enough files that read_cached_digests starts helpers (xattr_reads_per_thread each).
  const std::size_t count = 3 * xattr_reads_per_thread + 17;
  file_tree tree(count);
  auto files = tree.collect();
  REQUIRE(files.size() == count);
  // Every third file carries no record, and one carries a record of an older size.
  for (std::size_t i = 0; i < count; ++i) {
    if (i % 3 == 0) continue;
    const int fd = ::open(files[i].local.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const int e = write_digest_xattr(fd, marked(i), files[i].entry.size + (i == 5 ? 1 : 0),
                                     files[i].entry.mtime_ns);
    ::close(fd);
    if (e == ENOTSUP) {
      WARN("SKIPPED: " << tree.dir << " has no user extended attributes");
      return;
    }
    REQUIRE(e == 0);
  }

  for (const unsigned threads : {1u, 4u}) {
    auto got = files;
    read_cached_digests(got, threads);
    for (std::size_t i = 0; i < count; ++i) {
      INFO("file " << i << ", " << threads << " threads");
      if (i % 3 == 0 || i == 5) {
        CHECK_FALSE(got[i].entry.digest);
      } else {
        REQUIRE(got[i].entry.digest);
        CHECK(*got[i].entry.digest == marked(i));
      }
    }
  }

  // prehash takes the records and hashes the files without one (recording them).
  prehash(files, UINT64_MAX, UINT64_MAX, 4, true);
  for (std::size_t i = 0; i < count; ++i) {
    INFO("file " << i);
    REQUIRE(files[i].entry.digest);
    CHECK(*files[i].entry.digest == (i % 3 == 0 || i == 5 ? digest_of(files[i]) : marked(i)));
  }
  auto again = tree.collect();
  read_cached_digests(again, 4);
  REQUIRE(again[0].entry.digest);
  CHECK(*again[0].entry.digest == digest_of(again[0]));
  REQUIRE(again[5].entry.digest);
  CHECK(*again[5].entry.digest == digest_of(again[5]));
}

TEST_CASE("without the cache, prehash hashes within its budgets and reads no record",
          "[unit][sender][file_hasher]") {
  file_tree tree(40);
  auto files = tree.collect();
  const int fd = ::open(files[1].local.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const int e = write_digest_xattr(fd, marked(1), files[1].entry.size, files[1].entry.mtime_ns);
  ::close(fd);
  REQUIRE((e == 0 || e == ENOTSUP));
  // Each file is "bulletin N", 10 or 11 bytes: a budget of 100 bytes hashes files in index
  // order while they fit, and no more.
  prehash(files, UINT64_MAX, 100, 2, false);
  std::uint64_t budget = 100;
  std::size_t hashed = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    INFO("file " << i);
    if (files[i].entry.size <= budget) {
      budget -= files[i].entry.size;
      ++hashed;
      REQUIRE(files[i].entry.digest);
      CHECK(*files[i].entry.digest == digest_of(files[i]));
    } else {
      CHECK_FALSE(files[i].entry.digest);
    }
  }
  CHECK(hashed >= 9);
  CHECK(hashed < files.size());
}
