// Throughput benchmark of the unicast transports (a program, not a test).
//
//   unicast_bench [--kind sctp|tcp] [--connections N] [--set 1g|10k|mixed] [--repeat K]
//       (--connections: TCP connections, or SCTP associations)
//                 [--record-size BYTES] [--no-verify] [--no-crc] [--no-loss-repair]
//                 [--no-flight-cap]
//                 [--auth plain|signed|encrypted]
//       runs the server in a child process and the client here, over loopback, and prints
//       goodput (payload bytes / time from start() to the last byte).
//   unicast_bench --role server --listen-udp ADDR:PORT --listen-tcp ADDR:PORT [--set ...]
//   unicast_bench --role client --connect ADDR:PORT --kind ... [--set ...]
//       the two halves apart, e.g. in two network namespaces behind the link emulator.
//
// --auth: signed, every connection proves a (fixed, bench-only) site key over the server's
// challenge (hello_proof.hpp); encrypted, also every frame after the hello is sealed
// (record_seal.hpp), as the fallback of an mcdist-send --encrypt session.
//
// File contents are a pattern (each 8-byte word holds its file index and word offset), made
// on the fly by the server and checked word by word by the client, so a byte delivered at the
// wrong place is caught without holding the set in memory.

#include "common/unicast/io/client.hpp"
#include "common/unicast/io/server.hpp"
#include "tests/common/unicast/token.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

using namespace mcdist;
using namespace mcdist::unicast;

namespace {

const fallback_token bench_token = unicast::test::tok(0x6265'6e63'6821'2121ull);
const session_id bench_session{0xbe9c0001};
const char* const bench_receiver = "bench";

std::uint64_t word_at(std::uint32_t file, std::uint64_t word) {
  return (std::uint64_t{file} << 40) ^ word ^ 0x5555'5555'5555'5555ull;
}

/// Fills `out` with the pattern bytes of `file` from `offset`.
void pattern(std::uint32_t file, std::uint64_t offset, std::span<std::byte> out) {
  std::size_t i = 0;
  while (i < out.size() && (offset + i) % 8 != 0) {
    const std::uint64_t o = offset + i;
    out[i++] = std::byte(word_at(file, o / 8) >> (8 * (o % 8)));
  }
  for (; i + 8 <= out.size(); i += 8) {
    const std::uint64_t w = word_at(file, (offset + i) / 8);
    std::memcpy(out.data() + i, &w, 8);  // little-endian host: byte k is bits 8k..8k+7
  }
  for (; i < out.size(); ++i) {
    const std::uint64_t o = offset + i;
    out[i] = std::byte(word_at(file, o / 8) >> (8 * (o % 8)));
  }
}

bool check(std::uint32_t file, std::uint64_t offset, std::span<const std::byte> in) {
  std::size_t i = 0;
  while (i < in.size() && (offset + i) % 8 != 0) {
    const std::uint64_t o = offset + i;
    if (in[i++] != std::byte(word_at(file, o / 8) >> (8 * (o % 8)))) return false;
  }
  for (; i + 8 <= in.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, in.data() + i, 8);
    if (w != word_at(file, (offset + i) / 8)) return false;
  }
  for (; i < in.size(); ++i) {
    const std::uint64_t o = offset + i;
    if (in[i] != std::byte(word_at(file, o / 8) >> (8 * (o % 8)))) return false;
  }
  return true;
}

class pattern_source final : public byte_source {
 public:
  explicit pattern_source(std::vector<std::uint64_t> sizes) : m_sizes(std::move(sizes)) {}
  std::uint32_t file_count() const override { return static_cast<std::uint32_t>(m_sizes.size()); }
  std::uint64_t size(file_index f) const override { return m_sizes[f.value]; }
  std::error_code read(file_index f, std::uint64_t offset, std::span<std::byte> out) override {
    pattern(f.value, offset, out);
    return {};
  }

 private:
  std::vector<std::uint64_t> m_sizes;
};

std::vector<std::uint64_t> make_set(const std::string& name) {
  if (name == "1g") return {1'000'000'000};
  if (name == "10k") return std::vector<std::uint64_t>(1000, 10'000);
  if (name == "mixed") {
    std::vector<std::uint64_t> s{20'000'000, 1'000'000, 0, 1};
    for (int i = 0; i < 100; ++i) s.push_back(10'000);
    return s;
  }
  // "NxS": N files of S bytes, S with an optional k, m or g suffix (powers of 1000).
  if (const auto x = name.find('x'); x != std::string::npos) {
    const std::uint64_t n = std::stoull(name.substr(0, x));
    std::string size = name.substr(x + 1);
    std::uint64_t mult = 1;
    if (!size.empty() && std::string("kmg").find(size.back()) != std::string::npos) {
      mult = size.back() == 'k' ? 1'000 : size.back() == 'm' ? 1'000'000 : 1'000'000'000;
      size.pop_back();
    }
    return std::vector<std::uint64_t>(n, std::stoull(size) * mult);
  }
  throw std::invalid_argument("unknown set " + name +
                              " (1g, 10k, mixed, or NxS such as 100x10k, 10x1m)");
}

struct args {
  std::string role = "both";
  transport_kind kind = transport_kind::sctp_udp;
  std::size_t connections = 0;
  std::string set = "1g";
  int repeat = 1;
  std::uint32_t record_size = default_record_size;
  bool verify = true;
  bool crc = true;
  bool loss_repair = true;  ///< usrsctp_tuning::loss_repair
  bool flight_cap = true;   ///< usrsctp_tuning::flight_cap
  std::uint32_t max_burst = usrsctp_tuning{}.max_burst;
  std::uint32_t scheduler = sctp_socket_options{}.stream_scheduler;
  std::uint32_t cc = usrsctp_tuning{}.cc_module;
  std::chrono::milliseconds server_idle{60'000};
  std::uint32_t rto_min = usrsctp_tuning{}.rto_min_ms;
  std::string tcp_cc;
  endpoint listen_udp = *parse_endpoint("127.0.0.1:4712");
  endpoint listen_tcp = *parse_endpoint("127.0.0.1:4712");
  std::optional<endpoint> connect;
  std::string auth = "plain";
};

/// The site key of --auth signed/encrypted (both halves know it; a benchmark, not a secret).
crypto::key32 bench_site_key() {
  crypto::key32 k{};
  k.fill(0x3c);
  return k;
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      return argv[++i];
    };
    auto ep = [&](const std::string& v) {
      auto e = parse_endpoint(v);
      if (!e) throw std::invalid_argument("bad address " + v);
      return *e;
    };
    if (k == "--role")
      a.role = value();
    else if (k == "--kind") {
      const auto v = value();
      auto t = parse_transport_kind(v);
      if (!t) throw std::invalid_argument("bad kind " + v);
      a.kind = *t;
    } else if (k == "--connections")
      a.connections = std::stoul(value());
    else if (k == "--set")
      a.set = value();
    else if (k == "--repeat")
      a.repeat = std::stoi(value());
    else if (k == "--record-size")
      a.record_size = static_cast<std::uint32_t>(std::stoul(value()));
    else if (k == "--no-verify")
      a.verify = false;
    else if (k == "--no-crc")
      a.crc = false;
    else if (k == "--no-loss-repair")
      a.loss_repair = false;
    else if (k == "--no-flight-cap")
      a.flight_cap = false;
    else if (k == "--server-idle-ms")
      a.server_idle = std::chrono::milliseconds(std::stol(value()));
    else if (k == "--tcp-cc")
      a.tcp_cc = value();
    else if (k == "--rto-min")
      a.rto_min = static_cast<std::uint32_t>(std::stoul(value()));
    else if (k == "--cc")
      a.cc = static_cast<std::uint32_t>(std::stoul(value()));
    else if (k == "--scheduler")
      a.scheduler = static_cast<std::uint32_t>(std::stoul(value()));
    else if (k == "--max-burst")
      a.max_burst = static_cast<std::uint32_t>(std::stoul(value()));
    else if (k == "--listen-udp")
      a.listen_udp = ep(value());
    else if (k == "--listen-tcp")
      a.listen_tcp = ep(value());
    else if (k == "--connect")
      a.connect = ep(value());
    else if (k == "--auth") {
      a.auth = value();
      if (a.auth != "plain" && a.auth != "signed" && a.auth != "encrypted")
        throw std::invalid_argument("--auth is plain, signed or encrypted");
    } else
      throw std::invalid_argument("unknown option " + k);
  }
  return a;
}

usrsctp_tuning tuning_of(const args& a) {
  usrsctp_tuning t;
  t.crc32c = a.crc;
  t.loss_repair = a.loss_repair;
  t.flight_cap = a.flight_cap;
  t.max_burst = a.max_burst;
  t.cc_module = a.cc;
  t.rto_min_ms = a.rto_min;
  return t;
}

/// Runs the server until SIGTERM/SIGINT; writes "udp-port tcp-port\n" to `ready_fd` once up.
int run_server(const args& a, int ready_fd) {
  boost::asio::io_context io;
  pattern_source src(make_set(a.set));
  server_options o;
  o.sctp_udp = a.listen_udp;
  o.tcp = a.listen_tcp;
  o.record_size = a.record_size;
  o.usrsctp = tuning_of(a);
  o.sctp.stream_scheduler = a.scheduler;
  o.idle_timeout = a.server_idle;
  o.tcp_congestion = a.tcp_cc;
  server srv(io, src, o);
  std::string detail;
  if (auto ec = srv.start(detail)) {
    std::cerr << "server: " << ec.message() << ": " << detail << "\n";
    return 1;
  }
  client_grant g{bench_token, bench_receiver, bench_session, {}, true};
  if (a.auth != "plain") g.proof_key = bench_site_key();
  g.seal_records = a.auth == "encrypted";
  if (auto ec = srv.register_client(g)) return 1;
  const std::string ready = std::to_string(srv.sctp_udp_endpoint()->port) + " " +
                            std::to_string(srv.tcp_endpoint()->port) + "\n";
  if (ready_fd >= 0) {
    (void)!::write(ready_fd, ready.data(), ready.size());
    ::close(ready_fd);
  } else {
    std::cout << "listening: udp " << srv.sctp_udp_endpoint()->to_string() << ", tcp "
              << srv.tcp_endpoint()->to_string() << std::endl;
  }
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code&, int) { io.stop(); });
  io.run();
  return 0;
}

/// One transfer of the whole set. @return false on failure.
bool run_client_once(const args& a, const endpoint& server_ep) {
  boost::asio::io_context io;
  pattern_source sizes(make_set(a.set));
  client_options o;
  o.kind = a.kind;
  o.server = server_ep;
  o.token = bench_token;
  o.session = bench_session;
  o.receiver_id = bench_receiver;
  o.tcp_connections = a.connections;
  o.sctp_associations = a.connections;
  o.usrsctp = tuning_of(a);
  o.idle_timeout = std::chrono::seconds(120);
  if (a.auth != "plain") o.proof_key = bench_site_key();
  o.seal_records = a.auth == "encrypted";
  std::vector<byte_range> wanted;
  std::uint64_t total = 0;
  for (std::uint32_t f = 0; f < sizes.file_count(); ++f) {
    wanted.push_back({file_index{f}, 0, sizes.size(file_index{f})});
    total += sizes.size(file_index{f});
  }
  std::uint64_t got = 0;
  std::uint64_t bad = 0;
  std::size_t files_done = 0;
  bool closed = false;
  std::error_code result;
  std::string detail;
  std::chrono::steady_clock::time_point t0, t_first, t_end;
  std::unique_ptr<client> c;
  client_events ev;
  ev.on_data = [&](file_index f, std::uint64_t off, std::span<const std::byte> b) {
    if (got == 0) t_first = std::chrono::steady_clock::now();
    got += b.size();
    if (a.verify && !check(f.value, off, b)) ++bad;
  };
  ev.on_file_done = [&](file_index) { ++files_done; };
  ev.on_complete = [&] {
    t_end = std::chrono::steady_clock::now();
    c->close();
  };
  ev.on_closed = [&](const std::error_code& ec, const std::string& d) {
    closed = true;
    result = ec;
    detail = d;
    io.stop();
  };
  c = make_client(io, o, ev);
  t0 = std::chrono::steady_clock::now();
  c->request(wanted);
  c->start();
  io.run();
  if (result || bad != 0 || got != total) {
    std::cerr << "client: " << result.message() << " " << detail << " (" << got << "/" << total
              << " bytes, " << bad << " bad pieces)\n";
    return false;
  }
  const double s = std::chrono::duration<double>(t_end - t0).count();
  const auto st = c->stats();
  std::size_t channels = 0;
  for (auto b : st.bytes_per_channel) channels += b > 0;
  std::printf(
      "%-9s %-11s %-6s conns=%zu record=%u: %12llu bytes in %7.3f s = %8.1f Mbit/s "
      "(%zu files, first byte after %.1f ms, %zu channels used)\n",
      a.auth.c_str(), std::string(to_string(a.kind)).c_str(), a.set.c_str(),
      a.kind == transport_kind::tcp ? (a.connections ? a.connections : default_tcp_connections)
                                    : std::max<std::size_t>(a.connections, 1),
      a.record_size, static_cast<unsigned long long>(got), s, got * 8 / s / 1e6, files_done,
      std::chrono::duration<double, std::milli>(t_first - t0).count(), channels);
  std::fflush(stdout);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  args a;
  try {
    a = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "unicast_bench: " << e.what() << "\n";
    return 2;
  }
  spdlog::set_level(std::getenv("UNICAST_BENCH_DEBUG") ? spdlog::level::debug
                                                       : spdlog::level::warn);
  if (a.role == "server") return run_server(a, -1);
  if (a.role == "client") {
    if (!a.connect) {
      std::cerr << "unicast_bench: --role client needs --connect ADDR:PORT\n";
      return 2;
    }
    for (int i = 0; i < a.repeat; ++i)
      if (!run_client_once(a, *a.connect)) return 1;
    return 0;
  }
  // Both: server in a child process (its own usrsctp instance), client here.
  a.listen_udp.port = 0;
  a.listen_tcp.port = 0;
  int fds[2];
  if (::pipe(fds) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    return run_server(a, fds[1]);
  }
  ::close(fds[1]);
  char buf[64] = {};
  const ssize_t n = ::read(fds[0], buf, sizeof buf - 1);
  ::close(fds[0]);
  if (n <= 0) return 1;
  unsigned udp_port = 0, tcp_port = 0;
  std::sscanf(buf, "%u %u", &udp_port, &tcp_port);
  endpoint ep = a.listen_udp;
  ep.port = static_cast<std::uint16_t>(a.kind == transport_kind::tcp ? tcp_port : udp_port);
  bool ok = true;
  for (int i = 0; i < a.repeat && ok; ++i) ok = run_client_once(a, ep);
  ::kill(child, SIGTERM);
  int status = 0;
  ::waitpid(child, &status, 0);
  return ok ? 0 : 1;
}
