#pragma once
/// @file
/// The recent warnings and errors of a daemon's log, for its status page: an spdlog sink that
/// keeps the last `capacity` messages at or above a level (a bounded ring), and counts every
/// message by level for the metrics. Thread-safe (the storage threads log too).

#include <spdlog/sinks/base_sink.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace mcdist::http {

/// One kept log message.
struct log_entry {
  std::chrono::system_clock::time_point time;
  spdlog::level::level_enum level = spdlog::level::warn;
  std::string text;  ///< the message alone, without time and level; cut at max_text_bytes
};

/// spdlog sink keeping recent messages. Attach with logger->sinks().push_back(ring) before
/// other threads use the logger (spdlog's sink list is not guarded).
class log_ring_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  /// Longest kept message (1 KiB: a log line names a session, a path of at most 1024 bytes
  /// and a reason; longer is cut).
  static constexpr std::size_t max_text_bytes = 1024;

  /// @param capacity  messages kept (the oldest goes first)
  /// @param keep      lowest level kept; lower ones are only counted
  explicit log_ring_sink(std::size_t capacity = 100,
                         spdlog::level::level_enum keep = spdlog::level::warn);

  /// The kept messages, oldest first.
  std::vector<log_entry> recent() const;
  /// Messages seen at `level` since construction (kept or not).
  std::uint64_t count(spdlog::level::level_enum level) const;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  std::size_t m_capacity;
  spdlog::level::level_enum m_keep;
  std::deque<log_entry> m_entries;
  std::array<std::uint64_t, spdlog::level::n_levels> m_counts{};
};

/// The name a status page and its JSON give `level`: "warning", "error", "critical", "info",
/// "debug" or "trace".
const char* level_name(spdlog::level::level_enum level) noexcept;

/// The status pages' "Recent warnings and errors" section: a heading and a table (id
/// "recent-log") of `entries` newest first, time in ISO 8601 UTC, text escaped; or a line saying
/// there are none.
/// @param entries  oldest first, as log_ring_sink::recent returns them
std::string recent_log_html(const std::vector<log_entry>& entries);

}  // namespace mcdist::http
