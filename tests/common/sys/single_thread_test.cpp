#include "common/sys/single_thread.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <thread>

using namespace mcdist;

namespace {

/// is_single_thread() of `t` asked from a new thread.
bool from_other_thread(const single_thread& t) {
  bool r = true;
  std::thread other([&] { r = t.is_single_thread(); });
  other.join();
  return r;
}

}  // namespace

TEST_CASE("the first thread to check owns the object", "[unit][single_thread]") {
  single_thread t;
  REQUIRE(t.is_single_thread());  // binds this thread
  REQUIRE(t.is_single_thread());
  REQUIRE_FALSE(from_other_thread(t));
  REQUIRE(t.is_single_thread());  // a failed check does not move the owner
}

TEST_CASE("an object checked first elsewhere belongs there", "[unit][single_thread]") {
  single_thread t;
  REQUIRE(from_other_thread(t));  // bound to a thread that has ended
  REQUIRE_FALSE(t.is_single_thread());
}

TEST_CASE("release hands the object to the next thread that checks", "[unit][single_thread]") {
  single_thread t;
  REQUIRE(t.is_single_thread());
  t.release();
  REQUIRE(from_other_thread(t));
  REQUIRE_FALSE(t.is_single_thread());
}

TEST_CASE("a copy starts unbound", "[unit][single_thread]") {
  single_thread t;
  REQUIRE(t.is_single_thread());
  single_thread copy = t;
  REQUIRE(from_other_thread(copy));
  REQUIRE(t.is_single_thread());
}

TEST_CASE("the assertion aborts off the owning thread and passes on it", "[unit][single_thread]") {
  // This test's target is built with MCDIST_THREAD_CHECKS=1 (tests/CMakeLists.txt), so the
  // macro is live whatever the build type. The abort happens in a child process.
  single_thread t;
  MCDIST_ASSERT_SINGLE_THREAD(t);  // binds; passes
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::thread other([&] { MCDIST_ASSERT_SINGLE_THREAD(t); });
    other.join();
    ::_exit(0);  // not reached when the check works
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGABRT);
  MCDIST_ASSERT_SINGLE_THREAD(t);  // still this thread's
}
