#include "feed/sqlite_journal.hpp"

#include <sqlite3.h>

#include <array>
#include <map>
#include <stdexcept>

namespace mcdist::feed {
namespace {

// Schema version 1. Times are INTEGER ns since the Unix epoch; states are their to_string()
// words, checked by the database so that a second writer cannot store another word.
constexpr std::string_view schema_v1 = R"sql(
CREATE TABLE channels(
  channel   TEXT PRIMARY KEY,
  last_seq  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE products(
  id            INTEGER PRIMARY KEY,
  channel       TEXT NOT NULL,
  name          TEXT NOT NULL,
  spool_path    TEXT NOT NULL,
  size          INTEGER NOT NULL,
  mtime_ns      INTEGER NOT NULL,
  sha256        TEXT NOT NULL DEFAULT '',
  state         TEXT NOT NULL CHECK(state IN ('queued','sending','sent','failed')),
  seq           INTEGER NOT NULL DEFAULT 0,
  queued_at     INTEGER NOT NULL,
  sent_at       INTEGER,
  retained_path TEXT,
  reason        TEXT NOT NULL DEFAULT '',
  UNIQUE(channel, spool_path, size, mtime_ns)
);
CREATE INDEX products_state ON products(state, channel, queued_at);
CREATE INDEX products_seq ON products(channel, seq);
CREATE TABLE sessions(
  id          INTEGER PRIMARY KEY,
  channel     TEXT NOT NULL,
  seq         INTEGER NOT NULL,
  session_id  TEXT NOT NULL,
  kind        TEXT NOT NULL CHECK(kind IN ('batch','catchup','resend')),
  started     INTEGER NOT NULL,
  ended       INTEGER,
  outcome     TEXT CHECK(outcome IN ('complete','partial','aborted'))
);
CREATE UNIQUE INDEX sessions_seq ON sessions(channel, seq) WHERE seq > 0;
CREATE INDEX sessions_started ON sessions(started);
CREATE TABLE session_products(
  session  INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  product  INTEGER NOT NULL REFERENCES products(id) ON DELETE CASCADE,
  PRIMARY KEY(session, product)
) WITHOUT ROWID;
CREATE INDEX session_products_product ON session_products(product);
CREATE TABLE outcomes(
  id       INTEGER PRIMARY KEY,
  product  INTEGER NOT NULL REFERENCES products(id) ON DELETE CASCADE,
  site     TEXT NOT NULL,
  outcome  TEXT NOT NULL CHECK(outcome IN ('stored','held','failed','missed')),
  reason   TEXT NOT NULL DEFAULT '',
  seq      INTEGER NOT NULL DEFAULT 0,
  at       INTEGER NOT NULL
);
CREATE INDEX outcomes_site ON outcomes(site, at);
CREATE INDEX outcomes_product_site ON outcomes(product, site);
CREATE INDEX outcomes_at ON outcomes(at);
CREATE TABLE sites(
  site       TEXT NOT NULL,
  channel    TEXT NOT NULL,
  last_seen  INTEGER NOT NULL,
  rtt_s      REAL NOT NULL DEFAULT 0,
  nak_ratio  REAL NOT NULL DEFAULT 0,
  last_seq   INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(site, channel)
) WITHOUT ROWID;
)sql";

// Schema version 4: the WIS2 notifications [[wis2_input]] took (feed/wis2_seen.hpp), one row
// per notification id, kept for the dedupe window. A pending row is a download not finished:
// it carries what the download needs, so a restart resumes it.
constexpr std::string_view wis2_schema_v4 = R"sql(
CREATE TABLE wis2_notifications(
  id               INTEGER PRIMARY KEY,
  notification_id  TEXT NOT NULL UNIQUE,
  data_id          TEXT NOT NULL,
  pubtime          INTEGER NOT NULL,
  input            TEXT NOT NULL,
  channel          TEXT NOT NULL,
  name             TEXT NOT NULL,
  href             TEXT NOT NULL,
  length           INTEGER,
  integrity_method TEXT NOT NULL DEFAULT '',
  integrity_value  TEXT NOT NULL DEFAULT '',
  state            TEXT NOT NULL CHECK(state IN ('pending','done','failed')),
  reason           TEXT NOT NULL DEFAULT '',
  attempts         INTEGER NOT NULL DEFAULT 0,
  received_at      INTEGER NOT NULL,
  done_at          INTEGER
);
CREATE INDEX wis2_notifications_data_id ON wis2_notifications(data_id, pubtime);
CREATE INDEX wis2_notifications_state ON wis2_notifications(state, received_at);
)sql";

// The column list every product query selects, in the order read_product() reads.
constexpr std::string_view product_columns =
    "p.id, p.channel, p.name, p.spool_path, p.size, p.mtime_ns, p.sha256, p.state, p.seq, "
    "p.queued_at, p.sent_at, p.retained_path";

product read_product(const sqlite::statement& st) {
  product p;
  p.id = st.column_int64(0);
  p.channel = st.column_text(1);
  p.name = st.column_text(2);
  p.spool_path = st.column_text(3);
  p.size = static_cast<std::uint64_t>(st.column_int64(4));
  p.mtime_ns = st.column_int64(5);
  p.sha256 = st.column_text(6);
  p.state = parse_product_state(st.column_text(7)).value_or(product_state::failed);
  p.seq = static_cast<std::uint64_t>(st.column_int64(8));
  p.queued_at = from_ns(st.column_int64(9));
  if (const auto t = st.column_opt_int64(10)) p.sent_at = from_ns(*t);
  p.retained_path = st.column_opt_text(11);
  return p;
}

class sqlite_tx final : public hub_journal::group {
 public:
  explicit sqlite_tx(sqlite::database& db) : m_tx(db) {}
  void commit() override { m_tx.commit(); }

 private:
  sqlite::transaction m_tx;
};

std::vector<product> read_products(sqlite::statement& st) {
  std::vector<product> out;
  while (st.step()) out.push_back(read_product(st));
  return out;
}

std::int64_t as_i64(std::uint64_t v) { return static_cast<std::int64_t>(v); }

}  // namespace

namespace {

/// Opens the database; read-only, falls back to an immutable open when SQLite cannot make the
/// WAL index (-shm) beside a WAL journal in a directory the reader may not write (mcdistctl run
/// by an operator while the daemon, which owns the directory, is down and has removed it).
sqlite::database open_journal(const std::filesystem::path& file, bool read_only) {
  if (!read_only) return sqlite::database(file.string(), sqlite::durability::full, 5000);
  try {
    return sqlite::database(file.string(), sqlite::durability::full, 5000, true);
  } catch (const sqlite::error& e) {
    const int primary = e.code() & 0xff;
    std::error_code ec;
    if ((primary != SQLITE_READONLY && primary != SQLITE_CANTOPEN) ||
        !std::filesystem::is_regular_file(file, ec))
      throw;
    return sqlite::database(file.string(), sqlite::durability::full, 5000, true, true);
  }
}

}  // namespace

sqlite_journal::sqlite_journal(const std::filesystem::path& file, bool read_only)
    : m_db(open_journal(file, read_only)) {
  if (read_only) {
    const int v = m_db.user_version();
    if (v == 0)
      throw std::runtime_error(file.string() + " is not an mcdist hub journal (no schema)");
    if (v > schema_version)
      throw std::runtime_error(file.string() + " has journal schema " + std::to_string(v) +
                               ", newer than this program's " + std::to_string(schema_version) +
                               ": upgrade mcdist");
    return;
  }
  create_or_migrate();
}

std::unique_ptr<hub_journal::group> sqlite_journal::begin_tx() {
  return std::make_unique<sqlite_tx>(m_db);
}

void sqlite_journal::create_or_migrate() {
  sqlite::transaction tx(m_db);
  const int v = m_db.user_version();
  if (v > schema_version)
    throw std::runtime_error(m_db.path() + " has journal schema " + std::to_string(v) +
                             ", newer than this program's " + std::to_string(schema_version) +
                             ": upgrade mcdist");
  if (v == 0) {
    auto st = m_db.prepare("SELECT count(*) FROM sqlite_schema");
    st.step();
    if (st.column_int64(0) != 0)
      throw std::runtime_error(m_db.path() +
                               " is an SQLite database but not an mcdist hub journal");
    m_db.exec(schema_v1);
  }
  // Each later version's step, in this same transaction.
  if (v < 2) {
    // superseded(): is there a newer version of a product's name on its channel.
    m_db.exec("CREATE INDEX IF NOT EXISTS products_name ON products(channel, name, id)");
  }
  if (v < 3) {
    // An interrupted batch is sent again under its own number (open_batches()): the aborted
    // row and its repetition share (channel, seq).
    m_db.exec(
        "DROP INDEX IF EXISTS sessions_seq; CREATE UNIQUE INDEX sessions_seq ON "
        "sessions(channel, seq) WHERE seq > 0 AND outcome IS NOT 'aborted'");
  }
  if (v < 4) m_db.exec(wis2_schema_v4);
  m_db.set_user_version(schema_version);
  tx.commit();
}

std::int64_t sqlite_journal::enqueue(const product& p) {
  sqlite::transaction tx(m_db);
  const auto queued_at =
      p.queued_at == wall_time{} ? std::chrono::system_clock::now() : p.queued_at;
  m_db.prepare(
          "INSERT INTO products(channel, name, spool_path, size, mtime_ns, sha256, state, "
          "queued_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7) "
          "ON CONFLICT(channel, spool_path, size, mtime_ns) DO NOTHING")
      .bind(1, p.channel)
      .bind(2, p.name)
      .bind(3, p.spool_path)
      .bind(4, as_i64(p.size))
      .bind(5, p.mtime_ns)
      .bind(6, p.sha256)
      .bind(7, to_ns(queued_at))
      .run();
  auto sel = m_db.prepare(
      "SELECT id FROM products WHERE channel = ?1 AND spool_path = ?2 AND size = ?3 AND "
      "mtime_ns = ?4");
  sel.bind(1, p.channel).bind(2, p.spool_path).bind(3, as_i64(p.size)).bind(4, p.mtime_ns);
  if (!sel.step()) throw std::logic_error("enqueue: product row vanished");
  const auto id = sel.column_int64(0);
  sel.reset();
  tx.commit();
  return id;
}

std::vector<product> sqlite_journal::queued(std::string_view channel) {
  auto st = m_db.prepare(std::string("SELECT ") + std::string(product_columns) +
                         " FROM products p WHERE p.state = 'queued' AND p.channel = ?1 "
                         "ORDER BY p.queued_at, p.id");
  st.bind(1, channel);
  return read_products(st);
}

std::uint64_t sqlite_journal::next_seq(std::string_view channel) {
  sqlite::transaction tx(m_db);
  m_db.prepare(
          "INSERT INTO channels(channel, last_seq) VALUES(?1, 1) "
          "ON CONFLICT(channel) DO UPDATE SET last_seq = last_seq + 1")
      .bind(1, channel)
      .run();
  auto st = m_db.prepare("SELECT last_seq FROM channels WHERE channel = ?1");
  st.bind(1, channel);
  st.step();
  const auto seq = static_cast<std::uint64_t>(st.column_int64(0));
  st.reset();
  tx.commit();
  return seq;
}

std::uint64_t sqlite_journal::last_seq(std::string_view channel) {
  auto st = m_db.prepare("SELECT last_seq FROM channels WHERE channel = ?1");
  st.bind(1, channel);
  if (!st.step()) return 0;
  return static_cast<std::uint64_t>(st.column_int64(0));
}

std::int64_t sqlite_journal::begin_session(const session_row& s,
                                           std::span<const std::int64_t> product_ids) {
  sqlite::transaction tx(m_db);
  const auto started = s.started == wall_time{} ? std::chrono::system_clock::now() : s.started;
  m_db.prepare(
          "INSERT INTO sessions(channel, seq, session_id, kind, started) "
          "VALUES(?1, ?2, ?3, ?4, ?5)")
      .bind(1, s.channel)
      .bind(2, as_i64(s.seq))
      .bind(3, s.session_id)
      .bind(4, to_string(s.kind))
      .bind(5, to_ns(started))
      .run();
  const auto sid = m_db.last_insert_rowid();
  auto link =
      m_db.prepare("INSERT OR IGNORE INTO session_products(session, product) VALUES(?1, ?2)");
  // A resend or catch-up of a product already sent leaves it 'sent'; only new products of a
  // batch (queued, or sending again after a crash) go to 'sending' and take the batch's seq.
  auto mark = m_db.prepare(
      "UPDATE products SET state = 'sending', seq = CASE WHEN ?2 > 0 THEN ?2 ELSE seq END "
      "WHERE id = ?1 AND state IN ('queued', 'sending')");
  const bool batch = s.kind == session_kind::batch;
  for (const auto id : product_ids) {
    link.bind(1, sid).bind(2, id).run();
    if (batch) mark.bind(1, id).bind(2, as_i64(s.seq)).run();
  }
  tx.commit();
  return sid;
}

void sqlite_journal::end_session(std::string_view channel, std::uint64_t seq,
                                 session_outcome result, wall_time ended) {
  auto st = m_db.prepare(
      "SELECT id FROM sessions WHERE channel = ?1 AND seq = ?2 AND seq > 0 AND "
      "outcome IS NOT 'aborted' ORDER BY id DESC LIMIT 1");
  st.bind(1, channel).bind(2, as_i64(seq));
  if (!st.step())
    throw std::invalid_argument("end_session: no session " + std::to_string(seq) + " on channel " +
                                std::string(channel));
  const auto id = st.column_int64(0);
  st.reset();
  end_session(id, result, ended);
}

void sqlite_journal::end_session(std::int64_t session_row_id, session_outcome result,
                                 wall_time ended) {
  sqlite::transaction tx(m_db);
  m_db.prepare("UPDATE sessions SET ended = ?2, outcome = ?3 WHERE id = ?1")
      .bind(1, session_row_id)
      .bind(2, to_ns(ended))
      .bind(3, to_string(result))
      .run();
  tx.commit();
}

void sqlite_journal::mark_sent(std::int64_t product_id, std::optional<std::string> retained_path,
                               wall_time at) {
  sqlite::transaction tx(m_db);
  m_db.prepare("UPDATE products SET state = 'sent', sent_at = ?2, retained_path = ?3 WHERE id = ?1")
      .bind(1, product_id)
      .bind(2, to_ns(at))
      .bind(3, retained_path)
      .run();
  tx.commit();
}

void sqlite_journal::mark_failed(std::int64_t product_id, std::string_view reason) {
  sqlite::transaction tx(m_db);
  m_db.prepare("UPDATE products SET state = 'failed', reason = ?2 WHERE id = ?1")
      .bind(1, product_id)
      .bind(2, reason)
      .run();
  tx.commit();
}

void sqlite_journal::requeue(std::int64_t product_id) {
  sqlite::transaction tx(m_db);
  m_db.prepare("UPDATE products SET state = 'queued' WHERE id = ?1 AND state = 'sending'")
      .bind(1, product_id)
      .run();
  tx.commit();
}

std::vector<product> sqlite_journal::unfinished() {
  auto st = m_db.prepare(std::string("SELECT ") + std::string(product_columns) +
                         " FROM products p WHERE p.state = 'sending' ORDER BY p.seq, p.id");
  return read_products(st);
}

std::vector<open_batch> sqlite_journal::open_batches(std::string_view channel) {
  std::vector<open_batch> out;
  auto st = m_db.prepare(
      "SELECT id, seq FROM sessions WHERE channel = ?1 AND ended IS NULL AND kind = 'batch' "
      "AND seq > 0 ORDER BY seq, id");
  st.bind(1, channel);
  while (st.step()) {
    out.push_back({st.column_int64(0), static_cast<std::uint64_t>(st.column_int64(1)), {}});
  }
  st.reset();
  for (auto& b : out) {
    auto ps = m_db.prepare(std::string("SELECT ") + std::string(product_columns) +
                           " FROM session_products sp JOIN products p ON p.id = sp.product "
                           "WHERE sp.session = ?1 AND p.state = 'sending' ORDER BY p.id");
    ps.bind(1, b.row);
    b.products = read_products(ps);
  }
  return out;
}

std::int64_t sqlite_journal::close_interrupted_sessions(wall_time now, std::string_view channel) {
  sqlite::transaction tx(m_db);
  auto st = m_db.prepare(
      "UPDATE sessions SET ended = ?1, outcome = 'aborted' WHERE ended IS NULL AND "
      "(coalesce(?2, '') = '' OR channel = ?2)");
  st.bind(1, to_ns(now)).bind(2, channel).run();
  const auto n = m_db.changes();
  tx.commit();
  return n;
}

std::optional<product> sqlite_journal::get(std::int64_t product_id) {
  auto st = m_db.prepare(std::string("SELECT ") + std::string(product_columns) +
                         " FROM products p WHERE p.id = ?1");
  st.bind(1, product_id);
  if (!st.step()) return std::nullopt;
  auto p = read_product(st);
  st.reset();
  return p;
}

void sqlite_journal::record_outcome(std::int64_t product_id, std::string_view site, outcome o,
                                    std::string_view reason, std::uint64_t seq, wall_time at) {
  sqlite::transaction tx(m_db);
  m_db.prepare(
          "INSERT INTO outcomes(product, site, outcome, reason, seq, at) "
          "VALUES(?1, ?2, ?3, ?4, ?5, ?6)")
      .bind(1, product_id)
      .bind(2, site)
      .bind(3, to_string(o))
      .bind(4, reason)
      .bind(5, as_i64(seq))
      .bind(6, to_ns(at))
      .run();
  tx.commit();
}

void sqlite_journal::site_seen(const site_row& s) {
  sqlite::transaction tx(m_db);
  m_db.prepare(
          "INSERT INTO sites(site, channel, last_seen, rtt_s, nak_ratio, last_seq) "
          "VALUES(?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(site, channel) DO UPDATE SET "
          "last_seen = excluded.last_seen, rtt_s = excluded.rtt_s, "
          "nak_ratio = excluded.nak_ratio, last_seq = excluded.last_seq")
      .bind(1, s.site)
      .bind(2, s.channel)
      .bind(3, to_ns(s.last_seen))
      .bind(4, s.rtt_s)
      .bind(5, s.nak_ratio)
      .bind(6, as_i64(s.last_seq))
      .run();
  tx.commit();
}

bool sqlite_journal::superseded(const product& p) {
  auto st = m_db.prepare(
      "SELECT 1 FROM products WHERE channel = ?1 AND name = ?2 AND id > ?3 AND state IN "
      "('sent', 'sending') LIMIT 1");
  st.bind(1, p.channel).bind(2, p.name).bind(3, p.id);
  return st.step();
}

bool sqlite_journal::batch_session_ended(std::string_view channel, std::uint64_t seq) {
  auto st = m_db.prepare(
      "SELECT 1 FROM sessions WHERE channel = ?1 AND seq = ?2 AND kind = 'batch' AND ended IS "
      "NOT NULL");
  st.bind(1, channel).bind(2, as_i64(seq));
  return st.step();
}

std::optional<product> sqlite_journal::newest_retained(std::string_view channel,
                                                       std::string_view name) {
  auto st = m_db.prepare(std::string("SELECT ") + std::string(product_columns) +
                         " FROM products p WHERE p.channel = ?1 AND p.name = ?2 AND p.state = "
                         "'sent' AND p.retained_path IS NOT NULL ORDER BY p.id DESC LIMIT 1");
  st.bind(1, channel).bind(2, name);
  auto v = read_products(st);
  if (v.empty()) return std::nullopt;
  return std::move(v.front());
}

std::vector<product> sqlite_journal::find_products(const product_filter& f) {
  auto st =
      m_db.prepare(std::string("SELECT ") + std::string(product_columns) +
                   " FROM products p WHERE p.state = 'sent' AND p.retained_path IS NOT NULL "
                   "AND (?1 IS NULL OR p.channel = ?1) AND (?2 IS NULL OR p.sent_at >= ?2) "
                   "AND (?3 IS NULL OR p.name GLOB ?3) AND (?4 IS NULL OR p.seq BETWEEN ?4 AND ?5) "
                   "ORDER BY p.seq, p.id");
  st.bind(1, f.channel);
  if (f.since) st.bind(2, to_ns(*f.since));
  st.bind(3, f.glob);
  if (f.seqs) st.bind(4, as_i64(f.seqs->first)).bind(5, as_i64(f.seqs->second));
  return read_products(st);
}

std::vector<history_row> sqlite_journal::history(std::string_view site, wall_time since,
                                                 std::optional<std::string_view> glob,
                                                 std::optional<std::string_view> channel,
                                                 std::size_t limit) {
  auto st = m_db.prepare(
      "SELECT o.product, p.channel, p.name, p.size, o.seq, o.site, o.outcome, o.reason, o.at "
      "FROM outcomes o JOIN products p ON p.id = o.product "
      "WHERE o.site = ?1 AND o.at >= ?2 AND (?3 IS NULL OR p.name GLOB ?3) "
      "AND (?4 IS NULL OR p.channel = ?4) ORDER BY o.at DESC, o.id DESC LIMIT ?5");
  st.bind(1, site).bind(2, to_ns(since));
  if (glob) st.bind(3, *glob);
  if (channel) st.bind(4, *channel);
  st.bind(5, limit == 0 ? std::int64_t{-1} : static_cast<std::int64_t>(limit));
  std::vector<history_row> out;
  while (st.step()) {
    history_row r;
    r.product_id = st.column_int64(0);
    r.channel = st.column_text(1);
    r.name = st.column_text(2);
    r.size = static_cast<std::uint64_t>(st.column_int64(3));
    r.seq = static_cast<std::uint64_t>(st.column_int64(4));
    r.site = st.column_text(5);
    r.result = parse_outcome(st.column_text(6)).value_or(outcome::failed);
    r.reason = st.column_text(7);
    r.at = from_ns(st.column_int64(8));
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<missing_row> sqlite_journal::missing(std::string_view site, wall_time since) {
  // The products of ended sessions of the window on the site's channels, less those the site
  // stored or held (at any time: a copy it got in an earlier session is not missing). The
  // site's last outcome of a product is its latest row (MAX(id), found in the (product, site)
  // index; ORDER BY at ... LIMIT 1 let the planner walk outcomes_at instead: 425 s on 1 M
  // outcomes, against 0.3 s).
  auto st = m_db.prepare(R"sql(
    WITH carried AS (
      SELECT sp.product AS pid, MAX(s.started) AS last_started
      FROM sessions s JOIN session_products sp ON sp.session = s.id
      WHERE s.started >= ?2 AND s.ended IS NOT NULL
        AND s.channel IN (SELECT channel FROM sites WHERE site = ?1)
      GROUP BY sp.product),
    miss AS (
      SELECT c.pid, c.last_started,
             (SELECT MAX(o.id) FROM outcomes o WHERE o.product = c.pid AND o.site = ?1) AS last
      FROM carried c
      WHERE NOT EXISTS (SELECT 1 FROM outcomes o WHERE o.product = c.pid AND o.site = ?1
                        AND o.outcome IN ('stored', 'held')))
    SELECT p.id, p.channel, p.name, p.size, p.seq, m.last_started, lo.outcome, lo.reason,
           p.retained_path IS NOT NULL AND p.state = 'sent'
    FROM miss m JOIN products p ON p.id = m.pid LEFT JOIN outcomes lo ON lo.id = m.last
    ORDER BY p.channel, p.seq, p.id)sql");
  st.bind(1, site).bind(2, to_ns(since));
  std::vector<missing_row> out;
  while (st.step()) {
    missing_row r;
    r.product_id = st.column_int64(0);
    r.channel = st.column_text(1);
    r.name = st.column_text(2);
    r.size = static_cast<std::uint64_t>(st.column_int64(3));
    r.seq = static_cast<std::uint64_t>(st.column_int64(4));
    r.sent_at = from_ns(st.column_int64(5));
    if (const auto o = st.column_opt_text(6)) r.last = parse_outcome(*o);
    r.reason = st.column_text(7);
    r.retained = st.column_int64(8) != 0;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<site_row> sqlite_journal::sites() {
  auto st = m_db.prepare(
      "SELECT site, channel, last_seen, rtt_s, nak_ratio, last_seq FROM sites "
      "ORDER BY site, channel");
  std::vector<site_row> out;
  while (st.step()) {
    site_row r;
    r.site = st.column_text(0);
    r.channel = st.column_text(1);
    r.last_seen = from_ns(st.column_int64(2));
    r.rtt_s = st.column_double(3);
    r.nak_ratio = st.column_double(4);
    r.last_seq = static_cast<std::uint64_t>(st.column_int64(5));
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<channel_row> sqlite_journal::channels() {
  std::map<std::string, channel_row, std::less<>> rows;
  auto row = [&](std::string name) -> channel_row& {
    auto& r = rows[name];
    r.channel = std::move(name);
    return r;
  };
  auto seqs = m_db.prepare("SELECT channel, last_seq FROM channels");
  while (seqs.step())
    row(seqs.column_text(0)).last_seq = static_cast<std::uint64_t>(seqs.column_int64(1));
  auto counts =
      m_db.prepare("SELECT channel, state, count(*) FROM products GROUP BY channel, state");
  while (counts.step()) {
    auto& r = row(counts.column_text(0));
    const auto n = counts.column_int64(2);
    switch (parse_product_state(counts.column_text(1)).value_or(product_state::failed)) {
      case product_state::queued: r.queued = n; break;
      case product_state::sending: r.sending = n; break;
      case product_state::sent: r.sent = n; break;
      case product_state::failed: r.failed = n; break;
    }
  }
  auto last = m_db.prepare("SELECT channel, MAX(started) FROM sessions GROUP BY channel");
  while (last.step()) row(last.column_text(0)).last_session = from_ns(last.column_int64(1));
  std::vector<channel_row> out;
  for (auto& [name, r] : rows) out.push_back(std::move(r));
  return out;
}

std::vector<session_info> sqlite_journal::sessions(wall_time since, std::size_t limit) {
  auto st = m_db.prepare(
      "SELECT s.id, s.channel, s.seq, s.session_id, s.kind, s.started, s.ended, s.outcome, "
      "(SELECT count(*) FROM session_products sp WHERE sp.session = s.id) "
      "FROM sessions s WHERE s.started >= ?1 ORDER BY s.started DESC, s.id DESC LIMIT ?2");
  st.bind(1, to_ns(since));
  st.bind(2, limit == 0 ? std::int64_t{-1} : static_cast<std::int64_t>(limit));
  std::vector<session_info> out;
  while (st.step()) {
    session_info s;
    s.id = st.column_int64(0);
    s.row.channel = st.column_text(1);
    s.row.seq = static_cast<std::uint64_t>(st.column_int64(2));
    s.row.session_id = st.column_text(3);
    s.row.kind = parse_session_kind(st.column_text(4)).value_or(session_kind::batch);
    s.row.started = from_ns(st.column_int64(5));
    if (const auto e = st.column_opt_int64(6)) s.ended = from_ns(*e);
    if (const auto o = st.column_opt_text(7)) s.result = parse_session_outcome(*o);
    s.products = st.column_int64(8);
    out.push_back(std::move(s));
  }
  return out;
}

expire_result sqlite_journal::expire(wall_time before) {
  const auto t = to_ns(before);
  expire_result r;
  sqlite::transaction tx(m_db);
  m_db.prepare("DELETE FROM outcomes WHERE at < ?1").bind(1, t).run();
  r.outcomes = m_db.changes();
  m_db.prepare("DELETE FROM sessions WHERE started < ?1 AND ended IS NOT NULL").bind(1, t).run();
  r.sessions = m_db.changes();
  m_db.prepare("DELETE FROM sites WHERE last_seen < ?1").bind(1, t).run();
  r.sites = m_db.changes();
  constexpr std::string_view doomed =
      " FROM products p WHERE p.state IN ('sent', 'failed') "
      "AND COALESCE(p.sent_at, p.queued_at) < ?1 "
      "AND NOT EXISTS (SELECT 1 FROM session_products sp WHERE sp.product = p.id)";
  auto paths = m_db.prepare(std::string("SELECT p.retained_path") + std::string(doomed) +
                            " AND p.retained_path IS NOT NULL");
  paths.bind(1, t);
  while (paths.step()) r.retained_paths.push_back(paths.column_text(0));
  paths.reset();
  m_db.prepare(std::string("DELETE FROM products WHERE id IN (SELECT p.id") + std::string(doomed) +
               ")")
      .bind(1, t)
      .run();
  r.products = m_db.changes();
  tx.commit();
  return r;
}

}  // namespace mcdist::feed
