#pragma once
/// @file
/// A thin RAII layer over the SQLite 3 C API (Debian libsqlite3-dev) for the delivery journals
/// of the hub and the sites. It adds no policy beyond what every journal needs: WAL mode, a busy
/// timeout, prepared statements with typed binds, and IMMEDIATE transactions.
///
/// Errors from SQLite throw sqlite::error carrying the extended result code and the message
/// (https://www.sqlite.org/rescode.html). Nothing here is thread-safe: one connection per thread.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace mcdist::sqlite {

/// An SQLite failure: code() is the extended result code (SQLITE_BUSY, SQLITE_IOERR_..., ...).
class error : public std::runtime_error {
 public:
  error(int code, const std::string& what) : std::runtime_error(what), m_code(code) {}
  int code() const noexcept { return m_code; }

 private:
  int m_code;
};

/// How hard a commit waits for the disk (PRAGMA synchronous, https://www.sqlite.org/pragma.html).
enum class durability {
  full,    ///< synchronous=FULL: a committed transaction survives power loss
  normal,  ///< synchronous=NORMAL in WAL mode: survives a crash of the process, not power loss
};

class statement;

/// One connection to a database file, opened read-write (created if absent) in WAL mode
/// (https://www.sqlite.org/wal.html) with foreign keys on and a busy timeout, so a reader such
/// as mcdistctl never blocks the daemon that writes.
class database {
 public:
  /// @param path        the database file; its directory must exist
  /// @param sync        commit durability
  /// @param busy_ms     how long a statement waits for a lock held by another connection, ms
  /// @param read_only   open read-only (no WAL switch, no creation)
  /// @param immutable   with read_only: open as an immutable file (URI parameter immutable=1,
  ///                    https://www.sqlite.org/uri.html): no locks, no -shm, so a WAL database
  ///                    can be read from a directory the reader cannot write; only correct
  ///                    while no other process writes it (a tool reading a stopped daemon's
  ///                    journal)
  /// @throws error when the file cannot be opened or is not a database
  explicit database(const std::string& path, durability sync = durability::full, int busy_ms = 5000,
                    bool read_only = false, bool immutable = false);
  ~database();
  database(const database&) = delete;
  database& operator=(const database&) = delete;
  database(database&& other) noexcept;
  database& operator=(database&& other) noexcept;

  /// Runs one or more SQL statements that return no rows. @throws error
  void exec(std::string_view sql);

  /// Compiles one statement. @throws error on a syntax error
  statement prepare(std::string_view sql);

  /// The statement for `sql`, compiled on first use and kept for the connection's life
  /// (SQLITE_PREPARE_PERSISTENT): the same text returns the same object, reset and with its
  /// bindings cleared. For what a journal runs per file or per batch, where compiling the SQL
  /// each time costs more than running it. The reference stays valid until the database is
  /// destroyed or assigned; a row-returning statement must be stepped to its end (or reset)
  /// before the caller lets go of it, or it keeps a read transaction open. Constant SQL text
  /// only: the cache keeps one statement per distinct text and never evicts.
  /// @throws error on a syntax error
  statement& cached(std::string_view sql);
  /// Runs one cached statement that returns no rows (BEGIN, COMMIT, a PRAGMA). @throws error
  void run_cached(std::string_view sql);

  /// rowid of the last INSERT on this connection.
  std::int64_t last_insert_rowid() const noexcept;
  /// Rows changed by the last INSERT/UPDATE/DELETE.
  std::int64_t changes() const noexcept;

  /// PRAGMA user_version, the schema version a journal keeps for its migrations.
  int user_version();
  void set_user_version(int v);

  sqlite3* handle() const noexcept { return m_db; }
  const std::string& path() const noexcept { return m_path; }

 private:
  sqlite3* m_db = nullptr;
  std::string m_path;
  std::map<std::string, std::unique_ptr<statement>, std::less<>> m_cache;
};

/// A prepared statement. Bind indices start at 1 (SQLite's convention); columns at 0.
class statement {
 public:
  /// @param flags sqlite3_prepare_v3's prepFlags (SQLITE_PREPARE_PERSISTENT for kept ones)
  statement(sqlite3* db, std::string_view sql, unsigned flags = 0);
  ~statement();
  statement(const statement&) = delete;
  statement& operator=(const statement&) = delete;
  statement(statement&& other) noexcept;
  statement& operator=(statement&& other) noexcept;

  statement& bind(int index, std::int64_t v);
  statement& bind(int index, int v) { return bind(index, static_cast<std::int64_t>(v)); }
  statement& bind(int index, std::uint32_t v) { return bind(index, static_cast<std::int64_t>(v)); }
  statement& bind(int index, double v);
  statement& bind(int index, std::string_view v);  ///< copied (SQLITE_TRANSIENT)
  statement& bind(int index, const char* v) { return bind(index, std::string_view(v)); }
  statement& bind(int index, const std::string& v) { return bind(index, std::string_view(v)); }
  statement& bind_null(int index);
  /// Binds v, or NULL when it is empty.
  template <class T>
  statement& bind(int index, const std::optional<T>& v) {
    return v ? bind(index, *v) : bind_null(index);
  }

  /// Advances. @return true when a row is available, false when done. @throws error
  bool step();
  /// step() for a statement that returns no rows, then reset(). @throws error
  void run();
  /// Makes the statement ready to run again; keeps the bindings.
  void reset();
  /// Clears the bindings to NULL.
  void clear_bindings();

  bool is_null(int column) const;
  std::int64_t column_int64(int column) const;
  double column_double(int column) const;
  std::string column_text(int column) const;  ///< "" for NULL
  std::optional<std::int64_t> column_opt_int64(int column) const;
  std::optional<std::string> column_opt_text(int column) const;

 private:
  sqlite3* m_db = nullptr;
  sqlite3_stmt* m_stmt = nullptr;
};

/// BEGIN IMMEDIATE ... COMMIT; rolled back when destroyed uncommitted (an exception).
/// Inside another transaction of the same connection it is a SAVEPOINT (RELEASE on commit,
/// ROLLBACK TO on destruction): a caller groups several functions that each take a transaction
/// into one commit, so one fsync pays for all of them (with synchronous=FULL a commit costs
/// one fsync, ~8 ms on the CI machine's disk; mcdist-feed journals a session's hundreds of
/// product x site outcomes at once).
class transaction {
 public:
  /// @throws error (SQLITE_BUSY after the busy timeout)
  explicit transaction(database& db);
  ~transaction();
  transaction(const transaction&) = delete;
  transaction& operator=(const transaction&) = delete;
  /// @throws error; after a failed commit the transaction is rolled back by the destructor
  void commit();

 private:
  database& m_db;
  bool m_nested = false;  ///< a SAVEPOINT inside an outer transaction
  bool m_done = false;
};

}  // namespace mcdist::sqlite
