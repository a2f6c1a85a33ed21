#pragma once
/// @file
/// SHA-256 of the sender's files, off the network thread. Small files are hashed before the
/// announce (their digests go in the manifest, so receivers can skip files they hold); large
/// files are hashed in the background in index order while pass 1 already runs, and their
/// digests follow in DIGEST messages, so a 1 GB field does not wait 0.7 s for its hash.

#include "common/ids.hpp"
#include "common/sha256.hpp"
#include "sender/io/file_set.hpp"

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace mcdist::sender {

/// Hashes one file with pread in 1 MiB reads. @return the digest, or an error naming the file.
/// Reads exactly `expected_size` bytes: a file that shrank or grew since the scan is an error
/// (errc::invalid_field with `why` set), as is any read error.
std::error_code hash_file(const std::filesystem::path& p, std::uint64_t expected_size,
                          sha256_digest& out, std::string& why);
/// Hashes `f` (through its descriptor when it has one: source_file::fd), expecting
/// `f.entry.size` bytes; errors as above, naming `f.local`.
std::error_code hash_file(const source_file& f, sha256_digest& out, std::string& why);

/// Fills in digests before the announce. With `use_cache`, a file's digest recorded in its
/// user.mcdist.sha256 xattr (common/sys/digest_xattr.hpp) is taken as is, whatever its size; then,
/// in parallel on up to `threads` threads (one per prehash_bytes_per_thread of work), every
/// file of at most `per_file_max` bytes is hashed until `total_budget` bytes have been hashed,
/// and (with `use_cache`) its digest recorded.
/// @throws file_set_error when a file cannot be read
/// Bytes of hashing that justify one more prehash thread: 64 MiB, ~45 ms of SHA-256 at
/// 1.4 GB/s. A small set (100 x 10 kB: 1 ms) is hashed on the calling thread alone; a thread
/// started for it would cost more than it saves, and on a loaded machine it may wait tens of
/// ms for a CPU while the caller waits to join it (measured: 76 ms at load 28).
inline constexpr std::uint64_t prehash_bytes_per_thread = 64u << 20;

void prehash(std::vector<source_file>& files, std::uint64_t per_file_max,
             std::uint64_t total_budget, unsigned threads, bool use_cache);

/// Files whose digest xattrs justify one more reading thread. One getxattr(2) by path costs
/// about 2 us (tmpfs and ext4 here), so a set of 1000 bulletins spends 2 ms of the sender's
/// start-up in them; a thread costs ~0.1 ms to start.
inline constexpr std::size_t xattr_reads_per_thread = 256;

/// Takes each file's digest from its user.mcdist.sha256 xattr where one is recorded for its
/// size and mtime (common/sys/digest_xattr.hpp), on the calling thread and up to `threads` - 1
/// helpers (one per xattr_reads_per_thread files). The helpers are detached and share the work
/// through an atomic index: the caller waits only for reads a helper has begun, never for a
/// helper that has not been scheduled yet (on a loaded machine that can take tens of ms).
/// A file that cannot be read keeps no digest; it is reported when it is hashed or sent.
void read_cached_digests(std::vector<source_file>& files, unsigned threads);

/// Records `d` as the digest of `f` in its xattr, if the file is unchanged since the scan.
/// Failures (read-only file, no xattr support) are silent: the cache is an optimisation.
void remember_digest(const source_file& f, const sha256_digest& d);

/// Background hashing of the files still without a digest, in index order, on one thread.
/// Results are handed to `post` (which runs them on the network thread).
class background_hasher {
 public:
  using post_fn = std::function<void(std::function<void()>)>;
  using digest_fn = std::function<void(file_index, const sha256_digest&)>;
  using error_fn = std::function<void(file_index, const std::string&)>;

  background_hasher(const std::vector<source_file>& files, post_fn post, digest_fn on_digest,
                    error_fn on_error);
  /// Stops at the next read and joins.
  ~background_hasher();
  background_hasher(const background_hasher&) = delete;
  background_hasher& operator=(const background_hasher&) = delete;

 private:
  void run();
  std::vector<std::pair<std::uint32_t, source_file>> m_todo;
  post_fn m_post;
  digest_fn m_on_digest;
  error_fn m_on_error;
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
};

}  // namespace mcdist::sender
