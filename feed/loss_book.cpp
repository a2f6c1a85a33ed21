#include "feed/loss_book.hpp"

namespace mcdist::feed {

void loss_book::note(const std::string& site, std::uint64_t received, std::uint64_t lost) {
  if (received + lost == 0) return;  // nothing measured (a site that held every file)
  auto it = m_sites.find(site);
  if (it == m_sites.end()) {
    if (m_sites.size() >= max_sites) return;
    it = m_sites.emplace(site, counts{}).first;
  }
  counts& c = it->second;
  c.received += received;
  c.lost += lost;
  while (c.received + c.lost > horizon) {
    c.received /= 2;
    c.lost /= 2;
  }
}

loss_book::counts loss_book::sum(std::span<const std::string> sites) const {
  counts total;
  auto add = [&](const counts& c) {
    total.received += c.received;
    total.lost += c.lost;
  };
  if (sites.empty()) {
    for (const auto& [site, c] : m_sites) add(c);
  } else {
    for (const auto& site : sites) {
      if (const auto it = m_sites.find(site); it != m_sites.end()) add(it->second);
    }
  }
  return total;
}

std::optional<double> loss_book::loss_of(std::span<const std::string> sites) const {
  const counts c = sum(sites);
  const std::uint64_t all = c.received + c.lost;
  if (c.lost < min_lost && all < min_datagrams) return std::nullopt;
  return static_cast<double>(c.lost) / static_cast<double>(all);
}

std::uint64_t loss_book::datagrams_of(std::span<const std::string> sites) const {
  const counts c = sum(sites);
  return c.received + c.lost;
}

}  // namespace mcdist::feed
