#pragma once
/// @file
/// What the receiver core asks of its storage path, and the words both sides use. The core
/// (receiver_engine) calls a storage_port; the storage path (receiver/storage/file_store)
/// implements it directly, so the daemon passes the store to the engine and translates
/// nothing. Answers come back to the engine through the shell, which adds the time:
/// receiver_engine::on_file_stored and receiver_engine::on_held.
///
/// Pure: standard library and common's value types only.

#include "common/ids.hpp"
#include "common/manifest.hpp"
#include "common/sha256.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace mcdist::receiver {

/// Identifies one file of one session.
struct file_key {
  session_id session;
  file_index file;

  friend bool operator==(const file_key&, const file_key&) = default;
};

/// A destination file to look for before registering (files already held, same size and
/// SHA-256, are skipped).
struct held_query {
  file_index file{};
  std::string relative_path;  ///< manifest path below the channel's destination tree
  std::uint64_t size = 0;     ///< bytes
  std::int64_t mtime_ns = 0;  ///< ns since the Unix epoch
};

/// A file already held: same size and mtime at its destination, and this digest.
struct held_answer {
  file_index file{};
  sha256_digest digest{};
};

/// One source block of a FEC block, for storage_port::recover.
struct fec_source {
  file_index file{};
  std::uint32_t block = 0;
  std::uint64_t offset = 0;  ///< bytes into the file
  std::uint32_t length = 0;  ///< bytes (the file's last block may be short)
  /// Readable: in the file's temp file, or in the destination (a stored or held file).
  bool available = false;
  /// To be recovered and written to the file's temp file (begun); a source neither available
  /// nor wanted (a refused or failed file's block) is recovered and thrown away.
  bool wanted = false;
  /// Manifest path below the channel's destination tree, set for available sources: where a
  /// storage path reads the block once the file has left its temp file (stored or held).
  std::string path;
};

/// A FEC block to decode (docs/design-notes.md "Parity repairs"): storage reads the available
/// sources, zero-pads each to block_size, takes the parity blocks kept with write_parity, and
/// recovers the rest (fec::codec(k, max_parity).decode); it writes the wanted ones and forgets
/// the FEC block's parity. The outcome arrives as receiver_engine::on_recovered.
struct recovery_request {
  std::uint32_t fec_block = 0;
  std::uint32_t channel = 0;          ///< the session's channel: whose destination tree
  std::uint32_t k = 0;                ///< session_params.fec_k
  std::uint32_t max_parity = 0;       ///< session_params.fec_max_parity
  std::uint32_t block_size = 0;       ///< bytes
  std::vector<fec_source> sources;    ///< the FEC block's sources, in index order
  std::vector<std::uint32_t> parity;  ///< parity indexes kept for it, ascending
};

/// The storage path as the core sees it. Calls come from the core's thread and never block on
/// disk; outcomes are reported later, on the same thread, through the shell.
class storage_port {
 public:
  virtual ~storage_port() = default;

  /// Prepares a temp file for `key` (before its first write), for delivery to `entry.path`
  /// below the destination tree of `channel`. Restarts a file begun before.
  /// @param entry   valid during the call only
  /// @param resume  the temp file may already hold data from an earlier run: keep it
  virtual void begin_file(file_key key, std::uint32_t channel, const manifest_entry& entry,
                          bool resume) = 0;
  /// Stores `data` at byte `offset` of the file.
  /// @return false if it could not be taken now (buffers full, file failed): the block stays
  ///         missing and will be NAKed
  virtual bool write(file_key key, std::uint64_t offset, std::span<const std::byte> data) = 0;
  /// All bytes written: verify against `expected`, make durable, rename into place; the
  /// outcome arrives as receiver_engine::on_file_stored.
  virtual void finalize(file_key key, const sha256_digest& expected) = 0;
  /// Forgets a file and deletes its temp file; no outcome follows.
  virtual void discard_file(file_key key) = 0;
  /// Looks for held copies below the destination tree of `channel`; the answer (files held
  /// only) arrives as receiver_engine::on_held.
  virtual void query_held(session_id session, std::uint32_t channel,
                          std::vector<held_query> queries) = 0;
  /// Persists `blob` as the session's resume state, after the writes queued before it.
  virtual void checkpoint(session_id session, std::string blob) = 0;
  /// True when this storage path keeps parity and decodes FEC blocks (write_parity, recover).
  /// The default, false: the engine drops parity and NAKs missing blocks one by one.
  virtual bool decodes_parity() const { return false; }
  /// Keeps parity block `index` of FEC block `fec_block` (block_size bytes) until recover or
  /// close_session. The default keeps nothing: a storage path that cannot decode refuses, and
  /// the engine NAKs that FEC block's missing blocks one by one instead.
  /// @return false if it was not kept
  virtual bool write_parity(session_id session, std::uint32_t fec_block, std::uint32_t index,
                            std::span<const std::byte> data) {
    (void)session, (void)fec_block, (void)index, (void)data;
    return false;
  }
  /// Decodes a FEC block as `request` says; the outcome arrives as
  /// receiver_engine::on_recovered. Only called after write_parity kept its parity.
  virtual void recover(session_id session, recovery_request request) {
    (void)session, (void)request;
  }
  /// The session is over for this receiver: drops its files (no outcomes for them).
  /// @param remove_temp  also delete its temp files and resume state
  virtual void close_session(session_id session, bool remove_temp) = 0;
};

}  // namespace mcdist::receiver

template <>
struct std::hash<mcdist::receiver::file_key> {
  std::size_t operator()(const mcdist::receiver::file_key& k) const noexcept {
    // Fibonacci hashing of the packed pair: session ids are random, file indexes dense.
    const std::uint64_t packed = (std::uint64_t{k.session.value} << 32) | k.file.value;
    return static_cast<std::size_t>(packed * 0x9E3779B97F4A7C15ull);
  }
};
