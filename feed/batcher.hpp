#pragma once
/// @file
/// A channel's batching of products into sessions (pure: no clock, no I/O). A batch opens with
/// its first product and closes when `window` has passed since then, or when it holds
/// `max_files` files or `max_bytes` bytes, whichever comes first: one session then carries many
/// small products, so announce, registration and the end of the session are paid once per
/// batch (the small-file advantage of README "Why one session for a file set"). The window is
/// LDM's and TelliCast's trade: a warning channel uses ~200 ms, a model-field channel seconds.

#include "common/time.hpp"
#include "feed/journal.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <unordered_set>
#include <vector>

namespace mcdist::feed {

/// When a batch closes.
struct batch_limits {
  duration window = std::chrono::milliseconds(200);
  std::size_t max_files = 1000;                      ///< at least 1
  std::uint64_t max_bytes = std::uint64_t{4} << 30;  ///< a larger single product is a batch alone
};

/// Products of one channel waiting for their session, in arrival order.
class batcher {
 public:
  explicit batcher(batch_limits limits) : m_limits(limits) {}
  /// A reload changed the channel's batching: applies from the next batch on.
  void set_limits(batch_limits limits) { m_limits = limits; }

  /// Adds a product that arrived at `now`. @return false (and nothing changes) when a product
  /// with the same journal id is already waiting: the start-up scan and inotify may both
  /// report one file.
  bool add(const product& p, time_point now);

  /// True when a batch may be taken at `now`: products wait and the oldest waited `window`,
  /// or the limits are reached.
  bool ready(time_point now) const;

  /// When the waiting products become ready without more arriving (the oldest one's arrival
  /// plus the window), or nullopt when none waits.
  std::optional<time_point> deadline() const;

  /// Takes the next batch: the oldest products up to max_files and max_bytes (at least one,
  /// unless every product waiting is held). A product for which `hold` is true stays waiting
  /// (the hub holds back a new version of a product whose older version a running session of
  /// the channel still sends: sent at once, the two could complete at a site in either order).
  /// What is left stays, with its arrival times.
  std::vector<product> take(const std::function<bool(const product&)>& hold = {});

  bool empty() const { return m_waiting.empty(); }
  std::size_t size() const { return m_waiting.size(); }
  std::uint64_t bytes() const { return m_bytes; }

 private:
  struct waiting {
    product p;
    time_point arrived;
  };
  batch_limits m_limits;
  std::deque<waiting> m_waiting;
  std::unordered_set<std::int64_t> m_ids;
  std::uint64_t m_bytes = 0;
};

}  // namespace mcdist::feed
