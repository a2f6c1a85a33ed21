#include "feed/heartbeat_service.hpp"

#include "common/beacon.hpp"

#include <boost/asio/buffer.hpp>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>

namespace mcdist::feed {

namespace {

/// (channel, site) pairs whose last report time is kept: far beyond any hub's sites; an
/// unsigned hub's reports may name made-up sites, so the table is pruned beyond it.
constexpr std::size_t max_tracked_reporters = 4096;

}  // namespace

heartbeat_service::heartbeat_service(boost::asio::io_context& io,
                                     const net::resolved_interface& interface,
                                     const crypto::identity* hub,
                                     std::map<std::string, crypto::key32, std::less<>> site_keys,
                                     newest_fn newest, running_fn running, gaps_fn gaps,
                                     std::shared_ptr<spdlog::logger> log)
    : m_io(io), m_hub(hub), m_site_keys(std::move(site_keys)), m_newest(std::move(newest)),
      m_running(std::move(running)), m_gaps(std::move(gaps)), m_log(std::move(log)),
      m_socket([&] {
        net::sender_socket_options o;
        o.interface = interface.address;
        o.interface.port = 0;
        o.interface_index = interface.index;
        // Small buffers: heartbeats go out one at a time, reports come in a few at a time.
        o.send_buffer = 256 << 10;
        o.receive_buffer = 1 << 20;
        return net::open_sender_socket(io, o);
      }()),
      m_v6(interface.address.v6), m_rx(wire::max_datagram_size), m_tx(wire::control_budget + 128) {
  do_receive();
}

heartbeat_service::~heartbeat_service() { stop(); }

void heartbeat_service::stop() {
  m_stopped = true;
  for (auto& t : m_timers) t->cancel();
  boost::system::error_code ignored;
  m_socket.cancel(ignored);
}

void heartbeat_service::set_channels(std::vector<heartbeat_channel> channels) {
  for (auto& t : m_timers) t->cancel();
  m_timers.clear();
  m_channels = std::move(channels);
  for (std::size_t i = 0; i < m_channels.size(); ++i) {
    m_timers.push_back(std::make_unique<boost::asio::steady_timer>(m_io));
    if (m_channels[i].interval.count() > 0) {
      send(i);
      arm(i);
    }
  }
}

void heartbeat_service::arm(std::size_t channel) {
  if (m_stopped || channel >= m_timers.size()) return;
  auto& t = *m_timers[channel];
  t.expires_after(m_channels[channel].interval);
  t.async_wait([this, channel](const boost::system::error_code& ec) {
    if (ec || m_stopped) return;
    send(channel);
    arm(channel);
  });
}

void heartbeat_service::send_now(std::size_t channel) {
  if (channel < m_channels.size() && m_channels[channel].interval.count() > 0) send(channel);
}

void heartbeat_service::send(std::size_t channel) {
  const auto& c = m_channels[channel];
  const auto newest = m_newest(channel);
  if (newest == 0) return;  // nothing numbered yet: nothing to miss
  wire::heartbeat m;
  m.set_channel(c.name);
  m.set_newest_seq(newest);
  m.set_sent_unix_ms(static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count()));
  m.set_sender_name(c.sender_name.substr(0, 64));
  const auto running = m_running(channel);
  for (std::size_t i = 0; i < running.size() && i < wire::max_seq_ranges; ++i) {
    auto* r = m.add_running();
    r->set_first(running[i].first);
    r->set_last(running[i].second);
  }
  const auto n = beacon::encode_heartbeat(m_tx, m, m_hub);
  if (n == 0) return;
  // One socket for every channel: the channel's TTL before each send.
  const int fd = m_socket.native_handle();
  if (m_v6) {
    const int hops = c.ttl;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &hops, sizeof hops);
  } else {
    const auto ttl = static_cast<unsigned char>(c.ttl);
    ::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl);
  }
  std::error_code ec;
  if (net::send_one(fd, c.group, std::span(m_tx).first(n), ec)) {
    ++m_counters.sent;
  } else if (m_log) {
    m_log->debug("channel {}: cannot send its heartbeat: {}", c.name, ec.message());
  }
}

void heartbeat_service::do_receive() {
  if (m_stopped) return;
  m_socket.async_receive_from(boost::asio::buffer(m_rx), m_from,
                              [this](const boost::system::error_code& ec, std::size_t n) {
                                if (ec == boost::asio::error::operation_aborted || m_stopped) {
                                  return;
                                }
                                if (!ec) {
                                  on_report(std::span(m_rx).first(n), net::from_asio(m_from));
                                }
                                do_receive();
                              });
}

void heartbeat_service::on_report(std::span<const std::byte> d, const endpoint& from) {
  wire::gap_report m;
  std::optional<crypto::key32> key;
  auto refuse = [&](const char* why) {
    ++m_counters.reports_refused;
    if (m_log && m_refused_logged.tick()) {
      m_log->warn("gap report from {} refused: {}", from.to_string(), why);
    }
  };
  if (beacon::open_gap_report(d, m_hub != nullptr, m, key)) return refuse("not a valid report");
  if (!m_site_keys.empty()) {
    const auto it = m_site_keys.find(m.receiver_id());
    if (it == m_site_keys.end() || !key || it->second != *key) {
      return refuse("not signed by the pinned key of the site it names");
    }
  }
  const auto ch = std::find_if(m_channels.begin(), m_channels.end(),
                               [&](const heartbeat_channel& c) { return c.name == m.channel(); });
  if (ch == m_channels.end()) return refuse("unknown channel");
  const auto index = static_cast<std::size_t>(ch - m_channels.begin());
  const auto now = std::chrono::steady_clock::now();
  if (m_last.size() >= max_tracked_reporters) {
    std::erase_if(m_last, [&](const auto& kv) {
      return now - kv.second > m_channels[kv.first.first].interval;
    });
  }
  if (m_last.size() >= max_tracked_reporters) {
    ++m_counters.reports_too_soon;
    return;
  }
  auto& last = m_last[{index, m.receiver_id()}];
  if (last != std::chrono::steady_clock::time_point{} && now - last < ch->interval / 2) {
    ++m_counters.reports_too_soon;
    return;
  }
  last = now;
  ++m_counters.reports_taken;
  std::vector<wire::seq_span> missing;
  for (const auto& r : m.missing()) missing.emplace_back(r.first(), r.last());
  if (m_log) {
    m_log->info("channel {}: site {} reports {} missed session range{} after a heartbeat",
                ch->name, m.receiver_id(), missing.size(), missing.size() == 1 ? "" : "s");
  }
  m_gaps(index, m.receiver_id(), missing);
}

}  // namespace mcdist::feed
