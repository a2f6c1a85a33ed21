#pragma once
/// @file
/// The file that keeps a site's completed session numbers (receiver/core/sequence_book.hpp)
/// across restarts: TEMP/sequences, the book's versioned text, replaced atomically (write a
/// temp file, fsync it, rename it over, fsync the directory), so a crash leaves the old or the
/// new state, never a mix. Plain file I/O, no Asio; the file is small (at most
/// sequence_book::max_streams lines), written when the book changes: a few times per session.

#include "receiver/core/sequence_book.hpp"

#include <filesystem>
#include <string>
#include <system_error>

namespace mcdist::receiver {

/// Name of the file in the temp directory.
inline constexpr const char* sequences_file_name = "sequences";

/// Reads `file` into `book`.
/// @return empty (also when the file does not exist: a site new to every channel); an I/O
///         error; or errc::invalid_field when the content is not a version-1 book (the book is
///         left empty, and `detail` says why, for the operator's log)
std::error_code load_sequences(const std::filesystem::path& file, sequence_book& book,
                               std::string& detail);

/// Writes `book` to `file` atomically and durably (see the file comment).
/// @return empty, or the error of the step that failed (`detail` names it and the path)
std::error_code save_sequences(const std::filesystem::path& file, const sequence_book& book,
                               std::string& detail);

}  // namespace mcdist::receiver
