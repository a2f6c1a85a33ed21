#include "receiver/io/replay_store.hpp"

#include "common/sys/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

namespace mcdist::receiver {

namespace {

/// A cache file larger than this is not read (it would hold ten times max_entries lines).
constexpr std::size_t max_replay_file_bytes = 64u << 20;

bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

/// The file's text, or std::nullopt when it does not exist; throws nothing.
std::optional<std::string> read_text(const std::filesystem::path& file, std::string& error) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno != ENOENT) error = std::strerror(errno);
    return std::nullopt;
  }
  std::string text;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::uint64_t>(st.st_size) > max_replay_file_bytes) {
    error = "not a regular file of at most 64 MiB";
    ::close(fd);
    return std::nullopt;
  }
  text.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  ::close(fd);
  return text;
}

}  // namespace

std::uint64_t unix_ms_now() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

replay_store::replay_store(std::filesystem::path file, replay_guard::limits limits,
                           std::uint64_t now_ms, std::string& notice)
    : m_file(std::move(file)), m_guard(limits) {
  std::string error;
  const auto text = read_text(m_file, error);
  if (!text && error.empty()) {
    notice = "no replay cache yet (" + m_file.string() +
             "): signed sessions stamped before this start are refused";
    m_guard.raise_floor(now_ms);
  } else if (!text) {
    notice = "cannot read the replay cache " + m_file.string() + " (" + error +
             "): starting a new one; signed sessions stamped before this start are refused";
    m_guard.raise_floor(now_ms);
  } else if (auto why = replay_guard::decode(*text, now_ms, m_guard); !why.empty()) {
    notice = "the replay cache " + m_file.string() + " is damaged (" + why +
             "): starting a new one; signed sessions stamped before this start are refused";
    m_guard.raise_floor(now_ms);
  }
  std::string detail;
  if (auto ec = rewrite(detail)) throw std::system_error(ec, detail);
}

std::error_code replay_store::rewrite(std::string& detail) {
  if (auto ec = write_file_atomically(m_file, m_guard.encode(), detail)) return ec;
  m_appended = 0;
  return {};
}

errc replay_store::admit(const replay_guard::entry& e, std::uint64_t now_ms, std::string& detail) {
  const auto verdict = m_guard.admit(e, now_ms);
  if (verdict != errc::ok) return verdict;
  // Compact first when the appended lines outnumber the live entries (expired ones included).
  if (m_appended > std::max<std::size_t>(1024, m_guard.size())) {
    if (!rewrite(detail)) return errc::ok;  // the rewrite holds the new entry already
    m_guard.forget(e);
    return errc::replay_cache_unwritable;
  }
  // Opened per append, not held: a descriptor open for writing would keep the temp file
  // system from being remounted read-only, and sessions start a few times a second at most.
  const int fd = ::open(m_file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  const bool ok = fd >= 0 && write_all(fd, replay_guard::encode(e)) && ::fdatasync(fd) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) {
    detail = "cannot append to " + m_file.string() + ": " + std::strerror(err);
    m_guard.forget(e);
    return errc::replay_cache_unwritable;
  }
  ++m_appended;
  return errc::ok;
}

}  // namespace mcdist::receiver
