#include "receiver/core/gap_book.hpp"

#include <algorithm>

namespace mcdist::receiver {

namespace {

std::pair<std::string, std::string> key_of(std::string_view site, std::string_view channel) {
  return {std::string(site), std::string(channel)};
}

}  // namespace

bool gap_book::note(std::string_view site, std::string_view channel,
                    std::vector<wire::seq_span> missing) {
  auto it = m_sites.find(key_of(site, channel));
  if (missing.empty()) {
    if (it != m_sites.end()) m_sites.erase(it);
    return true;
  }
  if (it == m_sites.end()) {
    if (m_sites.size() >= max_sites) return false;
    it = m_sites.emplace(key_of(site, channel), report{}).first;
  }
  it->second.missing = std::move(missing);
  it->second.generation = m_generation;
  return true;
}

void gap_book::completed(std::string_view site, std::string_view channel,
                         std::span<const wire::seq_span> done) {
  const auto it = m_sites.find(key_of(site, channel));
  if (it == m_sites.end()) return;
  it->second.missing = wire::subtract_seq_ranges(it->second.missing, done);
  if (it->second.missing.empty()) m_sites.erase(it);
}

void gap_book::next_generation() {
  ++m_generation;
  std::erase_if(m_sites, [&](const auto& e) { return e.second.generation + 1 < m_generation; });
}

std::vector<wire::seq_span> gap_book::merged(std::string_view channel, std::uint64_t newest,
                                             std::span<const wire::seq_span> own,
                                             std::span<const wire::seq_span> busy) const {
  std::vector<wire::seq_span> all(own.begin(), own.end());
  for (const auto& [key, r] : m_sites) {
    if (key.second != channel) continue;
    const auto wanted = wire::subtract_seq_ranges(r.missing, busy);
    all.insert(all.end(), wanted.begin(), wanted.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<wire::seq_span> out;
  for (auto [first, last] : all) {
    first = std::max<std::uint64_t>(first, 1);
    last = std::min(last, newest);
    if (first > last) continue;
    // Adjacent ranges join too: 3-4 and 5-6 are one range of the wire's 32.
    if (!out.empty() && first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, last);
      continue;
    }
    if (out.size() == wire::max_seq_ranges) break;
    out.emplace_back(first, last);
  }
  return out;
}

std::vector<std::string> gap_book::sites_missing(std::string_view channel,
                                                 std::span<const wire::seq_span> ranges) const {
  std::vector<std::string> out;
  for (const auto& [key, r] : m_sites) {
    if (key.second != channel) continue;
    const bool hit = std::any_of(r.missing.begin(), r.missing.end(), [&](const auto& m) {
      return std::any_of(ranges.begin(), ranges.end(),
                         [&](const auto& q) { return m.first <= q.second && q.first <= m.second; });
    });
    if (hit) out.push_back(key.first);
  }
  return out;
}

}  // namespace mcdist::receiver
