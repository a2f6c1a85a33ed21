#include "sender/io/file_set.hpp"

#include "common/path_check.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_set>

namespace mcdist::sender {

namespace fs = std::filesystem;

namespace {

void add_file(const fs::path& local, const std::string& relative, std::vector<source_file>& out,
              std::unordered_set<std::string>& seen) {
  struct stat st {};
  if (::stat(local.c_str(), &st) != 0) {
    throw file_set_error("cannot stat " + local.string() + ": " + std::strerror(errno));
  }
  if (auto ec = check_relative_path(relative)) {
    throw file_set_error("cannot send " + local.string() + ": its name '" + relative +
                         "' is not a valid manifest path (" + ec.message() + ")");
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_file_size) {
    throw file_set_error("cannot send " + local.string() + ": larger than the 4 TiB limit");
  }
  if (!seen.insert(relative).second) {
    throw file_set_error("two files would both be sent as '" + relative +
                         "'; send them in separate sessions or rename one");
  }
  source_file f;
  f.local = local;
  f.entry.path = relative;
  f.entry.size = static_cast<std::uint64_t>(st.st_size);
  f.entry.mtime_ns = std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  f.entry.mode = st.st_mode & 0777;
  out.push_back(std::move(f));
}

void walk(const fs::path& dir, const std::string& prefix, std::vector<source_file>& out,
          std::unordered_set<std::string>& seen,
          const std::function<void(const std::string&)>& warn) {
  std::vector<fs::directory_entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    entries.push_back(*it);
  }
  if (ec) throw file_set_error("cannot read directory " + dir.string() + ": " + ec.message());
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  for (const auto& e : entries) {
    const std::string rel = prefix + "/" + e.path().filename().string();
    std::error_code sec;
    const auto status = e.status(sec);  // follows symlinks
    if (fs::is_directory(status)) {
      if (e.is_symlink(sec)) {
        warn("skipping " + e.path().string() + ": symbolic link to a directory");
        continue;
      }
      walk(e.path(), rel, out, seen, warn);
    } else if (fs::is_regular_file(status)) {
      add_file(e.path(), rel, out, seen);
    } else {
      warn("skipping " + e.path().string() + ": not a regular file");
    }
  }
}

}  // namespace

std::vector<source_file> collect_files(const std::vector<std::string>& args,
                                       const std::function<void(const std::string&)>& warn) {
  std::vector<source_file> out;
  std::unordered_set<std::string> seen;
  for (const auto& arg : args) {
    fs::path p(arg);
    std::error_code ec;
    const auto status = fs::status(p, ec);
    if (ec || !fs::exists(status)) {
      throw file_set_error("no such file or directory: " + arg);
    }
    // "dir/" and "dir" both name the directory "dir".
    fs::path clean = p.lexically_normal();
    if (!clean.has_filename()) clean = clean.parent_path();
    std::string name = clean.filename().string();
    if (name.empty() || name == "." || name == "..") {
      name = fs::absolute(clean).lexically_normal().filename().string();
    }
    if (fs::is_directory(status)) {
      walk(p, name, out, seen, warn);
    } else if (fs::is_regular_file(status)) {
      add_file(p, name, out, seen);
    } else {
      throw file_set_error("not a regular file or directory: " + arg);
    }
  }
  return out;
}

}  // namespace mcdist::sender
