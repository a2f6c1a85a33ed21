// The SHA-256 record in user.mcdist.sha256 (common/sys/digest_xattr.hpp): written through a file
// descriptor, read back through the descriptor and through the path, trusted only while size
// and mtime match.

#include "common/sys/digest_xattr.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

using namespace mcdist;
namespace fs = std::filesystem;

TEST_CASE("a digest record reads back by descriptor and by path while size and mtime match",
          "[unit][digest_xattr]") {
  std::string templ = (fs::temp_directory_path() / "mcdist-xattr-XXXXXX").string();
  REQUIRE(::mkdtemp(templ.data()) != nullptr);
  const fs::path dir = templ;
  const fs::path file = dir / "bulletin.bufr";
  std::ofstream(file) << "payload";
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  sha256_digest d{};
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::uint8_t>(i * 7);
  const int e = write_digest_xattr(fd, d, 7, 1'700'000'000'123'456'789);
  if (e == ENOTSUP) {
    WARN("SKIPPED: " << dir << " has no user extended attributes");
  } else {
    REQUIRE(e == 0);
    CHECK(read_digest_xattr(fd, 7, 1'700'000'000'123'456'789) == d);
    CHECK(read_digest_xattr(file.c_str(), 7, 1'700'000'000'123'456'789) == d);
    // Through a symbolic link: the target's record.
    fs::create_symlink(file, dir / "link");
    CHECK(read_digest_xattr((dir / "link").c_str(), 7, 1'700'000'000'123'456'789) == d);
    // Stale: another size or mtime than recorded.
    CHECK_FALSE(read_digest_xattr(file.c_str(), 8, 1'700'000'000'123'456'789));
    CHECK_FALSE(read_digest_xattr(file.c_str(), 7, 1'700'000'000'123'456'788));
    CHECK_FALSE(read_digest_xattr(fd, 7, 1));
  }
  // No record, no file.
  std::ofstream(dir / "plain") << "x";
  CHECK_FALSE(read_digest_xattr((dir / "plain").c_str(), 1, 0));
  CHECK_FALSE(read_digest_xattr((dir / "missing").c_str(), 1, 0));
  ::close(fd);
  fs::remove_all(dir);
}

TEST_CASE("a digest's hex parses back whatever its case, and no other byte is a digit",
          "[unit][digest_xattr]") {
  sha256_digest d{};
  for (int round = 0; round < 64; ++round) {
    for (std::size_t i = 0; i < d.size(); ++i)
      d[i] = static_cast<std::uint8_t>((round * 131 + static_cast<int>(i) * 37) ^ (i << 3));
    const std::string hex = to_hex(d);
    REQUIRE(hex.size() == 64);
    CHECK(digest_from_hex(hex) == d);
    std::string upper = hex;
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    CHECK(digest_from_hex(upper) == d);
  }
  // Every byte value that is not a hex digit, at the first, a middle and the last position.
  const std::string good = to_hex(d);
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    const bool digit = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    for (const std::size_t at : {std::size_t{0}, std::size_t{33}, std::size_t{63}}) {
      std::string s = good;
      s[at] = c;
      INFO("byte " << b << " at " << at);
      CHECK(digest_from_hex(s).has_value() == digit);
    }
  }
  CHECK_FALSE(digest_from_hex(good.substr(0, 63)));
  CHECK_FALSE(digest_from_hex(good + "0"));
  CHECK_FALSE(digest_from_hex(""));
}
