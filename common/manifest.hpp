#pragma once
/// @file
/// The manifest: the list of files of a file set (docs/architecture.md "Vocabulary"), and the
/// limits a receiver applies to what a manifest may ask of it.

#include "common/sha256.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace mcdist {

namespace wire {
class file_entry;
}

/// Most files in one session. 10^6 bulletins is far beyond a day's products of a centre; a
/// larger manifest is refused rather than allocated (it costs the receiver a bitmap per file).
inline constexpr std::uint32_t max_files_per_session = 1'000'000;
/// Largest file, bytes (4 TiB): keeps block indexes inside 31 bits at the smallest block size
/// and every offset well inside off_t.
inline constexpr std::uint64_t max_file_size = std::uint64_t{1} << 42;

/// One file of a file set.
struct manifest_entry {
  std::string path;                     ///< relative, '/'-separated
  std::uint64_t size = 0;               ///< bytes
  std::int64_t mtime_ns = 0;            ///< ns since the Unix epoch
  std::uint32_t mode = 0644;            ///< permission bits
  std::optional<sha256_digest> digest;  ///< absent until hashed (large files: during pass 1)
};

/// Number of blocks of a file of `size` bytes: ceil(size / block_size); 0 for an empty file.
constexpr std::uint32_t block_count(std::uint64_t size, std::uint32_t block_size) noexcept {
  return static_cast<std::uint32_t>((size + block_size - 1) / block_size);
}

/// Payload bytes of block `block` of a file of `size` bytes.
constexpr std::uint32_t block_length(std::uint64_t size, std::uint32_t block_size,
                                     std::uint32_t block) noexcept {
  const std::uint64_t offset = std::uint64_t{block} * block_size;
  return static_cast<std::uint32_t>(size - offset < block_size ? size - offset : block_size);
}

/// Converts to the wire form.
void to_wire(const manifest_entry& e, wire::file_entry& out);

/// Converts from the wire form, checking everything a receiver must: the path
/// (check_relative_path), size <= max_file_size, digest absent or 32 bytes. Mode is masked to
/// 0777 plus the sticky bit: set-user-ID and set-group-ID bits from the network are dropped.
/// @return empty, or the errc naming the first problem.
std::error_code from_wire(const wire::file_entry& in, manifest_entry& out);

}  // namespace mcdist
