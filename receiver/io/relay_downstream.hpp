#pragma once
/// @file
/// One two-way session a relay runs for the sites behind it (docs/design-notes.md "Relays",
/// docs/relays-design.md). Upstream the relay is an ordinary site of the session (its engine,
/// storage and NAKs unchanged); downstream this runs the same session, same id, files, block
/// size and FEC shape, as a sender_session whose blocks come from what the relay holds:
///
/// - blocks as they arrive upstream, copied into a bounded cache (cut-through: a block leaves
///   downstream as soon as the relay has it, not after the whole session) until the relay's
///   storage has verified their file (or failed it);
/// - files the relay holds in its destination tree, delivered in this session or before it,
///   whose size, mtime and digest record (user.mcdist.sha256) match the manifest, read back
///   with open_below (no symlink followed) once the cache no longer has the block.
///
/// relay_gate (sender/core/relay_gate.hpp) follows the upstream pass-1 sweep, so a block lost on
/// the hub's link waits for the relay's own repair, asked once upstream however many sites lack
/// it, and parity is encoded here only from FEC blocks held whole. The sites' registrations, NAKs
/// and COMPLETEs come to the relay's socket and are answered here; none goes upstream.
///
/// Signed sessions (not encrypted) run under keys of the relay's own (common/auth.hpp "Relays of
/// signed two-way sessions"): the hub delegated the session to the relay's X25519 key, which a
/// relay_hello multicast every hello_interval (and unicast to a site whose request still used
/// the hub's key) tells the sites; the relay answers their key requests and registrations with
/// a session key of its own, tags blocks and markers under it, and checks their NAKs and
/// COMPLETEs. What it cannot sign goes on as the hub signed it (signed_copies): the announces
/// (in place of the downstream session's own), the digest lists and the END, which the sites
/// check against the hub's key. Runs on the daemon's io thread; reads of the destination block
/// it for one pread of a block.
///
/// Memory: the cache (at most cache_bytes of payload), the manifest, one open file; a signed
/// session also the hub's signed datagrams (at most signed_copies::max_bytes) and at most
/// max_replies unicast answers queued.

#include "common/auth.hpp"
#include "common/endpoint.hpp"
#include "common/fec/fec.hpp"
#include "common/ids.hpp"
#include "common/manifest.hpp"
#include "common/time.hpp"
#include "common/wire.hpp"
#include "sender/core/relay_gate.hpp"
#include "sender/core/sender_session.hpp"

#include <spdlog/fwd.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace mcdist::wire {
class session_params;
}

namespace mcdist::receiver {

/// The hub's signed datagrams of a signed two-way session, as they came, for the sites behind a
/// relay (a relay cannot sign its own): the latest copy of each announce chunk, each distinct
/// digest list, the END.
struct signed_copies {
  /// Bytes kept per session at most: a 10,000-file manifest is about 700 announce chunks of
  /// 1.4 kB, 1 MB; past it the session is not relayed.
  static constexpr std::size_t max_bytes = 4 << 20;
  std::map<std::uint32_t, std::vector<std::byte>> announces;  ///< by chunk index
  std::uint32_t chunks = 0;                                   ///< the hub's manifest_chunks
  std::vector<std::vector<std::byte>> digest_lists;
  std::vector<std::byte> end;
  std::size_t bytes = 0;
  /// Set when keep() kept something new (an announce chunk changed, a digest list): the relay
  /// saves the copies again for a restart.
  bool changed = false;
  /// Keeps `raw`, a datagram of type `h.type` as it came (`plain`: its authenticated view).
  /// @return false when it would pass max_bytes (nothing kept)
  bool keep(const wire::header& h, std::span<const std::byte> raw,
            std::span<const std::byte> plain);
  /// The announces and digest lists as one blob ("MCSC", then per datagram its length, 4 bytes
  /// little-endian, and its bytes), for the relay's state directory.
  std::string serialize() const;
  /// Restores serialize()'s blob: each datagram kept again as keep() would (its header parsed,
  /// its trailer cut off for the view). @return false for a blob that is not one
  bool restore(std::string_view blob);
};

/// The downstream side of one relayed two-way session.
class relay_downstream {
 public:
  /// Payload bytes of upstream blocks one session keeps for sending on and for the sites'
  /// repairs; older blocks are read back from the destination once their file is delivered.
  /// 64 MiB holds about 0.5 s of a 1 Gbit/s session, many round trips of the sites behind a
  /// relay.
  static constexpr std::size_t cache_bytes = 64 << 20;
  /// What the caches of every session of a relay hold together at most (the `shared` count of
  /// the constructor): sessions that a host reaching the group can start are bounded in number
  /// (relay_forwarder::max_two_way_sessions) and together in memory.
  static constexpr std::size_t shared_cache_bytes = 256 << 20;
  /// How long a session whose upstream ended may go on waiting for blocks it does not hold
  /// (its sweep stopped or its passes blocked by the gate) before it ends for its sites (END
  /// aborted): they fail those files and recover by a resend or catch-up, as a site of the hub
  /// would.
  static constexpr duration orphan_timeout = std::chrono::seconds(30);
  /// Passes one run of a session makes at most (its max_passes), and the sequence numbers it
  /// may use: a relay that restarts takes its sessions up again `run` x these higher on the wire
  /// (sender_config::wire_pass_offset, first_seq), so the sites, which still hold the run
  /// before's numbers, take the new markers as newer. 2^28 datagrams are 375 GB of 1400-byte
  /// blocks.
  static constexpr std::uint32_t passes_per_run = 1000;
  static constexpr std::uint32_t seqs_per_run = 1U << 28;
  /// How long a session taken up again after a restart admits the sites that registered with
  /// the run before, as their NAKs and COMPLETEs come (sender_config::admit_on_feedback).
  static constexpr duration resume_window = std::chrono::seconds(30);
  /// Signed sessions: how often the relay_hello is multicast while the session runs (a site
  /// that joins late, or restarted, binds within it), and how many unicast answers (hellos to
  /// sites still using the hub's key, key replies) are queued at most between two services.
  static constexpr duration hello_interval = std::chrono::milliseconds(500);
  static constexpr std::size_t max_replies = 64;
  /// Unicast hellos sent at most per second (to sites whose request the relay cannot check).
  static constexpr std::uint32_t unicast_hellos_per_second = 20;

  /// What it sent and refused, for the status file.
  struct counters {
    std::uint64_t data = 0;        ///< data datagrams sent (pass 1 and repairs)
    std::uint64_t parity = 0;      ///< parity datagrams sent
    std::uint64_t control = 0;     ///< control datagrams sent (multicast and unicast)
    std::uint64_t from_cache = 0;  ///< of data and parity sources: taken from the cache
    std::uint64_t from_dest = 0;   ///< read back from the destination tree
    /// Blocks the gate let through that could not be read after all (the file was replaced
    /// meanwhile): not sent; the sites ask again.
    std::uint64_t unreadable = 0;
    /// Signed sessions: relay_hellos sent (multicast and unicast), site datagrams that did not
    /// verify under the relay's keys (dropped), and ENDs the relay could not send on because
    /// the hub's had not come (its sites that had not completed time out).
    std::uint64_t hellos = 0;
    std::uint64_t site_refused = 0;
    std::uint64_t ends_withheld = 0;
  };

  /// A signed session's part (auth.hpp "Relays of signed two-way sessions"): the hub's
  /// delegation and the hub's signed datagrams kept so far.
  struct signed_session {
    auth::relay_delegation delegation;
    std::shared_ptr<signed_copies> copies;
  };

  /// Sends one datagram: to the relay group when `to` is empty, else unicast to that site.
  using send_fn =
      std::function<void(const std::optional<endpoint>& to, std::span<const std::byte>)>;

  /// @param s       the session (the upstream id, kept)
  /// @param p       its parameters, from an upstream announce (block size, rate, FEC shape,
  ///                channel numbering, creation time)
  /// @param files   its manifest (receiver_engine::manifest_of)
  /// @param dest    the channel's destination tree, where delivered files are read back
  /// @param seed    the downstream session's random engine
  /// @param run     0 for a session started here; n for one taken up again after the relay's
  ///                n-th restart during it (the numbering above)
  /// @param shared  the bytes every session's cache holds, kept by all of them (outlives this)
  /// @param relays  sites that relay in turn (channel_config::relays): waited for 60 s, not 10
  /// @param sig     a signed session: its delegation and the hub's signed datagrams; nullopt
  ///                for an unsigned one
  /// @throws std::invalid_argument for parameters a sender_session refuses
  relay_downstream(session_id s, const wire::session_params& p, std::vector<manifest_entry> files,
                   std::filesystem::path dest, std::uint64_t seed, std::uint32_t run,
                   std::size_t& shared, std::vector<std::string> relays,
                   std::shared_ptr<spdlog::logger> log, time_point now,
                   std::optional<signed_session> sig = std::nullopt);
  ~relay_downstream();
  relay_downstream(const relay_downstream&) = delete;
  relay_downstream& operator=(const relay_downstream&) = delete;

  /// An upstream datagram of the session, authenticated and taken by the relay's engine
  /// (`plain`: as the engine saw it; `raw`: as it came, kept for a signed session's announces,
  /// digest lists and END): data blocks are kept, markers and data move the gate, digest lists
  /// complete the manifest, END ends the upstream sweep.
  void on_upstream(const wire::header& h, std::span<const std::byte> raw,
                   std::span<const std::byte> plain, time_point now);
  /// The relay's storage delivered file `file` (ok) or failed it.
  void on_file_stored(std::uint32_t file, bool ok);
  /// A datagram a site sent to the relay socket for this session. A signed session checks it
  /// under the relay's keys first: a key request is answered (at the next service), a request
  /// the relay cannot check is answered with the relay_hello, anything else that does not
  /// verify is counted (site_refused) and dropped.
  void on_site(const wire::header& h, std::span<const std::byte> d, const endpoint& from,
               time_point now);
  /// A signed session: queues the relay_hello unicast to `to` (a site that asked under the hub's
  /// key), at most unicast_hellos_per_second whoever asks; nothing for an unsigned session.
  void hello_to(const endpoint& to, time_point now);
  /// The relay's engine no longer tracks the session (it completed, failed or timed out here).
  void upstream_gone(time_point now);

  /// Runs the session's timers and sends what is due through `send`.
  /// @return when to call again; nullopt once the session is done
  std::optional<time_point> service(time_point now, const send_fn& send);

  bool done() const noexcept { return m_down->done(); }
  session_id session() const noexcept { return m_session; }
  const counters& stats() const noexcept { return m_stats; }
  sender::session_report report(time_point now) const { return m_down->report(now); }
  /// A signed session's copies of the hub's datagrams (null for an unsigned one).
  const std::shared_ptr<signed_copies>& copies() const noexcept { return m_signed; }
  /// Where the session comes from upstream (the hub's session socket, or the relay in front of
  /// this one): set by the forwarder from the datagrams it hands on.
  void set_upstream(const endpoint& e) noexcept { m_upstream = e; }
  const std::optional<endpoint>& upstream() const noexcept { return m_upstream; }
  /// The channel as the hub names it ("" for an unnumbered ad-hoc session).
  const std::string& channel() const noexcept { return m_channel; }
  /// The channel's session number (0: a catch-up, a resend or an ad-hoc session).
  std::uint64_t channel_seq() const noexcept { return m_channel_seq; }
  /// The numbers a site that completes the session completes: its own number, or a
  /// catch-up's ranges (session_params.catch_up_seqs); empty for neither.
  const std::vector<wire::seq_span>& completes() const noexcept { return m_completes; }

 private:
  enum class place : std::uint8_t { unknown, in_place, absent };

  bool held(std::uint32_t file, std::uint32_t block);
  bool in_place(std::uint32_t file);
  /// Source block (file, block) zero-padded to the block size into `out`; false when it can be
  /// neither found in the cache nor read back.
  bool source(std::uint32_t file, std::uint32_t block, std::span<std::byte> out);
  bool read_back(std::uint32_t file, std::uint64_t offset, std::span<std::byte> out);
  void keep(std::uint32_t file, std::uint32_t block, std::span<const std::byte> payload);
  /// Drops `file`'s blocks from the cache.
  void evict(std::uint32_t file);
  void send_data(const sender::data_send& d, const send_fn& send);
  /// Sends a control datagram of the downstream session: as it is (unsigned), sealed under the
  /// relay's keys, or in a signed session replaced by the hub's signed copies (announces,
  /// digest lists, END).
  void send_control(const sender::control_send& c, const send_fn& send, time_point now);
  /// Queues a unicast answer to `to` (dropped past max_replies).
  void reply(const endpoint& to, std::span<const std::byte> d);

  static std::uint64_t key(std::uint32_t file, std::uint32_t block) noexcept {
    return std::uint64_t{file} << 32 | block;
  }

  session_id m_session;
  std::optional<endpoint> m_upstream;
  std::string m_channel;
  std::uint64_t m_channel_seq;
  std::vector<wire::seq_span> m_completes;
  std::vector<manifest_entry> m_files;
  std::filesystem::path m_dest;
  std::shared_ptr<spdlog::logger> m_log;
  std::uint32_t m_block_size;
  sender::relay_gate m_gate;
  std::unique_ptr<sender::sender_session> m_down;
  std::optional<fec::codec> m_codec;
  std::vector<place> m_place;
  std::unordered_map<std::uint64_t, std::vector<std::byte>> m_cache;
  std::deque<std::uint64_t> m_cache_order;  ///< insertion order, for eviction
  std::size_t m_cache_used = 0;
  std::size_t& m_shared_used;
  int m_open_fd = -1;  ///< the destination file read last
  std::uint32_t m_open_file = 0;
  bool m_available = false;  ///< held more since the last service
  std::optional<time_point> m_upstream_gone;
  std::vector<std::byte> m_datagram;
  std::vector<std::vector<std::byte>> m_sources;
  counters m_stats;
  // A signed session (auth.hpp "Relays of signed two-way sessions").
  std::unique_ptr<auth::sender_keys> m_keys;
  std::shared_ptr<signed_copies> m_signed;
  std::vector<std::byte> m_hello;
  std::optional<time_point> m_next_hello;
  std::optional<time_point> m_digests_sent;  ///< the hub's digest lists last sent
  std::vector<std::pair<endpoint, std::vector<std::byte>>> m_replies;
  time_point m_unicast_second{};
  std::uint32_t m_unicast_hellos = 0;
  std::vector<std::byte> m_seal;
};

}  // namespace mcdist::receiver
