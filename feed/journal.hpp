#pragma once
/// @file
/// The hub's delivery journal: one interface (hub_journal) over two engines with the same
/// schema and queries, SQLite for a single hub (feed/sqlite_journal.hpp, one file in WAL mode,
/// the embedded default) and PostgreSQL for redundant hubs that share it (feed/pg_journal.hpp,
/// libpq). It holds
///   - the outbox: every product picked up from a spool, with its state
///       queued -> sending -> sent | failed
///     so that a crash or restart of mcdist-feed loses no product (`unfinished()` lists the
///     products a crash caught mid-batch) and sends nothing twice (`enqueue` is idempotent);
///   - the sessions: per channel its sequence numbers (`next_seq`, persisted), each session's
///     kind (batch | catchup | resend), start, end and outcome, and the products it carried;
///   - the outcomes: product x site, stored | held | failed | missed, with a reason;
///   - the sites: per (site, channel) when it was last seen, its RTT, NAK ratio and the highest
///     sequence number it reports complete.
/// It answers mcdistctl's queries (`history`, `missing`, `sites`, `channels`) and is bounded by
/// `expire()` (the retention window of the daemon's configuration).
///
/// Times are std::chrono::system_clock time points, stored as integer nanoseconds since the Unix
/// epoch (UTC). Every writing function is one transaction: an interrupted call (crash,
/// exception, a lost connection) leaves the journal as it was before the call. begin_tx() groups
/// several calls into one commit.
///
/// Nothing here is thread-safe: one object (one connection) per thread; the daemon uses its own
/// from its io_context thread only. Errors throw std::runtime_error or a subclass:
/// sqlite::error (disk full, I/O error, a locked file after the busy timeout), pg::error (the
/// server refused, the connection was lost or a call outlived pg::call_timeout), and plain
/// std::runtime_error for a journal of a newer schema version than this program.

#include "common/time.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mcdist::feed {

/// Where a product is in the outbox.
enum class product_state {
  queued,   ///< picked up from the spool, waiting for a batch
  sending,  ///< part of a session that has not ended (after a crash: an unfinished batch)
  sent,     ///< its session ended; post-send disposition done (retained_path if kept)
  failed,   ///< could not be sent (unreadable, vanished from the spool); not retried
};

/// Why a session was sent.
enum class session_kind {
  batch,    ///< a channel's batch of new products; carries the channel's next sequence number
  catchup,  ///< products of earlier sequence numbers for sites that report gaps; seq 0
  resend,   ///< an operator's `mcdistctl resend`; seq 0
};

/// How a session ended.
enum class session_outcome {
  complete,  ///< every registered site stored or held every product
  partial,   ///< some site failed or did not register; see the outcomes
  aborted,   ///< the session did not run to its end (shutdown, send error)
};

/// What a site did with a product.
enum class outcome {
  stored,  ///< received, verified and delivered by the site
  held,    ///< the site already held an identical copy (no transfer needed)
  failed,  ///< the site could not complete it (reason says why)
  missed,  ///< the site was not in the session (down, late registration, reported seq gap)
};

std::string_view to_string(product_state s) noexcept;
std::string_view to_string(session_kind k) noexcept;
std::string_view to_string(session_outcome o) noexcept;
std::string_view to_string(outcome o) noexcept;
/// Inverses of to_string; std::nullopt for an unknown word.
std::optional<product_state> parse_product_state(std::string_view s) noexcept;
std::optional<session_kind> parse_session_kind(std::string_view s) noexcept;
std::optional<session_outcome> parse_session_outcome(std::string_view s) noexcept;
std::optional<outcome> parse_outcome(std::string_view s) noexcept;

/// One product of the outbox.
struct product {
  std::int64_t id = 0;        ///< journal row id (0 before enqueue)
  std::string channel;        ///< channel name of the daemon's configuration
  std::string name;           ///< path inside the set, as receivers store it ("a/b.grib2")
  std::string spool_path;     ///< absolute path of the file in the spool when picked up
  std::uint64_t size = 0;     ///< bytes
  std::int64_t mtime_ns = 0;  ///< modification time of the spool file, ns since the epoch
  std::string sha256;         ///< lower-case hex, may be empty (not yet hashed)
  product_state state = product_state::queued;
  std::uint64_t seq = 0;  ///< sequence number of the batch that first sent it, 0 = none yet
  wall_time queued_at{};  ///< when enqueued; enqueue() sets now() when left at the epoch
  std::optional<wall_time> sent_at;          ///< when mark_sent() ran
  std::optional<std::string> retained_path;  ///< where the sent file is kept for catch-up
};

/// One session as begin_session() records it.
struct session_row {
  std::string channel;
  std::uint64_t seq = 0;   ///< the channel's sequence number; 0 for catchup and resend
  std::string session_id;  ///< the session id's text form (common/ids.hpp; 32 random bits,
                           ///< so not unique over months: rows are keyed by their own id)
  session_kind kind = session_kind::batch;
  wall_time started{};  ///< begin_session() sets now() when left at the epoch
};

/// A session read back, with its end.
struct session_info {
  std::int64_t id = 0;  ///< journal row id
  session_row row;
  std::optional<wall_time> ended;
  std::optional<session_outcome> result;
  std::int64_t products = 0;  ///< number of products it carried
};

/// What a site last reported on a channel (from its REGISTER and the session's statistics).
struct site_row {
  std::string site;  ///< site name (its key's name in signed sessions, else its address)
  std::string channel;
  wall_time last_seen{};
  double rtt_s = 0;            ///< round-trip time, seconds
  double nak_ratio = 0;        ///< NAKed blocks / blocks sent to it in its last session, 0..1
  std::uint64_t last_seq = 0;  ///< highest seq the site completed on the channel, 0 = none
};

/// One product x site outcome with its product, for `mcdistctl history`.
struct history_row {
  std::int64_t product_id = 0;
  std::string channel;
  std::string name;
  std::uint64_t size = 0;
  std::uint64_t seq = 0;  ///< the seq of the session the outcome came from (0: catchup/resend)
  std::string site;
  outcome result = outcome::stored;
  std::string reason;
  wall_time at{};
};

/// A product a site has not stored or held, for `mcdistctl missing`.
struct missing_row {
  std::int64_t product_id = 0;
  std::string channel;
  std::string name;
  std::uint64_t size = 0;
  std::uint64_t seq = 0;        ///< product's batch seq
  wall_time sent_at{};          ///< start of the latest session that carried it
  std::optional<outcome> last;  ///< the site's last outcome for it (failed, missed), or none
  std::string reason;
  bool retained = false;  ///< still kept at the hub: a resend can serve it
};

/// Per channel counts, for `mcdistctl status` without the daemon.
struct channel_row {
  std::string channel;
  std::uint64_t last_seq = 0;  ///< last allocated sequence number, 0 = none
  std::int64_t queued = 0, sending = 0, sent = 0, failed = 0;
  std::optional<wall_time> last_session;  ///< start of the latest session
};

/// Selects products for a resend (all given conditions must hold; only retained products).
struct product_filter {
  std::optional<std::string> channel;
  std::optional<wall_time> since;   ///< sent at or after
  std::optional<std::string> glob;  ///< SQLite GLOB on the product name ('*', '?', '[...]')
  std::optional<std::pair<std::uint64_t, std::uint64_t>> seqs;  ///< inclusive batch seq range
};

/// What expire() removed.
struct expire_result {
  std::int64_t products = 0, sessions = 0, outcomes = 0, sites = 0;
  /// retained copies of the removed products: the caller deletes these files
  std::vector<std::string> retained_paths;
};

/// An interrupted batch session: its journal row, number and the products it was sending.
struct open_batch {
  std::int64_t row = 0;
  std::uint64_t seq = 0;
  std::vector<product> products;  ///< its products still 'sending', by id
};

/// One hub of a cluster as the shared journal sees it (PostgreSQL only; pg_journal.hpp).
struct hub_row {
  std::string hub;                  ///< the hub's name (`[cluster] hub`)
  std::string http;                 ///< its status port, "" when off
  wall_time seen{};                 ///< its last lease round, on the database's clock
  wall_time started{};              ///< when it started
  double age_s = 0;                 ///< seconds since `seen`, on the database's clock
  std::vector<std::string> active;  ///< the channels whose lease it holds (unexpired)
};

/// One channel's lease as the shared journal holds it.
struct lease_row {
  std::string channel;
  std::string holder;       ///< the hub that holds (or last held) it
  std::uint64_t epoch = 0;  ///< how many times it changed hands (a fencing token)
  wall_time acquired{};     ///< when the holder took it
  double expires_in_s = 0;  ///< seconds to its deadline on the database's clock (< 0: lapsed)
};

/// The cluster as the journal sees it (empty for a single hub's SQLite journal).
struct cluster_view {
  std::vector<hub_row> hubs;
  std::vector<lease_row> leases;
};

/// The hub's journal: one connection to one engine.
class hub_journal {
 public:
  /// Schema version (SQLite: PRAGMA user_version; PostgreSQL: table schema_version); older
  /// journals are migrated on open, step by step in one transaction.
  /// 2: the index products_name (superseded()).
  /// 3: sessions_seq unique among sessions not aborted, so that an interrupted batch is sent
  ///    again under its own number (open_batches()); PostgreSQL: the cluster's hubs and leases.
  /// 4: the table wis2_notifications (feed/wis2_seen.hpp; SQLite journals only: WIS2 input
  ///    runs on a single hub).
  static constexpr int schema_version = 4;

  /// A group of calls committed together (one fsync, one round trip for the commit); rolled back
  /// when destroyed uncommitted. Calls made while one is open join it.
  class group {
   public:
    virtual ~group() = default;
    /// @throws as the engine's calls
    virtual void commit() = 0;
  };

  virtual ~hub_journal() = default;

  /// Starts a group of calls (see group). @throws as the engine's calls
  virtual std::unique_ptr<group> begin_tx() = 0;

  /// "sqlite" or "postgresql".
  virtual std::string_view engine() const noexcept = 0;

  // ---- outbox ----

  /// Adds a product to the outbox, state queued. Idempotent on (channel, spool_path, size,
  /// mtime_ns): the same spool file seen twice (start-up scan and inotify, or two hubs watching
  /// one shared spool) returns the existing id and changes nothing.
  /// @return the product id
  virtual std::int64_t enqueue(const product& p) = 0;

  /// The queued products of a channel, oldest first (queued_at, then id).
  virtual std::vector<product> queued(std::string_view channel) = 0;

  /// Allocates the channel's next session sequence number (1, 2, ...) and persists it, so that
  /// numbers survive a restart and are never reused.
  virtual std::uint64_t next_seq(std::string_view channel) = 0;
  /// The channel's newest sequence number allocated (0: none yet), read only.
  virtual std::uint64_t last_seq(std::string_view channel) = 0;

  /// Records a session and the products it carries, and marks them 'sending'. For a batch
  /// session (kind batch, seq > 0) the products' seq becomes the session's.
  /// @return the session's journal row id
  virtual std::int64_t begin_session(const session_row& s,
                                     std::span<const std::int64_t> product_ids) = 0;

  /// Ends the batch session (channel, seq) (seq > 0) that is not aborted.
  /// @throws std::invalid_argument if unknown
  virtual void end_session(std::string_view channel, std::uint64_t seq, session_outcome result,
                           wall_time ended = std::chrono::system_clock::now()) = 0;
  /// Ends any session (catchup and resend ones have seq 0) by its journal row id.
  virtual void end_session(std::int64_t session_row_id, session_outcome result,
                           wall_time ended = std::chrono::system_clock::now()) = 0;

  /// The product was sent and disposed of: state sent, sent_at, and where its copy is kept for
  /// catch-up (std::nullopt: not kept, e.g. `delete` disposition without retention).
  virtual void mark_sent(std::int64_t product_id, std::optional<std::string> retained_path,
                         wall_time at = std::chrono::system_clock::now()) = 0;

  /// The product cannot be sent (reason for the log and history): state failed.
  virtual void mark_failed(std::int64_t product_id, std::string_view reason) = 0;

  /// Puts a product back in the queue (after a crash caught it 'sending').
  virtual void requeue(std::int64_t product_id) = 0;

  /// Products in state 'sending': at start-up, those a crash caught mid-batch.
  virtual std::vector<product> unfinished() = 0;

  /// The channel's batch sessions that have no end (a crash, or the hub that sent them lost
  /// its lease), oldest first, each with its products still 'sending'. The hub that takes the
  /// channel over ends them as aborted and sends their products again under the same numbers,
  /// so sites see no gap and hold what they completed.
  virtual std::vector<open_batch> open_batches(std::string_view channel) = 0;

  /// Ends every session that has no end yet as aborted (at start-up, after a crash), of one
  /// channel or (empty) of every channel.
  /// @return how many
  virtual std::int64_t close_interrupted_sessions(wall_time now = std::chrono::system_clock::now(),
                                                  std::string_view channel = {}) = 0;

  /// One product by id, or std::nullopt.
  virtual std::optional<product> get(std::int64_t product_id) = 0;

  // ---- outcomes and sites ----

  /// Records what a site did with a product in the session of sequence number `seq` (0 for
  /// catchup/resend). All are kept for history(); missing() shows the last recorded one of
  /// (product, site) (insertion order) and skips products with any stored or held outcome.
  virtual void record_outcome(std::int64_t product_id, std::string_view site, outcome o,
                              std::string_view reason, std::uint64_t seq,
                              wall_time at = std::chrono::system_clock::now()) = 0;

  /// Inserts or updates the (site, channel) row.
  virtual void site_seen(const site_row& s) = 0;

  // ---- catch-up and resend ----

  /// True when a newer version of `p` (the same channel and name, a later id) was sent or is
  /// being sent: a catch-up leaves `p` out, so a site never gets an older version after a
  /// newer one.
  virtual bool superseded(const product& p) = 0;

  /// Products whose batch seq is in [from, to] on a channel and that are still retained,
  /// ordered by seq then id.
  std::vector<product> products_of_seqs(std::string_view channel, std::uint64_t from,
                                        std::uint64_t to);

  /// True when the batch session `seq` (> 0) of `channel` is journaled and has ended: its
  /// products' states are final (the product server's catch-up index answers only for those).
  virtual bool batch_session_ended(std::string_view channel, std::uint64_t seq) = 0;

  /// The newest retained, sent version of `name` on `channel` (highest id), or std::nullopt.
  virtual std::optional<product> newest_retained(std::string_view channel,
                                                 std::string_view name) = 0;

  /// Retained, sent products matching every condition of the filter, ordered by seq then id.
  virtual std::vector<product> find_products(const product_filter& f) = 0;

  // ---- queries for mcdistctl ----

  /// The site's outcomes at or after `since`, newest first, optionally only products whose name
  /// matches `glob` (SQLite GLOB syntax on both engines) and of one channel.
  /// @param limit  at most this many rows (0 = no limit)
  virtual std::vector<history_row> history(std::string_view site, wall_time since,
                                           std::optional<std::string_view> glob = std::nullopt,
                                           std::optional<std::string_view> channel = std::nullopt,
                                           std::size_t limit = 0) = 0;

  /// Products carried by ended sessions that started at or after `since` on the channels the
  /// site is known on (its site rows), for which the site has no stored or held outcome.
  /// A site new on a channel sees every product of the window as missing (it never got them).
  /// Ordered by channel, seq, id.
  virtual std::vector<missing_row> missing(std::string_view site, wall_time since) = 0;

  /// Every (site, channel) row, ordered by site then channel.
  virtual std::vector<site_row> sites() = 0;

  /// Per channel outbox counts and sequence numbers, ordered by channel.
  virtual std::vector<channel_row> channels() = 0;

  /// Sessions that started at or after `since`, newest first (at most `limit`, 0 = all).
  virtual std::vector<session_info> sessions(wall_time since, std::size_t limit = 0) = 0;

  /// The hubs and leases of a cluster (an SQLite journal has none).
  virtual cluster_view cluster() { return {}; }

  /// Inside a tx: throws unless `hub` holds channel `channel`'s lease of epoch `epoch` and its
  /// deadline has not passed on the database's clock (a fencing token, Kleppmann's "How to do
  /// distributed locking", 2016): a hub that lost its lease while a write was on its way cannot
  /// start a session or end one in the name of the channel's new holder. An SQLite journal
  /// (one hub) has nothing to check.
  virtual void check_lease(std::string_view channel, std::string_view hub, std::uint64_t epoch) {
    (void)channel, (void)hub, (void)epoch;
  }

  // ---- retention ----

  /// Removes what is older than `before`: outcomes recorded before it, sessions started before
  /// it (ended ones), sites not seen since, and sent or failed products whose sent_at (failed:
  /// queued_at) is before it and that no remaining session carries. Queued and sending products
  /// and open sessions are never removed.
  /// @return counts, and the retained files of removed products (for the caller to delete)
  virtual expire_result expire(wall_time before) = 0;
};

/// True when `spec` names a PostgreSQL database (a "postgresql://" or "postgres://" URI, the
/// forms libpq documents), not an SQLite file.
bool is_postgresql(std::string_view spec) noexcept;

/// Opens the journal `spec` names: a PostgreSQL URI (pg_journal) or an SQLite file
/// (sqlite_journal), creating or migrating its schema unless `read_only`.
/// @throws as the engine's constructor
std::unique_ptr<hub_journal> open_hub_journal(const std::string& spec, bool read_only = false);

/// `spec` for a log line: a URI without its password.
std::string describe_journal(std::string_view spec);

/// Nanoseconds since the Unix epoch, as the journal stores times.
std::int64_t to_ns(wall_time t) noexcept;
wall_time from_ns(std::int64_t ns) noexcept;

}  // namespace mcdist::feed
