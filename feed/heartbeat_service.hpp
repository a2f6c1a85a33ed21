#pragma once
/// @file
/// A hub's heartbeats and the gap reports they bring back (docs/design-notes.md "Heartbeats"):
/// every `heartbeat` interval each channel multicasts its newest session number on its group
/// (common/beacon.hpp), idle or not, so a site back from an outage learns at once what it
/// missed; a site that misses numbers answers with a gap report to the socket the heartbeat
/// came from, and the service hands the report's ranges to the daemon, which queues a catch-up
/// exactly as for the gaps a REGISTER reports. One UDP socket for every channel, on the
/// daemon's io_context.
///
/// What is taken from the network is bounded before anything is done with it: a gap report is
/// parsed after its framing checks, its signature checked (signed hubs), its site's pinned key
/// compared (hubs with site keys), and one report per site and channel is taken per half
/// heartbeat interval (counted, dropped otherwise): a flood of reports costs signature checks,
/// never more catch-up sessions than the sites' own reports would.

#include "common/crypto.hpp"
#include "common/endpoint.hpp"
#include "common/log_limit.hpp"
#include "common/net/interface.hpp"
#include "common/net/udp.hpp"
#include "common/wire.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::feed {

/// One channel as the heartbeats see it.
struct heartbeat_channel {
  std::string name;
  endpoint group;
  int ttl = 1;
  std::chrono::nanoseconds interval{};  ///< 0: no heartbeats for this channel
  std::string sender_name;              ///< its sessions' sender name (unsigned hubs' streams)
};

/// Counters for the status document.
struct heartbeat_counters {
  std::uint64_t sent = 0;
  std::uint64_t reports_taken = 0;
  /// Reports refused: framing, signature, a key that is not the site's pinned one, an unknown
  /// channel.
  std::uint64_t reports_refused = 0;
  /// Reports of a site and channel within half an interval of its last one.
  std::uint64_t reports_too_soon = 0;
};

/// The service. Use from the io_context's thread.
class heartbeat_service {
 public:
  /// The daemon's view of a channel: its newest sequence number (0: none) and the numbers still
  /// being sent.
  using newest_fn = std::function<std::uint64_t(std::size_t channel)>;
  using running_fn = std::function<std::vector<wire::seq_span>(std::size_t channel)>;
  /// A site reported `missing` on `channel`.
  using gaps_fn = std::function<void(std::size_t channel, const std::string& site,
                                     const std::vector<wire::seq_span>& missing)>;

  /// Opens the socket on `interface` (port 0). @throws std::system_error
  /// @param hub         signs the heartbeats, and then only signed reports are taken; null:
  ///                    unsigned hub
  /// @param site_keys   pinned site keys: a report must be signed by its receiver's (empty:
  ///                    any signed report of a signed hub, any report of an unsigned one)
  heartbeat_service(boost::asio::io_context& io, const net::resolved_interface& interface,
                    const crypto::identity* hub,
                    std::map<std::string, crypto::key32, std::less<>> site_keys, newest_fn newest,
                    running_fn running, gaps_fn gaps, std::shared_ptr<spdlog::logger> log);
  ~heartbeat_service();
  heartbeat_service(const heartbeat_service&) = delete;
  heartbeat_service& operator=(const heartbeat_service&) = delete;

  /// Sets the channels (index = the daemon's channel index); starts or stops their timers. A
  /// reload calls it again with the new set.
  void set_channels(std::vector<heartbeat_channel> channels);
  /// Replaces the pinned site keys (reload).
  void set_site_keys(std::map<std::string, crypto::key32, std::less<>> keys) {
    m_site_keys = std::move(keys);
  }
  /// Sends channel `channel`'s heartbeat now (after a session starts, so sites hear the new
  /// number without waiting an interval).
  void send_now(std::size_t channel);
  /// Stops the timers and the socket's reads.
  void stop();

  const heartbeat_counters& counters() const noexcept { return m_counters; }

 private:
  void arm(std::size_t channel);
  void send(std::size_t channel);
  void do_receive();
  void on_report(std::span<const std::byte> d, const endpoint& from);

  boost::asio::io_context& m_io;
  const crypto::identity* m_hub;
  std::map<std::string, crypto::key32, std::less<>> m_site_keys;
  newest_fn m_newest;
  running_fn m_running;
  gaps_fn m_gaps;
  std::shared_ptr<spdlog::logger> m_log;
  net::udp::socket m_socket;
  bool m_v6 = false;
  std::vector<heartbeat_channel> m_channels;
  std::vector<std::unique_ptr<boost::asio::steady_timer>> m_timers;
  std::vector<std::byte> m_rx;
  std::vector<std::byte> m_tx;
  boost::asio::ip::udp::endpoint m_from;
  /// (channel, site) -> when its last report was taken.
  std::map<std::pair<std::size_t, std::string>, std::chrono::steady_clock::time_point> m_last;
  heartbeat_counters m_counters;
  log_limiter m_refused_logged{10};  ///< refused reports: the first few logged, then rarely
  bool m_stopped = false;
};

}  // namespace mcdist::feed
