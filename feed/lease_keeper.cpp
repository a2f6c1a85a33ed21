#include "feed/lease_keeper.hpp"

#include <algorithm>
#include <random>

namespace mcdist::feed {

lease_keeper::lease_keeper(std::string uri, cluster_settings settings, std::string http,
                           std::vector<std::string> channels, report_fn report)
    : m_uri(std::move(uri)), m_settings(std::move(settings)), m_http(std::move(http)),
      m_report(std::move(report)), m_instance([] {
        std::random_device rd;
        return static_cast<std::int64_t>((std::uint64_t{rd()} << 31) ^ rd()) & INT64_MAX;
      }()),
      m_started(std::chrono::system_clock::now()), m_channels(std::move(channels)) {
  for (const auto& c : m_channels)
    m_fences.emplace(c, std::make_unique<std::atomic<std::int64_t>>(0));
  m_thread = std::thread([this] { run(); });
}

lease_keeper::~lease_keeper() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

const std::atomic<std::int64_t>* lease_keeper::fence(const std::string& channel) {
  std::lock_guard lock(m_mutex);
  auto& f = m_fences[channel];
  if (!f) f = std::make_unique<std::atomic<std::int64_t>>(0);
  return f.get();
}

void lease_keeper::set_channels(std::vector<std::string> channels) {
  std::lock_guard lock(m_mutex);
  for (auto& [name, f] : m_fences) {
    if (std::find(channels.begin(), channels.end(), name) == channels.end()) f->store(0);
  }
  for (const auto& c : channels) {
    auto& f = m_fences[c];
    if (!f) f = std::make_unique<std::atomic<std::int64_t>>(0);
  }
  m_channels = std::move(channels);
}

void lease_keeper::release() {
  {
    std::lock_guard lock(m_mutex);
    for (auto& [name, f] : m_fences) f->store(0);
    m_release = true;
    m_stop = true;
  }
  m_wake.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

void lease_keeper::run() {
  std::unique_lock lock(m_mutex);
  while (!m_stop) {
    const auto t0 = std::chrono::steady_clock::now();
    lock.unlock();
    round();
    lock.lock();
    m_wake.wait_until(lock, t0 + m_settings.renew, [this] { return m_stop; });
  }
  if (!m_release) return;
  lock.unlock();
  try {
    if (!m_journal)
      m_journal = std::make_unique<pg_journal>(m_uri, false, m_settings.round_timeout);
    m_journal->release_leases(m_settings.hub, m_instance);
  } catch (const std::exception&) {
    // The leases lapse by themselves.
  }
}

void lease_keeper::round() {
  lease_report r;
  std::vector<std::string> channels;
  {
    std::lock_guard lock(m_mutex);
    channels = m_channels;
  }
  // t0 before anything is sent: the database's deadline is later than t0 + lease.
  r.round_started = std::chrono::steady_clock::now();
  r.fence = r.round_started + m_settings.lease - m_settings.margin;
  try {
    if (!m_journal)
      m_journal = std::make_unique<pg_journal>(m_uri, false, m_settings.round_timeout);
    r.held = m_journal->lease_round(m_settings.hub, m_instance, m_http, m_started, channels,
                                    m_settings.lease);
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = e.what();
    m_journal.reset();  // the next round reconnects
  }
  if (r.ok) {
    std::lock_guard lock(m_mutex);
    // A renewal moves the fence on at once; a channel not granted (another hub holds it) or
    // no longer wanted is fenced now. A failed round changes nothing: the fences pass by
    // themselves.
    const auto fence_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(r.fence.time_since_epoch()).count();
    for (auto& [name, f] : m_fences) {
      const bool held = std::any_of(r.held.begin(), r.held.end(),
                                    [&](const lease_grant& g) { return g.channel == name; });
      const bool wanted = std::find(m_channels.begin(), m_channels.end(), name) != m_channels.end();
      f->store(held && wanted ? fence_ns : 0, std::memory_order_release);
    }
  }
  if (r.ok) {
    try {
      r.view = m_journal->cluster();
    } catch (const std::exception&) {
      m_journal.reset();  // the status view waits for the next round
    }
  }
  m_report(std::move(r));
}

}  // namespace mcdist::feed
