#pragma once
/// @file
/// mcdistd settings: from a TOML file (--config), overridden by command-line options.

#include "common/endpoint.hpp"
#include "common/logging.hpp"
#include "receiver/io/file_store.hpp"

#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mcdist::receiver {

/// A channel this receiver subscribes to.
struct channel_config {
  std::string name;                 ///< for logs
  endpoint group;                   ///< multicast group + port
  std::filesystem::path dest;       ///< destination tree of sessions on this channel
};

/// Everything mcdistd needs.
struct daemon_config {
  std::string id;                   ///< receiver id (wire::valid_receiver_id)
  endpoint interface;               ///< local address to join on and send from
  std::vector<channel_config> channels;
  std::filesystem::path temp;       ///< temp files and checkpoints; same filesystem as dest
  sync_mode sync = sync_mode::batch;
  std::size_t buffer_pool_bytes = 16u << 20;
  int socket_buffer_bytes = 32 << 20;
  std::chrono::nanoseconds session_timeout = std::chrono::seconds(60);
  std::chrono::nanoseconds status_interval = std::chrono::seconds(60);
  /// How often a receiving session's resume state is saved.
  std::chrono::nanoseconds checkpoint_interval = std::chrono::seconds(2);
  std::optional<std::filesystem::path> status_file;  ///< JSON status, rewritten every interval
  log_options log;
  /// Test only: drop received datagrams with this probability before the core (like NORM's
  /// rxloss), seeded by drop_seed.
  double drop_rate = 0;
  std::uint64_t drop_seed = 1;
};

/// Bad configuration: the message names the setting and what is wrong.
class config_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Reads a TOML configuration file (README "mcdistd configuration").
/// @throws config_error on a syntax error (with line and column) or a bad value
daemon_config load_config_file(const std::filesystem::path& file);

/// Reads a TOML configuration from `text` (README "mcdistd configuration"); `source` names it
/// in error messages (a file name, "<fuzz>"). @throws config_error as load_config_file
daemon_config load_config_string(std::string_view text, const std::string& source);

/// Checks a complete configuration: id set and valid, at least one channel, every group
/// multicast, temp and dest set. @throws config_error naming the first problem
void validate(const daemon_config& cfg);

}  // namespace mcdist::receiver
