#pragma once
/// @file
/// When a receiver sends its NAK round and what it leaves out of it, so that the NAKs the sender
/// reads grow with the distinct losses, not with the group (docs/design-notes.md "Feedback
/// bounded by distinct losses"). Three rules, each from NORM (RFC 5740):
///
/// - **Backoff.** The round waits a delay drawn from the truncated exponential distribution over
///   the window the sender announces, with lambda = ln(group size) + 1 (RFC 5740 section 5.3;
///   Nonnenmacher and Biersack, "Optimal multicast feedback", IEEE INFOCOM 1998). Few receivers
///   draw an early time, most a late one: when a loss is shared, the first NAK's repair (or the
///   sender's advertisement) reaches the others before their timers fire.
/// - **Suppression by advertisement.** The sender multicasts the blocks it has scheduled for
///   repair (RFC 5740's NORM_CMD(REPAIR_ADV), which NORM sends for the same reason: its NAKs
///   can be unicast, so receivers never hear each other's). A receiver drops advertised blocks
///   from its NAK. The hint holds for the current pass only and is forgotten when the sender
///   asks again for the end of a pass already answered (a rescan), so a lost repair still costs
///   one status interval, like a lost NAK.
/// - **Parity coverage.** A FEC block's lack is reported once per pass, and not at all while the
///   parity the sender advertised as pending (`repair_advert.fec_parity`) covers it: the sender
///   raises a FEC block's parity to the largest lack it hears, so one report of the largest
///   lack serves every site (RFC 5740 section 5.3's suppression, applied to NORM's erasure
///   counts). What covers a FEC block is kept as the number of parity blocks this receiver
///   expects to hold: the ones held plus the lack it reported or the parity advertised. A lost
///   parity block then waits for the next pass or rescan, like a lost repair.
/// - **Sampled status.** A status request asks the slice of the group whose id hash falls in
///   it to answer even with nothing to NAK (RFC 5740's ACK request to a subset of receivers);
///   receivers with something to NAK always answer.
///
/// Pure: the engine passes the random values and the marker's fields in. "What this receiver
/// would ask for" stays the engine's (nak_builder); this unit only filters and times it, so the
/// same rule holds whatever a NAK names.

#include "common/time.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>

namespace mcdist::receiver {

/// NAK timing and advertised-repair hints of one session.
class nak_scheduler {
 public:
  /// Advertised runs remembered per session (about 48 bytes each with the map node: 48 KiB at
  /// most). A fade is one run; beyond the cap new hints are ignored, which costs at most a
  /// duplicate NAK, never a block.
  static constexpr std::size_t max_runs = 1024;
  /// FEC blocks whose parity coverage is remembered per session (about 40 bytes each: 160 KiB
  /// at most); beyond the cap a FEC block is reported again, which costs a datagram, never a
  /// block.
  static constexpr std::size_t max_covered_fec_blocks = 4096;

  /// The sender's NAK parameters, from its latest marker.
  /// @param window      marker.nak_backoff_us: delays are drawn in [0, window)
  /// @param group_size  marker.group_size: receivers registered at the sender; 0 (a sender
  ///                    without it) draws uniformly, as before the exponential backoff
  void on_marker(duration window, std::uint32_t group_size) noexcept {
    m_window = window;
    m_group = group_size;
  }
  duration window() const noexcept { return m_window; }

  /// The delay before the next NAK round, in [0, window).
  /// @param random  a uniformly distributed 64-bit value (the engine's generator)
  /// @return t = (T / lambda) ln(1 + U (e^lambda - 1)), U uniform in [0, 1), T the window,
  ///         lambda = ln(group size) + 1: the inverse of the truncated exponential
  ///         distribution's CDF (RFC 5740 section 5.3); uniform U x T without a group size
  duration draw_delay(std::uint64_t random) const noexcept;

  /// The sender advertised blocks [first, first + count) of `file` as scheduled for repair in
  /// `pass`. Hints of a pass other than the one the engine is in are ignored (the caller
  /// passes its current pass as `current`).
  void advertise(std::uint32_t pass, std::uint32_t current, std::uint32_t file, std::uint32_t first,
                 std::uint32_t count);
  /// A new pass began or the sender asked again for a pass end already answered: every hint is
  /// dropped, so the next round asks for everything still missing.
  void clear() noexcept {
    m_runs.clear();
    m_covered.clear();
  }
  /// FEC block `fb` is covered until this receiver holds `parity` parity blocks of it (it
  /// reported its lack then, or the sender advertised that much parity pending): raises what
  /// is remembered, never lowers it. Hints of another pass are ignored (`pass` != `current`).
  void cover_parity(std::uint32_t pass, std::uint32_t current, std::uint32_t fb,
                    std::uint64_t parity);
  /// True if FEC block `fb`, lacking `need` parity blocks in all (its missing sources, before
  /// the parity held), is covered: the parity expected reaches `need`.
  bool parity_covered(std::uint32_t fb, std::uint64_t need) const noexcept {
    const auto it = m_covered.find(fb);
    return it != m_covered.end() && need <= it->second;
  }
  /// Advertised runs held.
  std::size_t runs() const noexcept { return m_runs.size(); }
  /// True if block `block` of `file` is advertised.
  bool advertised(std::uint32_t file, std::uint32_t block) const noexcept;

  /// Calls fn(from, to) for each piece of [from, to) of `file` that is not advertised, in
  /// order; stops early when fn returns false.
  /// @return false if fn stopped it
  template <class Fn>
  bool for_each_unadvertised(std::uint32_t file, std::uint32_t from, std::uint32_t to,
                             Fn&& fn) const {
    auto it = m_runs.upper_bound(key(file, from));
    if (it != m_runs.begin()) {
      const auto p = std::prev(it);
      if (p->first >> 32 == file && p->second > key(file, from)) it = p;
    }
    std::uint32_t b = from;
    for (; b < to && it != m_runs.end() && it->first >> 32 == file; ++it) {
      const auto start = static_cast<std::uint32_t>(it->first);
      const auto end = static_cast<std::uint32_t>(it->second - (std::uint64_t{file} << 32));
      if (start >= to) break;
      if (start > b && !fn(b, start)) return false;
      if (end > b) b = end;
    }
    if (b < to) return fn(b, to);
    return true;
  }

  /// The value a receiver id is sampled by: the first 8 bytes of SHA-256(id), big-endian, so
  /// every implementation puts a site in the same slice. Computed once per engine.
  static std::uint64_t id_hash(std::string_view id) noexcept;
  /// Sampled status: true if a receiver whose id_hash() is `hash` answers a status request of
  /// slice `slice` of `slices` with nothing to NAK (slices <= 1: every receiver). The slices
  /// partition the group: a sender that asks slices 0, 1, ..., slices - 1 in turn has asked
  /// everyone once.
  static bool in_status_sample(std::uint64_t hash, std::uint32_t slices,
                               std::uint32_t slice) noexcept {
    return slices <= 1 || hash % slices == slice % slices;
  }

 private:
  static std::uint64_t key(std::uint32_t file, std::uint32_t block) noexcept {
    return std::uint64_t{file} << 32 | block;
  }

  duration m_window{};
  std::uint32_t m_group = 0;
  /// Advertised runs: key(file, first) -> key(file, end), disjoint and not touching.
  std::map<std::uint64_t, std::uint64_t> m_runs;
  /// FEC block -> parity blocks expected held (cover_parity).
  std::map<std::uint32_t, std::uint64_t> m_covered;
};

}  // namespace mcdist::receiver
