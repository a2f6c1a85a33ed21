#include "receiver/storage/posix_io.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

constexpr file_key key_a{session_id{1}, file_index{0}};
constexpr file_key key_b{session_id{1}, file_index{1}};

/// A scratch directory removed at the end of the test.
struct scratch {
  std::filesystem::path dir;
  unique_fd fd;
  scratch() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "posix_io_test.XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    fd.reset(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(fd);
  }
  ~scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::vector<std::byte> pattern(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(i % 251);
  return v;
}

}  // namespace

TEST_CASE("fail_nth fails exactly the nth matching call") {
  fail_nth plan(storage_op::pwrite, 3, ENOSPC);
  CHECK(plan(storage_op::pwrite, &key_a) == 0);
  CHECK(plan(storage_op::fsync, &key_a) == 0);  // another op: not counted
  CHECK(plan(storage_op::pwrite, nullptr) == 0);
  CHECK(plan(storage_op::pwrite, &key_b) == ENOSPC);
  CHECK(plan(storage_op::pwrite, &key_a) == 0);  // only the third
  CHECK(plan.seen() == 4);
}

TEST_CASE("fail_nth restricted to one file counts only that file's calls; copies share it") {
  fail_nth plan(storage_op::rename, 2, EIO, key_b);
  const fail_nth copy = plan;
  CHECK(plan(storage_op::rename, &key_a) == 0);
  CHECK(plan(storage_op::rename, nullptr) == 0);
  CHECK(plan(storage_op::rename, &key_b) == 0);
  CHECK(copy(storage_op::rename, &key_b) == EIO);
  CHECK(plan.seen() == 2);
}

TEST_CASE("posix_io asks the hook once per call, with the op and file, and skips failed calls") {
  scratch s;
  std::vector<std::pair<storage_op, const file_key*>> asked;
  int fail_with = 0;
  posix_io io([&](storage_op op, const file_key* k) {
    asked.emplace_back(op, k);
    return fail_with;
  });
  int fd = -1;
  REQUIRE(io.open(s.fd.get(), "f.part", O_RDWR | O_CREAT | O_CLOEXEC, 0600, &key_a, fd) == 0);
  unique_fd owned(fd);
  const auto data = pattern(5000);
  REQUIRE(io.pwrite_all(fd, data, 0, &key_a) == 0);
  REQUIRE(asked.size() == 2);
  CHECK(asked[0] == std::make_pair(storage_op::open, &key_a));
  CHECK(asked[1] == std::make_pair(storage_op::pwrite, &key_a));  // once for the whole range

  fail_with = ENOSPC;
  CHECK(io.pwrite_all(fd, data, 5000, &key_a) == ENOSPC);
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  CHECK(st.st_size == 5000);  // the injected failure made no write
  int fd2 = -1;
  CHECK(io.open(s.fd.get(), "other", O_RDWR | O_CREAT | O_CLOEXEC, 0600, nullptr, fd2) == ENOSPC);
  CHECK(fd2 == -1);
  CHECK_FALSE(std::filesystem::exists(s.dir / "other"));
  CHECK(io.rename(s.fd.get(), "f.part", s.fd.get(), "f", &key_a) == ENOSPC);
  CHECK(std::filesystem::exists(s.dir / "f.part"));
  CHECK(io.mkdir(s.fd.get(), "d", 0755) == ENOSPC);
  CHECK_FALSE(std::filesystem::exists(s.dir / "d"));
}

TEST_CASE("posix_io read_hash hashes a range in buffer-sized reads, asking before each") {
  scratch s;
  int preads = 0;
  posix_io io([&](storage_op op, const file_key*) {
    if (op == storage_op::pread) ++preads;
    return 0;
  });
  int fd = -1;
  REQUIRE(io.open(s.fd.get(), "f", O_RDWR | O_CREAT | O_CLOEXEC, 0600, &key_a, fd) == 0);
  unique_fd owned(fd);
  const auto data = pattern(10000);
  REQUIRE(io.pwrite_all(fd, data, 0, &key_a) == 0);

  std::vector<std::byte> buf(4096);
  std::atomic<std::uint64_t> reread{0};
  sha256_hasher h;
  REQUIRE(io.read_hash(fd, 1000, 10000, h, buf, &key_a, &reread) == 0);
  CHECK(preads == 3);  // 9000 bytes through a 4096-byte buffer
  CHECK(reread == 9000);
  CHECK(h.finish() == sha256(std::span(data).subspan(1000)));

  sha256_hasher h2;
  CHECK(io.read_hash(fd, 0, 10001, h2, buf, &key_a, nullptr) == ENODATA);  // file too short
}

TEST_CASE("posix_io read_hash stops at an injected pread failure") {
  scratch s;
  fail_nth second_read(storage_op::pread, 2, EIO);
  posix_io io(second_read);
  int fd = -1;
  REQUIRE(io.open(s.fd.get(), "f", O_RDWR | O_CREAT | O_CLOEXEC, 0600, nullptr, fd) == 0);
  unique_fd owned(fd);
  REQUIRE(io.pwrite_all(fd, pattern(10000), 0, nullptr) == 0);
  std::vector<std::byte> buf(4096);
  std::atomic<std::uint64_t> reread{0};
  sha256_hasher h;
  CHECK(io.read_hash(fd, 0, 10000, h, buf, nullptr, &reread) == EIO);
  CHECK(reread == 4096);
}

TEST_CASE("posix_io without a hook runs every call; mkdir of an existing name succeeds") {
  scratch s;
  const posix_io io;
  CHECK(io.mkdir(s.fd.get(), "d", 0755) == 0);
  CHECK(io.mkdir(s.fd.get(), "d", 0755) == 0);
  int fd = -1;
  REQUIRE(io.open(s.fd.get(), "f", O_RDWR | O_CREAT | O_CLOEXEC, 0600, nullptr, fd) == 0);
  unique_fd owned(fd);
  CHECK(io.fsync(fd, nullptr) == 0);
  CHECK(io.syncfs(fd) == 0);
  CHECK(io.fchmod(fd, 0640, nullptr) == 0);
  CHECK(io.rename(s.fd.get(), "f", s.fd.get(), "g", nullptr) == 0);
  CHECK(io.dir_fsync(s.fd.get()) == 0);
  CHECK(std::filesystem::exists(s.dir / "g"));
  CHECK((std::filesystem::status(s.dir / "g").permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
         std::filesystem::perms::group_read));
  CHECK(io.rename(s.fd.get(), "missing", s.fd.get(), "h", nullptr) == ENOENT);
}
