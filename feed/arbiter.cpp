#include "feed/arbiter.hpp"

#include <algorithm>
#include <numeric>

namespace mcdist::feed {

std::vector<std::uint64_t> share_rate(std::uint64_t total_bps, std::span<const rate_claim> claims,
                                      double floor_fraction) {
  std::vector<std::size_t> order(claims.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return claims[a].priority > claims[b].priority;
  });
  const auto floor = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(static_cast<double>(total_bps) * floor_fraction));
  std::vector<std::uint64_t> out(claims.size(), 0);
  std::uint64_t left = total_bps;
  for (const auto i : order) {
    const auto& c = claims[i];
    std::uint64_t want = c.cap_bps;
    if (want == 0) {
      want = static_cast<std::uint64_t>(static_cast<double>(total_bps) *
                                        std::clamp(c.share, 0.0, 1.0));
    }
    const auto got = std::min(want, left);
    left -= got;
    out[i] = std::max(got, floor);
  }
  return out;
}

std::vector<std::uint64_t> split_rate(std::span<const std::uint64_t> channel_bps,
                                      std::span<const std::size_t> sessions,
                                      std::uint64_t total_bps, double floor_fraction) {
  const auto floor = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(static_cast<double>(total_bps) * floor_fraction));
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; i < channel_bps.size() && i < sessions.size(); ++i) {
    const auto n = std::max<std::size_t>(1, sessions[i]);
    for (std::size_t k = 0; k < n; ++k) out.push_back(std::max(channel_bps[i] / n, floor));
  }
  return out;
}

}  // namespace mcdist::feed
