// mcdist-feed's control handler on a real daemon, journal file and Unix socket: mcdistctl's
// journal queries run on the handler's query worker, not on the daemon's io thread, so a status
// request is answered while a history query is held running (a test hook blocks the worker
// until the test releases it; futures synchronise, no sleeps).
#include "feed/daemon_handler.hpp"

#include "feed/control_server.hpp"
#include "feed/feed_daemon.hpp"

#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <future>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

using namespace mcdist::feed;
using json = nlohmann::json;
namespace fs = std::filesystem;
namespace asio = boost::asio;

namespace {

fs::path temp_dir() {
  const auto d = fs::temp_directory_path() / ("mcdist-dhandler-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

int connect_to(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void send_line(int fd, std::string s) {
  s += '\n';
  REQUIRE(::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()));
}

json read_answer(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  REQUIRE_FALSE(line.empty());
  return json::parse(line);
}

/// Whether an answer is waiting on the socket now (no waiting: poll with timeout 0).
bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

}  // namespace

TEST_CASE("daemon handler: status answers while a history query holds the query worker") {
  const auto dir = temp_dir();
  feed_config cfg;
  cfg.journal = dir / "journal.db";
  cfg.retention = std::chrono::hours(1);
  cfg.retained_dir = dir / "retained";
  cfg.http = std::nullopt;
  asio::io_context io(1);
  auto log = std::make_shared<spdlog::logger>("t", std::make_shared<spdlog::sinks::null_sink_mt>());
  feed_daemon daemon(io, cfg, log);

  // One product that site "dwd" stored: history's answer has one row.
  {
    auto& j = daemon.journal();
    product p;
    p.channel = "obs";
    p.name = "a.bufr";
    p.spool_path = (dir / "a.bufr").string();
    p.size = 10;
    const auto id = j.enqueue(p);
    const std::int64_t ids[] = {id};
    const auto seq = j.next_seq("obs");
    j.begin_session({"obs", seq, "00000001", session_kind::batch, {}}, ids);
    j.end_session("obs", seq, session_outcome::complete);
    j.mark_sent(id, std::nullopt);
    j.record_outcome(id, "dwd", outcome::stored, "", seq);
  }

  auto handler = std::make_unique<daemon_handler>(daemon, io);
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> held{0};
  handler->set_query_hook([&] {
    if (held++ == 0) entered.set_value();  // the first query job: hold it
    released.wait();
  });
  const auto path = dir / "control.sock";
  auto server = std::make_unique<control_server>(io, control_socket_options{path, ""}, *handler);
  server->start();
  std::thread io_thread([&] { io.run(); });

  const int slow = connect_to(path);
  send_line(slow, R"({"cmd":"history","site":"dwd","since_ns":0})");
  entered.get_future().wait();  // the worker runs the history query, held by the hook

  // The io thread is free: status (its journal part on the other worker) is answered now.
  const int fast = connect_to(path);
  send_line(fast, R"({"cmd":"status"})");
  auto a = read_answer(fast);
  CHECK(a["ok"] == true);
  CHECK(a["daemon"] == true);
  CHECK(a["feed"].is_object());
  REQUIRE(a["channels"].size() == 1);
  CHECK(a["channels"][0]["channel"] == "obs");
  CHECK(a["channels"][0]["sent"] == 1);
  // A resend's lookup queues behind the held query on the same worker; status still answers.
  const int resend = connect_to(path);
  send_line(resend, R"({"cmd":"resend","site":"dwd","product":"nothing-*"})");
  send_line(fast, R"({"cmd":"status"})");
  CHECK(read_answer(fast)["ok"] == true);

  // The held history has not been answered: its worker is blocked (no timing involved).
  CHECK_FALSE(readable(slow));
  CHECK_FALSE(readable(resend));
  release.set_value();
  a = read_answer(slow);
  CHECK(a["ok"] == true);
  CHECK(a["site"] == "dwd");
  REQUIRE(a["rows"].size() == 1);
  CHECK(a["rows"][0]["name"] == "a.bufr");
  CHECK(a["rows"][0]["outcome"] == "stored");
  // The lookup ran on the worker's read-only connection and its error came back as an answer.
  a = read_answer(resend);
  CHECK(a["ok"] == false);
  CHECK(a["error"].get<std::string>().find("no retained product matches") != std::string::npos);
  CHECK(held == 2);  // history and the resend's lookup went through the query worker

  // missing, also from the worker, sees the io thread's latest commit (WAL snapshot per query).
  daemon.journal().site_seen({"dwd", "obs", std::chrono::system_clock::now(), 0.01, 0, 1});
  send_line(slow, R"({"cmd":"missing","site":"dwd","since_ns":0})");
  a = read_answer(slow);
  CHECK(a["ok"] == true);
  CHECK(a["rows"].empty());  // dwd stored the only product
  CHECK(held == 3);

  ::close(slow);
  ::close(fast);
  ::close(resend);
  std::promise<void> stopped;
  asio::post(io, [&] {
    server.reset();
    io.stop();
    stopped.set_value();
  });
  stopped.get_future().wait();
  io_thread.join();
  handler.reset();
  fs::remove_all(dir);
}
