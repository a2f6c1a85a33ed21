#pragma once
/// @file
/// Validation of manifest paths, which come from the network (docs/architecture.md "Data flow in
/// one session"): a receiver never writes outside its destination and temp directories.

#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>

namespace mcdist {

/// Longest accepted manifest path, bytes. Linux PATH_MAX is 4096 including the destination
/// prefix; 1024 leaves room for any sane destination and keeps a manifest entry inside one
/// datagram.
inline constexpr std::size_t max_path_bytes = 1024;
/// Longest accepted path component, bytes (NAME_MAX on Linux filesystems).
inline constexpr std::size_t max_component_bytes = 255;
/// Most components in one path; deeper trees are refused rather than walked.
inline constexpr std::size_t max_path_depth = 64;

/// `name` for a log line or a journal (text): every byte that is not printable ASCII, and the
/// backslash, written as \xHH; cut to its first `max_bytes` bytes and then "..." (300: a log
/// line stays readable and a hostile name cannot make it long). A name from the network or a
/// spool may be anything; this is how the daemons show one.
std::string printable(std::string_view name, std::size_t max_bytes = 300);

/// True when `text` is well-formed UTF-8 as RFC 3629 section 4 defines it: no overlong form,
/// no surrogate (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequence.
bool valid_utf8(std::string_view text) noexcept;

/// Checks that `path` is a safe relative path: valid UTF-8 (valid_utf8; manifest paths are
/// protobuf text, and a receiver stores them as names other programs read as UTF-8),
/// '/'-separated components, none empty, none "." or "..", no NUL or control character
/// (0x00-0x1f, 0x7f), no leading '/', not longer than max_path_bytes, no component longer than
/// max_component_bytes, at most max_path_depth components.
/// @return an empty error_code, or one of errc::path_* naming the first problem found.
std::error_code check_relative_path(std::string_view path) noexcept;

}  // namespace mcdist
