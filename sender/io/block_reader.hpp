#pragma once
/// @file
/// Reads blocks of the sender's files on demand, so the sender's memory does not grow with the
/// files' size: a few open descriptors and a few read-ahead chunks, nothing more.

#include "common/sha256.hpp"
#include "sender/io/file_set.hpp"

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace mcdist::sender {

/// Descriptors a block_reader keeps open by default (its LRU of files).
inline constexpr std::size_t default_open_files = 256;

/// Block source over a file set. Not thread-safe; lives on the network thread.
class block_reader {
 public:
  /// @param chunk_bytes  read-ahead unit, bytes (pass 1 reads each file sequentially)
  /// @param chunks       chunks cached (repairs revisit recent chunks)
  /// @param max_open     descriptors kept open (LRU)
  block_reader(const std::vector<source_file>& files, std::size_t chunk_bytes = 1 << 20,
               std::size_t chunks = 8, std::size_t max_open = default_open_files);
  ~block_reader();
  block_reader(const block_reader&) = delete;
  block_reader& operator=(const block_reader&) = delete;

  /// Makes `length` bytes at `offset` of file `file` available in `out` (valid until the next
  /// call). @return an error, with `why` naming the file, if it cannot be read or is shorter
  /// than announced (changed since the scan).
  std::error_code read(std::uint32_t file, std::uint64_t offset, std::uint32_t length,
                       std::span<const std::byte>& out, std::string& why);

  /// Reads the bytes [offset, offset + total length of `pieces`) of file `file` straight into
  /// `pieces` with one preadv (each piece typically the payload slot of one datagram in a GSO
  /// buffer), hashing them in band like read() when they continue the file's hashed prefix.
  /// Pass data thus goes from the page cache into the datagrams in one copy, into a buffer
  /// small enough to stay in cache; the chunks of read() are not used (measured on 1 GB from
  /// tmpfs: the pread into 1 MiB chunks and the copy out of them were 60 % of the sender's
  /// CPU). At most IOV_MAX pieces. @return an error, with `why` naming the file, as read()
  std::error_code read_into(std::uint32_t file, std::uint64_t offset, std::span<const iovec> pieces,
                            std::string& why);

  /// Bytes read from disk so far.
  std::uint64_t bytes_read() const noexcept { return m_bytes_read; }

  /// Hash `file` as it is read: pass 1 reads every file front to back, so SHA-256 of a file
  /// announced without a digest comes from the same reads that send it (no second read of a
  /// GB field, and the digest is of exactly the bytes that were sent).
  void hash_while_reading(std::uint32_t file);
  /// Digests finished since the last call, as (file, digest).
  std::vector<std::pair<std::uint32_t, sha256_digest>> take_digests();
  /// Files whose in-band hash was broken by a read out of order (they need another way).
  std::vector<std::uint32_t> take_unhashable();

 private:
  struct chunk {
    std::uint32_t file = UINT32_MAX;
    std::uint64_t offset = 0;
    std::size_t length = 0;
    std::vector<std::byte> data;
  };
  int descriptor(std::uint32_t file, std::string& why);
  /// Opens `f` for reading: through the descriptor of its directory (m_dirs) when it is opened
  /// by path, else as open_source. @return the descriptor, or -1 with `why` set
  int open_file(const source_file& f, std::string& why);
  /// In-band hashing of bytes [start, start + n) of `file` just read, given as `parts`.
  void hash_read(std::uint32_t file, std::uint64_t start, std::span<const iovec> parts);

  const std::vector<source_file>& m_files;
  std::size_t m_chunk_bytes;
  std::vector<chunk> m_chunks;
  std::size_t m_next_victim = 0;
  std::size_t m_max_open;
  using open_list = std::list<std::pair<std::uint32_t, int>>;
  open_list m_open;  ///< (file, descriptor), most recent first
  /// Where each open file is in m_open: a lookup per read was a walk of up to max_open nodes,
  /// on every new file of pass 1 (5 % of the sender's CPU on 1000 x 10 kB, perf).
  std::unordered_map<std::uint32_t, open_list::iterator> m_where;
  /// Directories of files opened by path, by path (at most max_open_dirs).
  static constexpr std::size_t max_open_dirs = 16;
  std::unordered_map<std::string, int> m_dirs;
  struct inband_hash {
    sha256_hasher hasher;
    std::uint64_t prefix = 0;  ///< bytes hashed
  };
  std::vector<std::unique_ptr<inband_hash>> m_hashing;  ///< per file; null = not hashed here
  std::vector<std::pair<std::uint32_t, sha256_digest>> m_digests;
  std::vector<std::uint32_t> m_unhashable;
  std::uint64_t m_bytes_read = 0;
};

}  // namespace mcdist::sender
