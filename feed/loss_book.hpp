#pragma once
/// @file
/// What the sites say of the hub's multicast path: per site, the datagrams of its recent
/// sessions it received and found lost (COMPLETE's datagrams_received and datagrams_lost), from
/// which a channel whose profile has fec_k "auto" sizes each session's FEC blocks
/// (sender::fec_k_for_loss; docs/design-notes.md "FEC block size and the repair floor").

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>

namespace mcdist::feed {

/// Per-site loss counts, decayed. Single-threaded (the hub's io thread).
class loss_book {
 public:
  /// A site's history holds at most this many datagrams: past it both of its counts are
  /// halved, so its estimate follows its last one to two million datagrams (1.4-2.8 GB of
  /// 1400-byte blocks), and a path that changes shows within a few large sessions.
  static constexpr std::uint64_t horizon = 2'000'000;
  /// Sites kept at most (a book fed by an open group's registrations stays bounded); sites
  /// past it are not noted.
  static constexpr std::size_t max_sites = 4096;
  /// The sites of a session must together have reported this many losses, or this many
  /// datagrams, before their loss is taken: ten losses put the estimate within about a third,
  /// and at 10,240 datagrams without ten losses the loss is below about the one at which
  /// fec_k_for_loss reaches its largest k (sender::auto_fec_lack / 4096 = 1e-3), where the
  /// exact value no longer matters.
  static constexpr std::uint64_t min_lost = 10;
  static constexpr std::uint64_t min_datagrams = 10'240;

  /// Adds one session's report from `site`: `received` multicast datagrams taken, `lost`
  /// found missing by sequence gaps.
  void note(const std::string& site, std::uint64_t received, std::uint64_t lost);

  /// The pooled loss of `sites` (sum lost / sum (received + lost) over those in the book), a
  /// share in [0, 1], or nullopt while they have less than min_lost losses and min_datagrams
  /// datagrams in all. Empty `sites` (an open group): every site in the book.
  std::optional<double> loss_of(std::span<const std::string> sites) const;

  /// The datagrams behind loss_of(sites) (for logs).
  std::uint64_t datagrams_of(std::span<const std::string> sites) const;

  std::size_t sites() const noexcept { return m_sites.size(); }

 private:
  struct counts {
    std::uint64_t received = 0;
    std::uint64_t lost = 0;
  };
  /// Sums over `sites` (empty: all).
  counts sum(std::span<const std::string> sites) const;

  std::map<std::string, counts, std::less<>> m_sites;
};

}  // namespace mcdist::feed
