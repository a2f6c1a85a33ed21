#pragma once
/// @file
/// The receiver's loss detector for one session: follows the sender's progress through its
/// markers, schedules a NAK round for the blocks between two markers, and when a round is due
/// works out what it asks for (missing blocks, FEC block lacks, digests) and packs it into NAK
/// datagrams. In the manner of Aeron's loss detector: the gap state and the NAK timing live
/// here, the engine only routes markers and adverts in and sends what comes out.
///
/// Every receiver that lost a block detects it at the same marker and times its NAK from it
/// (nak_scheduler.hpp's backoff), so the first one's repair (or the sender's advert) reaches
/// the others before their timers fire; each block is NAKed once per pass, by its round.
/// Parity (docs/design-notes.md "Parity repairs"): a missing block that parity will repair is
/// left out of the named blocks and its FEC block's lack is reported instead, once per pass,
/// by the round drawn at the marker that finished the FEC block.
///
/// Pure: the engine passes the time, the random values, the session's files and its FEC
/// tracker in.

#include "common/time.hpp"
#include "receiver/core/file_table.hpp"
#include "receiver/core/nak_scheduler.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

namespace mcdist::wire {
class marker;
class nak;
class repair_advert;
}  // namespace mcdist::wire

namespace mcdist::receiver {

class fec_tracker;

/// One NAK round: what was missing between two markers, NAKed at a time drawn when the later
/// marker arrived. Positions are (file, block) of the session's sweep order.
struct nak_round {
  time_point due{};
  std::uint32_t from_file = 0;
  std::uint32_t from_block = 0;
  std::uint32_t to_file = 0;  ///< up to the marker: (file_count, 0) at a pass end
  std::uint32_t to_block = 0;
  bool pass_end = false;  ///< covers the pass's end: answering it answers the pass end
  bool status = false;    ///< answers a status request: a status reply even with nothing missing
  std::uint32_t status_slices = 0;
  std::uint32_t status_slice = 0;
};

/// The sender's progress as of the latest marker the planner took.
struct sender_progress {
  std::uint32_t pass = 0;
  std::uint32_t file = 0;  ///< the next block the sweep sends: (file, block)
  std::uint32_t block = 0;
  std::uint32_t seq = 0;  ///< the highest marker sequence number seen (0: none)
  bool pass_end = false;  ///< the pass's sweep has ended
};

/// The NAK datagrams of one round, and what it left out.
struct nak_round_out {
  std::vector<wire::nak> datagrams;
  /// FEC block lacks left out because this receiver reported them this pass or the sender
  /// advertised enough parity pending (receiver_stats::fec_lacks_covered).
  std::uint64_t lacks_covered = 0;
};

/// NAK rounds of one session.
class nak_planner {
 public:
  /// Pending NAK rounds a session keeps (one per marker, GRTT/2 apart: 32 GRTT, beyond any NAK
  /// window, which is at most about 6 GRTT); beyond, the newest takes the next one's blocks.
  static constexpr std::size_t max_rounds = 64;
  /// Most digests asked for in one NAK round.
  static constexpr std::size_t max_digests_wanted = 128;
  /// Longest NAK backoff window taken from a marker (10 s): a forged one must not stretch
  /// NAK timers beyond the session timeout.
  static constexpr duration max_window = std::chrono::seconds(10);

  /// @param max_datagrams  most NAK datagrams per round (receiver_config::max_nak_datagrams;
  ///                       the rest of a round goes out at the next timer)
  /// @param id_hash        nak_scheduler::id_hash of this receiver's id: its status slice
  nak_planner(std::uint32_t max_datagrams, std::uint64_t id_hash) noexcept
      : m_max_datagrams(max_datagrams), m_id_hash(id_hash) {}

  /// Takes the NAK parameters every marker carries, whatever the session's state: the backoff
  /// window (clamped to max_window), the group size and how many digests were sent (clamped to
  /// `file_count`).
  void on_marker_params(const wire::marker& m, std::uint32_t file_count) noexcept;

  /// Takes a marker's progress (its file and block already checked against the session): a
  /// marker older than the latest is ignored; one of a new pass voids the old pass's rounds and
  /// hints. Then schedules a round for the blocks between the previous marker and this one,
  /// due after a backoff drawn with `random()` (called once, only when a round is scheduled),
  /// unless there is nothing to ask: no new blocks, no status request, no rescan.
  /// @param unicast  data comes over unicast: rounds ask only for digests and answer status
  /// @param silent   a silent session: the progress is kept, no round is scheduled
  template <class Random>
  void on_marker(const wire::marker& m, bool unicast, bool silent, time_point now,
                 Random&& random) {
    if (auto r = advance(m, unicast, silent)) {
      r->due = now + m_feedback.draw_delay(random());
      schedule(*r);
    }
  }

  /// The session starts receiving (registered): the next round starts at the beginning of the
  /// pass, so the holes of what arrived during registration are NAKed at once.
  void restart_scan() noexcept {
    m_scan_file = 0;
    m_scan_block = 0;
  }

  /// The earliest time a round is due, or nullopt.
  std::optional<time_point> due() const noexcept { return m_due; }
  /// The rounds due at `now`, in the order scheduled, taken out; the others stay.
  std::vector<nak_round> take_due(time_point now);
  /// Drops every pending round (rounds due while the session registers: the sender ignores a
  /// receiver it does not know).
  void discard_rounds() noexcept {
    m_rounds.clear();
    m_due.reset();
  }

  /// Builds round `r`'s NAK datagrams: the missing blocks behind its marker not advertised for
  /// repair and not left to parity, the FEC lacks due, the digests still wanted. When the
  /// datagram cap stops it, the rest of the round is rescheduled, due at `now`.
  /// @param header  the fields every NAK of the round repeats (nak_header, rate fields);
  ///                blocks_missing is set here
  /// @param files   every file of the session (the manifest is complete: one per entry)
  /// @param fec     the session's FEC tracker, or nullptr without parity (or over unicast)
  nak_round_out build_round(const nak_round& r, wire::nak header, std::span<const file_rx> files,
                            const fec_tracker* fec, time_point now);

  /// True when every file an advert names is a file of the session and its runs lie within
  /// the file (proto repair_advert.files). Checked before take_advert.
  static bool advert_files_valid(const wire::repair_advert& m,
                                 std::span<const file_rx> files) noexcept;
  /// Takes an advert whose files passed advert_files_valid: its block runs are left out of
  /// this pass's NAKs, its parity pending per FEC block ((gap, pending) pairs, ascending) covers
  /// those FEC blocks' lacks (nak_scheduler.hpp).
  /// @param fec  the session's FEC tracker; nullptr: the parity pairs are not read
  /// @return false (nothing taken) when the parity pairs are odd in number, not ascending, past
  ///         the last FEC block or name no parity
  bool take_advert(const wire::repair_advert& m, std::span<const file_rx> files,
                   const fec_tracker* fec);

  /// The sender's progress as of the latest marker.
  const sender_progress& progress() const noexcept { return m_progress; }
  /// Blocks of `files` behind round `r`'s marker still missing (nak.blocks_missing); a file's
  /// blocks beyond the marker are not counted, nor files without a block map.
  static std::uint64_t blocks_missing(std::span<const file_rx> files, const nak_round& r);
  /// Pending rounds (for tests and status).
  std::size_t rounds() const noexcept { return m_rounds.size(); }
  /// Advert hints and parity coverage (nak_scheduler.hpp).
  const nak_scheduler& feedback() const noexcept { return m_feedback; }

 private:
  /// The progress part of on_marker: the round to schedule, without its due time, or nullopt.
  std::optional<nak_round> advance(const wire::marker& m, bool unicast, bool silent);
  void schedule(const nak_round& r);
  /// Sources of FEC block `fb` the sender had sent as of round `r`'s marker: a FEC block is
  /// reported by the first round drawn at or after the marker that completed it, so its
  /// backoff starts there (a round drawn earlier in the pass would fire at a time unrelated to
  /// it, and every site's NAK would come at once).
  std::uint32_t fec_sent(const fec_tracker& t, std::uint32_t fb, const nak_round& r,
                         std::uint32_t file_count) const;
  /// `received` with the missing blocks of file `f` in [from, end) that parity will repair
  /// set, so the NAK names only the others; the FEC blocks repaired by parity go into `lacks`.
  block_map fec_mask(const fec_tracker& t, const nak_round& r, std::span<const file_rx> files,
                     std::uint32_t f, std::uint32_t from, std::uint32_t end,
                     std::map<std::uint32_t, std::uint32_t>& lacks) const;
  /// Adds the missing blocks of round `r` file by file. @return false when the datagram cap
  /// stopped it (the rest is rescheduled, due at `now`)
  bool add_missing(const nak_round& r, std::span<const file_rx> files, const fec_tracker* fec,
                   class nak_builder& naks, std::map<std::uint32_t, std::uint32_t>& lacks,
                   time_point now);
  /// The FEC blocks round `r` reports besides those fec_mask found: what the cap pushed out of
  /// the last round, and in pass 1 the FEC blocks finished between the round's two markers.
  std::set<std::uint32_t> fec_due(const fec_tracker& t, const nak_round& r,
                                  std::uint32_t file_count);
  /// Reports the FEC blocks `due`: their lack into `lacks`, or their missing blocks by name
  /// when parity cannot make them whole.
  void fec_report(const fec_tracker& t, const nak_round& r, std::span<const file_rx> files,
                  const std::set<std::uint32_t>& due, class nak_builder& naks,
                  std::map<std::uint32_t, std::uint32_t>& lacks);
  /// Names blocks of FEC blocks parity cannot make whole (file -> blocks); what the cap leaves
  /// out is deferred to the next round, from the first block left out.
  void name_blocks(const fec_tracker& t, std::map<std::uint32_t, std::vector<std::uint32_t>>& named,
                   class nak_builder& naks);
  /// Adds the FEC lacks not covered; what the cap leaves out is deferred. @return lacks covered
  std::uint64_t add_lacks(const fec_tracker& t, const std::map<std::uint32_t, std::uint32_t>& lacks,
                          class nak_builder& naks);
  /// Asks for the digests of the files receiving or awaiting one, among the first
  /// digests_through.
  void want_digests(std::span<const file_rx> files, class nak_builder& naks) const;

  std::uint32_t m_max_datagrams;
  std::uint64_t m_id_hash;
  sender_progress m_progress;
  /// How far NAK rounds of the current pass are scheduled: each newer marker schedules a round
  /// for the blocks between the previous marker and itself.
  std::uint32_t m_scan_file = 0;
  std::uint32_t m_scan_block = 0;
  /// The pass whose end a round answered (a pass end asked for again is a rescan).
  std::uint32_t m_pass_end_answered = 0;
  /// Files whose digests the sender has sent (marker.digests_through).
  std::uint32_t m_digests_through = 0;
  /// Pending NAK rounds, in the order scheduled; each fires at its own time.
  std::vector<nak_round> m_rounds;
  /// The earliest due time of m_rounds.
  std::optional<time_point> m_due;
  /// NAK timing, advertised repairs and the status slice.
  nak_scheduler m_feedback;
  /// FEC blocks whose report the NAK datagram cap pushed out of a round: the next round
  /// reports them. (A FEC block pass 1 has not finished is reported by the round drawn at the
  /// marker that finishes it.)
  std::set<std::uint32_t> m_fec_deferred;
  /// Of those FEC blocks whose missing blocks are named one by one, the source index where the
  /// cap stopped the naming: the next round goes on from there rather than name the first
  /// part again (one entry per deferred FEC block at most).
  std::map<std::uint32_t, std::uint32_t> m_fec_name_resume;
};

}  // namespace mcdist::receiver
