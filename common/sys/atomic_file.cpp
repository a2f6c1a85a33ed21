#include "common/sys/atomic_file.hpp"

#include "common/sys/unique_fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace mcdist {

namespace {

std::error_code last_error() { return {errno, std::generic_category()}; }

}  // namespace

std::error_code write_file_atomically(const std::filesystem::path& file, std::string_view text,
                                      std::string& detail) {
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    const unique_fd fd(
        ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) {
      const auto ec = last_error();
      detail = "cannot create " + tmp.string() + ": " + ec.message();
      return ec;
    }
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const auto ec = last_error();
        detail = "cannot write " + tmp.string() + ": " + ec.message();
        return ec;
      }
      done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd.get()) != 0) {
      const auto ec = last_error();
      detail = "cannot fsync " + tmp.string() + ": " + ec.message();
      return ec;
    }
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const auto ec = last_error();
    detail = "cannot rename " + tmp.string() + " to " + file.string() + ": " + ec.message();
    return ec;
  }
  // The rename is durable only once the directory is.
  const auto dir = file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path();
  const unique_fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd || ::fsync(dfd.get()) != 0) {
    const auto ec = last_error();
    detail = "cannot fsync the directory " + dir.string() + ": " + ec.message();
    return ec;
  }
  return {};
}

}  // namespace mcdist
