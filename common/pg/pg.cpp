#include "common/pg/pg.hpp"

#include <libpq-fe.h>
#include <poll.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <utility>

namespace mcdist::pg {
namespace {

/// SQLSTATE of a lost connection (class 08, connection_failure).
constexpr const char* lost = "08006";

std::string message_of(pg_conn* c) {
  std::string m = c ? PQerrorMessage(c) : "no connection";
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

}  // namespace

params& params::add(std::int64_t v) {
  m_values.emplace_back(std::to_string(v));
  return *this;
}

params& params::add(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  m_values.emplace_back(std::string(buf, r.ptr));
  return *this;
}

params& params::add(std::string_view v) {
  m_values.emplace_back(std::string(v));
  return *this;
}

params& params::add_null() {
  m_values.emplace_back(std::nullopt);
  return *this;
}

result::~result() {
  if (m_r) PQclear(m_r);
}

result::result(result&& o) noexcept : m_r(std::exchange(o.m_r, nullptr)) {}

result& result::operator=(result&& o) noexcept {
  if (this != &o) {
    if (m_r) PQclear(m_r);
    m_r = std::exchange(o.m_r, nullptr);
  }
  return *this;
}

int result::rows() const noexcept { return m_r ? PQntuples(m_r) : 0; }

std::int64_t result::changed() const {
  const char* n = m_r ? PQcmdTuples(m_r) : "";
  return *n ? std::strtoll(n, nullptr, 10) : 0;
}

bool result::is_null(int row, int col) const { return PQgetisnull(m_r, row, col) != 0; }

std::string result::text(int row, int col) const {
  if (is_null(row, col)) return {};
  return std::string(PQgetvalue(m_r, row, col),
                     static_cast<std::size_t>(PQgetlength(m_r, row, col)));
}

std::int64_t result::int64(int row, int col) const {
  if (is_null(row, col)) return 0;
  const char* s = PQgetvalue(m_r, row, col);
  std::int64_t v = 0;
  std::from_chars(s, s + PQgetlength(m_r, row, col), v);
  return v;
}

double result::real(int row, int col) const {
  if (is_null(row, col)) return 0;
  return std::strtod(PQgetvalue(m_r, row, col), nullptr);
}

bool result::boolean(int row, int col) const {
  return !is_null(row, col) && PQgetvalue(m_r, row, col)[0] == 't';
}

std::optional<std::int64_t> result::opt_int64(int row, int col) const {
  if (is_null(row, col)) return std::nullopt;
  return int64(row, col);
}

std::optional<std::string> result::opt_text(int row, int col) const {
  if (is_null(row, col)) return std::nullopt;
  return text(row, col);
}

connection::connection(std::string conninfo, bool read_only, std::chrono::milliseconds timeout,
                       std::string application)
    : m_conninfo(std::move(conninfo)), m_read_only(read_only), m_timeout(timeout),
      m_application(std::move(application)) {
  connect();
}

connection::~connection() { close(); }

void connection::close() noexcept {
  if (m_conn) PQfinish(m_conn);
  m_conn = nullptr;
}

void connection::connect() {
  close();
  // libpq's connect_timeout is whole seconds, at least 2 (libpq-connect.html).
  const auto seconds = std::max<long long>(2, (m_timeout.count() + 999) / 1000);
  const std::string timeout = std::to_string(seconds);
  // The URI first, expanded (expand_dbname); the keywords after it override its values.
  const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
  const char* values[] = {m_conninfo.c_str(), timeout.c_str(), m_application.c_str(), nullptr};
  pg_conn* c = PQconnectdbParams(keys, values, 1);
  if (!c || PQstatus(c) != CONNECTION_OK) {
    const auto m = message_of(c);
    if (c) PQfinish(c);
    throw error(lost, "cannot connect to the journal database: " + m);
  }
  m_conn = c;
  // Journal rows never carry anything but UTF-8 (product names are checked at intake), and
  // times are integers: the session's settings make no difference but these two.
  exec_script(m_read_only ? "SET default_transaction_read_only = on; SET client_encoding = 'UTF8'"
                          : "SET client_encoding = 'UTF8'");
}

void connection::fail(std::string sqlstate, const std::string& what) {
  close();
  throw error(std::move(sqlstate), what);
}

result connection::finish_call(std::string_view what,
                               std::chrono::steady_clock::time_point deadline) {
  // Flush what libpq could not send at once, then read until the last result is in.
  for (;;) {
    const int f = PQflush(m_conn);
    if (f < 0) fail(lost, std::string(what) + ": " + message_of(m_conn));
    const bool ready = f == 0 && PQisBusy(m_conn) == 0;
    if (ready) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      fail(lost, std::string(what) + ": no answer from the journal database within " +
                     std::to_string(m_timeout.count()) + " ms");
    }
    pollfd p{PQsocket(m_conn), static_cast<short>(POLLIN | (f == 1 ? POLLOUT : 0)), 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) fail(lost, std::string(what) + ": poll failed");
    if (n > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP)) && PQconsumeInput(m_conn) == 0) {
      fail(lost, std::string(what) + ": " + message_of(m_conn));
    }
  }
  pg_result* last = nullptr;
  std::string err_state, err_text;
  while (pg_result* r = PQgetResult(m_conn)) {
    const auto st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && err_state.empty()) {
      const char* code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
      err_state = code ? code : lost;
      err_text = PQresultErrorMessage(r);
      while (!err_text.empty() && err_text.back() == '\n') err_text.pop_back();
    }
    if (last) PQclear(last);
    last = r;
  }
  if (!err_state.empty()) {
    if (last) PQclear(last);
    if (PQstatus(m_conn) != CONNECTION_OK) fail(err_state, std::string(what) + ": " + err_text);
    throw error(err_state, std::string(what) + ": " + err_text);
  }
  if (PQstatus(m_conn) != CONNECTION_OK) {
    if (last) PQclear(last);
    fail(lost, std::string(what) + ": " + message_of(m_conn));
  }
  return result(last);
}

result connection::exec(std::string_view sql, const params& p) {
  if (!m_conn) connect();
  const auto deadline = std::chrono::steady_clock::now() + m_timeout;
  std::vector<const char*> values;
  values.reserve(p.values().size());
  for (const auto& v : p.values()) values.push_back(v ? v->c_str() : nullptr);
  const std::string text(sql);
  if (PQsendQueryParams(m_conn, text.c_str(), static_cast<int>(values.size()), nullptr,
                        values.data(), nullptr, nullptr, 0) == 0) {
    fail(lost, "SQL " + text.substr(0, 60) + ": " + message_of(m_conn));
  }
  return finish_call("SQL " + text.substr(0, 60), deadline);
}

void connection::exec_script(std::string_view sql) {
  if (!m_conn) connect();
  const auto deadline = std::chrono::steady_clock::now() + m_timeout;
  const std::string text(sql);
  if (PQsendQuery(m_conn, text.c_str()) == 0) {
    fail(lost, "SQL " + text.substr(0, 60) + ": " + message_of(m_conn));
  }
  finish_call("SQL " + text.substr(0, 60), deadline);
}

bool connection::in_transaction() const noexcept {
  return m_conn && PQtransactionStatus(m_conn) != PQTRANS_IDLE;
}

transaction::transaction(connection& c) : m_c(c), m_outer(!c.in_transaction()) {
  if (m_outer) m_c.exec_script("BEGIN");
}

transaction::~transaction() {
  if (m_outer && !m_done && m_c.connected()) {
    try {
      m_c.exec_script("ROLLBACK");
    } catch (...) {
    }
  }
}

void transaction::commit() {
  if (m_outer) m_c.exec_script("COMMIT");
  m_done = true;
}

}  // namespace mcdist::pg
