// A hostile host for tests/integration/test_fallback_flood.py, the SCTP half of
// fallback_flood.py: opens COUNT SCTP-over-UDP associations (usrsctp, each from its own UDP
// port) to the unicast fallback listener at ADDRESS:PORT, never says a word on them (the
// server's challenge is read and ignored), and reopens each one as soon as it is aborted,
// refused or fails, until SIGTERM or SIGINT. A raw INIT flood would not do: the listener keeps
// no state for an INIT beyond its peer table, and a handshake slot is taken only once the
// 4-way handshake completes, which needs an SCTP stack. The associations are spread round
// robin over the source addresses given. Prints one JSON line at the end: attempts,
// established, closed_by_server, failed (never came up), most_open.
//
// usage: fallback_sctp_flood ADDRESS:PORT COUNT SOURCE[,SOURCE...] [READY-FILE]

#include "common/endpoint.hpp"
#include "common/unicast/io/sctp_assoc.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

using namespace mcdist;
using namespace mcdist::unicast;

namespace {

/// An association that failed to come up (the listener not up yet, its peer table full)
/// waits this long before the next try, so the flood does not spin before the session starts;
/// one the server closed is reopened at once.
constexpr auto retry_after_failure = std::chrono::milliseconds(20);

struct stats {
  std::uint64_t attempts = 0;
  std::uint64_t established = 0;
  std::uint64_t closed_by_server = 0;
  std::uint64_t failed = 0;
  std::size_t open = 0;
  std::size_t most_open = 0;
};

class flood {
 public:
  flood(boost::asio::io_context& io, endpoint server, std::vector<endpoint> sources,
        std::size_t count, std::string ready_file)
      : m_io(io), m_server(server), m_sources(std::move(sources)),
        m_ready_file(std::move(ready_file)) {
    for (std::size_t i = 0; i < count; ++i) m_slots.push_back(std::make_unique<slot>(io, i));
  }

  void start() {
    for (auto& s : m_slots) open(*s);
  }

  void stop() {
    m_stopped = true;
    for (auto& s : m_slots) {
      s->retry.cancel();
      if (s->assoc) s->assoc->abort();
      s->assoc.reset();
    }
  }

  const stats& counts() const { return m_stats; }

 private:
  struct slot {
    slot(boost::asio::io_context& io, std::size_t i) : index(i), retry(io) {}
    std::size_t index;
    std::unique_ptr<sctp_assoc> assoc;
    boost::asio::steady_timer retry;
    bool up = false;
    bool ever_up = false;
  };

  void open(slot& s) {
    if (m_stopped) return;
    s.up = false;
    std::error_code ec;
    std::string detail;
    auto local = m_sources[s.index % m_sources.size()];
    local.port = 0;
    ++m_stats.attempts;
    s.assoc =
        usrsctp_connect(m_io, m_server, local, sctp_socket_options{}, usrsctp_tuning{}, ec, detail);
    if (!s.assoc) {
      ++m_stats.failed;
      return later(s);
    }
    s.assoc->set_ready_handler([this, &s] { on_ready(s); });
  }

  void later(slot& s) {
    s.retry.expires_after(retry_after_failure);
    s.retry.async_wait([this, &s](const boost::system::error_code& ec) {
      if (!ec) open(s);
    });
  }

  /// The association `s` is gone: reopen it (at once when the server closed it).
  void ended(slot& s, bool by_server) {
    if (s.up) {
      --m_stats.open;
      if (by_server) ++m_stats.closed_by_server;
    } else {
      ++m_stats.failed;
    }
    // Released here, out of its own ready handler: that runs posted, never inside usrsctp.
    s.assoc->abort();
    s.assoc.reset();
    if (s.up) {
      s.up = false;
      open(s);
    } else {
      later(s);
    }
  }

  void on_ready(slot& s) {
    if (m_stopped || !s.assoc) return;
    if (!s.up) {
      const auto ec = s.assoc->connect_status();
      if (ec == std::errc::operation_in_progress) return;
      if (ec) return ended(s, false);
      s.up = true;
      ++m_stats.established;
      m_stats.most_open = std::max(m_stats.most_open, ++m_stats.open);
      if (!s.ever_up) {
        s.ever_up = true;
        if (++m_ever_up == m_slots.size() && !m_ready_file.empty())
          std::ofstream(m_ready_file) << m_stats.open << "\n";
      }
    }
    for (;;) {
      sctp_assoc::received r;
      const auto ec = s.assoc->receive(m_buffer, r);
      if (ec == std::errc::operation_would_block) return;
      if (ec || (r.bytes == 0 && !r.notification)) return ended(s, true);
      // The challenge, or a notification: nothing is ever said back.
    }
  }

  boost::asio::io_context& m_io;
  endpoint m_server;
  std::vector<endpoint> m_sources;
  std::string m_ready_file;
  std::vector<std::unique_ptr<slot>> m_slots;
  std::array<std::byte, 2048> m_buffer{};
  stats m_stats;
  std::size_t m_ever_up = 0;
  bool m_stopped = false;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: fallback_sctp_flood ADDRESS:PORT COUNT SOURCE[,SOURCE...] [READY-FILE]\n";
    return 2;
  }
  const auto server = parse_endpoint(argv[1]);
  const auto count = std::stoul(argv[2]);
  std::vector<endpoint> sources;
  const std::string list = argv[3];
  for (std::size_t at = 0; at <= list.size();) {
    const auto comma = std::min(list.find(',', at), list.size());
    const auto e = parse_address(list.substr(at, comma - at));
    if (!e) {
      std::cerr << "fallback_sctp_flood: bad source address\n";
      return 2;
    }
    sources.push_back(*e);
    at = comma + 1;
  }
  if (!server || count == 0) {
    std::cerr << "fallback_sctp_flood: bad arguments\n";
    return 2;
  }
  boost::asio::io_context io;
  flood f(io, *server, sources, count, argc == 5 ? argv[4] : "");
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code&, int) {
    f.stop();
    io.stop();
  });
  f.start();
  io.run();
  const auto& s = f.counts();
  std::printf(
      "{\"attempts\": %llu, \"established\": %llu, \"closed_by_server\": %llu, \"failed\": %llu, "
      "\"most_open\": %zu}\n",
      static_cast<unsigned long long>(s.attempts), static_cast<unsigned long long>(s.established),
      static_cast<unsigned long long>(s.closed_by_server),
      static_cast<unsigned long long>(s.failed), s.most_open);
  return 0;
}
