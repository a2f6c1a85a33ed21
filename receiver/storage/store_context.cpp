#include "receiver/storage/store_context.hpp"

#include "common/sys/path_walk.hpp"

#include <fcntl.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace mcdist::receiver {

std::string session_hex(session_id s) { return fmt::format("{}", s); }

std::filesystem::path temp_file_path(const std::filesystem::path& temp_dir, file_key key) {
  return temp_dir / session_hex(key.session) / (std::to_string(key.file.value) + ".part");
}

int store_context::open_session_dir(session_id s, int& e) const {
  const std::string hex = session_hex(s);
  e = io.mkdir(temp_fd.get(), hex.c_str(), 0700);
  if (e != 0) return -1;
  const int fd =
      ::openat(temp_fd.get(), hex.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    e = errno;
    // O_DIRECTORY reports a symlink as ENOTDIR; name it for what it is.
    if (e == ENOTDIR && is_symlink_at(temp_fd.get(), hex.c_str())) e = ELOOP;
  }
  return fd;
}

std::optional<mode_t> read_process_umask() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("Umask:")) continue;
    try {
      return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8) & 0777);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace mcdist::receiver
