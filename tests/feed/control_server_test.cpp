// The control server on a real Unix socket, its io_context on a thread of its own, clients
// with plain blocking sockets: the socket file's mode and group, refusal of a path that is not a
// socket or that a live server holds, a stale socket replaced; requests answered in order on one
// connection; hostile clients (over-long line, bad JSON, unknown command, a client that goes away
// mid-answer, one that never finishes its line) cost an error answer or their connection, never
// the server; idle connections up to the limit cannot lock a real request out (the one idle
// longest is evicted), while connections with a request under way are kept.
#include "feed/control_server.hpp"

#include <catch2/catch.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace mcdist::feed;
using json = nlohmann::json;
namespace fs = std::filesystem;
namespace asio = boost::asio;

namespace {

fs::path temp_dir() {
  const auto d = fs::temp_directory_path() / ("mcdist-ctlsrv-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

/// Answers status with a payload of `big` bytes, so a test can make the answer outlast the
/// socket buffers. With `hold` set, answers wait in `held` until the test releases them (a
/// request under way, as the daemon's journal queries on its worker thread).
struct fake_handler : control_handler {
  std::atomic<std::size_t> big{0};
  std::atomic<int> resends{0};
  std::atomic<bool> hold{false};
  std::vector<std::function<void()>> held;  ///< io thread only

  void answer_async(control_request r, answer_callback done) override {
    if (!hold) {
      control_handler::answer_async(std::move(r), std::move(done));
      return;
    }
    held.push_back(
        [this, r = std::move(r), done = std::move(done)]() mutable { done(answer(*this, r)); });
  }
  json status() override { return {{"daemon", true}, {"blob", std::string(big.load(), 'x')}}; }
  json history(const history_request& r) override {
    return {{"site", r.site}, {"rows", json::array()}};
  }
  json missing(const missing_request& r) override {
    return {{"site", r.site}, {"rows", json::array()}};
  }
  json resend(const resend_request& r) override {
    ++resends;
    return {{"site", r.site}, {"uid", r.peer_uid ? json(*r.peer_uid) : json(nullptr)}};
  }
};

/// A server running on its own io thread for the duration of a test.
struct running_server {
  asio::io_context io;
  fake_handler handler;
  std::unique_ptr<control_server> server;
  std::thread thread;

  running_server(const fs::path& path, control_limits limits = {}, std::string group = {}) {
    server = std::make_unique<control_server>(io, control_socket_options{path, std::move(group)},
                                              handler, limits);
    server->start();
    thread = std::thread([this] { io.run(); });
  }
  ~running_server() {
    asio::post(io, [this] { server.reset(); });
    thread.join();
  }
  /// Reads a server property on its thread.
  template <class F>
  auto on_io(F f) {
    std::promise<decltype(f())> p;
    asio::post(io, [&] { p.set_value(f()); });
    return p.get_future().get();
  }
};

int connect_to(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const auto n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed: the test checks what it answered
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

/// Reads one line; "" at end of stream.
std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1) {
    if (c == '\n') return line;
    line += c;
  }
  return line;
}

/// Whether the server closes `fd` within `wait` (end of stream; any bytes it sent first are
/// left unread). False when the connection is still open after `wait`.
bool closed_by_server(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) return false;
  char c;
  const auto n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

json ask(int fd, std::string_view request) {
  send_all(fd, std::string(request) + "\n");
  const auto line = read_line(fd);
  REQUIRE_FALSE(line.empty());
  return json::parse(line);
}

}  // namespace

TEST_CASE("control server: socket file mode 0660, group, answers on one connection") {
  const auto path = temp_dir() / "a.sock";
  fs::remove(path);
  ::umask(0);  // the server must not depend on the caller's umask
  running_server s(path, {}, /* group = the process's own, by name */ "");
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0660);
  ::umask(022);

  const int fd = connect_to(path);
  auto a = ask(fd, R"({"cmd":"status"})");
  CHECK(a["ok"] == true);
  CHECK(a["daemon"] == true);
  a = ask(fd, R"({"cmd":"history","site":"dwd","since_ns":0})");
  CHECK(a["site"] == "dwd");
  a = ask(fd, "{\"cmd\":\"resend\",\"site\":\"knmi\",\"seq\":[1,2]}\r");  // CRLF tolerated
  CHECK(a["site"] == "knmi");
  CHECK(a["uid"] == ::getuid());
  ::close(fd);
  CHECK(s.handler.resends == 1);
}

TEST_CASE("control server: gives the socket to the configured group") {
  const auto path = temp_dir() / "g.sock";
  fs::remove(path);
  // A group this process may chown to: its own primary group, named.
  std::vector<char> buf(16384);
  group g{}, *found = nullptr;
  REQUIRE(::getgrgid_r(::getgid(), &g, buf.data(), buf.size(), &found) == 0);
  REQUIRE(found);
  {
    running_server s(path, {}, found->gr_name);
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    CHECK(st.st_gid == ::getgid());
  }
  CHECK_FALSE(fs::exists(path));  // removed at stop
  asio::io_context io;
  fake_handler h;
  CHECK_THROWS_WITH(control_server(io, {path, "no-such-group-mcdist"}, h),
                    Catch::Contains("group 'no-such-group-mcdist' does not exist"));
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("control server: refuses a non-socket path and a live socket, replaces a stale one") {
  const auto dir = temp_dir();
  asio::io_context io;
  fake_handler h;
  const auto file = dir / "not-a-socket";
  std::ofstream(file) << "precious";
  CHECK_THROWS_WITH(control_server(io, {file, ""}, h), Catch::Contains("is not a socket"));
  CHECK(fs::file_size(file) == 8);  // untouched

  const auto path = dir / "live.sock";
  fs::remove(path);
  {
    running_server live(path);
    asio::io_context io2;
    CHECK_THROWS_WITH(control_server(io2, {path, ""}, h), Catch::Contains("in use"));
    // The refused second server did not remove the live one's socket.
    const int fd = connect_to(path);
    CHECK(ask(fd, R"({"cmd":"status"})")["ok"] == true);
    ::close(fd);
  }
  // A stale socket file (its server died without cleaning up) is replaced.
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    ::close(fd);  // never listened: connect() is refused
  }
  REQUIRE(fs::is_socket(path));
  running_server s(path);
  const int fd = connect_to(path);
  CHECK(ask(fd, R"({"cmd":"status"})")["ok"] == true);
  ::close(fd);
}

TEST_CASE("control server: bad JSON and unknown commands get an error and keep the connection") {
  const auto path = temp_dir() / "b.sock";
  running_server s(path);
  const int fd = connect_to(path);
  auto a = ask(fd, "this is not json");
  CHECK(a["ok"] == false);
  CHECK_THAT(a["error"].get<std::string>(), Catch::Contains("not JSON"));
  a = ask(fd, R"({"cmd":"format_disk"})");
  CHECK(a["ok"] == false);
  CHECK_THAT(a["error"].get<std::string>(), Catch::Contains("unknown command"));
  a = ask(fd, std::string("{\"cmd\":\"history\",\"site\":\"\x01\xff\",\"since_ns\":0}"));
  CHECK(a["ok"] == false);  // invalid UTF-8 is not JSON
  a = ask(fd, std::string(5000, '['));
  CHECK(a["ok"] == false);
  a = ask(fd, R"({"cmd":"status"})");
  CHECK(a["ok"] == true);  // still serving
  ::close(fd);
  CHECK(s.on_io([&] { return s.server->bad_requests(); }) == 4);
}

TEST_CASE("control server: an over-long line gets an error answer and the connection closes") {
  const auto path = temp_dir() / "c.sock";
  running_server s(path);
  const int fd = connect_to(path);
  // Sent from a thread: the server stops reading at 64 KiB, so a blocking send of 1 MiB would
  // wait for ever if this thread also had to read the answer.
  std::thread writer([fd] { send_all(fd, std::string(1 << 20, 'x') + "\n"); });
  const auto line = read_line(fd);
  REQUIRE_FALSE(line.empty());
  const auto a = json::parse(line);
  CHECK(a["ok"] == false);
  CHECK_THAT(a["error"].get<std::string>(), Catch::Contains("longer than 65536"));
  ::shutdown(fd, SHUT_RDWR);  // unblocks the writer if the server's close has not
  writer.join();
  ::close(fd);
  // The server took no harm.
  const int fd2 = connect_to(path);
  CHECK(ask(fd2, R"({"cmd":"status"})")["ok"] == true);
  ::close(fd2);
}

TEST_CASE("control server: a client gone mid-answer costs the server nothing") {
  const auto path = temp_dir() / "d.sock";
  running_server s(path);
  s.handler.big = 8 << 20;  // 8 MiB answer: far beyond the socket buffers
  for (int i = 0; i < 3; ++i) {
    const int fd = connect_to(path);
    send_all(fd, "{\"cmd\":\"status\"}\n");
    char head[16];
    REQUIRE(::read(fd, head, sizeof head) > 0);  // the answer has started
    ::close(fd);                                 // and the client leaves
  }
  s.handler.big = 0;
  const int fd = connect_to(path);
  CHECK(ask(fd, R"({"cmd":"status"})")["ok"] == true);  // no SIGPIPE, still serving
  ::close(fd);
}

TEST_CASE("control server: first lines never finished time out sooner than later ones") {
  const auto path = temp_dir() / "e.sock";
  control_limits limits;
  limits.first_request_timeout = std::chrono::milliseconds(200);
  limits.request_timeout = std::chrono::seconds(20);
  running_server s(path, limits);
  const auto start = std::chrono::steady_clock::now();
  const int slow = connect_to(path);
  send_all(slow, "{\"cmd\":");  // and nothing more
  const int idle = connect_to(path);
  // Both are closed by the server when first_request_timeout passes, long before
  // request_timeout would.
  CHECK(read_line(slow).empty());
  CHECK(read_line(idle).empty());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  ::close(slow);
  ::close(idle);
  CHECK(s.on_io([&] { return s.server->bad_requests(); }) == 2);
  // A client that asked once is given request_timeout for its next request.
  const int fd = connect_to(path);
  CHECK(ask(fd, R"({"cmd":"status"})")["ok"] == true);
  CHECK_FALSE(closed_by_server(fd, std::chrono::milliseconds(600)));
  CHECK(ask(fd, R"({"cmd":"status"})")["ok"] == true);
  ::close(fd);
}

TEST_CASE("control server: a later request line never finished times out") {
  const auto path = temp_dir() / "f.sock";
  control_limits limits;
  limits.request_timeout = std::chrono::milliseconds(200);
  running_server s(path, limits);
  const int fd = connect_to(path);
  CHECK(ask(fd, R"({"cmd":"status"})")["ok"] == true);
  send_all(fd, "{\"cmd\":");  // and nothing more
  CHECK(read_line(fd).empty());
  ::close(fd);
}

TEST_CASE("control server: max_connections idle connections cannot lock out a request") {
  const auto path = temp_dir() / "h.sock";
  control_limits limits;  // the daemon's max_connections
  // Long enough that nothing here times out: a connection closed was evicted.
  limits.first_request_timeout = std::chrono::minutes(1);
  limits.request_timeout = std::chrono::minutes(1);
  running_server s(path, limits);
  const auto count = [&] { return s.on_io([&] { return s.server->connections(); }); };
  std::vector<int> idle;
  for (std::size_t i = 0; i < limits.max_connections; ++i) {
    idle.push_back(connect_to(path));
    // One at a time: the server has accepted each before the next comes (a known idle order).
    for (int k = 0; k < 200 && count() != i + 1; ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(count() == i + 1);
  }
  // One of them sent part of a line and stalls: it is waiting too, but now idle for less long.
  send_all(idle[1], "{\"cmd\":");
  // A real request on a new connection is answered...
  const int fd = connect_to(path);
  const auto a = ask(fd, R"({"cmd":"status"})");
  CHECK(a["ok"] == true);
  CHECK(a["daemon"] == true);
  // ...at the cost of the connection idle longest: the first one, closed by the server.
  CHECK(closed_by_server(idle[0], std::chrono::seconds(5)));
  for (std::size_t i = 1; i < idle.size(); ++i) {
    INFO("idle connection " << i);
    CHECK_FALSE(closed_by_server(idle[i], std::chrono::milliseconds(50)));
  }
  CHECK(count() == limits.max_connections);
  // The next newcomer evicts the next oldest (the half line counts as idle); the new one that
  // asked was answered, so it has waited least.
  const int fd2 = connect_to(path);
  CHECK(ask(fd2, R"({"cmd":"status"})")["ok"] == true);
  CHECK(closed_by_server(idle[1], std::chrono::seconds(5)));
  CHECK_FALSE(closed_by_server(idle[2], std::chrono::milliseconds(50)));
  CHECK_FALSE(closed_by_server(fd, std::chrono::milliseconds(50)));
  // The others left standing still get answers.
  CHECK(ask(idle[2], R"({"cmd":"status"})")["ok"] == true);
  CHECK(ask(fd, R"({"cmd":"status"})")["ok"] == true);
  for (const int i : idle) ::close(i);
  ::close(fd);
  ::close(fd2);
}

TEST_CASE("control server: a connection with a request under way is never evicted") {
  const auto path = temp_dir() / "i.sock";
  control_limits limits;
  limits.max_connections = 2;
  limits.first_request_timeout = std::chrono::minutes(1);
  running_server s(path, limits);
  s.handler.hold = true;
  const int busy = connect_to(path);
  send_all(busy, "{\"cmd\":\"status\"}\n");  // its answer is held
  const auto held = [&] { return s.on_io([&] { return s.handler.held.size(); }); };
  for (int k = 0; k < 200 && held() != 1; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(held() == 1);
  const int idle = connect_to(path);
  // A third connection evicts the idle one, though the busy one is older.
  const int third = connect_to(path);
  CHECK(closed_by_server(idle, std::chrono::seconds(5)));
  CHECK_FALSE(closed_by_server(busy, std::chrono::milliseconds(50)));
  send_all(third, "{\"cmd\":\"status\"}\n");  // held too: now both are busy
  for (int k = 0; k < 200 && held() != 2; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(held() == 2);
  // With every connection answering, a newcomer is the one closed.
  const int fourth = connect_to(path);
  CHECK(closed_by_server(fourth, std::chrono::seconds(5)));
  CHECK_FALSE(closed_by_server(busy, std::chrono::milliseconds(50)));
  CHECK_FALSE(closed_by_server(third, std::chrono::milliseconds(50)));
  // Released, both answers arrive.
  s.handler.hold = false;
  s.on_io([&] {
    for (auto& f : s.handler.held) f();
    s.handler.held.clear();
    return 0;
  });
  for (const int fd : {busy, third}) {
    const auto line = read_line(fd);
    REQUIRE_FALSE(line.empty());
    CHECK(json::parse(line)["ok"] == true);
  }
  for (const int fd : {busy, idle, third, fourth}) ::close(fd);
}
