#include "feed/feed_board.hpp"

#include <algorithm>
#include <cstdio>

namespace mcdist::feed {

feed_board::feed_board(std::vector<std::string> channels)
    : m_names(std::move(channels)), m_channels(m_names.size()) {}

void feed_board::record_outcome(std::string_view site, std::size_t channel, std::int64_t product_id,
                                feed::outcome o, wall_time now) {
  if (channel >= m_channels.size()) return;
  auto it = m_sites.find(site);
  if (it == m_sites.end()) it = m_sites.emplace(std::string(site), site_tally{}).first;
  auto& s = it->second;
  if (!s.channels.count(m_names[channel])) s.channels.insert(m_names[channel]);
  ++s.outcomes[static_cast<std::size_t>(o)];
  if (o == outcome::stored || o == outcome::held) {
    s.missing.erase(product_id);
    return;
  }
  if (o == outcome::missed) s.state = "missed";
  if (s.missing.count(product_id)) return;  // keeps the time it was first missed
  if (s.missing.size() >= max_missing_tracked) {
    s.missing_truncated = true;
    return;
  }
  s.missing.emplace(product_id, std::make_pair(m_names[channel], now));
}

void feed_board::restore_missing(std::string_view site, std::size_t channel,
                                 std::int64_t product_id, wall_time since) {
  if (channel >= m_channels.size()) return;
  auto it = m_sites.find(site);
  if (it == m_sites.end()) it = m_sites.emplace(std::string(site), site_tally{}).first;
  auto& s = it->second;
  s.channels.insert(m_names[channel]);
  if (s.missing.size() >= max_missing_tracked) {
    s.missing_truncated = true;
    return;
  }
  s.missing.emplace(product_id, std::make_pair(m_names[channel], since));
}

void feed_board::site_report(std::size_t channel, const sender::receiver_report& r,
                             double nak_ratio, wall_time now) {
  if (channel >= m_channels.size()) return;
  auto& s = m_sites[r.id];
  s.channel = m_names[channel];
  s.channels.insert(m_names[channel]);
  // A listed site that never registered (closed group) ends 'failed' with no address: to a
  // person it is missing, and it was not seen.
  if (r.state == sender::receiver_report::state_t::missing || r.address.port == 0) {
    s.state = "missing";
    s.path.reset();
    return;
  }
  s.state = std::string(sender::to_string(r.state));
  s.path = r.path;
  s.last_seen = now;
  if (r.rtt_valid) s.rtt_s = std::chrono::duration<double>(r.rtt).count();
  s.nak_ratio = nak_ratio;
  if (const auto t = unicast_transport(r.path)) ++s.fallbacks[*t];
}

void feed_board::session_done(std::size_t channel, session_kind kind, std::uint64_t seq,
                              const std::vector<product>& products,
                              const sender::session_report& report, bool products_sent,
                              wall_time now) {
  if (channel >= m_channels.size()) return;
  using st = sender::receiver_report::state_t;
  auto& c = m_channels[channel];
  ++c.sessions[static_cast<std::size_t>(kind)];

  c.minutes.add(report.data_bytes, now);
  const auto repair = std::min(report.repair_datagrams, report.data_datagrams);
  const auto proactive = std::min(report.proactive_parity, report.data_datagrams - repair);
  c.datagrams[static_cast<std::size_t>(datagram_kind::first)] +=
      report.data_datagrams - repair - proactive;
  const auto late_key = std::min(report.late_key_blocks, repair);
  c.datagrams[static_cast<std::size_t>(datagram_kind::repair)] += repair - late_key;
  c.datagrams[static_cast<std::size_t>(datagram_kind::late_key)] += late_key;
  c.datagrams[static_cast<std::size_t>(datagram_kind::proactive_parity)] += proactive;

  if (!products_sent) return;
  // Per product, the sites that stored or held it (the rule of record_outcomes).
  std::vector<std::uint32_t> ok(products.size(), 0);
  for (const auto& rr : report.receivers) {
    const bool done = rr.state == st::completed;
    std::set<std::uint32_t> failed;
    for (const auto& [i, why] : rr.file_failures) failed.insert(i);
    std::set<std::uint32_t> held(rr.held_files.begin(), rr.held_files.end());
    for (std::uint32_t i = 0; i < products.size(); ++i) {
      if (held.count(i) || (done && !failed.count(i))) ++ok[i];
    }
  }
  const std::string hex = fmt::format("{}", report.session);
  for (std::size_t i = 0; i < products.size(); ++i) {
    const auto& p = products[i];
    ++c.products_sent;
    c.bytes_sent += p.size;
    if (c.recent.size() >= max_recent_products) c.recent.pop_front();
    c.recent.push_back({p.name, p.size, seq, hex, now, ok[i],
                        static_cast<std::uint32_t>(report.receivers.size())});
  }
  if (!products.empty()) c.last_sent = now;
}

std::vector<std::uint64_t> feed_board::bytes_per_minute(std::size_t channel, wall_time now) const {
  if (channel >= m_channels.size()) return std::vector<std::uint64_t>(minutes_kept, 0);
  return m_channels[channel].minutes.per_minute(now);
}

}  // namespace mcdist::feed
