#pragma once
/// @file
/// What the sender tells the group it has already scheduled for repair, so that receivers drop
/// those blocks from their NAKs (docs/design-notes.md "Feedback bounded by distinct losses").
/// mcdist's NAKs are unicast, so receivers never hear each other's; the sender stands in for
/// that, as NORM's NORM_CMD(REPAIR_ADV) does for unicast NACKs (RFC 5740). Coalesced: the
/// blocks NAKs newly added to the wanted set go into a pending set, and at most one advert per
/// interval (a quarter GRTT) carries those still wanted then (a prompt repair that already
/// left needs no hint: the repair itself reaches the others first). FEC blocks whose parity NAKs
/// raised wait the same way, and an advert carries the parity each still has pending, so a
/// receiver lacking no more leaves it out of its NAK (nak_scheduler.hpp "Parity coverage"). A
/// FEC block's pending parity is advertised parity_advert_sends times, one advert interval
/// apart, each time with the count then pending: one advert covers nearly every receiver at
/// once, so a receiver that loses it (1 % of 10,000 at 1e-2 loss) would otherwise NAK.
/// Bounded: at most max_pending_runs runs and max_pending_fec_blocks FEC blocks wait, one advert
/// carries at most range_budget bytes of runs and parity counts.
/// Pure; sends nothing itself (the session queues the datagram).

#include "common/ranges.hpp"
#include "common/time.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace mcdist::sender {

/// The pending advertisement of one session.
class repair_advert {
 public:
  /// Runs waiting for the next advert; beyond it new runs are not advertised (a hint only:
  /// receivers then NAK them, costing a datagram, never a block). 4096 runs of 16 bytes plus
  /// map nodes: ~200 KiB at most.
  static constexpr std::size_t max_pending_runs = 4096;
  /// Bytes of (gap, count) pairs one advert carries: well inside wire::control_budget, and
  /// about 250 scattered blocks or any number of long runs (a 10 s fade is one run).
  static constexpr std::size_t range_budget = 1000;
  /// Bytes a file_nak costs before its ranges (tag, length, file index), an upper bound.
  static constexpr std::size_t file_overhead = 12;
  /// FEC blocks waiting to have their pending parity advertised: 4096 x ~40 bytes.
  static constexpr std::size_t max_pending_fec_blocks = 4096;
  /// Adverts that carry a FEC block's pending parity after a NAK raised it: at loss p a
  /// receiver misses all of them with probability p^3 (1e-6 at 1e-2).
  static constexpr std::uint8_t parity_advert_sends = 3;
  /// Bytes a (gap, pending) pair costs at most (two varints of up to 5 bytes).
  static constexpr std::size_t fec_pair_bytes = 10;
  /// Bytes of (gap, pending) pairs one advert carries: 32 FEC blocks, beside range_budget of
  /// runs, well inside wire::control_budget.
  static constexpr std::size_t fec_budget = 320;

  /// Blocks [first, first + count) of `file` were just added to the wanted set.
  void scheduled(std::uint32_t file, std::uint32_t first, std::uint32_t count) {
    if (count == 0) return;
    std::uint64_t a = key(file, first);
    std::uint64_t b = a + count;
    auto it = m_pending.upper_bound(a);
    if (it != m_pending.begin() && std::prev(it)->second >= a) --it;
    bool merged = false;
    while (it != m_pending.end() && it->first <= b) {
      a = std::min(a, it->first);
      b = std::max(b, it->second);
      it = m_pending.erase(it);
      merged = true;
    }
    if (!merged && m_pending.size() >= max_pending_runs) return;
    m_pending.emplace(a, b);
  }
  /// NAKs raised the parity scheduled for FEC block `fb`.
  void scheduled_parity(std::uint32_t fb) {
    if (m_fec.size() < max_pending_fec_blocks || m_fec.count(fb)) m_fec[fb] = parity_advert_sends;
  }
  /// Something waits to be advertised.
  bool pending() const noexcept { return !m_pending.empty() || !m_fec.empty(); }
  /// Runs waiting.
  std::size_t pending_runs() const noexcept { return m_pending.size(); }
  /// A new pass starts: its sweep sends every wanted block, and receivers forget the hints of
  /// the pass before, so what waits is dropped.
  void clear() noexcept {
    m_pending.clear();
    m_fec.clear();
  }
  /// An advert may leave at or after this time (when pending()).
  time_point due_at() const noexcept { return m_next; }
  /// An advert is due at `now`.
  bool due(time_point now) const noexcept { return pending() && now >= m_next; }

  /// Moves pending runs into `out.files` as (gap, count) runs per file, keeping only the
  /// blocks still wanted, up to range_budget bytes; what does not fit stays pending.
  /// @param wanted  wanted(file, first, end, emit) calls emit(a, b) for every still-wanted
  ///                run [a, b) inside [first, end), in order, and stops when emit returns false
  /// @return blocks put into `out`
  template <class Wanted>
  std::uint64_t take(wire::repair_advert& out, Wanted&& wanted) {
    std::uint64_t blocks = 0;
    std::size_t used = 0;
    std::uint32_t open_file = 0;
    wire::file_nak* fn = nullptr;
    std::vector<std::uint32_t> pairs;
    range_encoder enc(pairs);
    auto seal = [&] {
      if (!fn) return;
      for (const auto v : pairs) fn->add_ranges(v);
      pairs.clear();
      enc = range_encoder(pairs);
      fn = nullptr;
    };
    while (!m_pending.empty()) {
      const auto it = m_pending.begin();
      const auto file = static_cast<std::uint32_t>(it->first >> 32);
      const auto first = static_cast<std::uint32_t>(it->first);
      const auto end = static_cast<std::uint32_t>(it->second - (std::uint64_t{file} << 32));
      std::uint32_t stopped_at = end;
      bool full = false;
      wanted(file, first, end, [&](std::uint32_t a, std::uint32_t b) {
        if (fn && open_file != file) seal();
        const std::size_t cost = (fn ? 0 : file_overhead) + enc.cost(a, b - a);
        if (used + cost > range_budget) {
          stopped_at = a;
          full = true;
          return false;
        }
        if (!fn) {
          fn = out.add_files();
          fn->set_file(file);
          open_file = file;
        }
        used += cost;
        enc.add(a, b - a);
        blocks += b - a;
        return true;
      });
      m_pending.erase(it);
      if (full) {
        m_pending.emplace(key(file, stopped_at), key(file, end));
        break;
      }
    }
    seal();
    return blocks;
  }

  /// Moves the waiting FEC blocks into `out.fec_parity` as (gap, pending) pairs, ascending,
  /// with the parity each still has pending (pending_of(fb); 0: all sent, left out and
  /// forgotten: the parity itself is on its way), up to fec_budget bytes; what does not fit
  /// stays waiting, and each one taken waits again until it has gone parity_advert_sends times.
  /// @return FEC blocks put into `out`
  template <class PendingOf>
  std::uint64_t take_parity(wire::repair_advert& out, PendingOf&& pending_of) {
    std::uint64_t taken = 0;
    std::uint32_t previous = 0;
    std::size_t used = 0;
    for (auto it = m_fec.begin(); it != m_fec.end() && used + fec_pair_bytes <= fec_budget;) {
      const std::uint32_t pending = pending_of(it->first);
      if (pending == 0) {
        it = m_fec.erase(it);
        continue;
      }
      out.add_fec_parity(it->first - previous);
      out.add_fec_parity(pending);
      previous = it->first;
      used += fec_pair_bytes;
      ++taken;
      it = --it->second == 0 ? m_fec.erase(it) : std::next(it);
    }
    return taken;
  }
  /// No advert before `t` (the session holds the first one of a burst until the prompt repairs
  /// of the same wake-up have left).
  void hold_until(time_point t) noexcept { m_next = std::max(m_next, t); }
  /// An advert left at `now`: the next may leave `interval` later.
  void sent(time_point now, duration interval) noexcept { m_next = now + interval; }

 private:
  static std::uint64_t key(std::uint32_t file, std::uint32_t block) noexcept {
    return std::uint64_t{file} << 32 | block;
  }

  /// key(file, first) -> key(file, end), disjoint and not touching.
  std::map<std::uint64_t, std::uint64_t> m_pending;
  /// FEC blocks whose raised parity is still to be advertised -> adverts left, ascending.
  std::map<std::uint32_t, std::uint8_t> m_fec;
  time_point m_next{};
};

}  // namespace mcdist::sender
