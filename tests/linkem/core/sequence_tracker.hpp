// Receiver-side bookkeeping of numbered test datagrams: what arrived, what was lost,
// duplicated or reordered, and how losses cluster into bursts. Used by
// mcdist-linkem-traffic to measure the emulator.
#pragma once

#include <cstdint>
#include <vector>

namespace mcdist::linkem {

/// Largest sequence number tracked: a bitmap of 2^31 bits is 256 MiB, far beyond any
/// validation run (10^7 datagrams), and bounds memory if a corrupt number arrives.
inline constexpr std::uint64_t k_max_tracked_sequence = 1ULL << 31U;

/// Tracks sequence numbers 0, 1, 2, ... of one stream.
class sequence_tracker {
 public:
  /// Records the arrival of datagram `seq`. Numbers >= k_max_tracked_sequence are counted
  /// as out_of_range and otherwise ignored.
  void record(std::uint64_t seq);

  struct summary {
    std::uint64_t total = 0;         ///< datagrams the sender says it sent
    std::uint64_t received = 0;      ///< arrivals, duplicates included
    std::uint64_t unique = 0;        ///< distinct sequence numbers received (< total)
    std::uint64_t duplicates = 0;    ///< arrivals of an already seen number
    std::uint64_t reordered = 0;     ///< first arrivals below the highest number seen
    std::uint64_t lost = 0;          ///< total - unique
    std::uint64_t loss_bursts = 0;   ///< maximal runs of consecutive lost numbers
    std::uint64_t max_burst = 0;     ///< longest such run
    double mean_burst = 0;           ///< lost / loss_bursts (0 if no loss)
    std::uint64_t out_of_range = 0;  ///< numbers >= total or >= the tracking limit
  };

  /// Summarises against `total` datagrams sent (numbers 0 .. total-1).
  [[nodiscard]] summary summarize(std::uint64_t total) const;

 private:
  std::vector<std::uint64_t> m_bits;
  std::uint64_t m_received = 0;
  std::uint64_t m_duplicates = 0;
  std::uint64_t m_reordered = 0;
  std::uint64_t m_out_of_range = 0;
  std::uint64_t m_highest = 0;
  bool m_any = false;
};

}  // namespace mcdist::linkem
