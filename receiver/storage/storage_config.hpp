#pragma once
/// @file
/// The storage path's vocabulary: its configuration (storage_config), what to deliver
/// (file_spec) and how a file ended (store_result). Shared by file_store and its components.

#include "common/ids.hpp"
#include "common/sha256.hpp"
#include "receiver/storage/posix_io.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// How finalized data is made durable before it is renamed into the destination. The first
/// four are group commit: the finalizer takes every finalize request waiting (up to
/// finalizer::batch_max), verifies them, makes their data durable together by the method
/// named, renames each and fsyncs each distinct destination directory once
/// (receiver/storage/group_commit.hpp; why the default is range: docs/design-notes.md
/// "Durability").
enum class sync_mode : std::uint8_t {
  /// One syncfs() of the temp filesystem for the batch (fsync for a batch of one). Cheapest
  /// when this daemon is the filesystem's only writer; waits for every other writer's dirty
  /// data too.
  syncfs,
  /// fdatasync() of each file of the batch, in parallel on storage_config::commit_threads
  /// threads, so the filesystem's journal commits them together (ext4's jbd2 joins concurrent
  /// syncs into one transaction commit), and nobody else's dirty data is waited for.
  fdatasync,
  /// sync_file_range(SYNC_FILE_RANGE_WRITE) on every file of the batch (writeback of all of
  /// them starts at once), then fdatasync() of each in turn; the first waits for the journal
  /// commit that carries the others.
  range,
  /// fdatasync of every file of the batch submitted at once to an io_uring
  /// (IORING_OP_FSYNC with IORING_FSYNC_DATASYNC); falls back to `fdatasync` where io_uring
  /// is unavailable (old kernel, seccomp, kernel.io_uring_disabled).
  uring,
  /// fsync each file before its rename, then its directory: batches of one.
  file,
  /// No fsync at all: for tmpfs and tests. A crash may leave renamed files with lost data.
  none,
  /// Per batch, syncfs while the machine's page cache holds little dirty data besides the
  /// batch's own (Dirty + Writeback of /proc/meminfo at most
  /// storage_config::adaptive_dirty_limit_bytes plus the batch's bytes), range otherwise.
  /// syncfs is one call and one device flush for the batch and its directories, where range
  /// costs a flush per file on ext4 without a journal; with another writer's data dirty,
  /// range does not wait for it.
  adaptive,
  /// The group commit method used when the configuration says "batch": adaptive, chosen by
  /// tests/bench/commit_latency.py and tests/bench/small_files_bench.py (docs/benchmarks.md
  /// "Group commit methods"): with another process writing 4 GB to the same filesystem it
  /// keeps range's p99, and on a quiet disk it has syncfs's whole run.
  batch = adaptive,
};

/// Parses a sync mode's name: "batch" (the default method), "adaptive", "syncfs", "fdatasync",
/// "range", "uring", "file" or "none". @return nullopt for anything else
std::optional<sync_mode> parse_sync_mode(std::string_view name) noexcept;

/// Names accepted by parse_sync_mode, for messages: "batch, syncfs, fdatasync, ...".
inline constexpr const char* sync_mode_names =
    "batch, adaptive, syncfs, fdatasync, range, uring, file, none";

/// Name of a sync mode: "adaptive", "syncfs", "fdatasync", "range", "uring", "file" or "none".
std::string_view to_string(sync_mode m) noexcept;

struct file_spec;

/// A file of a finalize batch about to be renamed into place: verified against its manifest
/// digest and durable (per sync_mode).
struct pending_rename {
  file_key key;
  const file_spec* spec = nullptr;  ///< dest_root and relative_path; valid during the call
  sha256_digest digest{};
};

/// Configuration. Checked by the file_store constructor, which throws std::invalid_argument
/// on nonsense (operator-facing message).
struct storage_config {
  /// Directory for temp files and checkpoints; created if missing. Must be on the same
  /// filesystem as every destination tree so the final rename is atomic: begin_file fails a
  /// file whose dest_root is on another device, with a message saying so.
  std::filesystem::path temp_dir;
  /// Destination tree of each channel, indexed by channel number: where storage_port calls
  /// (which name a channel) deliver. Calls with a file_spec name their tree themselves.
  std::vector<std::filesystem::path> dest_roots;
  /// Bytes of chunk buffers for data in flight to disk (16 MiB: ~27 ms at 5 Gbit/s; behind it
  /// the 32 MiB socket buffers ride out a page-cache writeback stall, since the daemon pauses
  /// its reads while the pool is full). Reserved at construction, touched lazily. When all are
  /// in flight write() returns false. mcdistd's `buffer_pool` default.
  std::size_t buffer_pool_bytes = 16u << 20;
  /// Size of one coalescing chunk, bytes (256 KiB: 187 blocks of 1400 bytes per pwrite, big
  /// enough that syscall cost is noise, small enough that 64 of them fit the pool).
  std::size_t chunk_bytes = 256u << 10;
  /// Most temp files the writer keeps open (LRU); others are reopened on demand.
  std::size_t max_open_files = 1024;
  /// Files at least this big (bytes) are fallocate()d at begin_file, so a full disk fails the
  /// file at once instead of midway (1 MiB: below that the allocation is cheap either way);
  /// on tmpfs in steps instead (preallocate_step_bytes).
  std::uint64_t preallocate_min_bytes = 1u << 20;
  /// Where fallocate materializes the whole file at once (tmpfs allocates every page of it:
  /// about 1 s for 1 GB on a loaded 2-core machine), a long preallocation at begin_file would
  /// stall the writer thread while the network thread fills the pool and the socket buffer
  /// overflows (measured: 1 GB at 4 Gbit/s lost 6 % of its blocks in the first 0.2 s). There
  /// the file is preallocated in steps of this many bytes, kept at least half a step ahead of
  /// the data written (32 MiB: ~10 ms of page allocation per step, the pool's size). The disk
  /// reserve check at begin_file still covers the whole file; a step that fails fails the file
  /// like a write would. 0: always the whole file at once.
  std::uint64_t preallocate_step_bytes = 32u << 20;
  /// Preallocate in steps (preallocate_step_bytes): unset = only where temp_dir is on tmpfs
  /// (checked at construction); tests force it either way.
  std::optional<bool> preallocate_in_steps;
  /// Start asynchronous writeback (sync_file_range SYNC_FILE_RANGE_WRITE) every this many
  /// bytes written to a file, so the fsync at finalize is short (8 MiB ~ 15 ms of disk at
  /// 500 MB/s). Not done in sync_mode::none. 0 disables.
  std::uint64_t writeback_bytes = 8u << 20;
  sync_mode sync = sync_mode::batch;
  /// How long a finalize batch gathers files, from the first file queued for it, before the
  /// finalizer verifies and delivers them; a batch of finalizer::batch_max files goes at once.
  /// A batch costs a fixed amount besides its files: its journal transaction, its sync, its
  /// destination directories opened and fsynced, the thread woken. Where that is cheap (tmpfs,
  /// a fast disk) the finalizer would otherwise keep up file by file and pay it every few
  /// files: 20,000 files of 10 kB arrived 14 to a batch, about 27 system calls a batch. 10 ms
  /// is what a delivery may wait for it, next to the tens of ms the network takes. Not in
  /// sync_mode::file (batches of one); zero: no wait.
  std::chrono::microseconds finalize_linger{10'000};
  /// sync_mode::adaptive uses syncfs for a batch only while the machine's dirty and
  /// under-writeback page cache, less the batch's own bytes, is at most this many bytes
  /// (16 MiB: what syncfs may then wait for beyond the batch, ~30-80 ms of writeback on a disk
  /// of 200-500 MB/s, against range's flush per file).
  std::uint64_t adaptive_dirty_limit_bytes = 16u << 20;
  /// Test hook for sync_mode::adaptive: the machine's dirty + writeback bytes, or nullopt when
  /// unknown (then range). Unset: read from /proc/meminfo (machine_dirty_bytes).
  std::function<std::optional<std::uint64_t>()> dirty_probe;
  /// Threads of sync_mode::fdatasync that call fdatasync() at once, each on its own file (8:
  /// placeholder until measured).
  unsigned commit_threads = 8;
  /// Store "user.mcdist.sha256" = "<64 hex> <size> <mtime_ns>" on delivered files, so
  /// query_held need not hash them again.
  bool record_digest_xattr = true;
  /// query_held hashes a destination file without a usable xattr only up to this size, bytes
  /// (64 MiB ~ 50 ms of SHA-256 here).
  std::uint64_t hash_held_max_bytes = 64u << 20;
  /// Free space kept on the temp filesystem: a new file is started only if, after its size,
  /// at least min(disk_reserve_bytes, disk_reserve_percent % of the filesystem) stays free
  /// (statvfs f_bavail); otherwise it fails with errc::disk_reserve. 1 GiB or 5 %: room for
  /// the system's logs and for files already being written (which are not preallocated below
  /// preallocate_min_bytes), while a small filesystem is not reserved entirely. Either 0
  /// turns the check off (then a full disk fails the file at fallocate or pwrite, ENOSPC).
  std::uint64_t disk_reserve_bytes = std::uint64_t{1} << 30;
  double disk_reserve_percent = 5;
  /// Most bytes of one session's files being written at once (begun, not yet handed to the
  /// finalizer or dropped); a file that would exceed it fails with errc::quota. 0: no quota.
  /// 256 GiB: far above a day's products, it stops one announced session from claiming a
  /// whole filesystem by itself.
  std::uint64_t session_quota_bytes = std::uint64_t{256} << 30;
  /// Most bytes of parity blocks kept in memory, all sessions together, until their FEC block
  /// is decoded (storage_port::write_parity; 96 bytes of overhead are charged per block). A
  /// parity block beyond it is refused and the engine NAKs that FEC block's missing blocks one
  /// by one. 64 MiB: about 46,000 parity blocks of 1400 bytes, i.e. 23,000 FEC blocks each
  /// waiting for 2 parity blocks; a FEC block whose parity covers its loss is decoded, and its
  /// parity freed, as soon as the parity arrives. 0: no parity kept (the engine then NAKs).
  std::uint64_t parity_memory_bytes = std::uint64_t{64} << 20;
  /// Where warnings and errors go; null: spdlog's default logger.
  std::shared_ptr<spdlog::logger> log;
  /// Tests only: failure injection; empty in production.
  fault_hook fault;
  /// The finalizer's "before renames" step (finalizer.hpp): called on the finalizer thread
  /// once per batch, with the files about to be renamed, after their data is durable and
  /// before the first rename (the daemon journals their deliveries). Empty: nothing. Must not
  /// block for long: the batch's results wait for it. Throwing fails every file of the call
  /// (none is renamed).
  std::function<void(std::span<const pending_rename>)> before_renames;
  /// Its counterpart, on the finalizer thread after the batch's renames and directory syncs
  /// and before its results are posted, once per batch for which before_renames returned: the
  /// files before_renames saw that did not end in place after all (the rename failed, a newer
  /// version was found, the directory could not be made durable). Usually empty.
  std::function<void(std::span<const pending_rename>)> after_renames;
  /// The sender key that verified a session ("" when unsigned), as the journal records it;
  /// called on the network thread by begin_file(key, channel, entry) to fill
  /// file_spec::sender_key. Empty: "".
  std::function<std::string(session_id)> sender_key_of;
};

/// What to deliver, from the manifest.
struct file_spec {
  /// Destination tree root; created (mkdir -p) if missing. Symlinks in it are followed (the
  /// operator configured it); symlinks below it are not.
  std::filesystem::path dest_root;
  /// '/'-separated path below dest_root. Re-checked with check_relative_path; refused if bad.
  std::string relative_path;
  /// File size, bytes.
  std::uint64_t size = 0;
  /// Modification time set on the delivered file, ns since the Unix epoch.
  std::int64_t mtime_ns = 0;
  /// Permission bits; applied masked with 07777 & ~S_ISUID & ~S_ISGID.
  std::uint32_t mode = 0644;
  /// The channel the file came on (the index of its dest_roots entry), for the hooks.
  std::uint32_t channel = 0;
  /// The sender key that verified the file's session or catch-up index, "" when unsigned;
  /// carried for the hooks (the delivery journal's provenance), never interpreted here.
  std::string sender_key;
};

/// Outcome of one begun file: exactly one is reported per begin_file, unless the file is
/// discarded, its session closed before finalize, or the file_store destroyed first.
struct store_result {
  file_key key;
  /// Empty: delivered. Otherwise why not: errc::digest_mismatch, errc::path_* (refused path),
  /// errc::disk_reserve, errc::quota (storage_config budgets), too_many_symbolic_link_levels
  /// (temp_dir/<session> is a symlink: refused, not followed),
  /// std::errc::no_space_on_device, io_error, permission_denied, is_a_directory,
  /// not_a_directory, too_many_symbolic_link_levels (symlink in the path),
  /// cross_device_link (temp_dir on another filesystem), ...
  std::error_code ec;
  /// Operator-facing: which path, which system call, what to do. Empty when delivered.
  std::string detail;
  /// What the received data hashed to (all zero if the file failed before finalize).
  sha256_digest digest{};
  /// Delivered: the file size. Failed: how far the data was hashed or found (a hint for logs).
  std::uint64_t bytes = 0;
};

}  // namespace mcdist::receiver
