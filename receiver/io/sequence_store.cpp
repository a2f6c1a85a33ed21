#include "receiver/io/sequence_store.hpp"

#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

namespace mcdist::receiver {

namespace {

/// The file is bounded by the book (max_streams lines of at most ~12 kB: 1025 numbers of up to
/// 20 digits); anything larger is not ours.
constexpr std::size_t max_file_bytes = 16u << 20;

std::error_code last_error() { return {errno, std::generic_category()}; }

}  // namespace

std::error_code load_sequences(const std::filesystem::path& file, sequence_book& book,
                               std::string& detail) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) {
      (void)book.parse("mcdist-sequences 1\n");
      return {};
    }
    const auto ec = last_error();
    detail = "cannot open " + file.string() + ": " + ec.message();
    return ec;
  }
  std::string text;
  char buf[65536];
  std::error_code ec;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ec = last_error();
      detail = "cannot read " + file.string() + ": " + ec.message();
      break;
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_file_bytes) {
      ec = errc::invalid_field;
      detail = file.string() + " is larger than any sequence state (" +
               std::to_string(max_file_bytes) + " bytes)";
      break;
    }
  }
  ::close(fd);
  if (ec) {
    (void)book.parse("mcdist-sequences 1\n");
    return ec;
  }
  if (auto pe = book.parse(text)) {
    detail = file.string() +
             " is not a version-1 sequence state (damaged or from another "
             "version)";
    return pe;
  }
  return {};
}

std::error_code save_sequences(const std::filesystem::path& file, const sequence_book& book,
                               std::string& detail) {
  const std::string text = book.serialize();
  const std::filesystem::path tmp = file.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    const auto ec = last_error();
    detail = "cannot create " + tmp.string() + ": " + ec.message();
    return ec;
  }
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const auto ec = last_error();
      ::close(fd);
      detail = "cannot write " + tmp.string() + ": " + ec.message();
      return ec;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const auto ec = last_error();
    ::close(fd);
    detail = "cannot fsync " + tmp.string() + ": " + ec.message();
    return ec;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const auto ec = last_error();
    detail = "cannot rename " + tmp.string() + " to " + file.string() + ": " + ec.message();
    return ec;
  }
  // The rename is durable only once the directory is.
  const auto dir = file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ::fsync(dfd) != 0) {
    const auto ec = last_error();
    if (dfd >= 0) ::close(dfd);
    detail = "cannot fsync the directory " + dir.string() + ": " + ec.message();
    return ec;
  }
  ::close(dfd);
  return {};
}

}  // namespace mcdist::receiver
