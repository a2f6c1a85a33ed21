#pragma once
/// @file
/// When was a block last sent? Needed to recognise a NAK that left its receiver before a
/// retransmission of the block could have reached it (the NAK carries the highest sequence
/// number the receiver had seen; a block sent after that is on its way and needs no second
/// copy). Aeron's retransmit handler solves the same problem with a linger timer per block.
///
/// Memory does not grow with file size: pass 1 sends every block of a file back to back, so its
/// sequence number is first_seq(file) + block (repairs interleaved during pass 1 make that an
/// underestimate by their number, which can only make a NAK look fresh, never stale); repairs
/// are remembered in a bounded window of the most recent ones. A NAK older than the window is
/// taken as fresh (at worst one duplicate repair).

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace mcdist::sender {

/// Sequence numbers of recent repair transmissions, keyed by (file, block).
class repair_log {
 public:
  /// @param window  repairs remembered (262144: 8 s of nothing but repairs at 350 Mbit/s,
  ///                far more than the NAK round trip of any path; ~10 MB at most)
  explicit repair_log(std::size_t window = 262144) : m_window(window) { m_ring.reserve(1024); }

  /// Records that (file, block) was repaired with sequence number `seq`.
  void record(std::uint32_t file, std::uint32_t block, std::uint32_t seq) {
    const std::uint64_t key = std::uint64_t{file} << 32 | block;
    m_last[key] = seq;
    if (m_ring.size() < m_window) {
      m_ring.push_back({key, seq});
      return;
    }
    // Overwrite the oldest entry, forgetting it unless the block was repaired again since.
    auto& oldest = m_ring[m_next];
    const auto it = m_last.find(oldest.key);
    if (it != m_last.end() && it->second == oldest.seq && oldest.key != key) m_last.erase(it);
    oldest = {key, seq};
    m_next = (m_next + 1) % m_window;
  }

  /// The latest repair sequence number of (file, block) still in the window, or 0.
  std::uint32_t last(std::uint32_t file, std::uint32_t block) const {
    const auto it = m_last.find(std::uint64_t{file} << 32 | block);
    return it == m_last.end() ? 0 : it->second;
  }

  std::size_t size() const noexcept { return m_last.size(); }

 private:
  struct entry {
    std::uint64_t key;
    std::uint32_t seq;
  };
  std::size_t m_window;
  std::size_t m_next = 0;
  std::vector<entry> m_ring;
  std::unordered_map<std::uint64_t, std::uint32_t> m_last;
};

}  // namespace mcdist::sender
