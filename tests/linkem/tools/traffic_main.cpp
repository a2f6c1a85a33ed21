// mcdist-linkem-traffic: traffic generator and measurement tool for validating
// mcdist-linkem (and for quick experiments across it).
//
//   send        numbered UDP datagrams (unicast or multicast), paced, optionally with
//               UDP GSO (UDP_SEGMENT) like mcdist-send; handshake with receivers first
//   recv        receives them (recvmmsg or UDP_GRO), reports loss, loss bursts,
//               duplicates, reordering, one-way delay and throughput
//   echo / ping UDP round-trip time measurement
//   tcp-source / tcp-sink  TCP bulk transfer with content verification
//
// Results go to stdout as one JSON object per command (or to --json FILE). Timestamps
// are CLOCK_MONOTONIC, which every network namespace shares, so one-way delays between
// emulated hosts are exact.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tests/linkem/core/rng.hpp"
#include "tests/linkem/core/scenario.hpp"
#include "tests/linkem/core/sequence_tracker.hpp"
#include "tests/linkem/core/units.hpp"

namespace {

using namespace mcdist::linkem;

#ifndef UDP_SEGMENT
constexpr int UDP_SEGMENT = 103;
#endif
#ifndef UDP_GRO
constexpr int UDP_GRO = 104;
#endif

/// Test datagram header, network byte order. Magic "MLET".
constexpr std::uint32_t k_magic = 0x4D4C4554;
constexpr std::size_t k_header_size = 32;
enum message_type : std::uint8_t { msg_hello = 1, msg_hello_ack = 2, msg_data = 3, msg_end = 4 };

/// Largest UDP payload handled (64 KiB minus IP and UDP headers).
constexpr std::size_t k_max_datagram = 65507;
/// Datagrams per recvmmsg call.
constexpr std::size_t k_recv_batch = 64;
/// Interval between HELLO probes while waiting for receivers, and between END repeats.
constexpr auto k_hello_interval = std::chrono::milliseconds(20);

struct header {
  std::uint8_t type = 0;
  std::uint32_t stream = 0;
  std::uint32_t receiver = 0;
  std::uint64_t seq = 0;
  std::uint64_t time_ns = 0;
};

void put32(std::uint8_t* p, std::uint32_t v) {
  v = htonl(v);
  std::memcpy(p, &v, 4);
}
std::uint32_t get32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  std::memcpy(&v, p, 4);
  return ntohl(v);
}
void put64(std::uint8_t* p, std::uint64_t v) {
  put32(p, static_cast<std::uint32_t>(v >> 32U));
  put32(p + 4, static_cast<std::uint32_t>(v));
}
std::uint64_t get64(const std::uint8_t* p) {
  return (static_cast<std::uint64_t>(get32(p)) << 32U) | get32(p + 4);
}

void encode(const header& h, std::uint8_t* p) {
  put32(p, k_magic);
  p[4] = h.type;
  p[5] = p[6] = p[7] = 0;
  put32(p + 8, h.stream);
  put32(p + 12, h.receiver);
  put64(p + 16, h.seq);
  put64(p + 24, h.time_ns);
}

bool decode(const std::uint8_t* p, std::size_t len, header& h) {
  if (len < k_header_size || get32(p) != k_magic) {
    return false;
  }
  h.type = p[4];
  h.stream = get32(p + 8);
  h.receiver = get32(p + 12);
  h.seq = get64(p + 16);
  h.time_ns = get64(p + 24);
  return true;
}

std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void sleep_until_ns(std::int64_t t) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(t / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(t % 1'000'000'000);
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "mcdist-linkem-traffic: %s\n", msg.c_str());
  std::exit(1);
}

[[noreturn]] void die_errno(const std::string& what) { die(what + ": " + std::strerror(errno)); }

sockaddr_in parse_endpoint(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    die("endpoint '" + text + "' must be ADDRESS:PORT");
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  try {
    sa.sin_addr.s_addr = htonl(parse_ipv4(text.substr(0, colon)));
    sa.sin_port = htons(static_cast<std::uint16_t>(parse_count(text.substr(colon + 1), 65535)));
  } catch (const config_error& e) {
    die(e.what());
  }
  return sa;
}

void emit_json(const std::string& json, const std::string& path) {
  if (path.empty()) {
    std::printf("%s\n", json.c_str());
    std::fflush(stdout);
    return;
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << json << "\n";
    if (!f) {
      die("cannot write " + tmp);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    die_errno("rename " + tmp);
  }
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

int udp_socket(std::size_t buffer_bytes) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    die_errno("socket");
  }
  const int size = static_cast<int>(buffer_bytes);
  // FORCE variants ignore rmem_max/wmem_max (we run as root in the namespaces).
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) != 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) != 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
  return fd;
}

std::uint32_t random_id() {
  std::random_device rd;
  return static_cast<std::uint32_t>(rd()) | 1U;
}

// ---------------------------------------------------------------------------------------
// send

struct send_options {
  std::string to;
  std::size_t size = 1400;
  std::string rate = "100Mbit";
  std::uint64_t count = 0;
  std::string duration;
  unsigned gso = 1;
  unsigned expect = 0;
  std::string hello_timeout = "10s";
  unsigned ttl = 8;
  unsigned end_repeats = 10;
  std::string json;
};

int run_send(const send_options& o) {
  const sockaddr_in dst = parse_endpoint(o.to);
  if (o.size < k_header_size || o.size > k_max_datagram) {
    die("--size must be between 32 and 65507 bytes");
  }
  if (o.gso < 1 || o.gso * o.size > 65000) {
    die("--gso segments times --size must stay below 65000 bytes");
  }
  if (o.count == 0 && o.duration.empty()) {
    die("give --count or --duration");
  }
  double rate = 0;
  std::int64_t duration_ns = 0;
  std::int64_t hello_timeout_ns = 0;
  try {
    rate = parse_bit_rate(o.rate);
    if (!o.duration.empty()) {
      duration_ns = parse_duration(o.duration).count();
    }
    hello_timeout_ns = parse_duration(o.hello_timeout).count();
  } catch (const config_error& e) {
    die(e.what());
  }

  const int fd = udp_socket(8U << 20U);
  const unsigned char ttl = static_cast<unsigned char>(o.ttl);
  ::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl);
  const unsigned char loop = 0;
  ::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop);
  const std::uint32_t stream = random_id();

  // Handshake: HELLO until `expect` distinct receivers answered. Receivers answer only
  // once their group membership is in place (they received the HELLO), so no data is
  // sent into a group nobody has joined yet.
  std::set<std::uint32_t> receivers;
  std::array<std::uint8_t, 2048> rbuf{};
  const std::int64_t hello_start = now_ns();
  std::int64_t hello_rtt_first_ns = -1;
  while (receivers.size() < o.expect) {
    if (now_ns() - hello_start > hello_timeout_ns) {
      die("only " + std::to_string(receivers.size()) + " of " + std::to_string(o.expect) +
          " receivers answered within --hello-timeout");
    }
    std::array<std::uint8_t, k_header_size> hello{};
    encode({msg_hello, stream, 0, 0, static_cast<std::uint64_t>(now_ns())}, hello.data());
    ::sendto(fd, hello.data(), hello.size(), 0, reinterpret_cast<const sockaddr*>(&dst),
             sizeof dst);
    const std::int64_t until = now_ns() + std::chrono::nanoseconds(k_hello_interval).count();
    for (std::int64_t left = until - now_ns(); left > 0; left = until - now_ns()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(1, left / 1'000'000))) <= 0) {
        continue;
      }
      const ssize_t n = ::recv(fd, rbuf.data(), rbuf.size(), MSG_DONTWAIT);
      header h;
      if (n > 0 && decode(rbuf.data(), static_cast<std::size_t>(n), h) && h.type == msg_hello_ack &&
          h.stream == stream) {
        receivers.insert(h.receiver);
        if (hello_rtt_first_ns < 0) {
          hello_rtt_first_ns = now_ns() - static_cast<std::int64_t>(h.time_ns);
        }
      }
    }
  }

  if (o.gso > 1) {
    const int seg = static_cast<int>(o.size);
    if (::setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) != 0) {
      die_errno("UDP_SEGMENT (UDP GSO needs Linux >= 4.18)");
    }
  }
  std::vector<std::uint8_t> batch(o.size * o.gso, 0);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    batch[i] = static_cast<std::uint8_t>(i * 7U);
  }
  const std::int64_t t0 = now_ns();
  std::uint64_t seq = 0;
  std::uint64_t send_errors = 0;
  double bits_sent = 0;
  const double ns_per_bit = 1e9 / rate;
  for (;;) {
    const std::int64_t now = now_ns();
    if (o.count > 0 && seq >= o.count) {
      break;
    }
    if (duration_ns > 0 && now - t0 >= duration_ns) {
      break;
    }
    const auto due = t0 + static_cast<std::int64_t>(bits_sent * ns_per_bit);
    if (due > now) {
      sleep_until_ns(due);
    }
    std::uint64_t n = o.gso;
    if (o.count > 0) {
      n = std::min<std::uint64_t>(n, o.count - seq);
    }
    const auto stamp = static_cast<std::uint64_t>(now_ns());
    for (std::uint64_t i = 0; i < n; ++i) {
      encode({msg_data, stream, 0, seq + i, stamp}, batch.data() + i * o.size);
    }
    const std::size_t len = n * o.size;
    if (::sendto(fd, batch.data(), len, 0, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) <
        0) {
      if (errno == ENOBUFS || errno == EAGAIN || errno == EINTR) {
        ++send_errors;
        continue;  // retry the same batch
      }
      die_errno("sendto");
    }
    seq += n;
    bits_sent += static_cast<double>(len) * 8;
  }
  const std::int64_t t1 = now_ns();
  if (o.gso > 1) {
    const int off = 0;
    ::setsockopt(fd, SOL_UDP, UDP_SEGMENT, &off, sizeof off);
  }
  // END carries the count; repeated so that loss on the way does not hide it.
  for (unsigned i = 0; i < o.end_repeats; ++i) {
    std::array<std::uint8_t, k_header_size> end{};
    encode({msg_end, stream, 0, seq, static_cast<std::uint64_t>(now_ns())}, end.data());
    ::sendto(fd, end.data(), end.size(), 0, reinterpret_cast<const sockaddr*>(&dst), sizeof dst);
    sleep_until_ns(now_ns() + 1'000'000);
  }
  ::close(fd);
  const double secs = static_cast<double>(t1 - t0) / 1e9;
  std::string j =
      "{\"mode\":\"send\",\"sent\":" + std::to_string(seq) +
      ",\"bytes\":" + std::to_string(seq * o.size) + ",\"size\":" + std::to_string(o.size) +
      ",\"gso\":" + std::to_string(o.gso) + ",\"seconds\":" + fmt("%.6f", secs) +
      ",\"rate_bps\":" + fmt("%.0f", secs > 0 ? static_cast<double>(seq * o.size) * 8 / secs : 0) +
      ",\"send_errors\":" + std::to_string(send_errors) +
      ",\"receivers\":" + std::to_string(receivers.size()) +
      ",\"hello_rtt_ms\":" + fmt("%.3f", static_cast<double>(hello_rtt_first_ns) / 1e6) + "}";
  emit_json(j, o.json);
  return 0;
}

// ---------------------------------------------------------------------------------------
// recv

struct recv_options {
  unsigned port = 5000;
  std::string group;
  std::string bind_address = "0.0.0.0";
  bool gro = false;
  std::string linger = "200ms";
  std::string start_timeout = "30s";
  std::string idle_timeout = "10s";
  std::string rcvbuf = "64MiB";
  std::string json;
  unsigned id = 0;
};

struct delay_stats {
  std::int64_t min = std::numeric_limits<std::int64_t>::max();
  std::int64_t max = std::numeric_limits<std::int64_t>::min();
  double sum = 0;
  std::uint64_t n = 0;
  void add(std::int64_t v) {
    min = std::min(min, v);
    max = std::max(max, v);
    sum += static_cast<double>(v);
    ++n;
  }
};

int run_recv(const recv_options& o) {
  std::int64_t linger_ns = 0;
  std::int64_t start_timeout_ns = 0;
  std::int64_t idle_timeout_ns = 0;
  std::uint64_t rcvbuf = 0;
  try {
    linger_ns = parse_duration(o.linger).count();
    start_timeout_ns = parse_duration(o.start_timeout).count();
    idle_timeout_ns = parse_duration(o.idle_timeout).count();
    rcvbuf = parse_byte_size(o.rcvbuf);
  } catch (const config_error& e) {
    die(e.what());
  }
  const int fd = udp_socket(static_cast<std::size_t>(rcvbuf));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_port = htons(static_cast<std::uint16_t>(o.port));
  try {
    local.sin_addr.s_addr =
        htonl(o.group.empty() ? parse_ipv4(o.bind_address) : parse_ipv4(o.group));
  } catch (const config_error& e) {
    die(e.what());
  }
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
    die_errno("bind");
  }
  if (!o.group.empty()) {
    ip_mreqn m{};
    m.imr_multiaddr.s_addr = local.sin_addr.s_addr;
    if (::setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
      die_errno("IP_ADD_MEMBERSHIP " + o.group);
    }
  }
  if (o.gro && ::setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) != 0) {
    die_errno("UDP_GRO");
  }
  const std::uint32_t my_id = o.id != 0 ? o.id : random_id();

  const std::size_t slot = o.gro ? 65536 : 2048;
  std::vector<std::uint8_t> storage(slot * k_recv_batch);
  std::array<mmsghdr, k_recv_batch> msgs{};
  std::array<iovec, k_recv_batch> iovs{};
  std::array<sockaddr_in, k_recv_batch> froms{};
  std::array<std::array<char, 64>, k_recv_batch> controls{};

  sequence_tracker tracker;
  delay_stats delay;
  std::uint32_t stream = 0;
  bool end_seen = false;
  std::uint64_t total = 0;
  std::uint64_t bytes = 0;
  std::uint64_t gro_batches = 0;
  std::uint64_t foreign = 0;
  std::int64_t first_ns = 0;
  std::int64_t last_ns = 0;
  std::int64_t end_deadline = 0;
  const std::int64_t started = now_ns();
  std::uint64_t datagram_size = 0;

  auto handle = [&](const std::uint8_t* p, std::size_t len, const sockaddr_in& from,
                    std::int64_t t) {
    header h;
    if (!decode(p, len, h)) {
      ++foreign;
      return;
    }
    if (stream == 0 && (h.type == msg_hello || h.type == msg_data)) {
      stream = h.stream;
    }
    if (h.stream != stream) {
      ++foreign;
      return;
    }
    switch (h.type) {
      case msg_hello: {
        std::array<std::uint8_t, k_header_size> ack{};
        encode({msg_hello_ack, stream, my_id, 0, h.time_ns}, ack.data());
        ::sendto(fd, ack.data(), ack.size(), 0, reinterpret_cast<const sockaddr*>(&from),
                 sizeof from);
        break;
      }
      case msg_data:
        tracker.record(h.seq);
        delay.add(t - static_cast<std::int64_t>(h.time_ns));
        bytes += len;
        datagram_size = len;
        if (first_ns == 0) {
          first_ns = t;
        }
        last_ns = t;
        break;
      case msg_end:
        if (!end_seen) {
          end_seen = true;
          total = h.seq;
          end_deadline = t + linger_ns;
        }
        break;
      default: ++foreign; break;
    }
  };

  for (;;) {
    const std::int64_t now = now_ns();
    std::int64_t deadline = 0;
    if (end_seen) {
      deadline = end_deadline;
    } else if (first_ns == 0) {
      deadline = started + start_timeout_ns;
    } else {
      deadline = std::max(last_ns, first_ns) + idle_timeout_ns;
    }
    if (now >= deadline) {
      break;
    }
    pollfd p{fd, POLLIN, 0};
    const int pr =
        ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(1, (deadline - now) / 1'000'000)));
    if (pr <= 0) {
      continue;
    }
    for (std::size_t i = 0; i < k_recv_batch; ++i) {
      iovs[i] = {storage.data() + i * slot, slot};
      msgs[i].msg_hdr = {};
      msgs[i].msg_hdr.msg_iov = &iovs[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_name = &froms[i];
      msgs[i].msg_hdr.msg_namelen = sizeof froms[i];
      msgs[i].msg_hdr.msg_control = controls[i].data();
      msgs[i].msg_hdr.msg_controllen = controls[i].size();
    }
    const int n = ::recvmmsg(fd, msgs.data(), k_recv_batch, MSG_DONTWAIT, nullptr);
    if (n <= 0) {
      continue;
    }
    const std::int64_t t = now_ns();
    for (int i = 0; i < n; ++i) {
      const auto& m = msgs[static_cast<std::size_t>(i)];
      const std::uint8_t* base = storage.data() + static_cast<std::size_t>(i) * slot;
      std::size_t seg = m.msg_len;
      for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr); c != nullptr;
           c = CMSG_NXTHDR(const_cast<msghdr*>(&m.msg_hdr), c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
          int gso_size = 0;
          std::memcpy(&gso_size, CMSG_DATA(c), sizeof gso_size);
          seg = static_cast<std::size_t>(gso_size);
          ++gro_batches;
        }
      }
      for (std::size_t off = 0; off < m.msg_len; off += seg) {
        handle(base + off, std::min<std::size_t>(seg, m.msg_len - off),
               froms[static_cast<std::size_t>(i)], t);
      }
    }
  }
  ::close(fd);
  const auto s = tracker.summarize(end_seen ? total : 0);
  const double secs = last_ns > first_ns ? static_cast<double>(last_ns - first_ns) / 1e9 : 0;
  const double rate = secs > 0 ? static_cast<double>(bytes) * 8 / secs : 0;
  std::string j =
      "{\"mode\":\"recv\",\"end_seen\":" + std::string(end_seen ? "true" : "false") +
      ",\"total\":" + std::to_string(s.total) + ",\"received\":" + std::to_string(s.received) +
      ",\"unique\":" + std::to_string(s.unique) + ",\"lost\":" + std::to_string(s.lost) +
      ",\"duplicates\":" + std::to_string(s.duplicates) +
      ",\"reordered\":" + std::to_string(s.reordered) +
      ",\"loss_bursts\":" + std::to_string(s.loss_bursts) +
      ",\"mean_burst\":" + fmt("%.4f", s.mean_burst) +
      ",\"max_burst\":" + std::to_string(s.max_burst) +
      ",\"out_of_range\":" + std::to_string(s.out_of_range) +
      ",\"bytes\":" + std::to_string(bytes) +
      ",\"datagram_size\":" + std::to_string(datagram_size) + ",\"seconds\":" + fmt("%.6f", secs) +
      ",\"rate_bps\":" + fmt("%.0f", rate) +
      ",\"delay_min_ms\":" + fmt("%.3f", delay.n ? static_cast<double>(delay.min) / 1e6 : 0) +
      ",\"delay_avg_ms\":" +
      fmt("%.3f", delay.n ? delay.sum / static_cast<double>(delay.n) / 1e6 : 0) +
      ",\"delay_max_ms\":" + fmt("%.3f", delay.n ? static_cast<double>(delay.max) / 1e6 : 0) +
      ",\"gro_batches\":" + std::to_string(gro_batches) +
      ",\"foreign\":" + std::to_string(foreign) + "}";
  emit_json(j, o.json);
  return end_seen ? 0 : 1;
}

// ---------------------------------------------------------------------------------------
// echo / ping

int run_echo(unsigned port, std::uint64_t count) {
  const int fd = udp_socket(4U << 20U);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
    die_errno("bind");
  }
  std::array<std::uint8_t, 65536> buf{};
  for (std::uint64_t n = 0; count == 0 || n < count; ++n) {
    sockaddr_in from{};
    socklen_t fl = sizeof from;
    const ssize_t r =
        ::recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (r < 0) {
      if (errno == EINTR) {
        continue;
      }
      die_errno("recvfrom");
    }
    ::sendto(fd, buf.data(), static_cast<std::size_t>(r), 0,
             reinterpret_cast<const sockaddr*>(&from), fl);
  }
  return 0;
}

struct ping_options {
  std::string to;
  std::uint64_t count = 100;
  std::string interval = "20ms";
  std::size_t size = 64;
  std::string wait = "3s";
  std::string warmup_timeout = "10s";
  std::string json;
};

int run_ping(const ping_options& o) {
  const sockaddr_in dst = parse_endpoint(o.to);
  std::int64_t interval_ns = 0;
  std::int64_t wait_ns = 0;
  std::int64_t warmup_ns = 0;
  try {
    interval_ns = parse_duration(o.interval).count();
    wait_ns = parse_duration(o.wait).count();
    warmup_ns = parse_duration(o.warmup_timeout).count();
  } catch (const config_error& e) {
    die(e.what());
  }
  if (o.size < k_header_size || o.size > k_max_datagram) {
    die("--size must be between 32 and 65507");
  }
  const int fd = udp_socket(4U << 20U);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) != 0) {
    die_errno("connect");
  }
  const std::uint32_t stream = random_id();
  std::vector<std::uint8_t> out(o.size, 0);
  std::array<std::uint8_t, 65536> in{};
  std::vector<double> rtts;
  std::vector<bool> answered(o.count, false);

  // Warm-up: probe until the echo server answers once (it may start after us).
  const std::int64_t warm_start = now_ns();
  bool warm = false;
  while (!warm) {
    if (now_ns() - warm_start > warmup_ns) {
      die("no echo from " + o.to + " within --warmup-timeout");
    }
    encode({msg_hello, stream, 0, 0, static_cast<std::uint64_t>(now_ns())}, out.data());
    ::send(fd, out.data(), out.size(), 0);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      const ssize_t n = ::recv(fd, in.data(), in.size(), MSG_DONTWAIT);
      header h;
      warm = n > 0 && decode(in.data(), static_cast<std::size_t>(n), h) && h.stream == stream;
    }
  }

  auto drain = [&](std::int64_t until) {
    for (;;) {
      const std::int64_t left = until - now_ns();
      if (left <= 0) {
        return;
      }
      pollfd p{fd, POLLIN, 0};
      // poll has millisecond resolution; the timestamp is taken after the receive, so
      // the resolution of the wait does not affect the RTT measured.
      if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(1, left / 1'000'000))) <= 0) {
        continue;
      }
      for (;;) {
        const ssize_t n = ::recv(fd, in.data(), in.size(), MSG_DONTWAIT);
        if (n <= 0) {
          break;
        }
        const std::int64_t t = now_ns();
        header h;
        if (decode(in.data(), static_cast<std::size_t>(n), h) && h.stream == stream &&
            h.type == msg_data && h.seq < o.count && !answered[h.seq]) {
          answered[h.seq] = true;
          rtts.push_back(static_cast<double>(t - static_cast<std::int64_t>(h.time_ns)) / 1e6);
        }
      }
      if (rtts.size() == o.count) {
        return;
      }
    }
  };

  const std::int64_t t0 = now_ns();
  for (std::uint64_t i = 0; i < o.count; ++i) {
    const std::int64_t due = t0 + static_cast<std::int64_t>(i) * interval_ns;
    drain(due);
    encode({msg_data, stream, 0, i, static_cast<std::uint64_t>(now_ns())}, out.data());
    ::send(fd, out.data(), out.size(), 0);
  }
  drain(now_ns() + wait_ns);
  ::close(fd);

  std::vector<double> sorted = rtts;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double q) {
    if (sorted.empty()) {
      return 0.0;
    }
    const auto idx = static_cast<std::size_t>(std::min<double>(
        static_cast<double>(sorted.size() - 1), q * static_cast<double>(sorted.size() - 1) + 0.5));
    return sorted[idx];
  };
  double sum = 0;
  for (const double r : rtts) {
    sum += r;
  }
  const double avg = rtts.empty() ? 0 : sum / static_cast<double>(rtts.size());
  std::string j = "{\"mode\":\"ping\",\"sent\":" + std::to_string(o.count) +
                  ",\"received\":" + std::to_string(rtts.size()) +
                  ",\"rtt_min_ms\":" + fmt("%.4f", sorted.empty() ? 0 : sorted.front()) +
                  ",\"rtt_avg_ms\":" + fmt("%.4f", avg) +
                  ",\"rtt_median_ms\":" + fmt("%.4f", pct(0.5)) +
                  ",\"rtt_p99_ms\":" + fmt("%.4f", pct(0.99)) +
                  ",\"rtt_max_ms\":" + fmt("%.4f", sorted.empty() ? 0 : sorted.back()) + "}";
  emit_json(j, o.json);
  return rtts.empty() ? 1 : 0;
}

// ---------------------------------------------------------------------------------------
// TCP bulk transfer with verification

/// Byte at stream offset `off`: a SplitMix64 stream, so corruption, duplication or a
/// shifted segment cannot go unnoticed.
inline std::uint8_t pattern_byte(std::uint64_t off) {
  return static_cast<std::uint8_t>(splitmix64(off / 8) >> ((off % 8) * 8));
}

void fill_pattern(std::uint8_t* p, std::size_t n, std::uint64_t off) {
  std::size_t i = 0;
  while (i < n && (off + i) % 8 != 0) {
    p[i] = pattern_byte(off + i);
    ++i;
  }
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t w = splitmix64((off + i) / 8);
    std::memcpy(p + i, &w, 8);  // little-endian: byte k = w >> 8k, as pattern_byte
  }
  for (; i < n; ++i) {
    p[i] = pattern_byte(off + i);
  }
}

int run_tcp_sink(unsigned port, const std::string& json) {
  const int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(ls, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0 ||
      ::listen(ls, 1) != 0) {
    die_errno("bind/listen");
  }
  const int fd = ::accept(ls, nullptr, nullptr);
  if (fd < 0) {
    die_errno("accept");
  }
  std::vector<std::uint8_t> buf(1U << 20U);
  std::vector<std::uint8_t> expect(buf.size());
  std::uint64_t off = 0;
  std::uint64_t first_bad = std::numeric_limits<std::uint64_t>::max();
  const std::int64_t t0 = now_ns();
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      die_errno("read");
    }
    if (n == 0) {
      break;
    }
    const auto len = static_cast<std::size_t>(n);
    if (first_bad == std::numeric_limits<std::uint64_t>::max()) {
      fill_pattern(expect.data(), len, off);
      if (std::memcmp(expect.data(), buf.data(), len) != 0) {
        for (std::size_t i = 0; i < len; ++i) {
          if (expect[i] != buf[i]) {
            first_bad = off + i;
            break;
          }
        }
      }
    }
    off += len;
  }
  const std::int64_t t1 = now_ns();
  ::close(fd);
  ::close(ls);
  const double secs = static_cast<double>(t1 - t0) / 1e9;
  const bool ok = first_bad == std::numeric_limits<std::uint64_t>::max();
  std::string j = "{\"mode\":\"tcp-sink\",\"bytes\":" + std::to_string(off) +
                  ",\"seconds\":" + fmt("%.6f", secs) + ",\"rate_bps\":" +
                  fmt("%.0f", secs > 0 ? static_cast<double>(off) * 8 / secs : 0) +
                  ",\"verified\":" + (ok ? "true" : "false") +
                  (ok ? std::string() : ",\"first_bad_offset\":" + std::to_string(first_bad)) + "}";
  emit_json(j, json);
  return ok ? 0 : 1;
}

int run_tcp_source(const std::string& to, std::uint64_t bytes, const std::string& connect_timeout,
                   const std::string& json) {
  const sockaddr_in dst = parse_endpoint(to);
  std::int64_t timeout_ns = 0;
  try {
    timeout_ns = parse_duration(connect_timeout).count();
  } catch (const config_error& e) {
    die(e.what());
  }
  const std::int64_t start = now_ns();
  int fd = -1;
  for (;;) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) == 0) {
      break;
    }
    // The sink may not listen yet: a refused connection is the event we retry on.
    ::close(fd);
    if (errno != ECONNREFUSED || now_ns() - start > timeout_ns) {
      die_errno("connect " + to);
    }
    sleep_until_ns(now_ns() + 20'000'000);
  }
  std::vector<std::uint8_t> buf(1U << 20U);
  std::uint64_t off = 0;
  const std::int64_t t0 = now_ns();
  while (off < bytes) {
    const std::size_t len =
        static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), bytes - off));
    fill_pattern(buf.data(), len, off);
    std::size_t done = 0;
    while (done < len) {
      const ssize_t n = ::write(fd, buf.data() + done, len - done);
      if (n < 0) {
        if (errno == EINTR) {
          continue;
        }
        die_errno("write");
      }
      done += static_cast<std::size_t>(n);
    }
    off += len;
  }
  ::shutdown(fd, SHUT_WR);
  // Wait for the sink to close: then every byte was received.
  std::array<std::uint8_t, 256> sink{};
  while (::read(fd, sink.data(), sink.size()) > 0) {
  }
  const std::int64_t t1 = now_ns();
  ::close(fd);
  const double secs = static_cast<double>(t1 - t0) / 1e9;
  std::string j = "{\"mode\":\"tcp-source\",\"bytes\":" + std::to_string(off) +
                  ",\"seconds\":" + fmt("%.6f", secs) + ",\"rate_bps\":" +
                  fmt("%.0f", secs > 0 ? static_cast<double>(off) * 8 / secs : 0) + "}";
  emit_json(j, json);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mcdist-linkem-traffic: traffic generator and measurement tool for mcdist-linkem.\n"
      "Each command prints one JSON object with its results (or writes it to --json).",
      "mcdist-linkem-traffic"};
  app.require_subcommand(1);

  send_options so;
  auto* send =
      app.add_subcommand("send", "send numbered UDP datagrams to ADDR:PORT (unicast or multicast)");
  send->add_option("--to", so.to, "destination ADDR:PORT")->required();
  send->add_option("--size", so.size, "UDP payload bytes per datagram")->capture_default_str();
  send->add_option("--rate", so.rate, "payload bit rate, e.g. 500Mbit")->capture_default_str();
  send->add_option("--count", so.count, "datagrams to send");
  send->add_option("--duration", so.duration, "send for DURATION instead of --count");
  send->add_option("--gso", so.gso, "datagrams per sendmsg with UDP_SEGMENT (1 = no GSO)")
      ->capture_default_str();
  send->add_option("--expect", so.expect, "wait until N receivers answered the HELLO handshake")
      ->capture_default_str();
  send->add_option("--hello-timeout", so.hello_timeout, "give up the handshake after DURATION")
      ->capture_default_str();
  send->add_option("--ttl", so.ttl, "multicast TTL")->capture_default_str();
  send->add_option("--end-repeats", so.end_repeats, "END markers sent (1 ms apart)")
      ->capture_default_str();
  send->add_option("--json", so.json, "write the result to FILE");

  recv_options ro;
  auto* recv = app.add_subcommand(
      "recv", "receive datagrams from 'send' and report loss, bursts, delay, rate");
  recv->add_option("--port", ro.port, "UDP port")->capture_default_str();
  recv->add_option("--group", ro.group, "join this multicast group (and bind to it)");
  recv->add_option("--bind", ro.bind_address, "local address for unicast")->capture_default_str();
  recv->add_flag("--gro", ro.gro, "enable UDP_GRO and split coalesced buffers");
  recv->add_option("--linger", ro.linger,
                   "keep receiving this long after END (reordered stragglers)")
      ->capture_default_str();
  recv->add_option("--start-timeout", ro.start_timeout, "fail if nothing arrives within DURATION")
      ->capture_default_str();
  recv->add_option("--idle-timeout", ro.idle_timeout,
                   "stop after DURATION without data when no END comes")
      ->capture_default_str();
  recv->add_option("--rcvbuf", ro.rcvbuf, "socket receive buffer")->capture_default_str();
  recv->add_option("--id", ro.id, "receiver id reported in the handshake (default random)");
  recv->add_option("--json", ro.json, "write the result to FILE");

  unsigned echo_port = 7;
  std::uint64_t echo_count = 0;
  auto* echo = app.add_subcommand("echo", "UDP echo server (runs until killed or --count echoes)");
  echo->add_option("--port", echo_port, "UDP port")->capture_default_str();
  echo->add_option("--count", echo_count, "exit after N echoes (0 = never)");

  ping_options po;
  auto* ping = app.add_subcommand("ping", "measure UDP round-trip time against 'echo'");
  ping->add_option("--to", po.to, "echo server ADDR:PORT")->required();
  ping->add_option("--count", po.count, "pings")->capture_default_str();
  ping->add_option("--interval", po.interval, "interval between pings")->capture_default_str();
  ping->add_option("--size", po.size, "payload bytes")->capture_default_str();
  ping->add_option("--wait", po.wait, "wait for late replies after the last ping")
      ->capture_default_str();
  ping->add_option("--warmup-timeout", po.warmup_timeout, "wait this long for the echo server")
      ->capture_default_str();
  ping->add_option("--json", po.json, "write the result to FILE");

  unsigned sink_port = 5001;
  std::string sink_json;
  auto* tsink =
      app.add_subcommand("tcp-sink", "accept one TCP connection, read and verify the pattern");
  tsink->add_option("--port", sink_port, "TCP port")->capture_default_str();
  tsink->add_option("--json", sink_json, "write the result to FILE");

  std::string source_to;
  std::string source_bytes = "100MB";
  std::string source_connect_timeout = "10s";
  std::string source_json;
  auto* tsource =
      app.add_subcommand("tcp-source", "connect and send BYTES of a verifiable pattern");
  tsource->add_option("--to", source_to, "sink ADDR:PORT")->required();
  tsource->add_option("--bytes", source_bytes, "bytes to send")->capture_default_str();
  tsource
      ->add_option("--connect-timeout", source_connect_timeout, "retry refused connects this long")
      ->capture_default_str();
  tsource->add_option("--json", source_json, "write the result to FILE");

  CLI11_PARSE(app, argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  if (*send) {
    return run_send(so);
  }
  if (*recv) {
    return run_recv(ro);
  }
  if (*echo) {
    return run_echo(echo_port, echo_count);
  }
  if (*ping) {
    return run_ping(po);
  }
  if (*tsink) {
    return run_tcp_sink(sink_port, sink_json);
  }
  std::uint64_t bytes = 0;
  try {
    bytes = parse_byte_size(source_bytes);
  } catch (const config_error& e) {
    die(e.what());
  }
  return run_tcp_source(source_to, bytes, source_connect_timeout, source_json);
}
