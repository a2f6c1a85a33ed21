#pragma once
/// @file
/// mcdistctl's human output: each answer of the control protocol (feed/control_protocol.hpp)
/// as aligned tables (table.hpp). `--json` prints the answers themselves; these functions read
/// them defensively (a key the daemon leaves out prints as blank), so a newer daemon with more
/// keys or an older one with fewer still prints.

#include <nlohmann/json.hpp>

#include <string>

namespace mcdist::ctl {

/// Channels, sites and the latest sessions; other scalar keys of the daemon's status as
/// "key: value" lines.
std::string render_status(const nlohmann::json& answer);
/// One line per outcome, newest first, and a count line.
std::string render_history(const nlohmann::json& answer);
/// One line per missing product, and a count line ("nothing missing" when empty).
std::string render_missing(const nlohmann::json& answer);
/// One line: what the daemon will resend.
std::string render_resend(const nlohmann::json& answer);

/// "2026-01-01T00:00:00.123Z" -> "2026-01-01 00:00:00" (tables give UTC in the header).
std::string short_time(const nlohmann::json& iso);

}  // namespace mcdist::ctl
