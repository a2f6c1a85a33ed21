#include "receiver/io/sequence_store.hpp"

#include "common/sys/atomic_file.hpp"

#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

namespace mcdist::receiver {

namespace {

/// The file is bounded by the book (max_streams lines of at most ~12 kB: 1025 numbers of up to
/// 20 digits); anything larger is not ours.
constexpr std::size_t max_sequences_file_bytes = 16u << 20;

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
    if (text.size() > max_sequences_file_bytes) {
      ec = errc::invalid_field;
      detail = file.string() + " is larger than any sequence state (" +
               std::to_string(max_sequences_file_bytes) + " bytes)";
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
  return write_file_atomically(file, book.serialize(), detail);
}

}  // namespace mcdist::receiver
