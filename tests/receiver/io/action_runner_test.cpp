// The runner of actions on receipt: its timeout and retries on real child processes.

#include "receiver/io/action_runner.hpp"
#include "tests/scratch_dir.hpp"

#include "receiver/io/delivery_journal.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <unistd.h>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

TEST_CASE("a timed-out exec action has its whole process group killed and is retried",
          "[unit][receiver][actions]") {
  const mcdist::test::scratch_dir dir("mcdist-actions");
  delivery_journal journal(dir.path() / "journal.db");
  const auto pidfile = dir.path() / "grandchild.pid";
  action_config a;
  a.name = "slow";
  a.channel = "*";
  a.match = ".";
  a.re = std::regex(a.match);
  // The shell starts a grandchild that would outlive it, then waits.
  a.argv = {"/bin/sh", "-c", "sleep 30 & echo $! > " + pidfile.string() + "; echo started; wait"};
  a.timeout = 300ms;
  a.retries = 1;
  a.retry_delay = 10ms;
  std::ostringstream logged;
  auto log = std::make_shared<spdlog::logger>(
      "t", std::make_shared<spdlog::sinks::ostream_sink_mt>(logged));
  boost::asio::io_context io;
  action_runner runner(io, {a}, journal, log);
  delivery_row d;
  d.channel = "c";
  d.relpath = "x";
  d.path = "/nonexistent/x";
  d.sha256 = std::string(64, '0');
  d.session = "00000001";
  d.delivered_at = std::chrono::system_clock::now();
  std::vector<std::int64_t> ids;
  journal.deliver(d, std::vector<std::string>{"slow"}, ids);
  runner.submit(ids[0], "slow", d);
  const auto t0 = std::chrono::steady_clock::now();
  while (runner.stats()[0].second.failed == 0 && std::chrono::steady_clock::now() - t0 < 10s) {
    io.run_for(50ms);
  }
  const auto st = runner.stats()[0].second;
  CHECK(st.retried == 1);
  CHECK(st.failed == 1);
  CHECK(st.done == 0);
  const auto text = logged.str();
  CHECK_THAT(text, Catch::Contains("timed out"));
  CHECK_THAT(text, Catch::Contains("started"));  // the child's output went to the log
  // The grandchild of the last attempt died with its group (kill(pid, 0) fails once reaped
  // by init; a zombie still answers, so look at /proc).
  std::ifstream pf(pidfile);
  pid_t gc = 0;
  pf >> gc;
  REQUIRE(gc > 0);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(gc) + "/stat");
    std::string s;
    std::getline(stat, s);
    gone = !stat || s.find(") Z") != std::string::npos;
    if (!gone) ::usleep(10000);
  }
  CHECK(gone);
  const auto runs = journal.unfinished_runs();
  CHECK(runs.empty());
}
