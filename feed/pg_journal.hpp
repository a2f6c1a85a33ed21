#pragma once
/// @file
/// The hub journal (feed/journal.hpp) on PostgreSQL through libpq (common/pg): the journal that
/// redundant hubs share, so that a channel's sequence numbers, outbox and outcomes are one
/// stream whichever hub sends it (README "Redundant hubs"). The same tables, columns and
/// queries as the SQLite journal (times in integer ns, states as words checked by the
/// database, text columns in the "C" collation so that ordering and GLOB matching are SQLite's
/// byte order), plus the cluster's `hubs` and `leases` (lease_keeper.hpp). The schema version is
/// the table schema_version; migrations run in one transaction under an advisory lock
/// (pg_advisory_xact_lock, https://www.postgresql.org/docs/15/functions-admin.html), so two hubs
/// starting at once migrate once.
///
/// Cost: every call is one round trip to the server (two for a call that opens and commits its
/// own transaction; a tx groups calls into one commit); the daemon's io thread pays them for its
/// writes (docs/design-notes.md "Redundant hubs": the round trips per product and per session).

#include "common/pg/pg.hpp"
#include "feed/journal.hpp"

#include <cstdint>
#include <string>

namespace mcdist::feed {

/// What one lease round gave a hub for one channel (lease_round()).
struct lease_grant {
  std::string channel;
  std::uint64_t epoch = 0;
  wall_time acquired{};  ///< when this holder took it (database clock)
};

/// The PostgreSQL engine of hub_journal. Owns one connection.
class pg_journal final : public hub_journal {
 public:
  /// Connects and creates or migrates the schema (unless read_only).
  /// @param uri        a libpq connection URI ("postgresql://mcdist@db1/mcdist")
  /// @param read_only  queries only: every transaction is read-only; no creation or migration
  /// @throws pg::error (unreachable, refused); std::runtime_error (a database that is not an
  ///         mcdist journal, or of a newer schema)
  /// @param timeout   bound of every call (pg::connection)
  explicit pg_journal(const std::string& uri, bool read_only = false,
                      std::chrono::milliseconds timeout = pg::call_timeout);

  std::unique_ptr<group> begin_tx() override;
  std::string_view engine() const noexcept override { return "postgresql"; }
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
  cluster_view cluster() override;
  void check_lease(std::string_view channel, std::string_view hub, std::uint64_t epoch) override;
  expire_result expire(wall_time before) override;

  // ---- the cluster's leases (lease_keeper.hpp, on a connection of its own) ----

  /// One lease round of hub `hub` (process `instance`), one statement: records the hub as seen,
  /// renews every lease of `channels` it holds and takes every one whose deadline has passed
  /// (or that nobody held), each until the database's clock_timestamp() + `lease`. A lease
  /// changing hands (or taken again after it lapsed) gets the next epoch.
  /// @return the leases it holds now
  /// @throws pg::error
  std::vector<lease_grant> lease_round(std::string_view hub, std::int64_t instance,
                                       std::string_view http, wall_time started,
                                       const std::vector<std::string>& channels,
                                       std::chrono::milliseconds lease);
  /// Ends every lease of `hub`/`instance` now (a clean stop: the standby takes over at its next
  /// round instead of after the lease). @throws pg::error
  void release_leases(std::string_view hub, std::int64_t instance);

  /// The connection (tests).
  pg::connection& connection() noexcept { return m_c; }

 private:
  void create_or_migrate();
  pg::connection m_c;
};

/// SQLite's GLOB ('*', '?', '[...]', '[^...]', case-sensitive) as an anchored POSIX regular
/// expression for PostgreSQL's `~`, so that both engines match names alike.
std::string glob_to_regex(std::string_view glob);

}  // namespace mcdist::feed
