#include "tools/mcdistctl/client.hpp"

#include "feed/control_protocol.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mcdist::ctl {
namespace {

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

std::string errno_text(int e) { return std::strerror(e); }

/// Milliseconds left until `deadline` (at least 0), for poll().
int left_ms(std::chrono::steady_clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
  return ms > 0 ? static_cast<int>(ms) : 0;
}

}  // namespace

std::variant<nlohmann::json, call_error> call(const std::filesystem::path& socket,
                                              const nlohmann::json& request,
                                              std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto where = socket.string();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (where.size() >= sizeof addr.sun_path)
    return call_error{true, where + ": path too long for a Unix socket"};
  std::memcpy(addr.sun_path, where.c_str(), where.size() + 1);

  fd_guard g{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (g.fd < 0) return call_error{false, "socket: " + errno_text(errno)};
  if (::connect(g.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    return call_error{true, where + ": " + errno_text(e)};
  }

  const auto line = feed::to_line(request);
  std::size_t sent = 0;
  while (sent < line.size()) {
    pollfd p{g.fd, POLLOUT, 0};
    if (::poll(&p, 1, left_ms(deadline)) <= 0)
      return call_error{false, where + ": timed out sending the request"};
    const auto n = ::send(g.fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return call_error{false, where + ": " + errno_text(errno)};
    }
    sent += static_cast<std::size_t>(n);
  }

  std::string answer;
  char buf[65536];
  for (;;) {
    pollfd p{g.fd, POLLIN, 0};
    if (::poll(&p, 1, left_ms(deadline)) <= 0)
      return call_error{false, where + ": no answer from mcdist-feed within " +
                                   std::to_string(timeout.count() / 1000) + " s"};
    const auto n = ::read(g.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return call_error{false, where + ": " + errno_text(errno)};
    }
    if (n == 0) return call_error{false, where + ": mcdist-feed closed the connection unanswered"};
    const auto before = answer.size();
    answer.append(buf, static_cast<std::size_t>(n));
    const auto nl = answer.find('\n', before);
    if (nl != std::string::npos) {
      answer.resize(nl);
      break;
    }
    if (answer.size() > max_answer_bytes)
      return call_error{false, where + ": answer larger than 256 MiB"};
  }
  auto j = nlohmann::json::parse(answer, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return call_error{false, where + ": the answer is not a JSON object (not mcdist-feed?)"};
  return j;
}

}  // namespace mcdist::ctl
