#pragma once
/// @file
/// Actions on receipt (`[[action]]` in mcdistd's TOML, docs/actions.md): which products an
/// action takes (channel, a regular expression on the product path) and what it does (run a
/// program, hard-link or copy the product to a path template), with the placeholder and
/// template expansion they use. Pure functions, no I/O: the runner is action_runner.hpp.
///
/// Modelled on Unidata LDM's pqact (pattern -> action with capture groups and date fields,
/// https://docs.unidata.ucar.edu/ldm/current/basics/pqact.conf.html) and UFTP's post-receive
/// script (uftpd -s).

#include <chrono>
#include <cstdint>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist::receiver {

/// What an action does with a matching product.
enum class action_kind : std::uint8_t {
  exec,  ///< run argv (no shell) with placeholders expanded
  link,  ///< hard-link the product to a path template (same filesystem)
  copy,  ///< copy the product to a path template (write a temp file, fsync, rename)
};

/// "exec", "link" or "copy".
std::string_view to_string(action_kind k) noexcept;

/// One `[[action]]`.
struct action_config {
  std::string name;     ///< unique; names the action in logs, the journal and metrics
  std::string channel;  ///< channel name, or "*" for every channel
  std::string match;    ///< ECMAScript regular expression, searched in the product path
  std::regex re;        ///< `match` compiled
  action_kind kind = action_kind::exec;
  std::vector<std::string> argv;  ///< exec: argv[0] absolute; placeholders in every element
  std::string target;             ///< link/copy: absolute path template
  std::chrono::nanoseconds timeout = std::chrono::seconds(60);  ///< per attempt; then SIGKILL
  std::uint32_t concurrency = 4;  ///< attempts of this action running at once
  std::uint32_t retries = 0;      ///< further attempts after a failed one
  /// Wait before retry n (1-based): retry_delay * 2^(n-1), at most max_retry_delay.
  std::chrono::nanoseconds retry_delay = std::chrono::seconds(10);
};

/// Counters of one action (/status, /metrics mcdist_receiver_actions_total{action,result}).
struct action_stats {
  std::uint64_t done = 0;     ///< attempts that succeeded
  std::uint64_t retried = 0;  ///< attempts that failed with a retry to follow
  std::uint64_t failed = 0;   ///< runs that failed for good (no retry left)
  std::uint64_t running = 0;  ///< attempts running now
  std::uint64_t queued = 0;   ///< runs waiting for a concurrency slot
};

/// Longest wait between two attempts, whatever retry_delay and the attempt number.
inline constexpr auto max_retry_delay = std::chrono::hours(1);

/// The values placeholders take for one delivered product.
struct placeholder_values {
  std::string path;                 ///< {path}: absolute path of the delivered file
  std::string relpath;              ///< {relpath}: path below the channel's destination
  std::string channel;              ///< {channel}: channel name
  std::string session;              ///< {session}: session id, 8 lower-case hex digits
  std::string sha256;               ///< {sha256}: 64 lower-case hex digits
  std::vector<std::string> groups;  ///< {0}..{9}: match and capture groups ("" when absent)
  /// Delivery time for the date fields of link/copy templates (%Y %m %d %H %M %S %j, UTC).
  std::chrono::system_clock::time_point delivered{};
};

/// A template that cannot be expanded: the message says where and why.
class template_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Checks a template's syntax: `{name}` placeholders (path, relpath, channel, session, sha256,
/// 0..9), `{{` and `}}` for literal braces; with `dates`, also `%Y %m %d %H %M %S %j` and
/// `%%`. @throws template_error naming the offending text
void check_template(std::string_view tmpl, bool dates);

/// Expands a template checked by check_template. @throws template_error as check_template
std::string expand_template(std::string_view tmpl, const placeholder_values& v, bool dates);

/// Expands a link/copy target: the template with date fields, which must give an absolute
/// path with no empty, "." or ".." component (a capture group cannot climb out of the
/// template's directory). @throws template_error
std::string expand_target(std::string_view tmpl, const placeholder_values& v);

/// Checks an action's settings that need no filesystem: name, channel, kind-specific fields,
/// templates, limits. @throws std::invalid_argument naming the problem
void check_action(const action_config& a);

/// The action's regular expression searched in `relpath`: std::nullopt when it does not
/// match, else {0} the matched text and {1}..{9} the capture groups ("" when a group did not
/// take part).
std::optional<std::vector<std::string>> match_action(const action_config& a,
                                                     const std::string& relpath);

}  // namespace mcdist::receiver
