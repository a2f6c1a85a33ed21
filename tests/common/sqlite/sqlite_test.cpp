// The SQLite layer against a real database file: WAL mode, typed binds, NULLs, transactions
// that roll back on an exception, and errors that name the file.
#include "common/sqlite/sqlite.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace mcdist;
namespace fs = std::filesystem;

namespace {
fs::path temp_db(const char* name) {
  const auto dir = fs::temp_directory_path() / ("mcdist-sqlite-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto p = dir / name;
  fs::remove(p);
  fs::remove(p.string() + "-wal");
  fs::remove(p.string() + "-shm");
  return p;
}
}  // namespace

TEST_CASE("sqlite: WAL mode, binds, columns and NULL") {
  const auto path = temp_db("a.db");
  sqlite::database db(path.string());
  auto mode = db.prepare("PRAGMA journal_mode");
  REQUIRE(mode.step());
  CHECK(mode.column_text(0) == "wal");
  db.exec("CREATE TABLE t(i INTEGER, d REAL, s TEXT)");
  auto ins = db.prepare("INSERT INTO t VALUES(?1, ?2, ?3)");
  ins.bind(1, std::int64_t{1} << 40).bind(2, 2.5).bind(3, std::string_view("x\0y", 3)).run();
  ins.bind(1, 7).bind_null(2).bind(3, std::optional<std::string>{}).run();
  CHECK(db.last_insert_rowid() == 2);
  auto sel = db.prepare("SELECT i, d, s FROM t ORDER BY rowid");
  REQUIRE(sel.step());
  CHECK(sel.column_int64(0) == (std::int64_t{1} << 40));
  CHECK(sel.column_double(1) == 2.5);
  CHECK(sel.column_text(2) == std::string("x\0y", 3));
  REQUIRE(sel.step());
  CHECK(sel.column_int64(0) == 7);
  CHECK_FALSE(sel.column_opt_int64(1).has_value());
  CHECK_FALSE(sel.column_opt_text(2).has_value());
  CHECK_FALSE(sel.step());
  db.set_user_version(3);
  CHECK(db.user_version() == 3);
}

TEST_CASE(
    "sqlite: a cached statement is compiled once, comes back reset, and survives a schema change "
    "and a move") {
  const auto path = temp_db("cache.db");
  sqlite::database db(path.string());
  db.exec("CREATE TABLE t(i INTEGER, s TEXT)");
  const char* sql = "INSERT INTO t(i, s) VALUES(?1, ?2)";
  auto& a = db.cached(sql);
  a.bind(1, 1).bind(2, "one").run();
  auto& b = db.cached(sql);
  CHECK(&a == &b);
  // The bindings of the last use are cleared: an unbound parameter is NULL.
  b.bind(1, 2).run();
  // A statement left on a row is reset when taken again, so its read ends.
  auto& sel = db.cached("SELECT i, s FROM t ORDER BY i");
  REQUIRE(sel.step());
  CHECK(sel.column_int64(0) == 1);
  auto& again = db.cached("SELECT i, s FROM t ORDER BY i");
  REQUIRE(again.step());
  CHECK(again.column_int64(0) == 1);
  CHECK(again.column_text(1) == "one");
  REQUIRE(again.step());
  CHECK(again.column_int64(0) == 2);
  CHECK_FALSE(again.column_opt_text(1).has_value());
  CHECK_FALSE(again.step());
  // SQLite recompiles a kept statement after the schema changed under it.
  db.exec("ALTER TABLE t ADD COLUMN u TEXT");
  db.cached(sql).bind(1, 3).bind(2, "three").run();
  db.run_cached("PRAGMA user_version=9");
  CHECK(db.user_version() == 9);
  // Moved, the connection keeps its statements; the moved-from one holds none.
  sqlite::database moved(std::move(db));
  auto& c = moved.cached(sql);
  CHECK(&c == &a);
  c.bind(1, 4).bind(2, "four").run();
  auto count = moved.prepare("SELECT count(*), sum(i) FROM t");
  REQUIRE(count.step());
  CHECK(count.column_int64(0) == 4);
  CHECK(count.column_int64(1) == 10);
  CHECK_THROWS_AS(moved.cached("INSERT INTO nowhere VALUES(1)"), sqlite::error);
}

TEST_CASE("sqlite: a transaction not committed is rolled back; committed rows survive reopen") {
  const auto path = temp_db("b.db");
  {
    sqlite::database db(path.string());
    db.exec("CREATE TABLE t(i INTEGER)");
    {
      sqlite::transaction tx(db);
      db.exec("INSERT INTO t VALUES(1)");
      tx.commit();
    }
    try {
      sqlite::transaction tx(db);
      db.exec("INSERT INTO t VALUES(2)");
      throw std::runtime_error("crash before commit");
    } catch (const std::runtime_error&) {
    }
  }
  sqlite::database db(path.string(), sqlite::durability::normal, 100, true);
  auto st = db.prepare("SELECT group_concat(i) FROM t");
  REQUIRE(st.step());
  CHECK(st.column_text(0) == "1");
}

TEST_CASE("sqlite: a transaction inside another is a savepoint of the outer one") {
  const auto path = temp_db("nested.db");
  {
    sqlite::database db(path.string());
    db.exec("CREATE TABLE t(i INTEGER)");
    sqlite::transaction outer(db);
    {
      sqlite::transaction inner(db);
      db.exec("INSERT INTO t VALUES(1)");
      inner.commit();
    }
    {
      sqlite::transaction failed(db);
      db.exec("INSERT INTO t VALUES(2)");
      // destroyed uncommitted: only its own row goes
    }
    auto n = db.prepare("SELECT count(*), max(i) FROM t");
    REQUIRE(n.step());
    CHECK(n.column_int64(0) == 1);
    CHECK(n.column_int64(1) == 1);
    n.reset();
    outer.commit();
  }
  {
    sqlite::database db(path.string());
    auto n = db.prepare("SELECT count(*) FROM t");
    REQUIRE(n.step());
    CHECK(n.column_int64(0) == 1);  // committed with the outer transaction
  }
  {
    sqlite::database db(path.string());
    {
      sqlite::transaction outer(db);
      sqlite::transaction inner(db);
      db.exec("INSERT INTO t VALUES(3)");
      inner.commit();
      // outer destroyed uncommitted: the inner's committed savepoint goes with it
    }
    auto n = db.prepare("SELECT count(*) FROM t");
    REQUIRE(n.step());
    CHECK(n.column_int64(0) == 1);
  }
}

TEST_CASE("sqlite: errors carry the code and name the file") {
  const auto path = temp_db("c.db");
  { std::ofstream(path) << "this is not a database, it is a text file of some length........"; }
  try {
    sqlite::database db(path.string());
    FAIL("opened a text file as a database");
  } catch (const sqlite::error& e) {
    CHECK(std::string(e.what()).find("c.db") != std::string::npos);
    CHECK((e.code() & 0xff) == 26);  // SQLITE_NOTADB
  }
  sqlite::database db(temp_db("d.db").string());
  CHECK_THROWS_AS(db.prepare("SELEC nonsense"), sqlite::error);
  db.exec("CREATE TABLE u(i INTEGER PRIMARY KEY)");
  db.exec("INSERT INTO u VALUES(1)");
  try {
    db.exec("INSERT INTO u VALUES(1)");
    FAIL("duplicate key accepted");
  } catch (const sqlite::error& e) {
    CHECK((e.code() & 0xff) == 19);  // SQLITE_CONSTRAINT
  }
}
