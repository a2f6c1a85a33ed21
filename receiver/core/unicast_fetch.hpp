#pragma once
/// @file
/// One session's unicast completion on the receiver side (docs/design-notes.md "Unicast
/// fallback"): reads the sender's FALLBACK order (or an announce's unicast_start), keeps the
/// order, counts the attempts and their back-off, lists what is still wanted as byte ranges
/// and assembles blocks that arrive in pieces. The engine makes the calls into its shell
/// (receiver_sink::prepare_unicast, start_unicast, stop_unicast) when this says so, and marks
/// the blocks this says are whole. Pure: no sockets, the time comes in as an argument.

#include "common/byte_range.hpp"
#include "common/delivery_path.hpp"
#include "common/endpoint.hpp"
#include "common/ids.hpp"
#include "common/manifest.hpp"
#include "common/time.hpp"
#include "common/transport.hpp"
#include "receiver/core/file_table.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace mcdist::wire {
class fallback;
class unicast_start;
}  // namespace mcdist::wire

namespace mcdist::receiver {

/// How to reach the sender's unicast server (from its FALLBACK order).
struct unicast_order {
  transport_kind transport = transport_kind::sctp_udp;
  endpoint server;
  fallback_token token{};
  std::uint32_t connections = 0;  ///< TCP sockets; 0 = the shell's default
  /// Round trip to the sender measured at registration (the first REGISTER to its answer, the
  /// register reply or the FALLBACK order; Karn: not when REGISTER was sent again); zero when
  /// unknown. The shell bases the association's first retransmission timeout on it.
  duration rtt{};
};

/// The unicast fallback of one session.
class unicast_fetch {
 public:
  /// Attempts (connections) per session before the receiver gives up on it.
  static constexpr std::uint32_t max_attempts = 8;
  /// Most TCP connections a FALLBACK order or an announce may ask a site to open; the unicast
  /// framing itself allows 16 per session (unicast::max_connections, whose client clamps).
  static constexpr std::uint32_t max_connections = 64;
  /// Back-off after a lost connection: this times the attempt number, at most max_backoff.
  static constexpr duration backoff = std::chrono::milliseconds(500);
  static constexpr duration max_backoff = std::chrono::seconds(10);

  /// Reads a FALLBACK order that came from `from` (its server is `from` unless it names an
  /// address). @return the order, or nullopt when a field is out of range (transport, port,
  /// address length, connections, token length): errc::invalid_field
  static std::optional<unicast_order> read_order(const wire::fallback& m,
                                                 const endpoint& from) noexcept;
  /// Reads an announce's unicast_start (session_params.unicast_start) that came from `from`.
  /// Only ever the host the announce came from: an announce cannot point a group's connections
  /// at a third host (docs/security.md "Unicast fallback").
  /// @param out  the order (token zero), or left empty when it names another host
  /// @return errc::invalid_field when a field is out of range, else empty
  static std::error_code read_start(const wire::unicast_start& u, const endpoint& from,
                                    std::optional<unicast_order>& out) noexcept;
  /// What is still wanted of `files` (the receiving ones), as byte ranges of `block_size`
  /// blocks, in file and offset order.
  static std::vector<byte_range> wanted(std::span<const file_rx> files, std::uint32_t block_size);

  /// The sender moved this receiver to unicast: multicast data is ignored from now on.
  bool moved() const noexcept { return is_unicast(m_path); }
  /// How the session's data reaches this receiver: multicast until the sender's first FALLBACK
  /// order, then that order's transport.
  delivery_path path() const noexcept { return m_path; }
  /// A unicast client is running.
  bool active() const noexcept { return m_active; }
  /// The shell holds a transport for this session (running, or prepared ahead of the order):
  /// stop_unicast when the session closes.
  bool holds_transport() const noexcept { return m_active || m_prepared; }
  /// When the next attempt may start: after an order or a lost connection, while no client
  /// runs; nullopt when there is none to make.
  std::optional<time_point> next_attempt() const noexcept {
    if (!moved() || m_active) return std::nullopt;
    return m_next;
  }

  /// The announce said the session is served over unicast from the start (read_start).
  void set_start(const unicast_order& o) noexcept { m_start = o; }
  /// The first REGISTER is leaving: the transport to open now (receiver_sink::prepare_unicast),
  /// when the session is served over unicast from the start and no order came yet; counted as
  /// held from then on. nullptr: nothing to open.
  const unicast_order* prepare() noexcept;

  /// True when `o` repeats the order the running client follows (nothing to do).
  bool repeats(const unicast_order& o) const noexcept {
    return moved() && m_active && m_order.token == o.token;
  }
  /// Takes a new order. @return true when a client was running: the caller stops it (the
  /// sender lost our session; connect again) before the next attempt
  bool take_order(const unicast_order& o) noexcept;
  /// The order taken.
  const unicast_order& order() const noexcept { return m_order; }

  /// Nothing is wanted when an attempt would start: no attempt until retry_now. Pieces of
  /// blocks are forgotten. @return true when a prepared transport is to be dropped
  /// (stop_unicast)
  bool nothing_wanted() noexcept;
  /// An attempt starts (receiver_sink::start_unicast with the order returned): counted, the
  /// client is running, the prepared transport taken, pieces of blocks forgotten (blocks asked
  /// for again arrive whole). @param register_rtt  the order's rtt
  const unicast_order& begin_attempt(duration register_rtt);
  /// The client finished or lost its connection.
  void on_closed() noexcept { m_active = false; }
  /// Schedules the next attempt after the back-off. @return false (nothing scheduled) when
  /// max_attempts were made: the caller gives up
  bool schedule_retry(time_point now) noexcept;
  /// A file must be fetched again (its digest failed): the next attempt may start at `now` when
  /// no client runs.
  void retry_now(time_point now) noexcept {
    if (moved() && !m_active) m_next = now;
  }
  std::uint32_t attempts() const noexcept { return m_attempts; }

  /// Bytes [offset, offset + length) of file `f` (`fr`, receiving, its block map allocated)
  /// arrived over unicast and were written. Calls complete(b) for each block of the file they
  /// make whole, in order (a block that came in pieces once its bytes add up); stops early
  /// when fr leaves the receiving state (the file completed).
  template <class Fn>
  void on_bytes(std::uint32_t f, const file_rx& fr, std::uint64_t offset, std::uint64_t length,
                std::uint32_t block_size, Fn&& complete) {
    const std::uint64_t end = offset + length;
    const auto first = static_cast<std::uint32_t>(offset / block_size);
    const auto last = static_cast<std::uint32_t>((end - 1) / block_size);
    for (std::uint32_t b = first; b <= last; ++b) {
      if (fr.state != file_rx::state_t::receiving) break;  // completed by an earlier block
      if (fr.received.test(b)) continue;
      const std::uint64_t bs = std::uint64_t{b} * block_size;
      const std::uint64_t be = bs + block_length(fr.entry.size, block_size, b);
      const auto got = static_cast<std::uint32_t>(std::min(be, end) - std::max(bs, offset));
      if (got == be - bs) {
        complete(b);
        continue;
      }
      const std::uint64_t key = std::uint64_t{f} << 32 | b;
      auto& have = m_partial[key];
      have += got;
      if (have >= be - bs) {
        m_partial.erase(key);
        complete(b);
      }
    }
  }

 private:
  delivery_path m_path = delivery_path::multicast;
  bool m_active = false;
  /// The announce's session_params.unicast_start (token zero): opened with the first REGISTER.
  std::optional<unicast_order> m_start;
  /// The shell holds a transport opened for this session before its FALLBACK order
  /// (receiver_sink::prepare_unicast) until an attempt takes it or the session closes.
  bool m_prepared = false;
  unicast_order m_order;
  std::uint32_t m_attempts = 0;
  time_point m_next{};
  /// Bytes received of blocks that arrived in pieces, by (file << 32 | block).
  std::unordered_map<std::uint64_t, std::uint32_t> m_partial;
};

}  // namespace mcdist::receiver
