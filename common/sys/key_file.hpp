#pragma once
/// @file
/// Key files on disk (docs/security.md "Keys"): the secret key file of a sender, hub or site,
/// and public keys given inline or as a file. The text formats are common/crypto.hpp's
/// (format_secret_key, format_public_key); this unit only does the file I/O, so that crypto
/// stays pure computation.

#include "common/crypto.hpp"

#include <filesystem>
#include <string_view>

namespace mcdist::crypto {

/// Where a configured secret key lives: `configured` itself, or for "credential:NAME" the file
/// NAME of the directory systemd gives the service in $CREDENTIALS_DIRECTORY (systemd.exec(5),
/// LoadCredential=: systemd reads the key as root and hands the service a copy on a private
/// read-only ramfs, so the service user needs no access to the original file).
/// @throws key_error when NAME is empty or holds '/', or $CREDENTIALS_DIRECTORY is not set
std::filesystem::path resolve_key_path(std::string_view configured);

/// Writes a secret key file (format_secret_key's text), created with mode 0600 (O_EXCL: an
/// existing file is never overwritten) and fsynced.
/// @throws key_error on any I/O error, naming the file
void write_secret_key_file(const std::filesystem::path& file, const identity& id);
/// Reads a secret key file. The file must be a regular file readable by its owner only (no
/// group or other permission bits), like ssh's private keys; it is not followed if a symlink.
/// @throws key_error naming the file and the problem
identity read_secret_key_file(const std::filesystem::path& file);
/// Reads a public key given inline ("mcdist-ed25519:...") or as a file holding one (the first
/// line starting with "mcdist-ed25519:"). @throws key_error naming the text or file
key32 read_public_key(std::string_view text_or_file);

}  // namespace mcdist::crypto
