// batch_receiver on real UDP sockets: its SO_RXQ_OVFL count and receive_buffer_fill when the
// receive buffer overflows (docs/design-notes.md "Receiver overrun"), and its arrival dates
// (SO_TIMESTAMPNS, docs/design-notes.md "Rate auto"); send_many and batch_sender's GSO runs,
// datagram by datagram as received.
#include "common/net/udp.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

using mcdist::net::batch_receiver;
using mcdist::net::receive_buffer_fill;

namespace {

/// A UDP socket bound to 127.0.0.1 on an ephemeral port; closed on scope exit.
struct udp_fd {
  int fd = -1;
  sockaddr_in addr{};
  udp_fd() {
    fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    REQUIRE(fd >= 0);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  }
  ~udp_fd() { ::close(fd); }
  udp_fd(const udp_fd&) = delete;
  udp_fd& operator=(const udp_fd&) = delete;

  mcdist::endpoint endpoint() const {
    mcdist::endpoint to{};
    to.port = ntohs(addr.sin_port);
    std::memcpy(to.addr.data(), &addr.sin_addr, 4);
    return to;
  }

  /// Receives exactly `expected`, datagram by datagram in order, and then nothing more.
  void require_received(const std::vector<std::vector<std::byte>>& expected) const {
    std::array<std::byte, 2048> buf{};
    for (const auto& d : expected) {
      const auto n = ::recv(fd, buf.data(), buf.size(), 0);
      REQUIRE(n == static_cast<ssize_t>(d.size()));
      REQUIRE(std::memcmp(buf.data(), d.data(), d.size()) == 0);
    }
    REQUIRE(::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT) < 0);
  }
};

}  // namespace

TEST_CASE("a receive buffer that overflows: its fill, and the drop count on what follows",
          "[unit][net]") {
  udp_fd rx, tx;
  const int one = 1, small = 16 * 1024;  // the kernel doubles it and keeps a minimum
  REQUIRE(::setsockopt(rx.fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one) == 0);
  REQUIRE(::setsockopt(rx.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) == 0);
  REQUIRE(receive_buffer_fill(rx.fd) == 0);

  // Numbered datagrams, far more than the buffer holds, none read meanwhile.
  constexpr std::uint32_t sent = 400;
  std::array<std::byte, 1000> payload{};
  for (std::uint32_t i = 0; i < sent; ++i) {
    std::memcpy(payload.data(), &i, sizeof i);
    REQUIRE(::sendto(tx.fd, payload.data(), payload.size(), 0,
                     reinterpret_cast<const sockaddr*>(&rx.addr),
                     sizeof rx.addr) == static_cast<ssize_t>(payload.size()));
  }
  const double fill = receive_buffer_fill(rx.fd);
  REQUIRE(fill > 0.5);  // full up to the last datagram it could take

  batch_receiver br(16, 2048);
  std::vector<std::uint32_t> numbers, drops;
  std::error_code ec;
  // Reads what is queued: each datagram's number and the drop count it carries.
  auto drain = [&] {
    numbers.clear();
    drops.clear();
    return br.drain(
        rx.fd, SIZE_MAX,
        [&](std::span<const std::byte> d, const mcdist::endpoint&) {
          std::uint32_t n = 0;
          std::memcpy(&n, d.data(), sizeof n);
          numbers.push_back(n);
          drops.push_back(br.socket_drops());
        },
        ec);
  };
  const std::size_t got = drain();
  REQUIRE_FALSE(ec);
  REQUIRE(got == numbers.size());
  REQUIRE(got < sent);
  REQUIRE(receive_buffer_fill(rx.fd) == 0);  // drained
  // The first datagrams were queued before any drop; the kernel dropped every later one, so
  // what was read is 0..got-1 in order, each carrying the count as of its queueing: 0.
  for (std::size_t i = 0; i < numbers.size(); ++i) REQUIRE(numbers[i] == i);
  REQUIRE(drops.back() == 0);

  // One more datagram, queued after the drops: it carries their count.
  const std::uint32_t last = sent;
  std::memcpy(payload.data(), &last, sizeof last);
  REQUIRE(::sendto(tx.fd, payload.data(), payload.size(), 0,
                   reinterpret_cast<const sockaddr*>(&rx.addr),
                   sizeof rx.addr) == static_cast<ssize_t>(payload.size()));
  REQUIRE(drain() == 1);
  REQUIRE(numbers.front() == sent);
  REQUIRE(drops.front() == sent - got);  // every datagram not read was dropped, and counted
}

TEST_CASE("each datagram carries the time the kernel received it, on the steady clock",
          "[unit][net]") {
  using clock = std::chrono::steady_clock;
  udp_fd rx, tx;
  auto send = [&](std::uint32_t n) {
    REQUIRE(::sendto(tx.fd, &n, sizeof n, 0, reinterpret_cast<const sockaddr*>(&rx.addr),
                     sizeof rx.addr) == static_cast<ssize_t>(sizeof n));
  };
  batch_receiver br(16, 2048);
  std::vector<std::optional<clock::time_point>> arrivals;
  std::error_code ec;
  auto drain = [&] {
    arrivals.clear();
    return br.drain(
        rx.fd, SIZE_MAX,
        [&](std::span<const std::byte>, const mcdist::endpoint&) {
          arrivals.push_back(br.arrival());
        },
        ec);
  };
  // Without SO_TIMESTAMPNS: no date.
  send(0);
  REQUIRE(drain() == 1);
  REQUIRE_FALSE(arrivals[0]);

  const int one = 1;
  REQUIRE(::setsockopt(rx.fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) == 0);
  // The kernel turns receive dating on for every packet a little after the first socket asks
  // (net_enable_timestamp(), from a work queue); until then it dates a datagram when it is
  // read. Wait for a probe dated before the read began.
  bool dated_on_arrival = false;
  for (int i = 0; i < 1000 && !dated_on_arrival; ++i) {
    send(100);
    const auto sent = clock::now();
    while (clock::now() - sent < std::chrono::microseconds(200)) {
    }
    const auto before_read = clock::now();
    REQUIRE(drain() == 1);
    dated_on_arrival = arrivals[0] && *arrivals[0] < before_read;
  }
  REQUIRE(dated_on_arrival);
  // Two datagrams 20 ms apart, read together: each keeps its own arrival, within the times
  // around its send (the clocks' conversion is exact to far below the 1 ms allowed).
  constexpr auto slack = std::chrono::milliseconds(1);
  const auto before_first = clock::now();
  send(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the spacing under test
  const auto before_second = clock::now();
  send(2);
  REQUIRE(drain() == 2);
  const auto after_read = clock::now();
  REQUIRE_FALSE(ec);
  REQUIRE(arrivals[0]);
  REQUIRE(arrivals[1]);
  CHECK(*arrivals[0] >= before_first - slack);
  // Dated before the second was sent, not at the read: on loopback the kernel dates a datagram
  // inside the sender's sendto (netif_rx), or at the latest when its softirq runs, well
  // within the 20 ms.
  CHECK(*arrivals[0] <= before_second);
  CHECK(*arrivals[1] >= before_second - slack);
  CHECK(*arrivals[1] <= after_read);
  CHECK(*arrivals[1] - *arrivals[0] >= std::chrono::milliseconds(20) - 2 * slack);
}

TEST_CASE("send_many sends datagrams of different sizes in order, past one call's 64",
          "[unit][net]") {
  udp_fd rx, tx;
  const int big = 4 << 20;
  REQUIRE(::setsockopt(rx.fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big) == 0);
  // 150 datagrams of 1..1500 bytes (three sendmmsg calls), each starting with its number.
  std::vector<std::vector<std::byte>> datagrams;
  for (std::uint32_t i = 0; i < 150; ++i) {
    std::vector<std::byte> d(4 + (i * 37) % 1497, std::byte{static_cast<unsigned char>(i)});
    std::memcpy(d.data(), &i, sizeof i);
    datagrams.push_back(std::move(d));
  }
  std::vector<std::span<const std::byte>> spans(datagrams.begin(), datagrams.end());
  const mcdist::endpoint to = rx.endpoint();
  std::error_code ec;
  REQUIRE(mcdist::net::send_many(tx.fd, to, spans, ec) == datagrams.size());
  REQUIRE_FALSE(ec);
  rx.require_received(datagrams);

  // A closed descriptor: nothing sent, the error said.
  const int closed = ::dup(tx.fd);
  ::close(closed);
  REQUIRE(mcdist::net::send_many(closed, to, spans, ec) == 0);
  REQUIRE(ec);
}

TEST_CASE("batch_sender sends GSO runs of several files in one call, each datagram whole",
          "[unit][net]") {
  udp_fd rx, tx;
  const int big = 4 << 20;
  REQUIRE(::setsockopt(rx.fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big) == 0);
  // Runs as the sender lays out small files: full segments and a short last one, a run of one
  // short datagram, a run of exact segments, then 70 one-datagram runs (past one call's 64).
  struct run_spec {
    std::size_t segment;
    std::vector<std::size_t> sizes;
  };
  std::vector<run_spec> specs{{1000, {1000, 1000, 1000, 300}}, {1000, {50}}, {1200, {1200, 1200}}};
  for (std::size_t i = 0; i < 70; ++i) specs.push_back({1400, {1 + i * 13}});
  std::vector<std::vector<std::byte>> buffers;
  std::vector<std::vector<std::byte>> expected;  // each datagram, in order
  std::uint32_t no = 0;
  for (const auto& sp : specs) {
    std::vector<std::byte> b;
    for (std::size_t size : sp.sizes) {
      std::vector<std::byte> d(size, std::byte{static_cast<unsigned char>(no * 7)});
      std::memcpy(d.data(), &no, std::min(sizeof no, size));
      ++no;
      b.insert(b.end(), d.begin(), d.end());
      expected.push_back(std::move(d));
    }
    buffers.push_back(std::move(b));
  }
  std::vector<mcdist::net::gso_run> runs;
  for (std::size_t i = 0; i < specs.size(); ++i)
    runs.push_back({std::span<const std::byte>(buffers[i]), specs[i].segment});
  CHECK(runs[0].count() == 4);
  CHECK(runs[1].count() == 1);
  CHECK(runs[2].count() == 2);

  const mcdist::endpoint to = rx.endpoint();
  // With GSO, and as on a path whose kernel refused it (every datagram on its own).
  for (const bool gso : {true, false}) {
    mcdist::net::batch_sender sender(gso);
    std::error_code ec;
    REQUIRE(sender.send(tx.fd, to, std::span<const mcdist::net::gso_run>(runs), ec) ==
            expected.size());
    REQUIRE_FALSE(ec);
    rx.require_received(expected);
  }

  // A closed descriptor: nothing sent, the error said.
  const int closed = ::dup(tx.fd);
  ::close(closed);
  mcdist::net::batch_sender sender;
  std::error_code ec;
  REQUIRE(sender.send(closed, to, std::span<const mcdist::net::gso_run>(runs), ec) == 0);
  REQUIRE(ec);
}
