#pragma once
/// @file
/// The control protocol between mcdistctl and mcdist-feed, on the daemon's Unix socket
/// (feed/control_server.hpp). One owner for one format: the client encodes with to_json(),
/// the server decodes with parse_request(), both render rows with the same to_json().
///
/// Framing: one JSON object per line (UTF-8, '\n'-terminated), at most max_request_bytes per
/// request line; one JSON object per line in answer. Requests:
///
///   {"cmd":"status"}
///   {"cmd":"history","site":S,"since_ns":T[,"product":GLOB][,"channel":C][,"limit":N]}
///   {"cmd":"missing","site":S,"since_ns":T}
///   {"cmd":"resend","site":S[,"since_ns":T][,"product":GLOB][,"seq":[N,M]][,"channel":C]
///    [,"unicast":true]}          (at least one of since_ns, product, seq)
///
/// since_ns is an absolute time, ns since the Unix epoch (UTC): the client computes it from
/// `--since 6h`, so the journal's offline answer and the daemon's are the same.
/// Answers: {"ok":true, ...command's keys...} or {"ok":false,"error":"what went wrong"}.
/// The keys of each answer are listed at the functions that build them; they are stable
/// (mcdistctl --json prints them as they are).

#include "common/wire.hpp"
#include "feed/journal.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace mcdist::feed {

/// Longest request line, bytes (64 KiB: the longest legitimate request is a resend with a glob,
/// under 2 KiB; bounded so a client cannot grow the daemon's memory).
constexpr std::size_t max_request_bytes = 64 * 1024;
/// Deepest JSON nesting accepted in a request (requests are flat objects with one array of two
/// numbers; checked before parsing so a "[[[[..." line costs no recursion).
constexpr std::size_t max_request_depth = 4;
/// Longest site, channel or glob string, bytes (site names are key names or addresses).
constexpr std::size_t max_name_bytes = 1024;
/// Most history rows one answer carries (a day of a busy channel to one site, ~100 k bulletins,
/// is about 20 MB of JSON; more is asked for with a smaller window).
constexpr std::size_t max_history_rows = 100'000;

struct status_request {};

struct history_request {
  std::string site;
  wall_time since{};
  std::optional<std::string> glob;  ///< SQLite GLOB on the product name
  std::optional<std::string> channel;
  std::size_t limit = max_history_rows;  ///< 1..max_history_rows
};

struct missing_request {
  std::string site;
  wall_time since{};
};

struct resend_request {
  std::string site;
  std::optional<wall_time> since;                              ///< products sent at or after
  std::optional<std::string> glob;                              ///< products whose name matches
  std::optional<wire::seq_span> seqs;  ///< inclusive batch seq range
  std::optional<std::string> channel;
  bool unicast = false;  ///< over the unicast fallback instead of multicast
  /// Filled by the server from SO_PEERCRED (who asked, for the daemon's log); not on the wire.
  std::optional<std::uint32_t> peer_uid;
};

using control_request =
    std::variant<status_request, history_request, missing_request, resend_request>;

/// A request, or why the line is not one.
struct parsed_request {
  std::optional<control_request> request;
  std::string error;  ///< set when request is empty
};

/// Decodes and validates one request line (without its '\n'). Never throws.
parsed_request parse_request(std::string_view line);

/// Encodes a request (the client's side). Inverse of parse_request.
nlohmann::json to_json(const control_request& r);

/// Receives the answer to one request (control_handler::answer_async).
using answer_callback = std::function<void(nlohmann::json)>;

/// What the daemon implements; the control server calls it on the io thread, one request at a
/// time per connection. A function may throw: the client gets {"ok":false,"error":what()} and
/// the connection stays usable. "ok":true is added to an answer that lacks "ok".
struct control_handler {
  virtual ~control_handler() = default;
  /// The control server's entry point: answers `r`, now or later. `done` is called at most once,
  /// on the io_context's thread (from this call or from a handler run later), with an answer
  /// or an {"ok":false,"error":...} object; it is not called when the answer can no longer be
  /// given (the daemon is shutting down). The default calls the synchronous functions below at
  /// once (answer(control_handler&, control_request&)); the daemon overrides it to run journal
  /// queries off its io thread (daemon_handler.hpp).
  virtual void answer_async(control_request r, answer_callback done);
  /// Daemon state. Keys: "daemon" (bool), "channels" [channel_row], "sites" [site_row], plus
  /// whatever the daemon adds ("sessions_running", "rate_bps", ...).
  virtual nlohmann::json status() = 0;
  /// Keys: "site", "since", "rows" [history_row], "truncated" (bool).
  virtual nlohmann::json history(const history_request& r) = 0;
  /// Keys: "site", "since", "rows" [missing_row].
  virtual nlohmann::json missing(const missing_request& r) = 0;
  /// Keys: "site", "products" (count), "bytes", "session" (the resend session's id text or "",
  /// queued for later), "unicast" (bool).
  virtual nlohmann::json resend(const resend_request& r) = 0;
};

/// The journal's answers to status, history and missing: what mcdistctl prints when the daemon
/// is down, and what the daemon inherits. resend() throws (it needs the running daemon).
class journal_handler : public control_handler {
 public:
  explicit journal_handler(hub_journal& j) : m_journal(j) {}
  /// "daemon": false, "channels", "sites", "sessions" (the latest 20 sessions).
  nlohmann::json status() override;
  nlohmann::json history(const history_request& r) override;
  nlohmann::json missing(const missing_request& r) override;
  nlohmann::json resend(const resend_request& r) override;

 protected:
  hub_journal& m_journal;
};

/// Parses one request line and answers it through the handler: the whole protocol short of the
/// socket. Never throws; always returns an object with "ok".
nlohmann::json answer(control_handler& h, std::string_view line,
                      std::optional<std::uint32_t> peer_uid = std::nullopt);

/// Answers a parsed request through the handler's synchronous functions. Never throws; always
/// returns an object with "ok".
nlohmann::json answer(control_handler& h, control_request& r);

/// An answer as the client gets it: a non-object wrapped as {"result":...}, "ok":true added
/// when absent.
nlohmann::json finish_answer(nlohmann::json out);

/// Parses one request line (filling a resend's peer_uid) and answers it through
/// h.answer_async(); `done` gets the answer or the parse error, finished by finish_answer().
/// Never throws (an exception of answer_async becomes an error answer).
void answer_async(control_handler& h, std::string_view line, std::optional<std::uint32_t> peer_uid,
                  answer_callback done);

/// Serialises an answer as one line, '\n' included. Invalid UTF-8 in strings (a product name is
/// bytes from a file system) becomes U+FFFD instead of throwing.
std::string to_line(const nlohmann::json& j);

/// A time as the protocol shows it: "2026-01-01T00:00:00.123Z" (UTC, milliseconds).
std::string format_time(wall_time t);

// Rows as JSON objects (stable keys: see the implementation's single place for each).
nlohmann::json to_json(const history_row& r);
nlohmann::json to_json(const missing_row& r);
nlohmann::json to_json(const site_row& r);
nlohmann::json to_json(const channel_row& r);
nlohmann::json to_json(const session_info& s);
nlohmann::json to_json(const product& p);

}  // namespace mcdist::feed
