#pragma once
/// @file
/// A thin RAII layer over libpq (PostgreSQL's C client, Debian libpq-dev) for the hub journal
/// and the hubs' leases: one connection, parameterised statements in text format, and every
/// call bounded in time. libpq's blocking calls wait as long as TCP does for a server that went
/// silent (minutes); a hub must notice within its lease, so each statement is sent with
/// libpq's asynchronous API (PQsendQueryParams, then poll(2) on PQsocket until PQisBusy is
/// false, https://www.postgresql.org/docs/15/libpq-async.html) and a call that outlives its
/// timeout closes the connection and throws. The next call reconnects.
///
/// Errors throw pg::error with the server's SQLSTATE (https://www.postgresql.org/docs/15/
/// errcodes-appendix.html), or "08006" (connection failure) for a lost connection and a
/// timeout. Nothing here is thread-safe: one connection per thread.

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

struct pg_conn;
struct pg_result;

namespace mcdist::pg {

/// The longest one statement may take before the connection is given up (5 s: the journal's
/// longest writes, a session's outcomes, take tens of ms; longer means a server or a path that
/// stopped answering, which a hub must see well within its lease).
inline constexpr std::chrono::milliseconds call_timeout{5000};

/// A PostgreSQL failure.
class error : public std::runtime_error {
 public:
  error(std::string sqlstate, const std::string& what)
      : std::runtime_error(what), m_sqlstate(std::move(sqlstate)) {}
  /// Five characters; "08006" for a lost connection or a call that timed out.
  const std::string& sqlstate() const noexcept { return m_sqlstate; }
  /// True for SQLSTATE class 08 (connection exception) and 57P (operator intervention).
  bool connection_lost() const noexcept {
    return m_sqlstate.starts_with("08") || m_sqlstate.starts_with("57P");
  }

 private:
  std::string m_sqlstate;
};

/// Statement parameters in text format ($1, $2, ...); std::nullopt is SQL NULL.
class params {
 public:
  params& add(std::int64_t v);
  params& add(int v) { return add(static_cast<std::int64_t>(v)); }
  params& add(std::uint64_t v) { return add(static_cast<std::int64_t>(v)); }
  params& add(double v);
  params& add(std::string_view v);
  params& add(const char* v) { return add(std::string_view(v)); }
  params& add(const std::string& v) { return add(std::string_view(v)); }
  params& add_null();
  template <class T>
  params& add(const std::optional<T>& v) {
    return v ? add(*v) : add_null();
  }
  const std::vector<std::optional<std::string>>& values() const noexcept { return m_values; }

 private:
  std::vector<std::optional<std::string>> m_values;
};

/// A statement's rows, in text format. Columns and rows from 0.
class result {
 public:
  explicit result(pg_result* r) : m_r(r) {}
  ~result();
  result(const result&) = delete;
  result& operator=(const result&) = delete;
  result(result&& o) noexcept;
  result& operator=(result&& o) noexcept;

  int rows() const noexcept;
  /// Rows an INSERT/UPDATE/DELETE changed (PQcmdTuples).
  std::int64_t changed() const;
  bool is_null(int row, int col) const;
  std::string text(int row, int col) const;    ///< "" for NULL
  std::int64_t int64(int row, int col) const;  ///< 0 for NULL
  double real(int row, int col) const;
  bool boolean(int row, int col) const;  ///< PostgreSQL's "t"
  std::optional<std::int64_t> opt_int64(int row, int col) const;
  std::optional<std::string> opt_text(int row, int col) const;

 private:
  pg_result* m_r = nullptr;
};

/// One connection, opened at construction and again after a failure, at the next call.
class connection {
 public:
  /// @param conninfo   a libpq connection URI or key=value string
  /// @param read_only  every transaction is read-only (default_transaction_read_only)
  /// @param timeout    bound of every call, connecting included (rounded up to whole seconds
  ///                   for connecting: libpq's connect_timeout)
  /// @param application  application_name, shown in pg_stat_activity
  /// @throws error when the server cannot be reached or refuses
  connection(std::string conninfo, bool read_only, std::chrono::milliseconds timeout = call_timeout,
             std::string application = "mcdist");
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// Runs one statement with parameters. @throws error
  result exec(std::string_view sql, const params& p = {});
  /// Runs one or more statements without parameters (a script: the schema). @throws error
  void exec_script(std::string_view sql);

  /// True inside BEGIN ... COMMIT.
  bool in_transaction() const noexcept;
  /// False after a failure until the next call reconnects.
  bool connected() const noexcept { return m_conn != nullptr; }
  /// Closes the connection (the next call reconnects).
  void close() noexcept;

 private:
  void connect();
  result finish_call(std::string_view what, std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void fail(std::string sqlstate, const std::string& what);

  std::string m_conninfo;
  bool m_read_only;
  std::chrono::milliseconds m_timeout;
  std::string m_application;
  pg_conn* m_conn = nullptr;
};

/// BEGIN ... COMMIT, rolled back when destroyed uncommitted. Inside another transaction of the
/// same connection it does nothing: the outer one commits or rolls back everything (a
/// PostgreSQL error aborts the whole transaction anyway, and a SAVEPOINT would cost a round
/// trip per call).
class transaction {
 public:
  /// @throws error
  explicit transaction(connection& c);
  ~transaction();
  transaction(const transaction&) = delete;
  transaction& operator=(const transaction&) = delete;
  /// @throws error; after a failed commit nothing was committed
  void commit();

 private:
  connection& m_c;
  bool m_outer = false;
  bool m_done = false;
};

}  // namespace mcdist::pg
