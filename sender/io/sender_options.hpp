#pragma once
/// @file
/// mcdist-send's command line: the option table (one add_option per option, bound to a field of
/// sender_cli as the operator typed it), and its conversion into the session's and the shell's
/// settings with every check an operator can fail (README "mcdist-send options"). A new option
/// is a field in sender_cli, a line in add_sender_options and, when it needs converting, a line
/// in make_sender_options.

#include "sender/core/sender_session.hpp"
#include "sender/io/sender_app.hpp"
#include "sender/io/session_profile.hpp"

#include <spdlog/common.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace CLI {
class App;
}

namespace mcdist::sender {

/// Exit statuses of mcdist-send (documented in --help and the README).
enum exit_status : int {
  exit_ok = 0,          ///< every receiver completed
  exit_incomplete = 1,  ///< some receiver failed or did not register
  exit_usage = 2,       ///< bad command line or file set
  exit_runtime = 3,     ///< could not run: socket, file read, interrupted
};

/// The options as typed (defaults as --help shows them); durations, rates and sizes are text.
struct sender_cli {
  std::vector<std::string> paths;
  std::string group = "239.192.0.1:4711";
  std::string interface;  ///< empty: any (the route to the group decides)
  std::string rate = "100M";
  std::string rate_max = "1G";
  std::vector<std::string> receivers;
  std::vector<std::string> only;
  std::vector<std::string> relays;
  std::string register_window = "2s";  ///< session_profile::register_window
  std::string register_timeout = "30s";
  std::string receiver_timeout = "10s";
  std::string block_size = "1400";
  std::string prehash_max = "16M";
  std::uint32_t max_passes = 100;
  int ttl = 1;
  std::uint16_t port = 0;
  std::string summary_json_path;
  std::string session_hex;
  std::string log_level = "info";
  std::string name;
  bool quiet = false;
  bool no_progress = false;
  bool no_digest_cache = false;
  std::string fallback = "auto";
  double fallback_nak_ratio = 0.05;
  std::uint32_t fallback_after_passes = 10;
  bool force_unicast = false;
  std::string unicast_rate = "0";
  std::string unicast_max_rate = "0";
  double unicast_threshold = 1.0;
  std::uint16_t unicast_port = 0;
  std::uint32_t tcp_connections = 0;
  std::uint32_t sctp_associations = 0;
  std::string tcp_congestion;
  std::string key_file;
  std::string site_keys_file;
  bool encrypt = false;
  std::string channel;
  std::uint64_t channel_seq = 0;
  std::string catch_up;
  // The session profile (session_profile.hpp): its defaults, as the feed's channels have them.
  /// "auto" or K (parse_fec_k).
  std::string fec_k =
      session_profile{}.fec_k_auto ? std::string("auto") : std::to_string(session_profile{}.fec_k);
  std::uint32_t fec_depth = session_profile{}.fec_depth;
  std::string fec_overhead = "0";
  std::uint32_t silent_passes = 0;
};

/// A command line an operator must correct; the message names the option.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What one run of mcdist-send does.
struct sender_options {
  std::vector<std::string> paths;  ///< files and directories to send
  sender_config session;           ///< session id random unless --session-id
  app_options app;                 ///< progress is left false: the caller knows the terminal
  std::uint64_t prehash_max = 0;   ///< bytes: larger files are hashed during pass 1
  spdlog::level::level_enum log_level = spdlog::level::info;  ///< warn with --quiet
  bool quiet = false;
  bool no_progress = false;
};

/// Registers every option of mcdist-send, its description and footer on `app`, bound to
/// `cli`'s fields (which must outlive the parse).
void add_sender_options(CLI::App& app, sender_cli& cli);

/// Converts and checks the typed options; reads --key and --site-keys files. The session id is
/// drawn from std::random_device when none was given; the sender name defaults to the host name.
/// @throws usage_error for anything the operator must correct
sender_options make_sender_options(const sender_cli& cli);

/// Parses mcdist-send's command line: the options, or the exit status after --help (exit_ok,
/// printed to stdout) or a usage error (exit_usage, printed to stderr).
std::variant<sender_options, int> parse_sender_options(int argc, const char* const* argv);

}  // namespace mcdist::sender
