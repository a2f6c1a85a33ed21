#pragma once
/// @file
/// mcdistctl's end of the control socket (feed/control_server.hpp): connect, send one request
/// line, read one answer line. Blocking POSIX calls with a timeout; one request per process.

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <variant>

namespace mcdist::ctl {

/// Longest answer accepted, bytes (256 MiB: a history answer is at most
/// feed::max_history_rows rows, ~20 MB; bounded so a wrong socket cannot exhaust memory).
constexpr std::size_t max_answer_bytes = 256u << 20;

/// Why a call failed.
struct call_error {
  /// true when nobody answers at the path (no file, refused, not a socket, no permission): the
  /// daemon is down or unreachable and the journal may answer instead.
  bool unreachable = false;
  std::string what;
};

/// Sends `request` as one line and returns the parsed answer.
/// @param timeout  for the whole exchange (connect, send, answer)
std::variant<nlohmann::json, call_error> call(const std::filesystem::path& socket,
                                              const nlohmann::json& request,
                                              std::chrono::milliseconds timeout);

}  // namespace mcdist::ctl
