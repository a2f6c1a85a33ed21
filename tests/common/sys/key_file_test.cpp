#include "common/sys/key_file.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

using namespace mcdist;

TEST_CASE("secret key files are created 0600, read back, and refused when others can read them",
          "[unit][key_file]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mcdist-auth-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "site.key";
  std::filesystem::remove(file);
  const auto id = crypto::generate_identity();
  crypto::write_secret_key_file(file, id);
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  REQUIRE((st.st_mode & 0777) == 0600);
  const auto back = crypto::read_secret_key_file(file);
  REQUIRE(back.public_key == id.public_key);
  REQUIRE(back.secret_key == id.secret_key);
  REQUIRE(crypto::read_public_key(file.string()) == id.public_key);  // the public line
  REQUIRE_THROWS_AS(crypto::write_secret_key_file(file, id),
                    crypto::key_error);  // never overwrites
  ::chmod(file.c_str(), 0640);
  REQUIRE_THROWS_WITH(crypto::read_secret_key_file(file), Catch::Contains("chmod 600"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a secret key's text round-trips and anything else is refused", "[unit][key_file]") {
  const auto id = crypto::generate_identity();
  std::string text = crypto::format_secret_key(id);
  REQUIRE(text.rfind("mcdist-ed25519-secret:", 0) == 0);
  const auto back = crypto::parse_secret_key(text);
  REQUIRE(back);
  REQUIRE(back->secret_key == id.secret_key);
  REQUIRE(crypto::find_public_key(text) == id.public_key);  // its second line
  REQUIRE_FALSE(crypto::parse_secret_key(crypto::format_public_key(id.public_key)));
  REQUIRE_FALSE(crypto::parse_secret_key("mcdist-ed25519-secret:AAAA\n"));
  crypto::wipe(text);
  REQUIRE(text.find_first_not_of('\0') == std::string::npos);
}

TEST_CASE("public keys are read inline or from a file's first key line", "[unit][key_file]") {
  const auto id = crypto::generate_identity();
  const auto text = crypto::format_public_key(id.public_key);
  REQUIRE(crypto::read_public_key(" " + text + "\n") == id.public_key);
  const auto file = std::filesystem::temp_directory_path() /
                    ("mcdist-key-file-test-" + std::to_string(::getpid()) + ".pub");
  {
    std::ofstream out(file);
    out << "# a comment\n" << text << "\n";
  }
  REQUIRE(crypto::read_public_key(" " + file.string() + "\n") == id.public_key);
  {
    std::ofstream out(file);
    out << "no key here\n";
  }
  REQUIRE_THROWS_WITH(crypto::read_public_key(file.string()), Catch::Contains("holds no line"));
  std::filesystem::remove(file);
  REQUIRE_THROWS_WITH(crypto::read_public_key(file.string()),
                      Catch::Contains("neither a public key"));
}
