#include "receiver/io/catch_up_queue.hpp"

#include <algorithm>
#include <set>

namespace mcdist::receiver {

void catch_up_queue::note_missing(std::size_t index, const std::string& channel,
                                  const std::string& source,
                                  const std::optional<crypto::key32>& signer,
                                  std::span<const wire::seq_span> missing, clock_time now) {
  if (m_channels.size() <= index) m_channels.resize(index + 1);
  auto& st = m_channels[index];
  if (st.channel != channel || st.source != source) {
    // Another stream (a hub's new key, a renamed channel): its numbers are not these.
    std::erase_if(st.numbers, [](const auto& n) { return !n.second.in_flight; });
  }
  st.channel = channel;
  st.source = source;
  st.signer = signer;
  std::set<std::uint64_t> now_missing;
  for (const auto& [first, last] : missing) {
    for (auto n = first; n <= last && now_missing.size() < max_numbers_per_channel; ++n) {
      now_missing.insert(n);
      if (n == last) break;  // last may be the largest uint64
    }
  }
  std::erase_if(st.numbers, [&](const auto& n) {
    return !n.second.in_flight && !now_missing.contains(n.first);
  });
  for (const auto n : now_missing) {
    if (st.numbers.size() >= max_numbers_per_channel) break;
    st.numbers.try_emplace(n, number{now, std::chrono::seconds(0), false});
  }
}

bool catch_up_queue::offer_due(clock_time now, const std::function<bool(std::size_t)>& eligible,
                               const std::function<offer(const pick&)>& submit) {
  bool waiting = false;
  for (std::size_t i = 0; i < m_channels.size(); ++i) {
    auto& st = m_channels[i];
    if (!eligible(i)) continue;
    // Oldest first: an older number's products go before a newer one's.
    for (auto& [seq, n] : st.numbers) {
      if (n.in_flight) continue;
      waiting = true;
      if (n.due > now) continue;
      const auto o = submit(pick{i, st.channel, seq, st.signer});
      if (o == offer::full) break;
      if (o == offer::taken) n.in_flight = true;
    }
  }
  return waiting;
}

std::optional<catch_up_queue::stream> catch_up_queue::succeeded(std::size_t index,
                                                                std::uint64_t seq) {
  if (!knows(index)) return std::nullopt;
  auto& st = m_channels[index];
  st.numbers.erase(seq);
  ++m_numbers_done;
  return stream{st.channel, st.source};
}

std::optional<std::chrono::seconds> catch_up_queue::failed(std::size_t index, std::uint64_t seq,
                                                           clock_time now) {
  if (!knows(index)) return std::nullopt;
  ++m_failed;
  const auto it = m_channels[index].numbers.find(seq);
  if (it == m_channels[index].numbers.end()) return std::nullopt;
  auto& n = it->second;
  n.in_flight = false;
  n.backoff = n.backoff.count() == 0 ? first_backoff : std::min(n.backoff * 2, max_backoff);
  n.due = now + n.backoff;
  return n.backoff;
}

bool catch_up_queue::any() const noexcept {
  return std::any_of(m_channels.begin(), m_channels.end(),
                     [](const auto& c) { return !c.numbers.empty(); });
}

std::size_t catch_up_queue::pending() const noexcept {
  std::size_t n = 0;
  for (const auto& c : m_channels) n += c.numbers.size();
  return n;
}

std::size_t catch_up_queue::pending(std::size_t index) const noexcept {
  return knows(index) ? m_channels[index].numbers.size() : 0;
}

bool catch_up_queue::in_flight(std::size_t index, std::uint64_t seq) const noexcept {
  if (!knows(index)) return false;
  const auto it = m_channels[index].numbers.find(seq);
  return it != m_channels[index].numbers.end() && it->second.in_flight;
}

}  // namespace mcdist::receiver
