#pragma once
/// @file
/// The end-of-session summary of mcdist-send (and of each mcdist-feed session): the outcome of a
/// run, an operator's table and the JSON document (README "Summary JSON"). A receiver's `state`
/// is its outcome (missing, registered, completed, failed) and its `path` how its data reached
/// it (common/delivery_path.hpp: multicast, or unicast-sctp, unicast-sctp-kernel, unicast-tcp
/// after a fallback), two fields, so "completed over TCP" reads state completed, path
/// unicast-tcp.

#include "common/auth.hpp"
#include "sender/core/sender_session.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace mcdist::sender {

/// Outcome of a run.
struct run_result {
  session_report report;
  double wall_seconds = 0;  ///< from program start to the end of the session
  bool succeeded = false;
  std::string error;               ///< set when the run could not proceed (I/O error)
  bool signed_session = false;     ///< the session was signed (--key)
  bool encrypted_session = false;  ///< the session was encrypted (--encrypt)
  /// Datagrams from the network refused because they did not authenticate (signed sessions):
  /// forged or stale NAKs, registrations and COMPLETEs, counted by reason.
  auth::auth_stats refused;
  /// Unicast fallback connections refused at their hello: credentials not registered (a
  /// guessed or stale token, a wrong receiver id or session), and, of those with the right
  /// token, id and session, the ones without a valid proof of the site key (a forged site
  /// with a sniffed token; signed sessions).
  std::uint64_t fallback_hellos_refused = 0;
  std::uint64_t fallback_hellos_bad_proof = 0;
  /// Unicast fallback connections closed before any hello (unicast::server_counters): their
  /// source held its share of handshakes already, evicted for a newer one at the total
  /// limit (a flood of silent connections), refused at the session limit, and silent for the
  /// hello timeout.
  std::uint64_t fallback_per_source_refused = 0;
  std::uint64_t fallback_handshakes_evicted = 0;
  std::uint64_t fallback_busy_refused = 0;
  std::uint64_t fallback_hello_timeouts = 0;
};

/// "missing", "registered", "completed", "failed".
std::string_view to_string(receiver_report::state_t s) noexcept;

/// The summary table for an operator: a session line, one line per receiver (state, path,
/// files, bytes, passes, NAKs, RTT) with its fallback, failure and sequence details below it,
/// refusal counts and the run's error.
std::string format_summary(const run_result& r);

/// The summary as JSON (README "Summary JSON"), pretty-printed, ending in a newline.
std::string summary_json(const run_result& r);

/// For a run that did not succeed: "N of M receivers did not complete: id (reason), ..."
/// (or "... no receiver registered"), without a trailing newline.
std::string incomplete_receivers(const run_result& r);

}  // namespace mcdist::sender
