#pragma once
/// @file
/// Replacing a small state file atomically and durably: the text goes to FILE.tmp (created
/// 0600, not through a link), is fsynced, renamed over FILE, and the directory is fsynced so
/// the rename itself survives a crash. A crash at any point leaves the old file or the new one,
/// never a mix (the sequence book, the replay cache, ...).

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace mcdist {

/// Writes `text` to `file` as the file comment says.
/// @return empty, or the error of the step that failed, with `detail` naming the step and the
///         path for the operator's log
std::error_code write_file_atomically(const std::filesystem::path& file, std::string_view text,
                                      std::string& detail);

}  // namespace mcdist
