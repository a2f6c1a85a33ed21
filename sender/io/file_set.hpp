#pragma once
/// @file
/// Turns the operator's PATH arguments into a file set: every regular file, directories walked
/// recursively, relative paths kept (a directory argument "obs" yields "obs/2026/a.bufr").

#include "common/manifest.hpp"
#include "common/sys/unique_fd.hpp"

#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mcdist::sender {

/// One file of the set: where it is here and what the manifest says.
struct source_file {
  std::string local;     ///< path on this host, as given or found (names it in messages)
  manifest_entry entry;  ///< relative path, size, mtime, mode; digest filled later
  /// The file, already open, when whoever collected it opened and checked it (the hub opens a
  /// spool file without following links and fstat()s the descriptor): every read then goes
  /// through this descriptor (pread, so its offset is never used) and `local` is never opened,
  /// so a link renamed over the path afterwards is never followed. Null: opened by `local`.
  std::shared_ptr<const unique_fd> fd;
};

/// A descriptor of `f` for reading that the caller owns: a dup() of `f.fd` when set, else
/// open(f.local). @return the descriptor, or -1 with `why` naming the file and the error
int open_source(const source_file& f, std::string& why);

/// Error in the operator's input: names the path and what is wrong.
class file_set_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Collects the file set. A file argument contributes its base name; a directory argument
/// contributes itself and everything below it, named relative to the directory's parent.
/// Symbolic links to regular files are followed; other non-regular files (devices, sockets,
/// FIFOs, dangling links) are skipped with a warning through `warn`. Files are ordered as the
/// arguments are, directory contents sorted by name, so the manifest is deterministic.
/// @throws file_set_error when an argument does not exist, a name is not a valid relative path
///         (check_relative_path), or two files would get the same relative path.
std::vector<source_file> collect_files(const std::vector<std::string>& args,
                                       const std::function<void(const std::string&)>& warn);

}  // namespace mcdist::sender
