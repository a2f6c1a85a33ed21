#include "common/sqlite/sqlite.hpp"

#include <sqlite3.h>

#include <utility>

namespace mcdist::sqlite {
namespace {

[[noreturn]] void fail(sqlite3* db, int rc, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  throw error(db ? sqlite3_extended_errcode(db) : rc, msg);
}

}  // namespace

database::database(const std::string& path, durability sync, int busy_ms, bool read_only,
                   bool immutable)
    : m_path(path) {
  read_only = read_only || immutable;
  int flags = read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  std::string name = path;
  if (immutable) {
    // file: URI with the characters that URIs reserve escaped (https://www.sqlite.org/uri.html)
    name = "file:";
    for (const char c : path) {
      if (c == '%' || c == '?' || c == '#') {
        static constexpr char hex[] = "0123456789ABCDEF";
        name += '%';
        name += hex[static_cast<unsigned char>(c) >> 4];
        name += hex[static_cast<unsigned char>(c) & 15];
      } else {
        name += c;
      }
    }
    name += "?immutable=1";
    flags |= SQLITE_OPEN_URI;
  }
  const int rc = sqlite3_open_v2(name.c_str(), &m_db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = "cannot open journal " + path;
    const int code = m_db ? sqlite3_extended_errcode(m_db) : rc;
    msg += ": ";
    msg += m_db ? sqlite3_errmsg(m_db) : sqlite3_errstr(rc);
    sqlite3_close(m_db);
    m_db = nullptr;
    throw error(code, msg);
  }
  sqlite3_extended_result_codes(m_db, 1);
  sqlite3_busy_timeout(m_db, busy_ms);
  try {
    if (!read_only) exec("PRAGMA journal_mode=WAL");
    exec(sync == durability::full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
    exec("PRAGMA foreign_keys=ON");
    // Check now that the file is a database (the pragmas above do not read the header).
    exec("SELECT count(*) FROM sqlite_schema");
  } catch (...) {
    sqlite3_close(m_db);
    m_db = nullptr;
    throw;
  }
}

database::~database() {
  m_cache.clear();  // statements are finalized before their connection closes
  if (m_db) sqlite3_close_v2(m_db);
}

database::database(database&& other) noexcept
    : m_db(std::exchange(other.m_db, nullptr)), m_path(std::move(other.m_path)),
      m_cache(std::move(other.m_cache)) {}

database& database::operator=(database&& other) noexcept {
  if (this != &other) {
    m_cache.clear();
    if (m_db) sqlite3_close_v2(m_db);
    m_db = std::exchange(other.m_db, nullptr);
    m_path = std::move(other.m_path);
    m_cache = std::move(other.m_cache);
  }
  return *this;
}

statement& database::cached(std::string_view sql) {
  auto it = m_cache.find(sql);
  if (it == m_cache.end()) {
    auto st = std::make_unique<statement>(m_db, sql, SQLITE_PREPARE_PERSISTENT);
    it = m_cache.emplace(std::string(sql), std::move(st)).first;
  }
  statement& st = *it->second;
  st.reset();
  st.clear_bindings();
  return st;
}

void database::run_cached(std::string_view sql) { cached(sql).run(); }

void database::exec(std::string_view sql) {
  const std::string s(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(m_db, s.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw error(sqlite3_extended_errcode(m_db), m_path + ": " + msg);
  }
}

statement database::prepare(std::string_view sql) { return statement(m_db, sql); }

std::int64_t database::last_insert_rowid() const noexcept {
  return sqlite3_last_insert_rowid(m_db);
}

std::int64_t database::changes() const noexcept { return sqlite3_changes64(m_db); }

int database::user_version() {
  auto st = prepare("PRAGMA user_version");
  st.step();
  return static_cast<int>(st.column_int64(0));
}

void database::set_user_version(int v) { exec("PRAGMA user_version=" + std::to_string(v)); }

statement::statement(sqlite3* db, std::string_view sql, unsigned flags) : m_db(db) {
  const int rc =
      sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), flags, &m_stmt, nullptr);
  if (rc != SQLITE_OK) fail(db, rc, "SQL " + std::string(sql.substr(0, 60)));
}

statement::~statement() {
  if (m_stmt) sqlite3_finalize(m_stmt);
}

statement::statement(statement&& other) noexcept
    : m_db(other.m_db), m_stmt(std::exchange(other.m_stmt, nullptr)) {}

statement& statement::operator=(statement&& other) noexcept {
  if (this != &other) {
    if (m_stmt) sqlite3_finalize(m_stmt);
    m_db = other.m_db;
    m_stmt = std::exchange(other.m_stmt, nullptr);
  }
  return *this;
}

statement& statement::bind(int index, std::int64_t v) {
  const int rc = sqlite3_bind_int64(m_stmt, index, v);
  if (rc != SQLITE_OK) fail(m_db, rc, "bind");
  return *this;
}

statement& statement::bind(int index, double v) {
  const int rc = sqlite3_bind_double(m_stmt, index, v);
  if (rc != SQLITE_OK) fail(m_db, rc, "bind");
  return *this;
}

statement& statement::bind(int index, std::string_view v) {
  const int rc =
      sqlite3_bind_text64(m_stmt, index, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) fail(m_db, rc, "bind");
  return *this;
}

statement& statement::bind_null(int index) {
  const int rc = sqlite3_bind_null(m_stmt, index);
  if (rc != SQLITE_OK) fail(m_db, rc, "bind");
  return *this;
}

bool statement::step() {
  const int rc = sqlite3_step(m_stmt);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const std::string sql = sqlite3_sql(m_stmt) ? sqlite3_sql(m_stmt) : "";
  sqlite3_reset(m_stmt);
  fail(m_db, rc, "SQL " + sql.substr(0, 60));
}

void statement::run() {
  step();
  reset();
}

void statement::reset() { sqlite3_reset(m_stmt); }

void statement::clear_bindings() { sqlite3_clear_bindings(m_stmt); }

bool statement::is_null(int column) const {
  return sqlite3_column_type(m_stmt, column) == SQLITE_NULL;
}

std::int64_t statement::column_int64(int column) const {
  return sqlite3_column_int64(m_stmt, column);
}

double statement::column_double(int column) const { return sqlite3_column_double(m_stmt, column); }

std::string statement::column_text(int column) const {
  const auto* p = sqlite3_column_text(m_stmt, column);
  if (!p) return {};
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<std::size_t>(sqlite3_column_bytes(m_stmt, column)));
}

std::optional<std::int64_t> statement::column_opt_int64(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_int64(column);
}

std::optional<std::string> statement::column_opt_text(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_text(column);
}

transaction::transaction(database& db)
    : m_db(db), m_nested(sqlite3_get_autocommit(db.handle()) == 0) {
  // Savepoints of one name nest: RELEASE and ROLLBACK TO act on the innermost.
  m_db.run_cached(m_nested ? "SAVEPOINT mcdist_tx" : "BEGIN IMMEDIATE");
}

transaction::~transaction() {
  if (!m_done) {
    try {
      m_db.exec(m_nested ? "ROLLBACK TO mcdist_tx; RELEASE mcdist_tx" : "ROLLBACK");
    } catch (...) {
    }
  }
}

void transaction::commit() {
  m_db.run_cached(m_nested ? "RELEASE mcdist_tx" : "COMMIT");
  m_done = true;
}

}  // namespace mcdist::sqlite
