#pragma once
/// @file
/// The receiver's delivery journal (docs/actions.md): an SQLite database in WAL mode
/// (common/sqlite/sqlite.hpp) recording every product mcdistd delivered and every action it
/// ran on one, so that actions run at least once across crashes and retention deletes only
/// what the daemon delivered.
///
/// Crash safety: file_store calls storage_config::before_renames on its finalizer thread with
/// the files of a batch before renaming them; record_intents() commits one *intent* per file
/// (channel, path, size, mtime, digest, session). When the engine then reports the file
/// stored, deliver() replaces the intent by a delivery and its action runs ('pending') in one
/// transaction. After a crash between the rename and deliver(), the daemon finds the intent
/// at start-up: if the file is in the destination with that size, mtime and digest it becomes
/// a delivery (and its actions run); otherwise it is dropped (the rename never happened; the
/// resumed session delivers it again). Runs left 'pending' or 'running' are run again.
///
/// Tables (times are seconds since the Unix epoch, REAL, UTC):
///   intents(id, channel, dest, relpath, size, mtime_ns, sha256, session, created_at)
///   deliveries(id, channel, dest, relpath, path, size, mtime_ns, sha256, session,
///              sender_key, delivered_at, removed_at, removed_reason)
///   action_runs(id, delivery_id -> deliveries ON DELETE CASCADE, action,
///               state 'pending'|'running'|'done'|'failed', attempt, started_at, ended_at,
///               exit_status, error)
///
/// Thread-safe: one connection behind a mutex (the finalizer thread writes intents, the
/// daemon's io thread everything else).

#include "common/sqlite/sqlite.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mcdist::receiver {

/// A product about to be renamed into place (or, at start-up, maybe renamed).
struct delivery_intent {
  std::int64_t id = 0;  ///< rowid; 0 before record_intents
  std::string channel;  ///< channel name
  std::string dest;     ///< the channel's destination root
  std::string relpath;  ///< path below dest
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::string sha256;   ///< 64 lower-case hex digits
  std::string session;  ///< session id, 8 lower-case hex digits
};

/// A delivered product.
struct delivery_row {
  std::int64_t id = 0;
  std::string channel;
  std::string dest;
  std::string relpath;
  std::string path;  ///< dest/relpath
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::string sha256;
  std::string session;
  /// The trusted sender key that verified the session's announce (crypto::format_public_key
  /// text, as trusted_senders spells it), "" for an unsigned session; stored NULL when "".
  std::string sender_key;
  std::chrono::system_clock::time_point delivered_at{};
};

/// An action run to (re)start, with its product.
struct action_run_row {
  std::int64_t id = 0;
  std::string action;
  std::string state;
  std::uint32_t attempt = 0;  ///< attempts started so far
  delivery_row product;
};

/// The journal. See the file comment.
class delivery_journal {
 public:
  /// Opens or creates the database (parent directory must exist) and its schema.
  /// @param sync  durability of record_intents (sqlite::durability::full unless the store
  ///              syncs nothing); every other commit is synchronous=NORMAL (no fsync; made
  ///              durable by the next intents or checkpoint, which is enough for at least
  ///              once: see record_intents)
  /// @throws sqlite::error
  explicit delivery_journal(const std::filesystem::path& file,
                            sqlite::durability sync = sqlite::durability::full);

  /// Commits intents, one transaction. Any thread. @throws sqlite::error
  void record_intents(std::span<const delivery_intent> intents);

  /// Every intent left (start-up, before any new one is recorded).
  std::vector<delivery_intent> intents();

  /// Drops one intent (its file failed, or is not in place after a crash).
  void drop_intent(std::int64_t id);
  /// Drops the intents of (dest, relpath) (a file that failed after its intent).
  void drop_intents(const std::string& dest, const std::string& relpath);

  /// Records a delivery and one 'pending' run per action name, removing the matching intents
  /// (same dest, relpath and sha256), in one transaction.
  /// @return the delivery's id; `run_ids` gets the runs' ids in the order of `actions`
  /// @throws sqlite::error
  std::int64_t deliver(const delivery_row& d, std::span<const std::string> actions,
                       std::vector<std::int64_t>& run_ids);

  /// One product of deliver_batch: the delivery, its action names, and (out) the runs' ids.
  struct batch_entry {
    delivery_row row;
    std::vector<std::string> actions;
    std::vector<std::int64_t> run_ids;
  };
  /// deliver() for many products in one transaction (one commit, one fsync: the daemon
  /// journals what one finalize batch stored together). Sets each row.id and run_ids.
  /// @throws sqlite::error (nothing is recorded)
  void deliver_batch(std::span<batch_entry> entries);

  /// Runs in state 'pending' or 'running' (start-up), oldest first.
  std::vector<action_run_row> unfinished_runs();

  /// An attempt starts: state 'running', attempt += 1, started_at = now.
  /// @return the attempt number (1-based)
  std::uint32_t run_started(std::int64_t run_id, std::chrono::system_clock::time_point now);
  /// An attempt ended: state ('pending' when it will be retried, 'done', 'failed'), exit
  /// status (or -signal, or nullopt when no process ran), error text ("" for none).
  void run_ended(std::int64_t run_id, std::string_view state, std::optional<int> exit_status,
                 const std::string& error, std::chrono::system_clock::time_point now);

  /// Deliveries of `channel` delivered before `before` and not yet removed, oldest first,
  /// at most `limit`.
  std::vector<delivery_row> expired(const std::string& channel,
                                    std::chrono::system_clock::time_point before,
                                    std::size_t limit);
  /// Marks a delivery's file removed by retention (reason "deleted", or why it was left).
  void mark_removed(std::int64_t delivery_id, std::string_view reason,
                    std::chrono::system_clock::time_point now);

  /// Deletes deliveries (and their runs) delivered before `before` whose runs are all done or
  /// failed, and intents older than it. @return deliveries deleted
  std::int64_t prune(std::chrono::system_clock::time_point before);

  const std::filesystem::path& file() const noexcept { return m_file; }

 private:
  std::filesystem::path m_file;
  sqlite::durability m_sync;
  std::mutex m_mutex;
  sqlite::database m_db;
};

/// Seconds since the Unix epoch, as stored in the journal.
double journal_time(std::chrono::system_clock::time_point t);

}  // namespace mcdist::receiver
