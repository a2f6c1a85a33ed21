#pragma once
/// @file
/// The hub journal (feed/journal.hpp) on SQLite: one file in WAL mode (common/sqlite), the
/// embedded default for a single hub. Readers (mcdistctl, the daemon's query workers) open it
/// read-only beside the writer (https://www.sqlite.org/wal.html). The schema version is
/// PRAGMA user_version.

#include "common/sqlite/sqlite.hpp"
#include "feed/journal.hpp"

#include <filesystem>

namespace mcdist::feed {

/// The SQLite engine of hub_journal. Owns one connection to the file.
class sqlite_journal final : public hub_journal {
 public:
  /// Opens (creating it and its schema if absent) the journal read-write in WAL mode.
  /// @param file  the journal; its directory must exist
  /// @param read_only  open for queries only (mcdistctl without the daemon): no creation, no
  ///                   migration, every writing function throws sqlite::error
  /// @throws sqlite::error when the file cannot be opened or is not a database;
  ///         std::runtime_error when its schema is newer than schema_version (or absent in
  ///         read-only mode)
  explicit sqlite_journal(const std::filesystem::path& file, bool read_only = false);

  std::unique_ptr<group> begin_tx() override;
  std::string_view engine() const noexcept override { return "sqlite"; }
  std::int64_t enqueue(const product& p) override;
  std::vector<product> queued(std::string_view channel) override;
  std::uint64_t next_seq(std::string_view channel) override;
  std::uint64_t last_seq(std::string_view channel) override;
  std::int64_t begin_session(const session_row& s,
                             std::span<const std::int64_t> product_ids) override;
  void end_session(std::string_view channel, std::uint64_t seq, session_outcome result,
                   wall_time ended = std::chrono::system_clock::now()) override;
  void end_session(std::int64_t session_row_id, session_outcome result,
                   wall_time ended = std::chrono::system_clock::now()) override;
  void mark_sent(std::int64_t product_id, std::optional<std::string> retained_path,
                 wall_time at = std::chrono::system_clock::now()) override;
  void mark_failed(std::int64_t product_id, std::string_view reason) override;
  void requeue(std::int64_t product_id) override;
  std::vector<product> unfinished() override;
  std::vector<open_batch> open_batches(std::string_view channel) override;
  std::int64_t close_interrupted_sessions(wall_time now = std::chrono::system_clock::now(),
                                          std::string_view channel = {}) override;
  std::optional<product> get(std::int64_t product_id) override;
  void record_outcome(std::int64_t product_id, std::string_view site, outcome o,
                      std::string_view reason, std::uint64_t seq,
                      wall_time at = std::chrono::system_clock::now()) override;
  void site_seen(const site_row& s) override;
  bool superseded(const product& p) override;
  bool batch_session_ended(std::string_view channel, std::uint64_t seq) override;
  std::optional<product> newest_retained(std::string_view channel, std::string_view name) override;
  std::vector<product> find_products(const product_filter& f) override;
  std::vector<history_row> history(std::string_view site, wall_time since,
                                   std::optional<std::string_view> glob = std::nullopt,
                                   std::optional<std::string_view> channel = std::nullopt,
                                   std::size_t limit = 0) override;
  std::vector<missing_row> missing(std::string_view site, wall_time since) override;
  std::vector<site_row> sites() override;
  std::vector<channel_row> channels() override;
  std::vector<session_info> sessions(wall_time since, std::size_t limit = 0) override;
  expire_result expire(wall_time before) override;

  /// The underlying connection (tests).
  sqlite::database& db() noexcept { return m_db; }

 private:
  void create_or_migrate();
  sqlite::database m_db;
};

}  // namespace mcdist::feed
