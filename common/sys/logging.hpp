#pragma once
/// @file
/// Logger set-up for both programs (spdlog): one line per event an operator reads, to stderr
/// and optionally to a size-rotated file.

#include <spdlog/common.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace spdlog {
class logger;
}

namespace mcdist {

/// Logging settings.
struct log_options {
  spdlog::level::level_enum level = spdlog::level::info;
  /// Also write to this file, rotated at rotate_bytes, keeping rotate_files old files.
  std::optional<std::string> file;
  std::size_t rotate_bytes = 10 << 20;
  std::size_t rotate_files = 5;
  /// stderr is a terminal with a progress line: clear it before each log line.
  bool clear_progress_line = false;
};

/// Parses "trace", "debug", "info", "warn", "error", "off".
/// @throws std::invalid_argument on anything else
spdlog::level::level_enum parse_log_level(const std::string& text);

/// Creates the program's logger and makes it spdlog's default; libprotobuf's messages go to it
/// at debug level (by default libprotobuf writes each to stderr, one per refused datagram).
/// @throws spdlog::spdlog_ex when the log file cannot be opened
std::shared_ptr<spdlog::logger> make_logger(const std::string& name, const log_options& o);

/// Holds back a logger's flushes while it lives, then flushes once: the lines one handler logs
/// for a batch of results (the "stored" lines of a finalize batch) reach stderr or the log file
/// in one write, not one write each. Warnings inside the batch wait for its end too; the batch
/// is one handler's work, microseconds. Other threads' lines in the meantime wait with them.
/// Meant for the io thread's handlers, one at a time: two batches alive at once on different
/// threads could restore each other's flush level out of order. A null logger does nothing.
class log_batch {
 public:
  explicit log_batch(spdlog::logger* log);
  ~log_batch();
  log_batch(const log_batch&) = delete;
  log_batch& operator=(const log_batch&) = delete;

 private:
  spdlog::logger* m_log;
  spdlog::level::level_enum m_flush_level = spdlog::level::info;
};

/// Closes and reopens the log file of a logger made by make_logger (SIGHUP, after an external
/// logrotate moved it away): later lines go to a file at the configured path again. Other
/// threads' lines wait on the sink's lock meanwhile. Returns false (the old file stays in use)
/// when the file cannot be opened; true also when the logger has no file.
/// @param error set to the reason on failure
bool reopen_log_files(spdlog::logger& log, std::string& error);

}  // namespace mcdist
