#pragma once
/// @file
/// The receiver's delivery journal (docs/actions.md): an SQLite database in WAL mode
/// (common/sqlite/sqlite.hpp) recording every product mcdistd delivered and every action it
/// ran on one, so that actions run at least once across crashes and retention deletes only
/// what the daemon delivered.
///
/// Crash safety: file_store calls storage_config::before_renames on its finalizer thread with
/// the files of a batch before renaming them; record_deliveries() commits their deliveries
/// and their actions' runs ('pending') in one fully synchronous transaction. The renames
/// follow; the same transaction of the next batch advances journal_state.confirmed_through to
/// the last delivery of the batch before, whose renames had then all ended (the deliveries of
/// files that did not end in place are deleted first, drop_deliveries). A delivery above the
/// mark is one a crash may have caught before its rename: at start-up each is checked, and
/// kept (its actions run) if its file is in the destination with that size, mtime and
/// digest, deleted otherwise (the rename never happened; the resumed session delivers the
/// file again). Runs left 'pending' or 'running' are run again. One transaction per batch,
/// on the finalizer thread, is all a delivered file costs the journal.
///
/// Journals of schema 1 recorded an *intent* per file before its rename and replaced it by
/// the delivery afterwards; intents such a journal still holds are settled at start-up the
/// same way (intents(), drop_intent(), deliver()).
///
/// Tables (times are seconds since the Unix epoch, REAL, UTC):
///   intents(id, channel, dest, relpath, size, mtime_ns, sha256, session, created_at)
///     (schema 1's; nothing writes it now)
///   deliveries(id, channel, dest, relpath, path, size, mtime_ns, sha256, session,
///              sender_key, delivered_at, removed_at, removed_reason)
///   action_runs(id, delivery_id -> deliveries ON DELETE CASCADE, action,
///               state 'pending'|'running'|'done'|'failed', attempt, started_at, ended_at,
///               exit_status, error)
///   journal_state(id = 1, confirmed_through): every delivery with id <= confirmed_through
///     is known to be in place (or was, before retention)
///
/// Thread-safe: one connection behind a mutex (the finalizer thread records deliveries, the
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
  /// @param sync  durability of record_deliveries (sqlite::durability::full unless the store
  ///              syncs nothing); every other commit is synchronous=NORMAL (no fsync; made
  ///              durable by the next batch's deliveries or a checkpoint, which is enough for
  ///              at least once: see record_deliveries)
  /// @throws sqlite::error
  explicit delivery_journal(const std::filesystem::path& file,
                            sqlite::durability sync = sqlite::durability::full);

  /// Every intent a schema-1 journal left (start-up).
  std::vector<delivery_intent> intents();

  /// Drops one intent (its file is not in place).
  void drop_intent(std::int64_t id);

  /// Records a delivery already in place (a settled intent, a file found at start-up) and
  /// one 'pending' run per action name, removing the matching intents (same dest, relpath
  /// and sha256), in one transaction. Not confirmed: confirm_all() does that.
  /// @return the delivery's id; `run_ids` gets the runs' ids in the order of `actions`
  /// @throws sqlite::error
  std::int64_t deliver(const delivery_row& d, std::span<const std::string> actions,
                       std::vector<std::int64_t>& run_ids);

  /// One product of record_deliveries or deliver_batch: the delivery, its action names, and
  /// (out) the runs' ids.
  struct batch_entry {
    delivery_row row;
    std::vector<std::string> actions;
    std::vector<std::int64_t> run_ids;
  };
  /// deliver() for many products in one transaction (one commit). Sets each row.id and
  /// run_ids. @throws sqlite::error (nothing is recorded)
  void deliver_batch(std::span<batch_entry> entries);

  /// The deliveries of files about to be renamed into place, and one 'pending' run per
  /// action name each, in one transaction that also confirms every delivery up to
  /// `confirm_through` (0: none; the mark never goes back). Fully synchronous when the
  /// journal was opened with sqlite::durability::full: the renames follow, and its fsync
  /// makes every earlier commit durable too (the WAL is ordered). Sets each row.id and
  /// run_ids. Any thread. @throws sqlite::error (nothing is recorded)
  void record_deliveries(std::span<batch_entry> entries, std::int64_t confirm_through);
  /// Deletes deliveries (and their runs) whose files did not end in place, one transaction.
  /// @throws sqlite::error
  void drop_deliveries(std::span<const std::int64_t> ids);
  /// Deliveries above journal_state.confirmed_through, oldest first: those a crash may have
  /// caught before their renames (start-up).
  std::vector<delivery_row> unconfirmed();
  /// Confirms every delivery recorded so far (start-up, once the unconfirmed are settled).
  void confirm_all();
  /// Confirms every delivery up to `id` (a clean stop: the last batch settled); never goes
  /// back. @throws sqlite::error
  void confirm_through(std::int64_t id);
  /// journal_state.confirmed_through.
  std::int64_t confirmed_through();

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
