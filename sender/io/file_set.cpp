#include "sender/io/file_set.hpp"

#include "common/path_check.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>

namespace mcdist::sender {

namespace fs = std::filesystem;

namespace {

/// Adds the regular file `local` (already stat()ed into `st`, symlinks followed) as `relative`.
void add_file(std::string local, std::string relative, const struct stat& st,
              std::vector<source_file>& out) {
  if (auto ec = check_relative_path(relative)) {
    throw file_set_error("cannot send " + local + ": its name '" + relative +
                         "' is not a valid manifest path (" + ec.message() + ")");
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_file_size) {
    throw file_set_error("cannot send " + local + ": larger than the 4 TiB limit");
  }
  source_file& f = out.emplace_back();
  f.local = std::move(local);
  f.entry.path = std::move(relative);
  f.entry.size = static_cast<std::uint64_t>(st.st_size);
  f.entry.mtime_ns = std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  f.entry.mode = st.st_mode & 0777;
}

/// `dir` + "/" + `name`, without doubling a slash `dir` ends with ("obs/" as given).
std::string join(const std::string& dir, const std::string& name) {
  std::string out;
  out.reserve(dir.size() + 1 + name.size());
  out += dir;
  if (out.empty() || out.back() != '/') out += '/';
  out += name;
  return out;
}

/// Closes a directory stream on scope exit.
struct dir_closer {
  void operator()(DIR* d) const noexcept { ::closedir(d); }
};

/// Walks `dir` (open as `dfd`, which it takes) in name order: each entry is stat()ed once,
/// relative to its directory, so a tree of 20,000 bulletins costs one short lookup per file
/// rather than two walks of its whole path. Paths are plain strings: a std::filesystem::path
/// keeps a list of its components, a few allocations per file.
void walk(int dfd, const std::string& dir, const std::string& prefix, std::vector<source_file>& out,
          const std::function<void(const std::string&)>& warn) {
  std::unique_ptr<DIR, dir_closer> d(::fdopendir(dfd));
  if (!d) {
    const int e = errno;
    ::close(dfd);
    throw file_set_error("cannot read directory " + dir + ": " + std::strerror(e));
  }
  std::vector<std::pair<std::string, unsigned char>> entries;  // name, d_type
  errno = 0;
  while (const dirent* de = ::readdir(d.get())) {
    if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0)
      entries.emplace_back(de->d_name, de->d_type);
    errno = 0;
  }
  if (errno != 0) {
    throw file_set_error("cannot read directory " + dir + ": " + std::strerror(errno));
  }
  std::sort(entries.begin(), entries.end());
  // Room for the entries at once (mostly files), growing geometrically all the same: many
  // small directories must not each cost a copy of everything found so far.
  if (const std::size_t need = out.size() + entries.size(); need > out.capacity())
    out.reserve(std::max(need, 2 * out.capacity()));
  const int fd = ::dirfd(d.get());
  for (const auto& [name, type] : entries) {
    std::string local = join(dir, name);
    std::string rel = join(prefix, name);
    struct stat st {};
    if (::fstatat(fd, name.c_str(), &st, 0) != 0) {  // follows symlinks
      warn("skipping " + local + ": " + std::strerror(errno));
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      struct stat lst {};
      const bool link =
          type == DT_LNK ||
          (type == DT_UNKNOWN && ::fstatat(fd, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
           S_ISLNK(lst.st_mode));
      if (link) {
        warn("skipping " + local + ": symbolic link to a directory");
        continue;
      }
      const int sub = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (sub < 0) {
        throw file_set_error("cannot read directory " + local + ": " + std::strerror(errno));
      }
      walk(sub, local, rel, out, warn);
    } else if (S_ISREG(st.st_mode)) {
      add_file(std::move(local), std::move(rel), st, out);
    } else {
      warn("skipping " + local + ": not a regular file");
    }
  }
}

}  // namespace

std::vector<source_file> collect_files(const std::vector<std::string>& args,
                                       const std::function<void(const std::string&)>& warn) {
  std::vector<source_file> out;
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
      const int dfd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd < 0) {
        throw file_set_error("cannot read directory " + p.string() + ": " + std::strerror(errno));
      }
      walk(dfd, arg, name, out, warn);
    } else if (fs::is_regular_file(status)) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0) {
        throw file_set_error("cannot stat " + p.string() + ": " + std::strerror(errno));
      }
      add_file(arg, name, st, out);
    } else {
      throw file_set_error("not a regular file or directory: " + arg);
    }
  }
  // One argument's names are unique (a directory's entries are, and each directory adds its
  // own prefix), so only two arguments can send the same name.
  if (args.size() > 1) {
    std::vector<std::string_view> names;
    names.reserve(out.size());
    for (const auto& f : out) names.emplace_back(f.entry.path);
    std::sort(names.begin(), names.end());
    if (const auto twice = std::adjacent_find(names.begin(), names.end()); twice != names.end()) {
      throw file_set_error("two files would both be sent as '" + std::string(*twice) +
                           "'; send them in separate sessions or rename one");
    }
  }
  return out;
}

int open_source(const source_file& f, std::string& why) {
  const int fd = f.fd ? ::fcntl(f.fd->get(), F_DUPFD_CLOEXEC, 0)
                      : ::open(f.local.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    why = "cannot open " + f.local + ": " + std::strerror(e);
    errno = e;
  }
  return fd;
}

}  // namespace mcdist::sender
