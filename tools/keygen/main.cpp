// mcdist-keygen: makes an Ed25519 key pair for a sender (mcdist-send --key) or a site
// (mcdistd key_file), and prints a key file's public key.

#include "common/crypto.hpp"
#include "common/sys/key_file.hpp"
#include "common/version.hpp"

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

namespace {

constexpr const char* footer = R"(
A key file holds the secret key ("mcdist-ed25519-secret:BASE64") and the public key
("mcdist-ed25519:BASE64"); it is created with mode 0600 and never overwritten. The public key
is also written to FILE.pub, which can be handed out: receivers list a sender's public key in
trusted_senders (or --trust), senders list sites' public keys in --site-keys.

Examples:
  mcdist-keygen /etc/mcdist/hub.key          (on the hub: then mcdist-send --key /etc/mcdist/hub.key)
  mcdist-keygen --public /etc/mcdist/site.key (print a site's public key, to pin it at the hub)

Exit status: 0 done; 1 the key file exists or cannot be written or read; 2 usage error.
)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mcdist-keygen - make an mcdist key pair (Ed25519) or print a key file's public key",
               "mcdist-keygen"};
  app.set_version_flag("--version", std::string("mcdist-keygen ") + mcdist::version(),
                       "Print the release and exit");
  app.footer(footer);
  std::string file;
  bool show_public = false;
  app.add_option("FILE", file, "The secret key file to create (or to read with --public)")
      ->required()
      ->type_name("FILE");
  app.add_flag("--public", show_public, "Print the public key of an existing key file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    mcdist::crypto::init();
    if (show_public) {
      const auto id = mcdist::crypto::read_secret_key_file(file);
      std::cout << mcdist::crypto::format_public_key(id.public_key) << "\n";
      return 0;
    }
    const auto id = mcdist::crypto::generate_identity();
    mcdist::crypto::write_secret_key_file(file, id);
    const auto pub = mcdist::crypto::format_public_key(id.public_key);
    std::ofstream out(file + ".pub");
    out << pub << "\n";
    if (!out) {
      std::cerr << "mcdist-keygen: wrote " << file << " but cannot write " << file << ".pub\n";
      return 1;
    }
    std::cout << pub << "\n";
    std::cerr << "mcdist-keygen: secret key in " << file << " (mode 0600), public key in " << file
              << ".pub\n";
    return 0;
  } catch (const mcdist::crypto::key_error& e) {
    std::cerr << "mcdist-keygen: " << e.what() << "\n";
    return 1;
  }
}
