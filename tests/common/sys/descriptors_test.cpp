// reserve_descriptors: the descriptor table grown once, while the process has one thread
// (common/sys/descriptors.hpp). Each case runs in a forked child: a table never shrinks, so a
// case run in the test process would see the one before it.

#include "common/sys/descriptors.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

/// Slots in this process's descriptor table ("FDSize" of /proc/self/status), 0 if unknown.
std::size_t table_size() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("FDSize:", 0) == 0) return std::stoul(line.substr(7));
  }
  return 0;
}

std::size_t open_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

/// A child's exit status for "this machine cannot show it" (a low RLIMIT_NOFILE).
constexpr int cannot_run = 77;

/// Runs `body` in a child process and checks that it returned 0 (its number of the first
/// failed check otherwise), or says SKIPPED when it returned cannot_run.
void expect_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  REQUIRE(pid > 0);
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == cannot_run) {
    WARN("SKIPPED: RLIMIT_NOFILE is too low, or the table is already large, to show it");
    return;
  }
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace

TEST_CASE("the table is grown to the count asked for, and no descriptor is left open",
          "[unit][descriptors]") {
  expect_child([] {
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 600) return cannot_run;
    const std::size_t before = table_size();
    const std::size_t fds = open_count();
    if (before == 0) return 1;
    if (before >= 600) return cannot_run;  // a fresh process starts with 64
    if (mcdist::reserve_descriptors(600) != 600) return 2;
    if (table_size() < 600) return 3;
    if (open_count() != fds) return 4;
    return 0;
  });
}

TEST_CASE("threads opening descriptors later do not grow a reserved table", "[unit][descriptors]") {
  // The property the reservation exists for: a table shared by threads that never grows
  // never waits for an RCU grace period. Without the reservation the same opens grow it.
  for (const bool reserve : {true, false}) {
    CAPTURE(reserve);
    expect_child([reserve] {
      struct rlimit rl {};
      if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 512) return cannot_run;
      if (table_size() >= 512) return cannot_run;
      if (reserve && mcdist::reserve_descriptors(512) != 512) return 1;
      const std::size_t reserved = table_size();
      std::vector<int> fds;
      std::thread opener([&] {
        for (int i = 0; i < 300; ++i) fds.push_back(::open("/dev/null", O_RDONLY));
      });
      opener.join();
      for (const int fd : fds) {
        if (fd < 0) return 2;
      }
      const bool grew = table_size() > reserved;
      return grew == !reserve ? 0 : 3;
    });
  }
}

TEST_CASE("the count is clamped to RLIMIT_NOFILE, and stderr need not be open",
          "[unit][descriptors]") {
  expect_child([] {
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1;
    rl.rlim_cur = 200;
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) return 2;
    if (mcdist::reserve_descriptors(100'000) != 200) return 3;
    if (table_size() < 200 || table_size() >= 100'000) return 4;
    return 0;
  });
  expect_child([] {
    ::close(STDERR_FILENO);
    const std::size_t fds = open_count();
    if (mcdist::reserve_descriptors(300) != 300) return 1;
    if (table_size() < 300) return 2;
    if (open_count() != fds) return 3;  // /dev/null, opened to copy, is closed again
    return 0;
  });
  CHECK(mcdist::reserve_descriptors(1) == 0);
  CHECK(mcdist::reserve_descriptors(0) == 0);
}
