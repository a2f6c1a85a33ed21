#include "common/sys/key_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace mcdist::crypto {

std::filesystem::path resolve_key_path(std::string_view configured) {
  constexpr std::string_view prefix = "credential:";
  if (!configured.starts_with(prefix)) return std::filesystem::path(configured);
  const auto name = configured.substr(prefix.size());
  if (name.empty() || name.find('/') != std::string_view::npos) {
    throw key_error("'" + std::string(configured) +
                    "': a credential's name is one file name (credential:NAME)");
  }
  const char* dir = std::getenv("CREDENTIALS_DIRECTORY");
  if (!dir || !*dir) {
    throw key_error("'" + std::string(configured) +
                    "' needs systemd's credentials: run under a unit with LoadCredential=" +
                    std::string(name) + ":/path/to/key ($CREDENTIALS_DIRECTORY is not set)");
  }
  return std::filesystem::path(dir) / name;
}

void write_secret_key_file(const std::filesystem::path& file, const identity& id) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    throw key_error("cannot create the key file " + file.string() + ": " + std::strerror(errno));
  }
  std::string text = format_secret_key(id);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  wipe(text);
  ::close(fd);
  if (!ok)
    throw key_error("cannot write the key file " + file.string() + ": " + std::strerror(err));
}

identity read_secret_key_file(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    throw key_error("cannot open the key file " + file.string() + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw key_error("the key file " + file.string() + " is not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw key_error("the key file " + file.string() + " has mode " + mode +
                    ": a secret key must be readable by its owner only (chmod 600)");
  }
  std::string text(4096, '\0');
  const ssize_t n = ::read(fd, text.data(), text.size());
  ::close(fd);
  if (n < 0)
    throw key_error("cannot read the key file " + file.string() + ": " + std::strerror(errno));
  text.resize(static_cast<std::size_t>(n));
  auto id = parse_secret_key(text);
  wipe(text);
  if (!id) {
    throw key_error(
        "the key file " + file.string() +
        " holds no secret key (its first line must be \"mcdist-ed25519-secret:BASE64\"; "
        "make one with mcdist-keygen)");
  }
  return *id;
}

key32 read_public_key(std::string_view text_or_file) {
  if (is_public_key_text(text_or_file)) return parse_public_key(text_or_file);
  const auto first = text_or_file.find_first_not_of(" \t\r\n");
  const auto last = text_or_file.find_last_not_of(" \t\r\n");
  const std::string name(first == std::string_view::npos
                             ? std::string_view{}
                             : text_or_file.substr(first, last - first + 1));
  std::ifstream in{name};
  if (!in) {
    throw key_error("\"" + name +
                    "\" is neither a public key (mcdist-ed25519:BASE64) nor a readable key file");
  }
  std::string line;
  while (std::getline(in, line)) {
    try {
      if (const auto pk = find_public_key(line)) return *pk;
    } catch (const key_error& e) {
      throw key_error(name + ": " + e.what());
    }
  }
  throw key_error("the file " + name + " holds no line \"mcdist-ed25519:BASE64\"");
}

}  // namespace mcdist::crypto
