#include "receiver/io/delivery_journal.hpp"

namespace mcdist::receiver {

namespace {

constexpr int schema_version = 2;

constexpr const char* schema = R"sql(
CREATE TABLE IF NOT EXISTS intents(
  id INTEGER PRIMARY KEY,
  channel TEXT NOT NULL,
  dest TEXT NOT NULL,
  relpath TEXT NOT NULL,
  size INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  session TEXT NOT NULL,
  created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS intents_path ON intents(dest, relpath);
CREATE TABLE IF NOT EXISTS deliveries(
  id INTEGER PRIMARY KEY,
  channel TEXT NOT NULL,
  dest TEXT NOT NULL,
  relpath TEXT NOT NULL,
  path TEXT NOT NULL,
  size INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  session TEXT NOT NULL,
  sender_key TEXT,
  delivered_at REAL NOT NULL,
  removed_at REAL,
  removed_reason TEXT);
CREATE INDEX IF NOT EXISTS deliveries_age ON deliveries(channel, delivered_at);
CREATE TABLE IF NOT EXISTS action_runs(
  id INTEGER PRIMARY KEY,
  delivery_id INTEGER NOT NULL REFERENCES deliveries(id) ON DELETE CASCADE,
  action TEXT NOT NULL,
  state TEXT NOT NULL CHECK(state IN ('pending','running','done','failed')),
  attempt INTEGER NOT NULL DEFAULT 0,
  started_at REAL,
  ended_at REAL,
  exit_status INTEGER,
  error TEXT);
CREATE INDEX IF NOT EXISTS action_runs_delivery ON action_runs(delivery_id);
CREATE INDEX IF NOT EXISTS action_runs_state ON action_runs(state);
CREATE TABLE IF NOT EXISTS journal_state(
  id INTEGER PRIMARY KEY CHECK(id = 1),
  confirmed_through INTEGER NOT NULL);
INSERT OR IGNORE INTO journal_state(id, confirmed_through)
  SELECT 1, IFNULL(MAX(id), 0) FROM deliveries;
)sql";

std::chrono::system_clock::time_point from_journal_time(double s) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::duration<double>(s)));
}

/// Columns 0..10 of `SELECT id, channel, dest, relpath, path, size, mtime_ns, sha256, session,
/// sender_key, delivered_at` starting at `c`.
delivery_row read_delivery(const sqlite::statement& st, int c) {
  delivery_row d;
  d.id = st.column_int64(c);
  d.channel = st.column_text(c + 1);
  d.dest = st.column_text(c + 2);
  d.relpath = st.column_text(c + 3);
  d.path = st.column_text(c + 4);
  d.size = static_cast<std::uint64_t>(st.column_int64(c + 5));
  d.mtime_ns = st.column_int64(c + 6);
  d.sha256 = st.column_text(c + 7);
  d.session = st.column_text(c + 8);
  d.sender_key = st.column_text(c + 9);
  d.delivered_at = from_journal_time(st.column_double(c + 10));
  return d;
}

constexpr const char* delivery_columns =
    "d.id, d.channel, d.dest, d.relpath, d.path, d.size, d.mtime_ns, d.sha256, d.session, "
    "d.sender_key, d.delivered_at";

}  // namespace

double journal_time(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

delivery_journal::delivery_journal(const std::filesystem::path& file, sqlite::durability sync)
    : m_file(file), m_sync(sync), m_db(file.string(), sqlite::durability::normal) {
  sqlite::transaction tx(m_db);
  m_db.exec(schema);
  if (m_db.user_version() < schema_version) m_db.set_user_version(schema_version);
  tx.commit();
}

std::vector<delivery_intent> delivery_journal::intents() {
  std::lock_guard lock(m_mutex);
  auto st = m_db.prepare(
      "SELECT id, channel, dest, relpath, size, mtime_ns, sha256, session FROM intents ORDER BY "
      "id");
  std::vector<delivery_intent> out;
  while (st.step()) {
    delivery_intent i;
    i.id = st.column_int64(0);
    i.channel = st.column_text(1);
    i.dest = st.column_text(2);
    i.relpath = st.column_text(3);
    i.size = static_cast<std::uint64_t>(st.column_int64(4));
    i.mtime_ns = st.column_int64(5);
    i.sha256 = st.column_text(6);
    i.session = st.column_text(7);
    out.push_back(std::move(i));
  }
  return out;
}

void delivery_journal::drop_intent(std::int64_t id) {
  std::lock_guard lock(m_mutex);
  m_db.cached("DELETE FROM intents WHERE id = ?1").bind(1, id).run();
}

namespace {

/// The statements of deliver(), compiled once per connection.
struct deliver_statements {
  sqlite::statement& drop_intent;
  sqlite::statement& insert_delivery;
  sqlite::statement& insert_run;
  explicit deliver_statements(sqlite::database& db)
      : drop_intent(
            db.cached("DELETE FROM intents WHERE dest = ?1 AND relpath = ?2 AND sha256 = ?3")),
        insert_delivery(db.cached(
            "INSERT INTO deliveries(channel, dest, relpath, path, size, mtime_ns, sha256, "
            "session, sender_key, delivered_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)")),
        insert_run(db.cached(
            "INSERT INTO action_runs(delivery_id, action, state) VALUES(?1, ?2, 'pending')")) {}
};

std::int64_t deliver_one(sqlite::database& db, deliver_statements& st, const delivery_row& d,
                         std::span<const std::string> actions, std::vector<std::int64_t>& run_ids,
                         bool drop_intent = true) {
  if (drop_intent) {
    st.drop_intent.bind(1, d.dest).bind(2, d.relpath).bind(3, d.sha256);
    st.drop_intent.run();
  }
  auto& ins = st.insert_delivery;
  ins.bind(1, d.channel).bind(2, d.dest).bind(3, d.relpath).bind(4, d.path);
  ins.bind(5, static_cast<std::int64_t>(d.size)).bind(6, d.mtime_ns).bind(7, d.sha256);
  ins.bind(8, d.session);
  if (d.sender_key.empty())
    ins.bind_null(9);
  else
    ins.bind(9, d.sender_key);
  ins.bind(10, journal_time(d.delivered_at));
  ins.run();
  const std::int64_t id = db.last_insert_rowid();
  run_ids.clear();
  for (const auto& a : actions) {
    st.insert_run.bind(1, id).bind(2, a);
    st.insert_run.run();
    run_ids.push_back(db.last_insert_rowid());
  }
  return id;
}

}  // namespace

std::int64_t delivery_journal::deliver(const delivery_row& d, std::span<const std::string> actions,
                                       std::vector<std::int64_t>& run_ids) {
  std::lock_guard lock(m_mutex);
  sqlite::transaction tx(m_db);
  deliver_statements st(m_db);
  const auto id = deliver_one(m_db, st, d, actions, run_ids);
  tx.commit();
  return id;
}

void delivery_journal::deliver_batch(std::span<batch_entry> entries) {
  std::lock_guard lock(m_mutex);
  sqlite::transaction tx(m_db);
  deliver_statements st(m_db);
  for (auto& e : entries) e.row.id = deliver_one(m_db, st, e.row, e.actions, e.run_ids);
  tx.commit();
}

void delivery_journal::record_deliveries(std::span<batch_entry> entries,
                                         std::int64_t confirm_through) {
  std::lock_guard lock(m_mutex);
  // The one commit that must reach the disk before it returns: the renames follow. Every
  // other commit is synchronous=NORMAL (no fsync in WAL mode): the WAL is ordered, so this
  // fsync makes every earlier commit durable too, and a later one lost to a power cut leaves
  // a run not marked done (run again): at least once.
  const bool full = m_sync == sqlite::durability::full;
  if (full) m_db.run_cached("PRAGMA synchronous=FULL");
  struct restore {
    sqlite::database& db;
    bool on;
    ~restore() {
      if (!on) return;
      try {
        db.run_cached("PRAGMA synchronous=NORMAL");
      } catch (...) {
      }
    }
  } back{m_db, full};
  sqlite::transaction tx(m_db);
  if (confirm_through > 0) {
    m_db.cached(
            "UPDATE journal_state SET confirmed_through = MAX(confirmed_through, ?1) WHERE id = 1")
        .bind(1, confirm_through)
        .run();
  }
  deliver_statements st(m_db);
  for (auto& e : entries) e.row.id = deliver_one(m_db, st, e.row, e.actions, e.run_ids, false);
  tx.commit();
}

void delivery_journal::drop_deliveries(std::span<const std::int64_t> ids) {
  std::lock_guard lock(m_mutex);
  sqlite::transaction tx(m_db);
  auto& st = m_db.cached("DELETE FROM deliveries WHERE id = ?1");
  for (const auto id : ids) st.bind(1, id).run();
  tx.commit();
}

std::vector<delivery_row> delivery_journal::unconfirmed() {
  std::lock_guard lock(m_mutex);
  auto st = m_db.prepare(std::string("SELECT ") + delivery_columns +
                         " FROM deliveries d WHERE d.id > (SELECT confirmed_through FROM "
                         "journal_state WHERE id = 1) ORDER BY d.id");
  std::vector<delivery_row> out;
  while (st.step()) out.push_back(read_delivery(st, 0));
  return out;
}

void delivery_journal::confirm_all() {
  std::lock_guard lock(m_mutex);
  m_db.cached(
          "UPDATE journal_state SET confirmed_through = (SELECT IFNULL(MAX(id), 0) FROM "
          "deliveries) WHERE id = 1")
      .run();
}

void delivery_journal::confirm_through(std::int64_t id) {
  std::lock_guard lock(m_mutex);
  m_db.cached(
          "UPDATE journal_state SET confirmed_through = MAX(confirmed_through, ?1) WHERE id = 1")
      .bind(1, id)
      .run();
}

std::int64_t delivery_journal::confirmed_through() {
  std::lock_guard lock(m_mutex);
  auto& st = m_db.cached("SELECT confirmed_through FROM journal_state WHERE id = 1");
  const std::int64_t v = st.step() ? st.column_int64(0) : 0;
  st.reset();
  return v;
}

std::vector<action_run_row> delivery_journal::unfinished_runs() {
  std::lock_guard lock(m_mutex);
  auto st =
      m_db.prepare(std::string("SELECT r.id, r.action, r.state, r.attempt, ") + delivery_columns +
                   " FROM action_runs r JOIN deliveries d ON d.id = r.delivery_id "
                   "WHERE r.state IN ('pending', 'running') ORDER BY r.id");
  std::vector<action_run_row> out;
  while (st.step()) {
    action_run_row r;
    r.id = st.column_int64(0);
    r.action = st.column_text(1);
    r.state = st.column_text(2);
    r.attempt = static_cast<std::uint32_t>(st.column_int64(3));
    r.product = read_delivery(st, 4);
    out.push_back(std::move(r));
  }
  return out;
}

std::uint32_t delivery_journal::run_started(std::int64_t run_id,
                                            std::chrono::system_clock::time_point now) {
  std::lock_guard lock(m_mutex);
  auto& st = m_db.cached(
      "UPDATE action_runs SET state = 'running', attempt = attempt + 1, started_at = ?2, "
      "ended_at = NULL WHERE id = ?1 RETURNING attempt");
  st.bind(1, run_id).bind(2, journal_time(now));
  const std::uint32_t attempt = st.step() ? static_cast<std::uint32_t>(st.column_int64(0)) : 0;
  st.reset();  // a kept statement left on its row would hold the update open
  return attempt;
}

void delivery_journal::run_ended(std::int64_t run_id, std::string_view state,
                                 std::optional<int> exit_status, const std::string& error,
                                 std::chrono::system_clock::time_point now) {
  std::lock_guard lock(m_mutex);
  auto& st = m_db.cached(
      "UPDATE action_runs SET state = ?2, ended_at = ?3, exit_status = ?4, error = ?5 "
      "WHERE id = ?1");
  st.bind(1, run_id).bind(2, state).bind(3, journal_time(now));
  st.bind(4, exit_status ? std::optional<std::int64_t>(*exit_status) : std::nullopt);
  if (error.empty())
    st.bind_null(5);
  else
    st.bind(5, error);
  st.run();
}

std::vector<delivery_row> delivery_journal::expired(const std::string& channel,
                                                    std::chrono::system_clock::time_point before,
                                                    std::size_t limit) {
  std::lock_guard lock(m_mutex);
  auto st = m_db.prepare(std::string("SELECT ") + delivery_columns +
                         " FROM deliveries d WHERE d.channel = ?1 AND d.delivered_at < ?2 AND "
                         "d.removed_at IS NULL ORDER BY d.delivered_at LIMIT ?3");
  st.bind(1, channel).bind(2, journal_time(before)).bind(3, static_cast<std::int64_t>(limit));
  std::vector<delivery_row> out;
  while (st.step()) out.push_back(read_delivery(st, 0));
  return out;
}

void delivery_journal::mark_removed(std::int64_t delivery_id, std::string_view reason,
                                    std::chrono::system_clock::time_point now) {
  std::lock_guard lock(m_mutex);
  m_db.cached("UPDATE deliveries SET removed_at = ?2, removed_reason = ?3 WHERE id = ?1")
      .bind(1, delivery_id)
      .bind(2, journal_time(now))
      .bind(3, reason)
      .run();
}

std::int64_t delivery_journal::prune(std::chrono::system_clock::time_point before) {
  std::lock_guard lock(m_mutex);
  sqlite::transaction tx(m_db);
  const double t = journal_time(before);
  m_db.prepare(
          "DELETE FROM deliveries WHERE delivered_at < ?1 AND NOT EXISTS (SELECT 1 FROM "
          "action_runs r WHERE r.delivery_id = deliveries.id AND r.state IN ('pending', "
          "'running'))")
      .bind(1, t)
      .run();
  const auto n = m_db.changes();
  m_db.prepare("DELETE FROM intents WHERE created_at < ?1").bind(1, t).run();
  tx.commit();
  return n;
}

}  // namespace mcdist::receiver
