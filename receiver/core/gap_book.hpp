#pragma once
/// @file
/// What the sites behind a relay miss of a channel's numbered sessions (docs/design-notes.md
/// "Catch-up through a relay"). A site behind a relay answers the hub's heartbeats, which the
/// relay passes on, with a gap report to the relay, and names its gaps in the REGISTER of the
/// sessions the relay runs for it; neither goes further. The relay keeps each site's latest
/// report here and, at the hub's next heartbeat, joins them to its own gaps in its one gap
/// report upstream: the hub catches the relay up (only_receivers = the relay), and the relay runs
/// that catch-up for the sites that reported the numbers. One report upstream stands for the
/// whole subtree, as one NAK upstream stands for a loss shared below the relay.
///
/// A site answers every heartbeat while it misses numbers and stays quiet once it misses none,
/// so a report is kept for two heartbeat generations (the one it answered and the next) and
/// then forgotten unless the site repeats it; completing a session the relay ran (its number,
/// or a catch-up's ranges) takes those numbers out of the site's report at once.
///
/// Pure: no sockets, no clock; the heartbeats taken mark the generations.

#include "common/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mcdist::receiver {

/// The latest gap report of each site behind one relayed channel. Not thread-safe.
class gap_book {
 public:
  /// Sites remembered: far beyond any relay's subtree. An unsigned channel lets any host
  /// of the relay group name itself a site, so beyond this a new site's report is dropped
  /// (counted by the caller) rather than one of the known ones forgotten.
  static constexpr std::size_t max_sites = 1024;

  /// Site `site`'s report of what it misses of channel `channel` (as the hub names it):
  /// `missing` replaces what it reported before; empty forgets it.
  /// @param missing  inclusive ranges that pass wire::valid_seq_ranges (the caller checks)
  /// @return false when the book is full and the site is not in it (the report is dropped)
  bool note(std::string_view site, std::string_view channel, std::vector<wire::seq_span> missing);
  /// Site `site` completed `done` of channel `channel` (a session the relay ran for it): those
  /// numbers are no longer missing there.
  void completed(std::string_view site, std::string_view channel,
                 std::span<const wire::seq_span> done);
  /// The relay took a heartbeat of the channel: reports older than the previous generation
  /// are forgotten (their sites would have repeated them had they still missed the numbers).
  void next_generation();

  /// The numbers to report upstream for `channel`: `own` (the relay's own gaps) joined with
  /// its sites' reports less `busy`, each range cut to at most `newest`, merged, the oldest
  /// wire::max_seq_ranges ranges. Passes wire::valid_seq_ranges(result, newest + 1).
  /// @param busy  numbers a session the relay runs for its sites is delivering now, ordered by
  ///              first (the sites are not asked for again; the relay's own gaps are: a
  ///              session cannot deliver what the relay lacks)
  std::vector<wire::seq_span> merged(std::string_view channel, std::uint64_t newest,
                                     std::span<const wire::seq_span> own,
                                     std::span<const wire::seq_span> busy = {}) const;
  /// The sites whose reports for `channel` hold a number of `ranges`, in id order.
  std::vector<std::string> sites_missing(std::string_view channel,
                                         std::span<const wire::seq_span> ranges) const;

  /// Sites with a report kept.
  std::size_t size() const noexcept { return m_sites.size(); }

 private:
  struct report {
    std::vector<wire::seq_span> missing;
    std::uint64_t generation = 0;  ///< the generation it was noted in
  };
  /// (site, channel) -> its report.
  std::map<std::pair<std::string, std::string>, report> m_sites;
  std::uint64_t m_generation = 0;
};

}  // namespace mcdist::receiver
